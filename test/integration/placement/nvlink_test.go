package placement

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

const (
	cliqueLabel = "nvidia.com/gpu.clique"
	// nvlinkNodes of leaf-0 and leaf-1 (spine 0) get clique labels, two nodes (16 GPUs) per
	// NVLink domain; the other nodes have none, so they are in no NVLink domain.
	nvlinkNodes    = 8
	nodesPerClique = 2
)

func cliqueOf(i int) string {
	return fmt.Sprintf("7b1e0c52-4f0e-4d7a-9a43-5d2c9e1b6f01.%d", i/nodesPerClique)
}

// labelCliques labels the first nvlinkNodes nodes as GPU feature discovery labels an NVL72
// rack's trays, and removes the labels when the test ends: the shipped profile's optional
// nvlink tier then exists, as tier 1, only during this test.
func labelCliques(t *testing.T, ctx context.Context) {
	patch := func(i int, value any) {
		body := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, cliqueLabel, value)
		_, err := kube.CoreV1().Nodes().Patch(ctx, nodeName(i), types.MergePatchType, []byte(body), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for i := 0; i < nvlinkNodes; i++ {
			patch(i, "null")
		}
	})
	for i := 0; i < nvlinkNodes; i++ {
		patch(i, fmt.Sprintf("%q", cliqueOf(i)))
	}
}

func inNVLink() *volcanov1beta1.NetworkTopologySpec {
	return &volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.HardNetworkTopologyMode, HighestTierName: "nvlink"}
}

// TestNVLinkDomains: groups that ask for the NVLink tier (GPU feature discovery's
// nvidia.com/gpu.clique label) land inside one NVLink domain; small groups pack into the
// domain already in use, so every large group finds a whole domain; and when the small
// pods are spread over the domains instead, a large group waits with a message that says
// how many GPUs it needs in one domain and how many the freest domain has.
func TestNVLinkDomains(t *testing.T) {
	startSystem(t)
	ctx := context.Background()
	deleteHyperNodes(ctx)
	labelCliques(t, ctx)

	clique := map[string]string{}
	for i := 0; i < nvlinkNodes; i++ {
		clique[nodeName(i)] = cliqueOf(i)
	}

	t.Run("small groups pack, large groups get whole domains", func(t *testing.T) {
		w := newWorld(t)
		// One at a time, as a stream: 4-GPU single-pod groups and groups of two 8-GPU pods
		// (a whole domain). Spread, the four small groups would leave no whole domain for
		// the three large ones; packed, they share one domain.
		stream := []group{
			{name: "s1", pods: 1, gpus: 4}, {name: "l1", pods: 2, gpus: 8}, {name: "s2", pods: 1, gpus: 4},
			{name: "s3", pods: 1, gpus: 4}, {name: "l2", pods: 2, gpus: 8}, {name: "s4", pods: 1, gpus: 4},
			{name: "l3", pods: 2, gpus: 8},
		}
		for _, g := range stream {
			g.nt = inNVLink()
			w.create(g)
			w.eventually("group "+g.name+" bound", 60*time.Second, func() bool {
				byGroup, _ := w.placement()
				return len(byGroup[g.name]) == g.pods
			})
		}
		byGroup, _ := w.placement()
		smallDomains := map[string]bool{}
		largeDomains := map[string]bool{}
		for _, g := range stream {
			nodes := byGroup[g.name]
			d := clique[nodes[0]]
			require.NotEmpty(t, d, "group %s on %s, a node in no NVLink domain", g.name, nodes[0])
			for _, n := range nodes {
				assert.Equal(t, d, clique[n], "group %s split across NVLink domains: %v", g.name, nodes)
			}
			if g.pods == 1 {
				smallDomains[d] = true
			} else {
				largeDomains[d] = true
			}
		}
		assert.Len(t, smallDomains, 1, "the small groups pack into one domain")
		assert.Len(t, largeDomains, 3, "each large group has a domain of its own")
		for d := range smallDomains {
			assert.False(t, largeDomains[d], "no large group shares the small groups' domain")
		}
	})

	t.Run("a group no NVLink domain holds waits, and says why in numbers", func(t *testing.T) {
		w := newWorld(t)
		// What spreading leaves: one 4-GPU pod in every domain, bound by name.
		for i := 0; i < nvlinkNodes; i += nodesPerClique {
			w.createPod(fmt.Sprintf("spread-%d", i), 4, nil, nodeName(i))
		}
		w.create(group{name: "large", pods: 2, gpus: 8, nt: inNVLink()})
		want := "they need 16 nvidia.com/gpu in one NVLink domain (nvidia.com/gpu.clique), the largest free one has 12"
		w.eventually("the large group refused with its numbers", 30*time.Second, func() bool {
			pg, err := vc.SchedulingV1beta1().PodGroups(w.ns).Get(w.ctx, "large", metav1.GetOptions{})
			require.NoError(t, err)
			for _, c := range pg.Status.Conditions {
				if c.Type == volcanov1beta1.PodGroupUnschedulableType && c.Status == corev1.ConditionTrue && strings.Contains(c.Message, want) {
					return true
				}
			}
			return false
		})
		w.eventually("a warning event on the PodGroup with the numbers", 10*time.Second, func() bool {
			evs, err := kube.EventsV1().Events(w.ns).List(w.ctx, metav1.ListOptions{})
			require.NoError(t, err)
			for _, e := range evs.Items {
				if e.Regarding.Name == "large" && e.Type == corev1.EventTypeWarning && strings.Contains(e.Note, want) {
					return true
				}
			}
			return false
		})
		byGroup, _ := w.placement()
		assert.Empty(t, byGroup["large"], "48 GPUs are free in the NVLink domains, but never 16 in one: the group waits, never split")
	})
}
