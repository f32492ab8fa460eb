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

// TestNVL72Fabric: 2 spines × 2 racks of 18 GB200 trays; every rack is an NVLink domain,
// labelled as GPU feature discovery labels it and described by a tier-1 HyperNode inside
// its leaf (tier 2), inside its spine (tier 3).
func TestNVL72Fabric(t *testing.T) {
	f := NVL72(2, 2)
	require.NoError(t, f.Validate())
	nodes := f.Nodes()
	require.Len(t, nodes, 72)
	assert.Equal(t, 4, f.NVLinkDomains())
	cliques := map[string]int{}
	for _, n := range nodes {
		cliques[n.Labels[CliqueLabel]]++
		assert.Equal(t, "NVIDIA-GB200", n.Labels[GPUProductLabel])
		gpus := n.Status.Allocatable[GPUResource]
		assert.Equal(t, int64(4), gpus.Value())
	}
	require.Len(t, cliques, 4)
	for c, count := range cliques {
		assert.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.[0-9]+$`, c, "<clusterUUID>.<cliqueID>")
		assert.Equal(t, 18, count, "18 trays per NVLink domain")
	}
	byName := map[string]*topologyv1alpha1.HyperNode{}
	for _, hn := range f.HyperNodes() {
		byName[hn.Name] = hn
	}
	require.Len(t, byName, 4+4+2)
	nv := byName["nvlink-1"]
	assert.Equal(t, NVLinkTier, nv.Spec.Tier)
	assert.Equal(t, NVLinkTierName, nv.Spec.TierName)
	require.Len(t, nv.Spec.Members, 18)
	assert.Equal(t, nodes[18].Name, nv.Spec.Members[0].Selector.ExactMatch.Name)
	assert.Equal(t, nodes[18].Labels[CliqueLabel], nodes[35].Labels[CliqueLabel])
	assert.NotEqual(t, nodes[17].Labels[CliqueLabel], nodes[18].Labels[CliqueLabel])
	leaf := byName["leaf-1"]
	assert.Equal(t, 2, leaf.Spec.Tier)
	require.Len(t, leaf.Spec.Members, 1)
	assert.Equal(t, "nvlink-1", leaf.Spec.Members[0].Selector.ExactMatch.Name)
	assert.Equal(t, 3, byName["spine-0"].Spec.Tier)

	bad := f
	bad.NodesPerNVLink = 5
	assert.EqualError(t, bad.Validate(), "nodes per NVLink domain (5) must divide the nodes per leaf (18)")
}
