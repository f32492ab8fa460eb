package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// A group with networkTopology {mode: hard, highestTierAllowed: 1} lands inside one leaf.
// Four GPU workers in two leaves under one spine; another pod already holds 4 GPUs in
// leaf-a, so only leaf-b can take the group's 16 GPUs (an entry and 3 workers of 4 GPUs):
// the group must not start in leaf-a and must not spread across leaves, which the default
// spreading score would otherwise do.
func TestHardTopologyGroupStaysInOneLeaf(t *testing.T) {
	e := newEnv(t)
	enabled, plugins, err := topologyPluginEnabled(e.ctx)
	require.NoError(t, err)
	// The shipped profile enables BerthTopology; an install without it is out of date.
	require.True(t, enabled, "the installed berth-scheduler profile enables no topology plugin (plugins: %s); apply this repository's manifests (docs/kind.md)", plugins)
	nodes := e.workers(4)
	leafOf := map[string]string{nodes[0]: "leaf-a", nodes[1]: "leaf-a", nodes[2]: "leaf-b", nodes[3]: "leaf-b"}
	e.labelTiers(leafOf, "spine-0")
	if hyperNodesServed() {
		e.createHyperNodes(leafOf, "spine-0")
	} else {
		t.Log("the HyperNode CRD is not installed: tiers come from node labels only")
	}
	e.fakeGPUs(nodes...)

	// 4 of leaf-a's 16 GPUs are taken by a pod bound directly to its first node.
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "training"}, Spec: podSpec(4)}
	other.Spec.NodeName = nodes[0]
	e.create(other)
	e.eventually("the other pod runs", 2*time.Minute, func() error {
		p := &corev1.Pod{}
		if err := cl.Get(e.ctx, client.ObjectKey{Namespace: e.ns, Name: "training"}, p); err != nil {
			return err
		}
		if !podReady(p) {
			return fmt.Errorf("pod training is %s", p.Status.Phase)
		}
		return nil
	})

	ms := serving("topo", 1)
	ms.Spec.Template.NetworkTopology = &workloadv1alpha1.NetworkTopology{NetworkTopologySpec: volcanov1beta1.NetworkTopologySpec{
		Mode: volcanov1beta1.HardNetworkTopologyMode, HighestTierAllowed: ptr.To(1),
	}}
	r := &ms.Spec.Template.Roles[0]
	r.WorkerReplicas = 3
	setGPUs(&r.EntryTemplate.Spec, 4)
	setGPUs(&r.WorkerTemplate.Spec, 4)
	e.create(ms)

	e.eventually("the group runs", 5*time.Minute, func() error {
		pods := e.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "topo"})
		if len(pods) != 4 {
			return fmt.Errorf("%d pods, want 4", len(pods))
		}
		for _, p := range pods {
			if !podReady(&p) {
				return fmt.Errorf("pod %s is %s on %q", p.Name, p.Status.Phase, p.Spec.NodeName)
			}
		}
		return nil
	})
	for _, p := range e.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "topo"}) {
		assert.Equal(t, "leaf-b", leafOf[p.Spec.NodeName], "pod %s is on %s, outside leaf-b", p.Name, p.Spec.NodeName)
	}
	pg, err := e.podGroup("topo-0")
	require.NoError(t, err)
	require.NotNil(t, pg.Spec.NetworkTopology, "the PodGroup carries the group's networkTopology")
	assert.Equal(t, volcanov1beta1.HardNetworkTopologyMode, pg.Spec.NetworkTopology.Mode)
	assert.Equal(t, 1, ptr.Deref(pg.Spec.NetworkTopology.HighestTierAllowed, 0))
}

// setGPUs makes every container of spec hold n GPUs.
func setGPUs(spec *corev1.PodSpec, n int64) {
	for i := range spec.Containers {
		q := *resource.NewQuantity(n, resource.DecimalSI)
		spec.Containers[i].Resources.Requests[gpu] = q
		spec.Containers[i].Resources.Limits[gpu] = q
	}
}
