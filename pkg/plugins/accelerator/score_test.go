package accelerator

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"
)

func TestScorePacksBestFit(t *testing.T) {
	pl := newPlugin(t, nil)
	nodes := []*framework.NodeInfo{
		gpuNode("empty", 8, 0, h100, 81559, "hopper"),
		gpuNode("half", 8, 4, h100, 81559, "hopper"),
		gpuNode("six-used", 8, 6, h100, 81559, "hopper"),
		gpuNode("seven-used", 8, 7, h100, 81559, "hopper"),
	}
	c := runCycle(t, pl, gpuPod("p", 2, nil), nodes)
	assert.Equal(t, []string{"six-used", "half", "empty"}, c.order, "the node left with the fewest free GPUs first")
	assert.Equal(t, int64(100), c.scores["six-used"])
	assert.Equal(t, int64(0), c.scores["empty"])
	assert.Contains(t, c.filter, "seven-used")
}

func TestCheaperClassWinsWhenBothFit(t *testing.T) {
	pl := newPlugin(t, &Args{ClassCosts: map[string]float64{a100: 1.0, h100: 2.2}})
	nodes := []*framework.NodeInfo{
		gpuNode("h100-perfect-fit", 8, 7, h100, 81559, "hopper"),
		gpuNode("a100-empty", 8, 0, a100, 81920, "ampere"),
		gpuNode("a100-half", 8, 4, a100, 81920, "ampere"),
		gpuNode("unknown-empty", 8, 7, "NVIDIA-B200", 183359, "blackwell"),
	}
	c := runCycle(t, pl, gpuPod("p", 1, nil), nodes)
	require.Len(t, c.order, 4)
	assert.Equal(t, []string{"a100-half", "a100-empty"}, c.order[:2], "the cheaper class first, packed within it")
	assert.Greater(t, c.scores["a100-empty"], c.scores["h100-perfect-fit"], "cost dominates packing")
	assert.Equal(t, c.scores["h100-perfect-fit"], c.scores["unknown-empty"], "an unlisted product costs as much as the priciest listed one")

	// The pod's own requirement can rule the cheap class out; then the next class is on top.
	c = runCycle(t, pl, gpuPod("p", 1, map[string]string{FamiliesAnnotation: "hopper,blackwell"}), nodes)
	assert.Equal(t, int64(100), c.scores["h100-perfect-fit"])
}

// Cost dominance has to survive normalization over whatever set of nodes is feasible:
// any node of a cheaper class above any node of a pricier one, best fit within a class.
func TestScoreBandsHoldForAnyFeasibleSet(t *testing.T) {
	products := []string{"gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-unlisted"}
	costs := map[string]float64{"gpu-a": 0.5, "gpu-b": 1, "gpu-c": 1.0004, "gpu-d": 7.5}
	pl := newPlugin(t, &Args{ClassCosts: costs})
	cost := func(product string) float64 {
		if c, ok := costs[product]; ok && product != "gpu-c" {
			return c
		}
		if product == "gpu-c" {
			return 1 // within a thousandth of gpu-b: the same class
		}
		return 7.5
	}
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 200; round++ {
		var nodes []*framework.NodeInfo
		free := map[string]int64{}
		product := map[string]string{}
		for i := 0; i < 2+rng.Intn(12); i++ {
			name := fmt.Sprintf("n%d", i)
			p := products[rng.Intn(len(products))]
			used := int64(rng.Intn(8))
			nodes = append(nodes, gpuNode(name, 8, used, p, 81920, "x"))
			free[name], product[name] = 8-used, p
		}
		need := int64(1 + rng.Intn(2))
		c := runCycle(t, pl, gpuPod("p", need, nil), nodes)
		for _, a := range c.order {
			for _, b := range c.order {
				ca, cb := cost(product[a]), cost(product[b])
				if ca < cb {
					require.Greater(t, c.scores[a], c.scores[b], "round %d: %s (%s) vs %s (%s)", round, a, product[a], b, product[b])
				}
				if ca == cb && free[a] < free[b] {
					require.GreaterOrEqual(t, c.scores[a], c.scores[b], "round %d: %s packs better than %s", round, a, b)
				}
			}
		}
	}
}

// Placing many 1-GPU pods one by one must leave a whole node for an 8-GPU pod. The same
// scenario placed by a spreading policy leaves none, so the test can tell the difference.
func TestSmallPodsLeaveAWholeNodeForTensorParallel(t *testing.T) {
	pl := newPlugin(t, nil)
	for seed := int64(0); seed < 20; seed++ {
		for _, spread := range []bool{false, true} {
			rng := rand.New(rand.NewSource(seed))
			nodes := []*framework.NodeInfo{
				gpuNode("n0", 8, 0, h100, 81559, "hopper"),
				gpuNode("n1", 8, 0, h100, 81559, "hopper"),
				gpuNode("n2", 8, 0, h100, 81559, "hopper"),
				gpuNode("n3", 8, 0, h100, 81559, "hopper"),
			}
			for i := 0; i < 24; i++ {
				pod := gpuPod(fmt.Sprintf("small-%d", i), 1, nil)
				c := runCycle(t, pl, pod, nodes)
				node := c.pick(rng, spread)
				require.NotEmpty(t, node)
				bind(nodes, node, pod)
			}
			c := runCycle(t, pl, gpuPod("tp8", 8, nil), nodes)
			if spread {
				assert.Empty(t, c.order, "seed %d: spreading 24 pods over 4 nodes leaves no whole node", seed)
				continue
			}
			require.Len(t, c.order, 1, "seed %d: packing leaves exactly one whole node", seed)
		}
	}
}

func TestPodsWithoutAcceleratorsPreferPlainNodes(t *testing.T) {
	nodes := []*framework.NodeInfo{
		gpuNode("gpu", 8, 0, h100, 81559, "hopper"),
		gpuNode("plain", 0, 0, "", 0, ""),
		labelledNode("npu", "huawei.com/Ascend910", 8, nil),
	}
	c := runCycle(t, newPlugin(t, nil), gpuPod("web", 0, nil), nodes)
	assert.Equal(t, map[string]int64{"plain": 100, "gpu": 0, "npu": 0}, c.scores)

	c = runCycle(t, newPlugin(t, &Args{PreferNodesWithoutAccelerators: ptr.To(false)}), gpuPod("web", 0, nil), nodes)
	assert.Empty(t, c.scores, "scoring is skipped when the preference is off")

	// Only the configured resources count as accelerators.
	c = runCycle(t, newPlugin(t, &Args{Resources: []AcceleratorResource{{Name: "nvidia.com/gpu"}}}), gpuPod("web", 0, nil), nodes)
	assert.Equal(t, map[string]int64{"plain": 100, "gpu": 0, "npu": 100}, c.scores)
}

func TestPodAskingForAnotherVendorIsNotScoredByGPUs(t *testing.T) {
	ascend := corev1.ResourceName("huawei.com/Ascend910")
	nodes := []*framework.NodeInfo{
		labelledNode("npu-a", ascend, 8, map[string]string{"node.kubernetes.io/npu.chip.name": "910B3"}),
		labelledNode("npu-b", ascend, 16, map[string]string{"node.kubernetes.io/npu.chip.name": "910B3"}),
	}
	c := runCycle(t, newPlugin(t, nil), devicePod("p", ascend, 8, nil), nodes)
	assert.Equal(t, []string{"npu-a", "npu-b"}, c.order, "the node the pod fills completely first")
	assert.Greater(t, c.scores["npu-a"], c.scores["npu-b"])
}
