package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	topologyv1alpha1 "volcano.sh/apis/pkg/apis/topology/v1alpha1"
)

// TestFabric checks the simulated fabric without a control plane: every node hangs off
// exactly one leaf HyperNode, the one its labels name, and every leaf off one spine.
func TestFabric(t *testing.T) {
	f := Fabric{Spines: 3, LeavesPerSpine: 2, NodesPerLeaf: 5, GPUsPerNode: 4, GPUProducts: []string{"h100", "a100"}}
	nodes := f.Nodes()
	require.Len(t, nodes, 30)
	parent := map[string]string{} // member → HyperNode
	tiers := map[string]int{}
	for _, hn := range f.HyperNodes() {
		tiers[hn.Name] = hn.Spec.Tier
		for _, m := range hn.Spec.Members {
			require.NotNil(t, m.Selector.ExactMatch)
			_, dup := parent[m.Selector.ExactMatch.Name]
			require.False(t, dup, "%s is a member twice", m.Selector.ExactMatch.Name)
			parent[m.Selector.ExactMatch.Name] = hn.Name
			if hn.Spec.Tier == LeafTier {
				assert.Equal(t, topologyv1alpha1.MemberTypeNode, m.Type)
				assert.Equal(t, LeafTierName, hn.Spec.TierName)
			} else {
				assert.Equal(t, topologyv1alpha1.MemberTypeHyperNode, m.Type)
				assert.Equal(t, SpineTierName, hn.Spec.TierName)
			}
		}
	}
	assert.Len(t, tiers, 6+3)
	names := map[string]bool{}
	for _, n := range nodes {
		require.False(t, names[n.Name], "node name %s twice", n.Name)
		names[n.Name] = true
		leaf, spine := n.Labels[LeafLabel], n.Labels[SpineLabel]
		assert.Equal(t, leaf, parent[n.Name], "node %s", n.Name)
		assert.Equal(t, spine, parent[leaf], "leaf %s", leaf)
		assert.Equal(t, spine, n.Labels[corev1.LabelTopologyZone])
		want := "NVIDIA-H100-80GB-HBM3"
		if spine == "spine-1" {
			want = "NVIDIA-A100-SXM4-80GB"
		}
		assert.Equal(t, want, n.Labels[GPUProductLabel], "node %s under %s", n.Name, spine)
		gpus := n.Status.Allocatable[GPUResource]
		assert.Equal(t, int64(4), gpus.Value())
	}
}
