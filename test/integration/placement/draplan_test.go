package placement

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/utils/ptr"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/pkg/plugins/placement"
	"github.com/berth-sh/berth/pkg/sim"
)

// The DRA side of placement: berth-scheduler plans the devices of a whole gang whose pods
// use ResourceClaims, with kube-scheduler's own DynamicResources plugin allocating them.
// The nodes here are the test's own (tainted, so the other tests' pods stay off them), each
// publishing its GPUs in a ResourceSlice of driver gpu.nvidia.com.

const (
	draDriver = "gpu.nvidia.com"
	planTaint = "dra.berth.test/plan"
)

// draGPU is one device of a ResourceSlice: its name and memory.
type draGPU struct {
	name   string
	memory string
}

// draNode makes a tainted node with cpu and the GPUs in a ResourceSlice, removed at cleanup.
func (w *world) draNode(name string, cpu string, gpus ...draGPU) {
	w.t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: planTaint, Effect: corev1.TaintEffectNoSchedule}}}}
	alloc := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("110")}
	node.Status = corev1.NodeStatus{Capacity: alloc, Allocatable: alloc, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}
	created, err := kube.CoreV1().Nodes().Create(w.ctx, node, metav1.CreateOptions{})
	require.NoError(w.t, err)
	created.Status = node.Status
	_, err = kube.CoreV1().Nodes().UpdateStatus(w.ctx, created, metav1.UpdateOptions{})
	require.NoError(w.t, err)
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-gpus"},
		Spec: resourceapi.ResourceSliceSpec{Driver: draDriver, NodeName: ptr.To(name),
			Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1}}}
	for i, g := range gpus {
		slice.Spec.Devices = append(slice.Spec.Devices, resourceapi.Device{Name: g.name,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"index":       {IntValue: ptr.To(int64(i))},
				"type":        {StringValue: ptr.To("gpu")},
				"productName": {StringValue: ptr.To("NVIDIA H100 80GB HBM3")},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse(g.memory)}}})
	}
	_, err = kube.ResourceV1().ResourceSlices().Create(w.ctx, slice, metav1.CreateOptions{})
	require.NoError(w.t, err)
	w.t.Cleanup(func() {
		_ = kube.ResourceV1().ResourceSlices().Delete(w.ctx, slice.Name, metav1.DeleteOptions{})
		_ = kube.CoreV1().Nodes().Delete(w.ctx, name, metav1.DeleteOptions{})
	})
}

// ensureGPUClass creates the DeviceClass NVIDIA's driver installs (the simulated driver's),
// if it is not there.
func (w *world) ensureGPUClass() {
	_, err := kube.ResourceV1().DeviceClasses().Create(w.ctx, sim.GPUDeviceClass(), metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(w.t, err)
	}
}

// claim makes a ResourceClaim for one device of class, with a CEL selector when sel is set.
func (w *world) claim(name, class, sel string) {
	w.t.Helper()
	req := resourceapi.ExactDeviceRequest{DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	if sel != "" {
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: sel}}}
	}
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &req}}}}}
	_, err := kube.ResourceV1().ResourceClaims(w.ns).Create(w.ctx, c, metav1.CreateOptions{})
	require.NoError(w.t, err)
}

// draGang makes a PodGroup of len(claims) pods, pod k using claims[k]; see draPod.
func (w *world) draGang(name string, claims ...string) {
	w.t.Helper()
	w.draGangGated(name, -1, claims...)
}

// draGangGated is draGang with pod gated (its index) created behind a scheduling gate.
func (w *world) draGangGated(name string, gated int, claims ...string) {
	w.t.Helper()
	pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns},
		Spec: volcanov1beta1.PodGroupSpec{MinMember: int32(len(claims))}}
	_, err := vc.SchedulingV1beta1().PodGroups(w.ns).Create(w.ctx, pg, metav1.CreateOptions{})
	require.NoError(w.t, err)
	for k, c := range claims {
		p := w.draPod(fmt.Sprintf("%s-%d", name, k), c, "")
		p.Annotations = map[string]string{placement.GroupNameKey: name, placement.TaskSpecKey: fmt.Sprintf("worker-%d", k)}
		if k == gated {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: testGate}}
		}
		_, err := kube.CoreV1().Pods(w.ns).Create(w.ctx, p, metav1.CreateOptions{})
		require.NoError(w.t, err)
	}
}

// testGate holds a pod back from scheduling until ungatePod.
const testGate = "berth.sh/test-hold"

// ungatePod lifts the pod's scheduling gates.
func (w *world) ungatePod(name string) {
	w.t.Helper()
	p, err := kube.CoreV1().Pods(w.ns).Get(w.ctx, name, metav1.GetOptions{})
	require.NoError(w.t, err)
	p.Spec.SchedulingGates = nil
	_, err = kube.CoreV1().Pods(w.ns).Update(w.ctx, p, metav1.UpdateOptions{})
	require.NoError(w.t, err)
}

// draPod is a pod using the claim, tolerating the DRA nodes' taint and asking for no
// device plugin GPU; with prefer, it prefers that node (a soft preference).
func (w *world) draPod(name, claim, prefer string) *corev1.Pod {
	spec := podSpec(0)
	spec.Tolerations = []corev1.Toleration{{Key: planTaint, Operator: corev1.TolerationOpExists}}
	spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}}
	spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	if prefer != "" {
		spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{prefer}}}}}}}}
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns}, Spec: spec}
}

// allocatedDevice is the device the claim was allocated, "" while it has none.
func (w *world) allocatedDevice(claim string) string {
	c, err := kube.ResourceV1().ResourceClaims(w.ns).Get(w.ctx, claim, metav1.GetOptions{})
	require.NoError(w.t, err)
	if c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) == 0 {
		return ""
	}
	r := c.Status.Allocation.Devices.Results[0]
	return r.Pool + "/" + r.Device
}

func placementCounter(t *testing.T, name, result string) float64 {
	vals, err := testutil.GetCounterValuesFromGatherer(legacyregistry.DefaultGatherer, name, nil, "result")
	if err != nil && strings.Contains(err.Error(), "not found") {
		return 0 // no series yet
	}
	require.NoError(t, err)
	return vals[result]
}

// podGroupMessage is the message of the PodGroup's newest condition, "" without one.
func (w *world) podGroupMessage(name string) string {
	pg, err := vc.SchedulingV1beta1().PodGroups(w.ns).Get(w.ctx, name, metav1.GetOptions{})
	require.NoError(w.t, err)
	msg := ""
	for _, c := range pg.Status.Conditions {
		msg = c.Message
	}
	return msg
}

func TestDRAPlan(t *testing.T) {
	t.Run("a gang whose first-fit devices fail is placed by another allocation", draBacktracks)
	t.Run("bad claims are refused in words, nothing held", draBadClaims)
	t.Run("a claim shared by two pods of a gang is planned once, on one node", draSharedClaim)
}

// draSharedClaim: two nodes of one GPU each, a gang of three pods, pods 0 and 1 sharing one
// claim and pod 2 using its own. The gang needs two GPUs, not three: counted per pod the
// shared claim would leave it unplaceable, and the two pods sharing it must go to the node
// whose GPU it is allocated (a claim's devices are on one node). The plan must place pods
// 0 and 1 together, pod 2 on the other node, and agree with what the plugin allocates.
//
// DynamicResources refuses pod 1 while pod 0's allocation of the shared claim is pending,
// and pod 0 would wait in Permit for pod 1: the gang lets pod 0 ahead to PreBind, where
// the claim is written and pod 0 waits. Pod 2 is created gated, so the group cannot be
// complete: a watch over the whole run asserts no pod binds before pod 2 is ungated, once
// the claim is allocated and both other pods are held.
func draSharedClaim(t *testing.T) {
	w := newWorld(t)
	w.ensureGPUClass()
	w.draNode("dra-s1", "64", draGPU{"gpu-0", "80Gi"})
	w.draNode("dra-s2", "64", draGPU{"gpu-0", "80Gi"})
	disagreeBefore := placementCounter(t, "berth_placement_dra_allocation_checks_total", "disagree")
	earlyBefore := gathered(t, "berth_gang_early_permits_total")
	w.claim("shared", draDriver, "")
	w.claim("own", draDriver, "")

	watch, err := kube.CoreV1().Pods(w.ns).Watch(w.ctx, metav1.ListOptions{})
	require.NoError(t, err)
	defer watch.Stop()
	var mu sync.Mutex
	var ungated time.Time
	var early []string // pods seen bound before pod 2 was ungated
	go func() {
		for ev := range watch.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok || p.Spec.NodeName == "" {
				continue
			}
			mu.Lock()
			if ungated.IsZero() {
				early = append(early, p.Name)
			}
			mu.Unlock()
		}
	}()
	w.draGangGated("sh", 2, "shared", "shared", "own")

	w.eventually("the shared claim allocated ahead and pods 0 and 1 held", 60*time.Second, func() bool {
		return w.allocatedDevice("shared") != "" && gathered(t, "berth_gang_waiting_pods") == 2
	})
	assert.Greater(t, gathered(t, "berth_gang_early_permits_total"), earlyBefore, "a pod was let through Permit ahead of its gang")
	byGroup, _ := w.placement()
	require.Empty(t, byGroup["sh"], "a pod of the gang bound while its third pod was gated")
	mu.Lock()
	ungated = time.Now()
	mu.Unlock()
	w.ungatePod("sh-2")

	w.eventually("the three pods of the gang bound", 60*time.Second, func() bool {
		byGroup, _ := w.placement()
		return len(byGroup["sh"]) == 3
	})
	mu.Lock()
	require.Empty(t, early, "pods bound before the gang's third pod was ungated")
	mu.Unlock()
	a, b, c := w.node("sh-0"), w.node("sh-1"), w.node("sh-2")
	assert.Equal(t, a, b, "the two pods sharing a claim are on its device's node")
	assert.NotEqual(t, a, c, "the pod with its own claim takes the other node's GPU")
	w.eventually("both claims allocated", 30*time.Second, func() bool {
		return w.allocatedDevice("shared") != "" && w.allocatedDevice("own") != ""
	})
	assert.Equal(t, a+"/gpu-0", w.allocatedDevice("shared"))
	assert.Equal(t, c+"/gpu-0", w.allocatedDevice("own"))
	assert.Equal(t, disagreeBefore, placementCounter(t, "berth_placement_dra_allocation_checks_total", "disagree"),
		"the DynamicResources plugin allocated what the plan chose")
}

// gathered reads a counter's or gauge's value (summed over its series) from the process's
// metrics registry, 0 before it has any.
func gathered(t *testing.T, name string) float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// draBacktracks: two nodes, one 80 GiB GPU on dra-a and one 40 GiB GPU on dra-b. Pod 0 can
// use any GPU, pod 1 needs 80 GiB. Placed one pod at a time, first fit, pod 0 takes
// dra-a's GPU (the first node by every score here) and pod 1 has nothing left; only the
// other allocation (pod 0 on dra-b) places the gang. The plan must find it, and what the
// DynamicResources plugin then allocates must be what the plan chose.
func draBacktracks(t *testing.T) {
	w := newWorld(t)
	w.ensureGPUClass()
	w.draNode("dra-a", "64", draGPU{"gpu-0", "80Gi"})
	w.draNode("dra-b", "64", draGPU{"gpu-0", "40Gi"})
	agreeBefore := placementCounter(t, "berth_placement_dra_allocation_checks_total", "agree")
	disagreeBefore := placementCounter(t, "berth_placement_dra_allocation_checks_total", "disagree")
	foundBefore := placementCounter(t, "berth_placement_dra_backtracks_total", "found")

	w.claim("any-gpu", draDriver, "")
	w.claim("big-gpu", draDriver, `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0`)
	w.draGang("tp", "any-gpu", "big-gpu")

	byGroup := w.wholeGroups(map[string]int{"tp": 2}, 60*time.Second)
	w.eventually("both pods of the gang bound", 60*time.Second, func() bool {
		byGroup, _ = w.placement()
		return len(byGroup["tp"]) == 2
	})
	assert.Equal(t, "dra-b", w.node("tp-0"), "the pod that can use any GPU goes where the big one is not")
	assert.Equal(t, "dra-a", w.node("tp-1"), "the pod that needs 80 GiB gets the node that has it")
	w.eventually("both claims allocated", 30*time.Second, func() bool {
		return w.allocatedDevice("any-gpu") != "" && w.allocatedDevice("big-gpu") != ""
	})
	assert.Equal(t, "dra-b/gpu-0", w.allocatedDevice("any-gpu"))
	assert.Equal(t, "dra-a/gpu-0", w.allocatedDevice("big-gpu"))
	w.eventually("the plan compared with both allocations", 30*time.Second, func() bool {
		return placementCounter(t, "berth_placement_dra_allocation_checks_total", "agree")-agreeBefore >= 2
	})
	assert.Equal(t, disagreeBefore, placementCounter(t, "berth_placement_dra_allocation_checks_total", "disagree"),
		"the DynamicResources plugin allocated what the plan chose")
	assert.GreaterOrEqual(t, placementCounter(t, "berth_placement_dra_backtracks_total", "found")-foundBefore, 1.0,
		"the first choice failed and the search found the other allocation")

	// The same two pods, on two more such nodes, through kube-scheduler's default profile
	// (which places pod by pod: no gang): pod 0 goes where it prefers, the 80 GiB GPU, and
	// pod 1 is left with nothing it can use though an allocation for both exists.
	w.draNode("dra-d", "64", draGPU{"gpu-0", "80Gi"})
	w.draNode("dra-e", "64", draGPU{"gpu-0", "40Gi"})
	w.claim("default-any", draDriver, "")
	w.claim("default-big", draDriver, `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0`)
	for _, p := range []*corev1.Pod{w.draPod("default-0", "default-any", "dra-d"), w.draPod("default-1", "default-big", "")} {
		p.Spec.SchedulerName = corev1.DefaultSchedulerName
		p.Spec.Affinity = mergeRequired(p.Spec.Affinity, "dra-d", "dra-e")
		_, err := kube.CoreV1().Pods(w.ns).Create(w.ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
		w.eventually("the default scheduler decided on "+p.Name, 30*time.Second, func() bool {
			q, err := kube.CoreV1().Pods(w.ns).Get(w.ctx, p.Name, metav1.GetOptions{})
			require.NoError(t, err)
			return q.Spec.NodeName != "" || unschedulable(q)
		})
	}
	assert.Equal(t, "dra-d", w.node("default-0"), "the default scheduler gives pod 0 the 80 GiB GPU")
	q, err := kube.CoreV1().Pods(w.ns).Get(w.ctx, "default-1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.True(t, q.Spec.NodeName == "" && unschedulable(q), "the default scheduler cannot place pod 1 after that: %+v", q.Status.Conditions)
}

// mergeRequired confines the pod to the nodes, keeping its preferences.
func mergeRequired(a *corev1.Affinity, nodes ...string) *corev1.Affinity {
	if a == nil {
		a = &corev1.Affinity{}
	}
	if a.NodeAffinity == nil {
		a.NodeAffinity = &corev1.NodeAffinity{}
	}
	a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: nodes}}}}}
	return a
}

// unschedulable: the scheduler tried the pod and found no node.
func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// draBadClaims: a claim naming a DeviceClass that does not exist, and one whose selector no
// device matches: each gang is refused with a PodGroup condition that names what is wrong,
// and neither holds a device.
func draBadClaims(t *testing.T) {
	w := newWorld(t)
	w.ensureGPUClass()
	w.draNode("dra-c", "64", draGPU{"gpu-0", "80Gi"}, draGPU{"gpu-1", "80Gi"})
	w.claim("no-class", "no-such-class.example.com", "")
	w.draGang("missing-class", "no-class")
	w.claim("too-big", draDriver, `device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("200Gi")) >= 0`)
	w.draGang("no-match", "too-big")

	w.eventually("the missing DeviceClass named in the PodGroup's condition", 60*time.Second, func() bool {
		return strings.Contains(w.podGroupMessage("missing-class"), "no-such-class.example.com")
	})
	w.eventually("the unmatched selector named in the PodGroup's condition", 60*time.Second, func() bool {
		msg := w.podGroupMessage("no-match")
		return strings.Contains(msg, "can allocate claim too-big") && strings.Contains(msg, `quantity("200Gi")`)
	})
	t.Logf("missing class: %s", w.podGroupMessage("missing-class"))
	t.Logf("no match: %s", w.podGroupMessage("no-match"))
	assert.Empty(t, w.allocatedDevice("no-class"))
	assert.Empty(t, w.allocatedDevice("too-big"))
	pods, err := kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, p := range pods.Items {
		assert.Empty(t, p.Spec.NodeName, "pod %s of a refused gang is not bound", p.Name)
	}
}
