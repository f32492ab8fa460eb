package ha

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/berth-sh/berth/internal/inprocess"
	"github.com/berth-sh/berth/internal/replicas"
	"github.com/berth-sh/berth/internal/systemtest"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/sim"
)

const (
	gpu       = corev1.ResourceName("nvidia.com/gpu")
	gpusNode  = 8
	poolLabel = "pool"
	gangLabel = "berth.test/gang"
)

func kubeClient(t *testing.T) kubernetes.Interface {
	cfg := cp.RESTConfig()
	cfg.QPS, cfg.Burst = 500, 1000
	return kubernetes.NewForConfigOrDie(cfg)
}

// newNamespace creates namespace ns with nodes per pool (8 GPUs each); the namespace and
// nodes go when the test ends.
func newNamespace(t *testing.T, kube kubernetes.Interface, ns string, pools map[string]int) map[string][]string {
	t.Helper()
	ctx := context.Background()
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	nodes := map[string][]string{}
	for pool, n := range pools {
		for i := range n {
			name := fmt.Sprintf("%s-%s-%d", ns, pool, i)
			node := sim.NewNode(name, sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: gpusNode}, map[string]string{systemtest.OwnerLabel: ns, poolLabel: pool})
			_, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
			require.NoError(t, err)
			nodes[pool] = append(nodes[pool], name)
		}
	}
	t.Cleanup(func() {
		zero := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
		_ = kube.CoreV1().Nodes().DeleteCollection(ctx, zero, metav1.ListOptions{LabelSelector: systemtest.OwnerLabel + "=" + ns})
		require.NoError(t, systemtest.RemoveNamespace(kube, ns), "the test's namespace is removed with everything in it")
	})
	return nodes
}

// podWatch follows a namespace's pods with an informer (which relists on a broken watch,
// so no event is missed for good) for the whole test, and checks on every event that no node
// holds more GPUs than it has: two schedulers placing at once would overcommit.
type podWatch struct {
	mu         sync.Mutex
	pods       map[string]*corev1.Pod
	violations []string
	onChange   func(pods map[string]*corev1.Pod) []string // more invariants, checked on every event
}

func watchPods(t *testing.T, kube kubernetes.Interface, ns string, onChange func(map[string]*corev1.Pod) []string) *podWatch {
	t.Helper()
	w := &podWatch{pods: map[string]*corev1.Pod{}, onChange: onChange}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.set(obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { w.set(obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				w.mu.Lock()
				delete(w.pods, p.Name)
				w.check()
				w.mu.Unlock()
			}
		},
	})
	require.NoError(t, err)
	factory.Start(ctx.Done())
	require.True(t, cache.WaitForCacheSync(ctx.Done(), inf.HasSynced))
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		assert.Empty(t, w.violations, "invariants broken during the run")
	})
	return w
}

func (w *podWatch) set(p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pods[p.Name] = p
	w.check()
}

func (w *podWatch) check() {
	used := map[string]int64{}
	for _, p := range w.pods {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
			used[p.Spec.NodeName] += gpusOf(p)
		}
	}
	for node, n := range used {
		if n > gpusNode {
			w.violations = append(w.violations, fmt.Sprintf("node %s holds %d GPUs of %d", node, n, gpusNode))
		}
	}
	if w.onChange != nil {
		w.violations = append(w.violations, w.onChange(w.pods)...)
	}
}

func (w *podWatch) snapshot() []*corev1.Pod {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(w.pods))
	for _, p := range w.pods {
		out = append(out, p)
	}
	return out
}

func gpusOf(p *corev1.Pod) int64 {
	var n int64
	for _, c := range p.Spec.Containers {
		q := c.Resources.Requests[gpu]
		n += q.Value()
	}
	return n
}

// gang is one Volcano PodGroup of pods pods each asking for gpus GPUs in pool; with
// gateLast its last pod is created with a scheduling gate (see ungate).
type gang struct {
	name       string
	pool       string
	pods, gpus int
	gateLast   bool
}

// holdGate is the scheduling gate that keeps a gang's last pod out of the scheduler, so the
// leader holds its siblings in Permit.
const holdGate = "berth.test/hold"

// createGang creates g's PodGroup and its pods from..to-1 (the PodGroup with pod 0).
func createGang(t *testing.T, kube kubernetes.Interface, vc volcanoclient.Interface, ns string, g gang, from, to int) {
	t.Helper()
	ctx := context.Background()
	if from == 0 {
		pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: g.name},
			Spec: volcanov1beta1.PodGroupSpec{MinMember: int32(g.pods)}}
		_, err := vc.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	for i := from; i < to; i++ {
		req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), gpu: *resource.NewQuantity(int64(g.gpus), resource.DecimalSI)}
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", g.name, i), Labels: map[string]string{gangLabel: g.name},
				Annotations: map[string]string{volcanov1beta1.KubeGroupNameAnnotationKey: g.name}},
			Spec: corev1.PodSpec{SchedulerName: workloadv1alpha1.BerthSchedulerName, NodeSelector: map[string]string{poolLabel: g.pool},
				Containers: []corev1.Container{{Name: "engine", Image: "vllm/vllm-openai:v0.11.0",
					Resources: corev1.ResourceRequirements{Requests: req, Limits: corev1.ResourceList{gpu: req[gpu]}}}}},
		}
		if g.gateLast && i == g.pods-1 {
			p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: holdGate}}
		}
		_, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		require.NoError(t, err)
	}
}

// fits says whether g's pods fit the GPUs left free on nodes (best fit, largest first:
// all the gang's pods are the same size, so this is exact).
func fits(g gang, free map[string]int64, nodes []string) bool {
	left := make([]int64, 0, len(nodes))
	for _, n := range nodes {
		left = append(left, free[n])
	}
	placed := 0
	for i := range left {
		for left[i] >= int64(g.gpus) && placed < g.pods {
			left[i] -= int64(g.gpus)
			placed++
		}
	}
	return placed == g.pods
}

// TestSchedulerLeaderKilledMidGang runs two berth-scheduler replicas and a seeded stream of
// gangs (random sizes, two node pools, more demand than capacity); the leader is killed while
// it holds one gang mid-way: that gang (in a pool of its own, so it fits) has its last pod
// gated, and the kill comes once the leader holds every other pod of it in Permit (each
// nominated to a node, none bound: kube-scheduler nominates the pods it holds), and the gate
// is lifted while no replica leads. The standby must take over once the lease expires; no
// node may ever hold more than it has (a watch over the whole run); once settled every gang,
// the held one included, is bound whole or not at all, and no waiting gang fits what is
// free, also after bound gangs leave.
func TestSchedulerLeaderKilledMidGang(t *testing.T) {
	seed := seedOf(t)
	rng := rand.New(rand.NewPCG(uint64(seed), 15))
	kube := kubeClient(t)
	vc := volcanoclient.NewForConfigOrDie(cp.RESTConfig())
	const ns = "ha-scheduler"
	// A kubelet runs the pods and finishes their deletion (so the namespace can go); it stops
	// after the namespace is removed (cleanups run last-registered first).
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	pools := newNamespace(t, kube, ns, map[string]int{"a": 4, "b": 3, "held": 2})
	go sim.NewKubelet(kube, 50*time.Millisecond).Run(ctx)
	watch := watchPods(t, kube, ns, nil)

	lead, standby, both := pair(t, replicas.Scheduler)

	var gangs []gang
	const total = 14
	killAfter := 3 + rng.IntN(6)
	for i := range total {
		pool := []string{"a", "b"}[rng.IntN(2)]
		if i == killAfter {
			pool = "held"
		}
		g := gang{name: fmt.Sprintf("g%02d", i), pool: pool, pods: 2 + rng.IntN(4), gpus: []int{2, 4, 8}[rng.IntN(3)], gateLast: i == killAfter}
		if g.pods*g.gpus > len(pools[pool])*gpusNode {
			g.pods = len(pools[pool]) * gpusNode / g.gpus // every gang fits its empty pool
		}
		gangs = append(gangs, g)
		createGang(t, kube, vc, ns, g, 0, g.pods)
		if i == killAfter {
			held := waitHeld(t, watch, g)
			lead.Kill()
			t.Logf("killed %s while it held %d of %s's %d pods in Permit (%v)", lead.Name, g.pods-1, g.name, g.pods, held)
			for _, p := range watch.snapshot() {
				require.False(t, p.Labels[gangLabel] == g.name && p.Spec.NodeName != "", "%s of the held gang was bound without its gated sibling", p.Name)
			}
			ungate(t, kube, ns, fmt.Sprintf("%s-%d", g.name, g.pods-1)) // while no replica leads
		}
		time.Sleep(time.Duration(50+rng.IntN(250)) * time.Millisecond)
	}
	replicas.RequireTakeover(t, lead, standby)

	// settled: every gang whole or unbound, and none of the unbound fits what is free.
	settled := func() (bool, string) {
		bound := map[string]int{}
		free := map[string]int64{}
		for _, nodes := range pools {
			for _, n := range nodes {
				free[n] = gpusNode
			}
		}
		for _, p := range watch.snapshot() {
			if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
				bound[p.Labels[gangLabel]]++
				free[p.Spec.NodeName] -= gpusOf(p)
			}
		}
		for _, g := range gangs {
			switch b := bound[g.name]; {
			case b == g.pods || g.name == "":
			case b > 0:
				return false, fmt.Sprintf("%s has %d of %d pods bound", g.name, b, g.pods)
			case fits(g, free, pools[g.pool]):
				return false, fmt.Sprintf("%s (%d×%d GPUs, pool %s) waits although it fits what is free", g.name, g.pods, g.gpus, g.pool)
			}
		}
		return true, ""
	}
	waitSettled := func(what string) {
		t.Helper()
		var why string
		err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
			var ok bool
			ok, why = settled()
			return ok, nil
		})
		require.NoError(t, err, "%s: %s", what, why)
	}
	waitSettled("after the takeover")

	// Departures: the new leader must place waiting gangs on what bound gangs leave.
	var boundGangs []string
	for _, p := range watch.snapshot() {
		if p.Spec.NodeName != "" && !slices.Contains(boundGangs, p.Labels[gangLabel]) {
			boundGangs = append(boundGangs, p.Labels[gangLabel])
		}
	}
	sort.Strings(boundGangs)
	require.NotEmpty(t, boundGangs, "no gang was ever placed")
	rng.Shuffle(len(boundGangs), func(i, j int) { boundGangs[i], boundGangs[j] = boundGangs[j], boundGangs[i] })
	for _, name := range boundGangs[:min(2, len(boundGangs))] {
		t.Logf("%s leaves", name)
		zero := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
		require.NoError(t, kube.CoreV1().Pods(ns).DeleteCollection(context.Background(), zero, metav1.ListOptions{LabelSelector: gangLabel + "=" + name}))
		require.NoError(t, vc.SchedulingV1beta1().PodGroups(ns).Delete(context.Background(), name, metav1.DeleteOptions{}))
		for i := range gangs {
			if gangs[i].name == name {
				gangs[i].name = "" // gone
			}
		}
	}
	waitSettled("after two gangs left")
	for _, r := range both {
		assert.False(t, r.DiedOnItsOwn(), "%s exited without being killed (lost its lease?)", r.Name)
	}
}

// waitHeld waits until the leader holds every pod of g but its gated last one in Permit:
// each unbound and nominated to a node (kube-scheduler writes the nomination of a pod it
// holds in Permit, NominatedNodeNameForExpectation, on by default since 1.35), and returns
// pod to node.
func waitHeld(t *testing.T, watch *podWatch, g gang) map[string]string {
	t.Helper()
	var held map[string]string
	var why string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		held, why = map[string]string{}, ""
		for _, p := range watch.snapshot() {
			if p.Labels[gangLabel] != g.name || len(p.Spec.SchedulingGates) > 0 {
				continue
			}
			switch {
			case p.Spec.NodeName != "":
				why = fmt.Sprintf("%s is bound to %s", p.Name, p.Spec.NodeName)
			case p.Status.NominatedNodeName != "":
				held[p.Name] = p.Status.NominatedNodeName
			}
		}
		if why != "" {
			return false, fmt.Errorf("bound while a sibling was gated: %s", why)
		}
		return len(held) == g.pods-1, nil
	})
	require.NoError(t, err, "the leader holds %d of %s's %d ungated pods in Permit %v", len(held), g.name, g.pods-1, held)
	return held
}

// ungate lifts the scheduling gate of pod.
func ungate(t *testing.T, kube kubernetes.Interface, ns, pod string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := kube.CoreV1().Pods(ns).Get(context.Background(), pod, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Spec.SchedulingGates = nil
		_, err = kube.CoreV1().Pods(ns).Update(context.Background(), p, metav1.UpdateOptions{})
		return err
	})
	require.NoError(t, err)
}

const servingManifest = `
metadata: {name: llm}
spec:
  replicas: 3
  schedulerName: berth-scheduler
  rolloutStrategy:
    rollingUpdateConfiguration: {maxUnavailable: 1, maxSurge: 0}
  template:
    roles:
    - name: prefill
      entryTemplate:
        spec:
          containers: [{name: vllm, image: vllm:v1, resources: {requests: {nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}}]
    - name: decode
      replicas: 2
      workerReplicas: 1
      entryTemplate:
        spec:
          containers: [{name: vllm, image: vllm:v1, resources: {requests: {nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}}]
      workerTemplate:
        spec:
          containers: [{name: vllm, image: vllm:v1, resources: {requests: {nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}}]
`

// TestControllerLeaderKilledMidRollout runs two berth-controller replicas; the leader is
// killed while a rolling update is under way (after a seeded number of updated groups). The
// standby must take over within the lease duration and finish the rollout, and a watch over
// the whole run checks that a ServingGroup ordinal never has live pods of two revisions and
// that no ordinal beyond the replicas appears; at the end exactly the objects of 3 groups
// exist, all owned and on the new revision.
func TestControllerLeaderKilledMidRollout(t *testing.T) {
	seed := seedOf(t)
	rng := rand.New(rand.NewPCG(uint64(seed), 16))
	kube := kubeClient(t)
	cl, err := client.New(cp.RESTConfig(), client.Options{Scheme: controller.Scheme()})
	require.NoError(t, err)
	const ns = "ha-controller"
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // after the namespace is removed: the kubelet finishes its pods
	newNamespace(t, kube, ns, map[string]int{"a": 2, "b": 1})
	watch := watchPods(t, kube, ns, func(pods map[string]*corev1.Pod) []string {
		revisions := map[string]map[string]bool{}
		for _, p := range pods {
			if p.DeletionTimestamp != nil {
				continue
			}
			g := p.Labels[workloadv1alpha1.GroupNameLabel]
			if revisions[g] == nil {
				revisions[g] = map[string]bool{}
			}
			revisions[g][p.Labels[workloadv1alpha1.RevisionLabel]] = true
		}
		var bad []string
		for g, revs := range revisions {
			if len(revs) > 1 {
				bad = append(bad, fmt.Sprintf("group %s has live pods of %d revisions", g, len(revs)))
			}
			if !slices.Contains([]string{"llm-0", "llm-1", "llm-2"}, g) {
				bad = append(bad, fmt.Sprintf("unexpected group %s", g))
			}
		}
		return bad
	})

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	require.NoError(t, cp.WriteKubeconfig(kubeconfig))
	sctx, stopScheduler := context.WithCancel(ctx)
	schedDone := make(chan struct{})
	go func() {
		defer close(schedDone)
		_ = inprocess.RunScheduler(sctx, dir, kubeconfig, inprocess.SchedulerOptions{})
	}()
	t.Cleanup(func() { stopScheduler(); <-schedDone })
	kubelet := sim.NewKubelet(kube, time.Duration(200+rng.IntN(300))*time.Millisecond)
	go kubelet.Run(ctx)

	lead, standby, both := pair(t, replicas.Controller)

	ms := &workloadv1alpha1.ModelServing{}
	require.NoError(t, yaml.UnmarshalStrict([]byte(servingManifest), ms))
	ms.Namespace = ns
	require.NoError(t, cl.Create(ctx, ms))
	get := func() *workloadv1alpha1.ModelServing {
		out := &workloadv1alpha1.ModelServing{}
		require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "llm"}, out))
		return out
	}
	eventually(t, "3 groups are available", func() bool { return get().Status.AvailableReplicas == 3 })

	ms = get()
	for i := range ms.Spec.Template.Roles {
		ms.Spec.Template.Roles[i].EntryTemplate.Spec.Containers[0].Image = "vllm:v2"
	}
	require.NoError(t, cl.Update(ctx, ms))
	updated := int32(1 + rng.IntN(2))
	eventually(t, fmt.Sprintf("%d groups are updated", updated), func() bool {
		st := get().Status
		return st.UpdateRevision != st.CurrentRevision && st.UpdatedReplicas >= updated
	})
	lead.Kill()
	require.Less(t, get().Status.UpdatedReplicas, int32(3), "the rollout finished before the leader was killed; the test proves nothing")
	t.Logf("killed %s with %d of 3 groups updated", lead.Name, get().Status.UpdatedReplicas)
	replicas.RequireTakeover(t, lead, standby)

	eventually(t, "the rollout converges", func() bool {
		m := get()
		st := m.Status
		return st.ObservedGeneration == m.Generation && st.UpdatedReplicas == 3 && st.AvailableReplicas == 3 && st.Replicas == 3
	})
	final := get()
	pods := watch.snapshot()
	groups := map[string]bool{}
	for _, p := range pods {
		groups[p.Labels[workloadv1alpha1.GroupNameLabel]] = true
		assert.True(t, metav1.IsControlledBy(p, final), "pod %s is owned by the ModelServing", p.Name)
		assert.Equal(t, final.Status.UpdateRevision, p.Labels[workloadv1alpha1.RevisionLabel], "pod %s", p.Name)
		assert.Nil(t, p.DeletionTimestamp, "pod %s is still terminating", p.Name)
	}
	assert.Len(t, pods, 15, "3 groups of 5 pods, no duplicate")
	var pgs volcanov1beta1.PodGroupList
	require.NoError(t, cl.List(ctx, &pgs, client.InNamespace(ns)))
	var pgNames []string
	for _, pg := range pgs.Items {
		pgNames = append(pgNames, pg.Name)
		assert.True(t, metav1.IsControlledBy(&pg, final), "PodGroup %s is owned by the ModelServing", pg.Name)
	}
	assert.ElementsMatch(t, []string{"llm-0", "llm-1", "llm-2"}, pgNames, "one PodGroup per group, none left over")
	var svcs corev1.ServiceList
	require.NoError(t, cl.List(ctx, &svcs, client.InNamespace(ns)))
	for _, s := range svcs.Items {
		assert.True(t, metav1.IsControlledBy(&s, final), "Service %s is owned by the ModelServing", s.Name)
	}
	for _, r := range both {
		assert.False(t, r.DiedOnItsOwn(), "%s exited without being killed (lost its lease?)", r.Name)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) { return cond(), nil })
	require.NoError(t, err, "timed out waiting until %s", what)
}

// seedOf is the run's seed: BERTH_SEED when set (a malformed one fails the test rather than
// being ignored), else the clock; logged either way, so a failure replays without editing code.
func seedOf(t *testing.T) int64 {
	t.Helper()
	seed := time.Now().UnixNano()
	if s := os.Getenv("BERTH_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("BERTH_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (BERTH_SEED=%d replays it)", seed, seed)
	return seed
}
