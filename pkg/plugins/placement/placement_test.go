package placement

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

const gpu = corev1.ResourceName("nvidia.com/gpu")

// pdGroup is the PodGroup Berth's controller writes for 1 prefill + 2 decode, each with
// `workers` workers: one task and one subgroup per role replica.
func pdGroup(name string, workers int32) *volcanov1beta1.PodGroup {
	size := 1 + workers
	pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	pg.Spec.MinTaskMember = map[string]int32{"prefill-0": size, "decode-0": size, "decode-1": size}
	pg.Spec.MinMember = 3 * size
	for _, role := range []string{"prefill", "decode"} {
		pg.Spec.SubGroupPolicy = append(pg.Spec.SubGroupPolicy, volcanov1beta1.SubGroupPolicySpec{
			Name: role, SubGroupSize: ptr.To(size), MinSubGroups: ptr.To[int32](0),
			LabelSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{workloadv1alpha1.RoleLabel: role}},
			MatchLabelKeys: []string{workloadv1alpha1.RoleIDLabel},
		})
	}
	return pg
}

func gangPod(group, role string, replica, index int, gpus int64) *corev1.Pod {
	task := fmt.Sprintf("%s-%d", role, replica)
	name := fmt.Sprintf("%s-%s-%d", group, task, index)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: name, UID: types.UID(name),
			Labels:      map[string]string{workloadv1alpha1.RoleLabel: role, workloadv1alpha1.RoleIDLabel: task},
			Annotations: map[string]string{GroupNameKey: group, TaskSpecKey: task},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{gpu: *resource.NewQuantity(gpus, resource.DecimalSI)},
		}}}},
	}
}

// simpleGroup is a PodGroup of n single pods, all needed.
func simpleGroup(name string, n int32) *volcanov1beta1.PodGroup {
	return &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.Now()}, Spec: volcanov1beta1.PodGroupSpec{MinMember: n}}
}

func simplePods(group string, n int, gpus int64) []*corev1.Pod {
	var out []*corev1.Pod
	for i := 0; i < n; i++ {
		p := gangPod(group, "w", i, 0, gpus)
		delete(p.Annotations, TaskSpecKey)
		out = append(out, p)
	}
	return out
}

// world is a model over fixed nodes whose free GPUs a test changes.
type world struct {
	t     *testing.T
	pods  cache.Indexer
	nodes map[string]*corev1.Node
	free  map[string]int64
	alloc map[string]int64
	m     *Model
}

func newWorld(t *testing.T, free ...int64) *world {
	w := &world{t: t, pods: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{podsByGroupIndex: indexByGroup}),
		nodes: map[string]*corev1.Node{}, free: map[string]int64{}, alloc: map[string]int64{}}
	for i, f := range free {
		name := fmt.Sprintf("n%d", i)
		w.nodes[name] = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "a"}}}
		w.free[name], w.alloc[name] = f, 8
	}
	w.m = newModel(w.pods, w.source)
	w.m.SetReserveAfter(0)
	return w
}

func (w *world) source() NodeSource {
	var nodes []StaticNode
	for name, n := range w.nodes {
		nodes = append(nodes, StaticNode{Node: n,
			Free:        Resources{gpu: w.free[name], corev1.ResourceCPU: 64000, corev1.ResourcePods: 110},
			Allocatable: Resources{gpu: w.alloc[name], corev1.ResourceCPU: 64000, corev1.ResourcePods: 110}})
	}
	return StaticSource(nodes...)
}

func (w *world) add(pods ...*corev1.Pod) {
	for _, p := range pods {
		require.NoError(w.t, w.pods.Add(p))
	}
}

func (w *world) plan(pg *volcanov1beta1.PodGroup, pod *corev1.Pod) Outcome {
	req, err := NewRequirement(pg)
	require.NoError(w.t, err)
	out, err := w.m.PlanFor(pod, pg, req, time.Minute)
	require.NoError(w.t, err)
	return out
}

func TestCheckNeverReleasesASplitRoleReplica(t *testing.T) {
	req, err := NewRequirement(pdGroup("g", 1))
	require.NoError(t, err)
	all := []*corev1.Pod{
		gangPod("g", "prefill", 0, 0, 1), gangPod("g", "prefill", 0, 1, 1),
		gangPod("g", "decode", 0, 0, 1), gangPod("g", "decode", 0, 1, 1),
		gangPod("g", "decode", 1, 0, 1), gangPod("g", "decode", 1, 1, 1),
	}
	assert.True(t, req.Check(all).OK)
	assert.False(t, req.Check(all[:5]).OK, "decode-1 has its entry but not its worker")
	assert.Contains(t, req.Check(all[:5]).Reason, "5/6 pods placed")
	assert.True(t, req.Enough(all).OK)
	assert.False(t, req.Enough(all[:4]).OK, "PreEnqueue holds the group until every minimum pod exists")
	req.MinMember, req.MinTask = 0, nil
	assert.Contains(t, req.Check(all[:5]).Reason, "decode: a subgroup has 1/2 pods placed", "the subgroup rule alone also refuses a split replica")
}

func TestCheckHonoursMinSubGroups(t *testing.T) {
	pg := &volcanov1beta1.PodGroup{}
	pg.Spec.SubGroupPolicy = []volcanov1beta1.SubGroupPolicySpec{{
		Name: "decode", SubGroupSize: ptr.To[int32](2), MinSubGroups: ptr.To[int32](2),
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{workloadv1alpha1.RoleLabel: "decode"}}, MatchLabelKeys: []string{workloadv1alpha1.RoleIDLabel},
	}}
	req, err := NewRequirement(pg)
	require.NoError(t, err)
	one := []*corev1.Pod{gangPod("g", "decode", 0, 0, 1), gangPod("g", "decode", 0, 1, 1)}
	two := append(one, gangPod("g", "decode", 1, 0, 1), gangPod("g", "decode", 1, 1, 1))
	assert.False(t, req.Check(one).OK)
	assert.True(t, req.Check(two).OK)
	assert.Equal(t, 4, req.Members())
}

func TestCompareNaturalOrdersReplicasNumerically(t *testing.T) {
	assert.Negative(t, CompareNatural("decode-2", "decode-10"))
	assert.Positive(t, CompareNatural("decode-10", "decode-9"))
	assert.Negative(t, CompareNatural("decode-1", "prefill-0"))
	assert.Zero(t, CompareNatural("a-1", "a-1"))
}

func TestPlanExplainsWhatIsMissing(t *testing.T) {
	w := newWorld(t, 8, 4, 2)
	pg := pdGroup("g", 0)
	pods := []*corev1.Pod{gangPod("g", "prefill", 0, 0, 4), gangPod("g", "decode", 0, 0, 8), gangPod("g", "decode", 1, 0, 8)}
	w.add(pods...)
	// Room for the prefill and one decode only.
	out := w.plan(pg, pods[0])
	require.Nil(t, out.Plan)
	assert.Regexp(t, "^decode needs 2 complete replicas, 1 fits: 0/3 nodes its pods may use have 8 free nvidia.com/gpu;", out.Refusal)

	w.free["n2"] = 8
	out = w.plan(pg, pods[0])
	require.NotNil(t, out.Plan)
	assert.Len(t, out.Plan.Nodes, 3, "every pod of the minimum has a node")
	assert.Equal(t, "n1", out.Node(pods[0]), "the 4-GPU prefill fills the 4-GPU node: whole nodes stay whole")
}

func TestPlanPlacesAReplicaWhole(t *testing.T) {
	pg := pdGroup("g", 3)
	pg.Spec.MinTaskMember = map[string]int32{"prefill-0": 4}
	pg.Spec.MinMember = 4
	var pods []*corev1.Pod
	for i := 0; i < 4; i++ {
		pods = append(pods, gangPod("g", "prefill", 0, i, 8))
	}
	w := newWorld(t, 8, 8, 8)
	w.add(pods...)
	out := w.plan(pg, pods[0])
	assert.Nil(t, out.Plan, "3 nodes cannot hold a 4-pod replica")
	w = newWorld(t, 8, 8, 8, 8)
	w.add(pods...)
	out = w.plan(pg, pods[0])
	require.NotNil(t, out.Plan)
	assert.Len(t, out.Plan.Nodes, 4)
}

func TestPlanUsesOnlyNodesThePodsMayUse(t *testing.T) {
	w := newWorld(t, 8, 8, 8, 8)
	// Two nodes are tainted, one is of another pool: only n0 is eligible.
	for _, n := range []string{"n1", "n2"} {
		w.nodes[n].Spec.Taints = []corev1.Taint{{Key: "pool", Value: "b", Effect: corev1.TaintEffectNoSchedule}}
	}
	w.nodes["n3"].Labels["pool"] = "b"
	pg := simpleGroup("g", 2)
	pods := simplePods("g", 2, 8)
	for _, p := range pods {
		p.Spec.NodeSelector = map[string]string{"pool": "a"}
	}
	w.add(pods...)
	out := w.plan(pg, pods[0])
	require.Nil(t, out.Plan, "resources alone would fit the group on 4 nodes")
	assert.Regexp(t, "^w needs 2 complete replicas, 1 fits: 0/1 nodes its pods may use have 8 free nvidia.com/gpu; it does not fit even on empty nodes", out.Refusal)

	// Tolerating the taint opens n1 and n2.
	for _, p := range pods {
		p.Spec.Tolerations = []corev1.Toleration{{Key: "pool", Operator: corev1.TolerationOpExists}}
	}
	out = w.plan(pg, pods[0])
	require.NotNil(t, out.Plan)
	for _, n := range out.Plan.Nodes {
		assert.NotEqual(t, "n3", n)
	}
}

// countingAccelerators counts Match calls.
type countingAccelerators struct{ calls atomic.Int32 }

func (c *countingAccelerators) Match(*corev1.Pod, *corev1.Node) (bool, string) {
	c.calls.Add(1)
	return true, ""
}
func (c *countingAccelerators) Cost(*corev1.Node) int64 { return 0 }

func TestEligibilityIsJudgedOncePerRole(t *testing.T) {
	acc := &countingAccelerators{}
	w := newWorld(t, 8, 8, 8, 8)
	pool := NewPool(w.source(), acc, nil)
	var pods []*corev1.Pod
	for i := 0; i < 4; i++ {
		p := gangPod("g", "decode", i, 0, 1)
		p.Labels[workloadv1alpha1.ModelServingNameLabel], p.Labels[workloadv1alpha1.RevisionLabel] = "ms", "r1"
		pods = append(pods, p)
	}
	for _, p := range pods {
		for n := range w.nodes {
			pool.Eligible(p, n)
		}
	}
	assert.Equal(t, int32(4), acc.calls.Load(), "4 pods of one role on 4 nodes: one judgement per node")
}

func TestOtherGroupsPlansCountAsUsed(t *testing.T) {
	w := newWorld(t, 8, 8)
	a, b := simpleGroup("a", 2), simpleGroup("b", 1)
	pa, pb := simplePods("a", 2, 8), simplePods("b", 1, 8)
	w.add(append(pa, pb...)...)
	require.NotNil(t, w.plan(a, pa[0]).Plan)
	out := w.plan(b, pb[0])
	require.Nil(t, out.Plan, "a's plan keeps both nodes")

	// a's first pod is held on its node: the snapshot counts it, the plan stops keeping it.
	na := w.m.Plan("ns/a").Nodes[pa[0].UID]
	w.m.Reserve(pa[0], na)
	w.free[na] = 0
	assert.Nil(t, w.plan(b, pb[0]).Plan, "a's second pod is still planned")

	w.m.Drop("ns/a")
	assert.NotNil(t, w.plan(b, pb[0]).Plan, "once a's attempt is given up, b plans")
}

func TestAStalePlanIsMadeAgainAroundWhatIsHeld(t *testing.T) {
	w := newWorld(t, 8, 8, 8)
	pg := simpleGroup("g", 2)
	pods := simplePods("g", 2, 8)
	w.add(pods...)
	out := w.plan(pg, pods[0])
	require.NotNil(t, out.Plan)
	first, second := out.Node(pods[0]), out.Node(pods[1])
	w.m.Reserve(pods[0], first)
	w.free[first] = 0
	// Something else took the second pod's node.
	w.free[second] = 0
	out = w.plan(pg, pods[1])
	require.NotNil(t, out.Plan)
	assert.True(t, out.Stale)
	third := out.Node(pods[1])
	assert.NotEqual(t, second, third)
	assert.NotEqual(t, first, third)
	assert.Equal(t, 8, int(w.free[third]))
}

func TestCapacityIsKeptForTheOldestBlockedGroup(t *testing.T) {
	// n0, n1 are free, n2 and n3 half used. The big group needs three whole nodes.
	w := newWorld(t, 8, 8, 4, 4)
	big := simpleGroup("big", 3)
	big.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
	pbig := simplePods("big", 3, 8)
	w.add(pbig...)
	out := w.plan(big, pbig[0])
	require.Nil(t, out.Plan)
	require.NotNil(t, out.Reservation)
	assert.Contains(t, out.Refusal, "capacity on 3 nodes is kept for it")
	kept := w.m.Reservation("ns/big")
	assert.Len(t, kept, 3)
	assert.Contains(t, kept, "n0")
	assert.Contains(t, kept, "n1", "the reservation takes the nodes nearest to holding it")
	assert.Equal(t, "ns/big", w.m.Head())

	// A small group backfills what the big one does not need, and no more.
	s1, s2 := simpleGroup("s1", 1), simpleGroup("s2", 1)
	ps1, ps2 := simplePods("s1", 1, 4), simplePods("s2", 1, 4)
	w.add(append(ps1, ps2...)...)
	o1 := w.plan(s1, ps1[0])
	require.NotNil(t, o1.Plan)
	_, reserved := kept[o1.Node(ps1[0])]
	assert.False(t, reserved, "s1 goes to the half-used node the big group does not wait for")
	o2 := w.plan(s2, ps2[0])
	assert.Nil(t, o2.Plan, "the rest is kept for the big group")
	assert.Contains(t, o2.Refusal, "capacity is kept for ns/big")

	// When what runs on its nodes finishes, the big group plans for real.
	for n := range kept {
		w.free[n] = 8
	}
	out = w.plan(big, pbig[0])
	require.NotNil(t, out.Plan)
	assert.False(t, out.Plan.Reservation)
	assert.Empty(t, w.m.Head())
	assert.Nil(t, w.m.Reservation("ns/big"))
}

func TestReservationGoesToThePriorityThenTheOldest(t *testing.T) {
	w := newWorld(t, 4, 4)
	old, young := simpleGroup("old", 2), simpleGroup("young", 2)
	old.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
	pold, pyoung := simplePods("old", 2, 8), simplePods("young", 2, 8)
	w.add(append(pold, pyoung...)...)
	require.NotNil(t, w.plan(young, pyoung[0]).Reservation)
	assert.Equal(t, "ns/young", w.m.Head())
	require.NotNil(t, w.plan(old, pold[0]).Reservation)
	assert.Equal(t, "ns/old", w.m.Head(), "the older group takes the reservation")
	assert.Nil(t, w.m.Reservation("ns/young"))
	assert.Nil(t, w.plan(young, pyoung[0]).Reservation, "the younger one waits its turn")

	urgent := simpleGroup("urgent", 2)
	purgent := simplePods("urgent", 2, 8)
	for _, p := range purgent {
		p.Spec.Priority = ptr.To[int32](100)
	}
	w.add(purgent...)
	require.NotNil(t, w.plan(urgent, purgent[0]).Reservation)
	assert.Equal(t, "ns/urgent", w.m.Head(), "priority comes before age")

	w.m.Forget("ns/urgent")
	assert.Empty(t, w.m.Head())
}

func TestNoCapacityIsKeptForAGroupThatNeverFits(t *testing.T) {
	w := newWorld(t, 8, 8)
	pg := simpleGroup("huge", 3)
	pods := simplePods("huge", 3, 8)
	w.add(pods...)
	out := w.plan(pg, pods[0])
	assert.Nil(t, out.Reservation)
	assert.Contains(t, out.Refusal, "does not fit even on empty nodes")
	assert.False(t, w.m.Keeping())
}

func TestReservationWaitsReserveAfter(t *testing.T) {
	w := newWorld(t, 4, 4)
	w.m.SetReserveAfter(time.Hour)
	pg := simpleGroup("g", 2)
	pods := simplePods("g", 2, 8)
	w.add(pods...)
	assert.Nil(t, w.plan(pg, pods[0]).Reservation)
	w.m.SetReserveAfter(-1)
	assert.Nil(t, w.plan(pg, pods[0]).Reservation, "negative turns keeping capacity off")
}

func TestAPodBeyondTheMinimumIsNotPlannedBeforeIt(t *testing.T) {
	// server 1 replica (min 1) and prefill 2 replicas of entry + worker (min 1): prefill-1
	// sorts before server-0 in the queue, but it is beyond the minimum.
	pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g"}}
	pg.Spec.MinTaskMember = map[string]int32{"server-0": 1, "prefill-0": 2}
	pg.Spec.MinMember = 3
	pg.Spec.SubGroupPolicy = []volcanov1beta1.SubGroupPolicySpec{{Name: "prefill", SubGroupSize: ptr.To[int32](2), MinSubGroups: ptr.To[int32](0),
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{workloadv1alpha1.RoleLabel: "prefill"}}, MatchLabelKeys: []string{workloadv1alpha1.RoleIDLabel}}}
	pods := []*corev1.Pod{gangPod("g", "server", 0, 0, 1),
		gangPod("g", "prefill", 0, 0, 1), gangPod("g", "prefill", 0, 1, 1),
		gangPod("g", "prefill", 1, 0, 1), gangPod("g", "prefill", 1, 1, 1)}
	w := newWorld(t, 8, 8, 8, 8)
	w.add(pods...)
	out := w.plan(pg, pods[1])
	require.NotNil(t, out.Plan)
	assert.Len(t, out.Plan.Nodes, 3, "the minimum: server-0 and prefill-0")
	w.m.Reserve(pods[1], out.Node(pods[1]))
	w.m.Reserve(pods[2], out.Node(pods[2]))

	extra := w.plan(pg, pods[3])
	assert.False(t, extra.MinPlaced)
	assert.Empty(t, extra.Node(pods[3]), "prefill-1 waits for the minimum")
	assert.Equal(t, out.Plan, extra.Plan, "and the plan stands")

	w.m.Reserve(pods[0], out.Node(pods[0]))
	extra = w.plan(pg, pods[3])
	assert.True(t, extra.MinPlaced, "with the minimum held, prefill-1 is an extra")
	assert.NotEmpty(t, extra.Node(pods[3]))
	assert.NotEmpty(t, extra.Node(pods[4]), "the extra replica is planned whole")
}

// oneDomain is a DomainChooser that puts every group in one domain of all the nodes, so its
// plans outlive the placement of their pods, as the topology plugin's do.
type oneDomain struct{}

func (oneDomain) ChooseDomain(r *Request) (*Plan, bool, string, error) {
	p, _, _ := PlaceAnywhere(r, nil)
	p.Domain = NewTarget("all", 1, append([]string(nil), r.Pool.Nodes()...))
	return p, true, "", nil
}

func TestAnExtraReplicaIsPlannedWhileTheGroupsDomainPlanStands(t *testing.T) {
	// The minimum is server-0 and prefill-0; prefill-1 is an extra. The plan made for the
	// minimum has a domain, so it stays in force once the minimum is held: prefill-1 must
	// still get nodes of its own (and, from the topology plugin, a domain of its own)
	// rather than go wherever in the group's domain.
	pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g"}}
	pg.Spec.MinTaskMember = map[string]int32{"server-0": 1, "prefill-0": 2}
	pg.Spec.MinMember = 3
	pg.Spec.SubGroupPolicy = []volcanov1beta1.SubGroupPolicySpec{{Name: "prefill", SubGroupSize: ptr.To[int32](2), MinSubGroups: ptr.To[int32](0),
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{workloadv1alpha1.RoleLabel: "prefill"}}, MatchLabelKeys: []string{workloadv1alpha1.RoleIDLabel}}}
	pods := []*corev1.Pod{gangPod("g", "server", 0, 0, 1),
		gangPod("g", "prefill", 0, 0, 1), gangPod("g", "prefill", 0, 1, 1),
		gangPod("g", "prefill", 1, 0, 1), gangPod("g", "prefill", 1, 1, 1)}
	w := newWorld(t, 8, 8, 8, 8)
	w.m.SetDomainChooser(oneDomain{})
	w.add(pods...)
	out := w.plan(pg, pods[1])
	require.NotNil(t, out.Plan)
	for _, p := range pods[:3] {
		w.m.Reserve(p, out.Node(p))
	}
	require.NotNil(t, w.m.Plan("ns/g"), "a plan with a domain outlives its pods' placement")

	extra := w.plan(pg, pods[3])
	assert.True(t, extra.MinPlaced)
	assert.NotEmpty(t, extra.Node(pods[3]), "the extra replica is planned")
	assert.NotEmpty(t, extra.Node(pods[4]), "whole")
	assert.NotNil(t, extra.Plan.Domain)
}

func TestPodsWithInterPodAffinityOrHostPortsTakeTheFullPass(t *testing.T) {
	pod := gangPod("g", "decode", 0, 0, 1)
	assert.True(t, Narrowable(pod))
	anti := pod.DeepCopy()
	anti.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: "kubernetes.io/hostname"}}}}
	assert.False(t, Narrowable(anti), "the plan does not model inter-pod anti-affinity")
	port := pod.DeepCopy()
	port.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8000, HostPort: 8000}}
	assert.False(t, Narrowable(port))
}
