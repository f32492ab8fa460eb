package gang

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/pkg/sim"
)

// gangDRA is gang with the pods' GPUs claimed through DRA (the ResourceClaimTemplate
// gpus-<gpus>) instead of the nvidia.com/gpu extended resource; the priority is on the pods.
func (pw *preemptWorld) gangDRA(name string, sel map[string]string, level string, pods int, gpus int64) {
	pw.t.Helper()
	r := role{name: "engine", replicas: pods, gpus: gpus, cpu: "1", priorityClass: pw.prio[level]}
	spec := newGangSpec(name, &gpuPool{name: name, selector: sel}, nil, r)
	spec.useDRA()
	pw.specs[name] = spec
	pw.gw.register(spec)
	pw.createGangWith(name, nil, gangOpts{}, spec.roles...)
}

// draNode adds a node of gpus DRA GPUs with its own pool label. The world's simulated
// kubelet publishes its ResourceSlice (it is every node's gpu.nvidia.com plugin); wait for it.
func (pw *preemptWorld) draNode(name string, gpus int64) {
	pw.t.Helper()
	node := sim.NewNode(pw.ns+"-"+name, sim.NodeShape{CPU: "64", Memory: "512Gi", DRAGPUs: gpus},
		map[string]string{"berth.test/owner": pw.ns, poolLabel: name})
	_, err := pw.kube.CoreV1().Nodes().Create(pw.ctx, node, metav1.CreateOptions{})
	require.NoError(pw.t, err)
	pw.eventually("the kubelet published "+name+"'s GPUs", 30*time.Second, func() bool {
		slices, err := pw.kube.ResourceV1().ResourceSlices().List(pw.ctx, metav1.ListOptions{})
		require.NoError(pw.t, err)
		for _, s := range slices.Items {
			if s.Spec.NodeName != nil && *s.Spec.NodeName == node.Name && int64(len(s.Spec.Devices)) == gpus {
				return true
			}
		}
		return false
	})
}

// claimedDevices lists, per node, the devices allocated to the group's pods' claims.
func (pw *preemptWorld) claimedDevices(group string) map[string]int {
	pw.t.Helper()
	claims, err := pw.kube.ResourceV1().ResourceClaims(pw.ns).List(pw.ctx, metav1.ListOptions{})
	require.NoError(pw.t, err)
	pods, err := pw.kube.CoreV1().Pods(pw.ns).List(pw.ctx, metav1.ListOptions{LabelSelector: labelGroup + "=" + group})
	require.NoError(pw.t, err)
	mine := map[string]bool{}
	for _, p := range pods.Items {
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.ResourceClaimName != nil {
				mine[*s.ResourceClaimName] = true
			}
		}
	}
	out := map[string]int{}
	for _, c := range claims.Items {
		if !mine[c.Name] || c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			out[r.Pool] += 1
		}
	}
	return out
}

// Preemption counts claimed devices: two nodes of 8 DRA GPUs, d1 held by a low gang of two
// 4-GPU pods, d2 by a low and a mid gang of one 4-GPU pod each, every GPU claimed through a
// ResourceClaimTemplate. A high gang of one pod claiming 8 GPUs can only run where whole
// gangs are evicted and their claims freed; the cheapest such set is d1's low gang alone.
// The preemptor must be planned onto d1 with the devices its victims held, evict that gang
// whole and nothing else, and be allocated d1's 8 devices by the DynamicResources plugin
// as the plan chose.
func TestPreemptionCountsClaimedDevices(t *testing.T) {
	pw := newPreemptWorld(t, 0)
	pw.ensureGPUTemplates()
	for _, n := range []string{"d1", "d2"} {
		pw.draNode(n, 8)
	}
	on := func(n string) map[string]string { return map[string]string{poolLabel: n} }
	pw.gangDRA("low-big", on("d1"), "low", 2, 4)
	pw.gangDRA("low-one", on("d2"), "low", 1, 4)
	pw.gangDRA("mid-one", on("d2"), "mid", 1, 4)
	pw.waitBound(60*time.Second, "low-big", "low-one", "mid-one")
	pw.eventually("every claim of the first gangs allocated", 30*time.Second, func() bool {
		return pw.claimedDevices("low-big")[pw.ns+"-d1"] == 8 && pw.claimedDevices("low-one")[pw.ns+"-d2"] == 4 &&
			pw.claimedDevices("mid-one")[pw.ns+"-d2"] == 4
	})
	disagreeBefore, _ := counterValue(t, "berth_placement_dra_allocation_checks_total", map[string]string{"result": "disagree"})

	pw.gangDRA("high", pw.anywhere(), "high", 1, 8)
	pw.waitBound(90*time.Second, "high")
	require.Equal(t, []string{"d1"}, pw.nodesOf("high"), "the preemptor goes where its victims' devices were freed")
	got := pw.ev.groups()
	sort.Strings(got)
	require.Equal(t, []string{"low-big"}, got, "only the lowest, fewest victims go")
	pw.eventually("the preemptor's claim allocated d1's 8 devices", 30*time.Second, func() bool {
		return fmt.Sprint(pw.claimedDevices("high")) == fmt.Sprint(map[string]int{pw.ns + "-d1": 8})
	})
	disagree, _ := counterValue(t, "berth_placement_dra_allocation_checks_total", map[string]string{"result": "disagree"})
	require.Equal(t, disagreeBefore, disagree, "the DynamicResources plugin allocated what the plan chose")
	pw.check()
}
