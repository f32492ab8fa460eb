package accelerator

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/berth-sh/berth/pkg/sim"
)

const (
	a100 = "NVIDIA-A100-SXM4-80GB"
	h100 = "NVIDIA-H100-80GB-HBM3"
	gpu  = corev1.ResourceName("nvidia.com/gpu")
)

func newPlugin(t *testing.T, args *Args) *Accelerator {
	t.Helper()
	pl, err := New(context.Background(), args, nil)
	require.NoError(t, err)
	return pl.(*Accelerator)
}

// devicePod requests n of res in one container, with the given annotations.
func devicePod(name string, res corev1.ResourceName, n int64, annotations map[string]string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name), Annotations: annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
		}}}},
	}
	if n > 0 {
		q := *resource.NewQuantity(n, resource.DecimalSI)
		pod.Spec.Containers[0].Resources.Requests[res] = q
		pod.Spec.Containers[0].Resources.Limits = corev1.ResourceList{res: q}
	}
	return pod
}

func gpuPod(name string, n int64, annotations map[string]string) *corev1.Pod {
	return devicePod(name, gpu, n, annotations)
}

// gpuNode is a simulated node with GFD labels and `used` GPUs taken by one bound pod.
func gpuNode(name string, gpus, used int64, product string, memMiB int64, family string) *framework.NodeInfo {
	node := sim.NewNode(name, sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: gpus, GPUProduct: product, GPUMemoryMiB: memMiB, GPUFamily: family}, nil)
	ni := framework.NewNodeInfo()
	ni.SetNode(node)
	if used > 0 {
		p := gpuPod(name+"-used", used, nil)
		p.Spec.NodeName = name
		ni.AddPod(p)
	}
	return ni
}

// labelledNode is a node offering `devices` of res with the given labels.
func labelledNode(name string, res corev1.ResourceName, devices int64, labels map[string]string) *framework.NodeInfo {
	node := sim.NewNode(name, sim.NodeShape{CPU: "64", Memory: "512Gi"}, labels)
	if devices > 0 {
		node.Status.Allocatable[res] = *resource.NewQuantity(devices, resource.DecimalSI)
		node.Status.Capacity[res] = *resource.NewQuantity(devices, resource.DecimalSI)
	}
	ni := framework.NewNodeInfo()
	ni.SetNode(node)
	return ni
}

// cycle is one scheduling cycle of the plugin alone, as the framework runs it.
type cycle struct {
	prefilter *fwk.Status
	filter    map[string]*fwk.Status // nodes that did not pass
	scores    map[string]int64       // normalized, feasible nodes only
	order     []string               // feasible nodes, best first (ties by name)
}

func runCycle(t *testing.T, pl *Accelerator, pod *corev1.Pod, nodes []*framework.NodeInfo) cycle {
	t.Helper()
	ctx := context.Background()
	state := framework.NewCycleState()
	infos := make([]fwk.NodeInfo, len(nodes))
	for i, n := range nodes {
		infos[i] = n
	}
	var c cycle
	_, c.prefilter = pl.PreFilter(ctx, state, pod, infos)
	if !c.prefilter.IsSuccess() && !c.prefilter.IsSkip() {
		return c
	}
	c.filter = map[string]*fwk.Status{}
	var feasible []fwk.NodeInfo
	for _, n := range infos {
		if !c.prefilter.IsSkip() {
			if s := pl.Filter(ctx, state, pod, n); !s.IsSuccess() {
				c.filter[n.Node().Name] = s
				continue
			}
		}
		feasible = append(feasible, n)
	}
	c.scores = map[string]int64{}
	if len(feasible) == 0 {
		return c
	}
	if s := pl.PreScore(ctx, state, pod, feasible); s.IsSkip() {
		return c
	} else {
		require.True(t, s.IsSuccess(), s.Message())
	}
	list := make(fwk.NodeScoreList, len(feasible))
	for i, n := range feasible {
		score, s := pl.Score(ctx, state, pod, n)
		require.True(t, s.IsSuccess(), s.Message())
		list[i] = fwk.NodeScore{Name: n.Node().Name, Score: score}
	}
	require.True(t, pl.NormalizeScore(ctx, state, pod, list).IsSuccess())
	for _, s := range list {
		require.GreaterOrEqual(t, s.Score, fwk.MinScore, s.Name)
		require.LessOrEqual(t, s.Score, fwk.MaxScore, s.Name)
		c.scores[s.Name] = s.Score
		c.order = append(c.order, s.Name)
	}
	sort.SliceStable(c.order, func(i, j int) bool {
		if c.scores[c.order[i]] != c.scores[c.order[j]] {
			return c.scores[c.order[i]] > c.scores[c.order[j]]
		}
		return c.order[i] < c.order[j]
	})
	return c
}

// pick chooses among the best-scored nodes at random, as the scheduler does, or among the
// worst when worst is set (a spreading policy, to show what packing prevents).
func (c cycle) pick(rng *rand.Rand, worst bool) string {
	if len(c.order) == 0 {
		return ""
	}
	target := c.scores[c.order[0]]
	if worst {
		target = c.scores[c.order[len(c.order)-1]]
	}
	var tied []string
	for _, n := range c.order {
		if c.scores[n] == target {
			tied = append(tied, n)
		}
	}
	return tied[rng.Intn(len(tied))]
}

func bind(nodes []*framework.NodeInfo, name string, pod *corev1.Pod) {
	for _, n := range nodes {
		if n.Node().Name == name {
			p := pod.DeepCopy()
			p.Spec.NodeName = name
			n.AddPod(p)
			return
		}
	}
	panic(fmt.Sprintf("no node %s", name))
}
