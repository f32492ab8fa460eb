// Package gang runs berth-scheduler in-process against a real apiserver and checks that
// gangs are placed all or nothing. Nodes are API objects; a pod counts as placed once bound.
package gang

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/utils/ptr"
	volcanobatchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/inprocess"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/sim"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) { cptest.Main(m, &cp) }

// Labels of the ModelServing contract (DESIGN.md) that the gang plugin reads.
const (
	labelGroup  = workloadv1alpha1.GroupNameLabel
	labelRole   = workloadv1alpha1.RoleLabel
	labelRoleID = workloadv1alpha1.RoleIDLabel
	labelEntry  = workloadv1alpha1.EntryLabel
	gpu         = corev1.ResourceName("nvidia.com/gpu")
)

// Pod annotations that tie a pod to its gang: Volcano's own keys, taken from Volcano's API
// so the tests depend on the contract rather than on a plugin's exported names.
const (
	groupNameKey = volcanov1beta1.KubeGroupNameAnnotationKey // scheduling.k8s.io/group-name
	taskSpecKey  = volcanobatchv1alpha1.TaskSpecKey          // volcano.sh/task-spec
)

var worldCount atomic.Int32

// world is one test's slice of the cluster: a namespace, the nodes it created, and a
// running berth-scheduler.
type world struct {
	t    *testing.T
	ctx  context.Context
	kube kubernetes.Interface
	vc   volcanoclient.Interface
	ns   string
	// gated names pods createGang creates with a scheduling gate, so the rest of their gang
	// is placed and held in Permit while they stay out of scheduling.
	gated map[string]bool
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg := cp.RESTConfig()
	cfg.QPS, cfg.Burst = 500, 1000
	w := &world{t: t, ctx: ctx, kube: kubernetes.NewForConfigOrDie(cfg), vc: volcanoclient.NewForConfigOrDie(cfg),
		ns: fmt.Sprintf("gang-%d", worldCount.Add(1))}
	_, err := w.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(w.cleanup)
	t.Cleanup(w.dumpOnFailure)
	return w
}

// dumpOnFailure logs every pod's placement and scheduling condition, and every PodGroup's
// status, so a failed run explains itself.
func (w *world) dumpOnFailure() {
	if !w.t.Failed() {
		return
	}
	ctx := context.Background()
	if pods, err := w.kube.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			cond := ""
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled {
					cond = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
				}
			}
			w.t.Logf("pod %s node=%q scheduled=%s", p.Name, p.Spec.NodeName, cond)
		}
	}
	if pgs, err := w.vc.SchedulingV1beta1().PodGroups(w.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, pg := range pgs.Items {
			w.t.Logf("podgroup %s phase=%s conditions=%+v", pg.Name, pg.Status.Phase, pg.Status.Conditions)
		}
	}
	w.t.Logf("scheduler queue and attempts: %s", schedulerQueueSummary())
}

// schedulerQueueSummary reads kube-scheduler's own queue and attempt metrics, so a pod
// with no PodScheduled condition can be told apart: gated (PreEnqueue), queued behind
// others (active, backoff) or parked unschedulable; and how long cycles took.
func schedulerQueueSummary() string {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, mf := range families {
		switch mf.GetName() {
		case "scheduler_pending_pods", "scheduler_schedule_attempts_total", "scheduler_queue_incoming_pods_total":
			for _, m := range mf.GetMetric() {
				var labels []string
				for _, l := range m.GetLabel() {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
				parts = append(parts, fmt.Sprintf("%s{%s}=%g", mf.GetName(), strings.Join(labels, ","), m.GetCounter().GetValue()+m.GetGauge().GetValue()))
			}
		case "scheduler_scheduling_attempt_duration_seconds", "scheduler_framework_extension_point_duration_seconds":
			for _, m := range mf.GetMetric() {
				h := m.GetHistogram()
				if h.GetSampleCount() == 0 {
					continue
				}
				var labels []string
				for _, l := range m.GetLabel() {
					labels = append(labels, l.GetName()+"="+l.GetValue())
				}
				parts = append(parts, fmt.Sprintf("%s{%s}: n=%d mean=%.1fms", mf.GetName(), strings.Join(labels, ","), h.GetSampleCount(), 1000*h.GetSampleSum()/float64(h.GetSampleCount())))
			}
		}
	}
	return "\n  " + strings.Join(parts, "\n  ")
}

// cleanup removes the test's pods (at once: no kubelet runs here to finish a graceful
// deletion, so deleting the namespace would leave it Terminating) and nodes, so the next
// test starts on an empty cluster.
func (w *world) cleanup() {
	ctx := context.Background()
	zero := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	_ = w.kube.CoreV1().Pods(w.ns).DeleteCollection(ctx, zero, metav1.ListOptions{})
	_ = w.kube.CoreV1().Nodes().DeleteCollection(ctx, zero, metav1.ListOptions{LabelSelector: "berth.test/owner=" + w.ns})
	_ = w.vc.SchedulingV1beta1().PodGroups(w.ns).DeleteCollection(ctx, zero, metav1.ListOptions{})
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		nodes, err := w.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "berth.test/owner=" + w.ns})
		return err == nil && len(nodes.Items) == 0, nil
	})
}

// startScheduler runs berth-scheduler with the shipped profile (manifests/scheduler/
// config.yaml), pointed at the test apiserver, with short gang timeouts.
// It returns a stop function that waits for the scheduler to exit.
func (w *world) startScheduler(waitSeconds, backoffSeconds int64) (stop func()) {
	w.t.Helper()
	return w.startSchedulerWith(map[string]any{"permitWaitingTimeSeconds": waitSeconds, "backoffSeconds": backoffSeconds})
}

// startSchedulerWith is startScheduler with the gang plugin's args in full.
func (w *world) startSchedulerWith(gangArgs map[string]any) (stop func()) {
	t := w.t
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	require.NoError(t, cp.WriteKubeconfig(kubeconfig))

	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan error, 1)
	go func() {
		err := inprocess.RunScheduler(ctx, dir, kubeconfig, inprocess.SchedulerOptions{GangArgs: gangArgs})
		if err != nil && ctx.Err() == nil {
			t.Errorf("berth-scheduler exited early: %v", err)
		}
		done <- err
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil && ctx.Err() == nil {
					t.Errorf("scheduler exited: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("scheduler did not stop within 30s")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// addNode registers a node with the given capacity. The scheduler only sees API objects:
// there is no kubelet, and no pod ever runs.
func (w *world) addNode(name string, gpus int64, cpu string) {
	w.t.Helper()
	w.addNodeWith(name, gpus, cpu, nil, nil)
}

// addNodeWith registers a node with extra labels and taints and returns its full name.
func (w *world) addNodeWith(name string, gpus int64, cpu string, labels map[string]string, taints []corev1.Taint) string {
	w.t.Helper()
	all := map[string]string{"berth.test/owner": w.ns}
	for k, v := range labels {
		all[k] = v
	}
	node := sim.NewNode(w.ns+"-"+name, sim.NodeShape{CPU: cpu, Memory: "512Gi", GPUs: gpus}, all)
	node.Spec.Taints = taints
	_, err := w.kube.CoreV1().Nodes().Create(w.ctx, node, metav1.CreateOptions{})
	require.NoError(w.t, err)
	return node.Name
}

// role describes one role of a serving group: replicas of an entry pod and workers.
type role struct {
	name     string
	replicas int
	workers  int
	gpus     int64
	cpu      string
	// nodeSelector and tolerations go on every pod of the role (a selected, tainted pool).
	nodeSelector map[string]string
	tolerations  []corev1.Toleration
	// priorityClass goes on every pod of the role (the apiserver resolves its priority).
	priorityClass string
	// dra: the role's pods ask for their GPUs through the ResourceClaimTemplate gpus-<n>
	// (see ensureGPUTemplates) instead of the nvidia.com/gpu extended resource.
	dra bool
}

// ensureGPUTemplates makes the gpu.nvidia.com DeviceClass (if absent) and, in the test's
// namespace, a ResourceClaimTemplate gpus-<n> for n = 1, 2, 4, 8 whole GPUs.
func (w *world) ensureGPUTemplates() {
	w.t.Helper()
	if _, err := w.kube.ResourceV1().DeviceClasses().Create(w.ctx, sim.GPUDeviceClass(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(w.t, err)
	}
	for _, n := range []int64{1, 2, 4, 8} {
		tmpl := &resourcev1.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: fmt.Sprintf("gpus-%d", n)},
			Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
				Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: &resourcev1.ExactDeviceRequest{
					DeviceClassName: sim.GPUDeviceClassName, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: n}}}}}}}
		_, err := w.kube.ResourceV1().ResourceClaimTemplates(w.ns).Create(w.ctx, tmpl, metav1.CreateOptions{})
		require.NoError(w.t, err)
	}
}

// gangOpts are PodGroup fields beyond the minimum.
type gangOpts struct {
	priorityClass string
	topology      *volcanov1beta1.NetworkTopologySpec
	// roleTopology is Kthena's rolePolicy as Volcano carries it: every role gets a
	// subGroupPolicy entry (one instance per role replica) with this networkTopology.
	roleTopology *volcanov1beta1.NetworkTopologySpec
}

// createGang writes what berth-controller writes for one ServingGroup (DESIGN.md's
// contract): a Volcano PodGroup with minTaskMember per role replica in the minimum,
// minMember their sum, a subGroupPolicy per role with workers, and the pods.
// minRole maps a role to its minimum replicas; a role missing from it counts all.
func (w *world) createGang(group string, minRole map[string]int, roles ...role) {
	w.t.Helper()
	w.createGangWith(group, minRole, gangOpts{}, roles...)
}

// createGangWith is createGang with a priority class and network topologies on the PodGroup.
func (w *world) createGangWith(group string, minRole map[string]int, opts gangOpts, roles ...role) {
	w.t.Helper()
	pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: group}}
	pg.Spec.PriorityClassName, pg.Spec.NetworkTopology = opts.priorityClass, opts.topology
	pg.Spec.MinTaskMember = map[string]int32{}
	minResources := corev1.ResourceList{}
	pg.Spec.MinResources = &minResources
	var pods []*corev1.Pod
	for _, r := range roles {
		size := int32(1 + r.workers)
		min := r.replicas
		if m, ok := minRole[r.name]; ok {
			min = m
		}
		for j := 0; j < r.replicas; j++ {
			task := fmt.Sprintf("%s-%d", r.name, j)
			if j < min {
				pg.Spec.MinTaskMember[task] = size
				pg.Spec.MinMember += size
				for k := int32(0); k < size; k++ {
					minResources[corev1.ResourceCPU] = add(minResources[corev1.ResourceCPU], resource.MustParse(orDefault(r.cpu, "100m")))
					if r.gpus > 0 && !r.dra {
						minResources[gpu] = add(minResources[gpu], *resource.NewQuantity(r.gpus, resource.DecimalSI))
					}
				}
			}
			for k := 0; k <= r.workers; k++ {
				pods = append(pods, w.gangPod(group, r, task, k))
			}
		}
		if r.workers > 0 || opts.roleTopology != nil {
			pg.Spec.SubGroupPolicy = append(pg.Spec.SubGroupPolicy, volcanov1beta1.SubGroupPolicySpec{
				Name: r.name, SubGroupSize: ptr.To(size), MinSubGroups: ptr.To[int32](0),
				LabelSelector:   &metav1.LabelSelector{MatchLabels: map[string]string{labelGroup: group, labelRole: r.name}},
				MatchLabelKeys:  []string{labelRoleID},
				NetworkTopology: opts.roleTopology,
			})
		}
	}
	_, err := w.vc.SchedulingV1beta1().PodGroups(w.ns).Create(w.ctx, pg, metav1.CreateOptions{})
	require.NoError(w.t, err)
	for _, p := range pods {
		_, err := w.kube.CoreV1().Pods(w.ns).Create(w.ctx, p, metav1.CreateOptions{})
		require.NoError(w.t, err)
	}
}

func (w *world) gangPod(group string, r role, task string, k int) *corev1.Pod {
	requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(orDefault(r.cpu, "100m"))}
	if r.gpus > 0 && !r.dra {
		requests[gpu] = *resource.NewQuantity(r.gpus, resource.DecimalSI)
	}
	labels := map[string]string{labelGroup: group, labelRole: r.name, labelRoleID: task}
	if k == 0 {
		labels[labelEntry] = "true"
	}
	name := fmt.Sprintf("%s-%s-%d", group, task, k)
	var gates []corev1.PodSchedulingGate
	if w.gated[name] {
		gates = []corev1.PodSchedulingGate{{Name: "test.berth.sh/hold"}}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: w.ns, Name: name, Labels: labels,
			Annotations: map[string]string{groupNameKey: group, taskSpecKey: task},
		},
		Spec: corev1.PodSpec{
			SchedulerName:     workloadv1alpha1.BerthSchedulerName,
			PriorityClassName: r.priorityClass,
			SchedulingGates:   gates,
			NodeSelector:      r.nodeSelector,
			Tolerations:       r.tolerations,
			Containers: []corev1.Container{{Name: "engine", Image: "vllm/vllm-openai:v0.11.0",
				Resources: corev1.ResourceRequirements{Requests: requests, Limits: limitsOf(requests)}}},
		},
	}
	if r.dra && r.gpus > 0 {
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(fmt.Sprintf("gpus-%d", r.gpus))}}
		pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
	}
	return pod
}

func add(a, b resource.Quantity) resource.Quantity {
	a.Add(b)
	return a
}

func limitsOf(requests corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for name, q := range requests {
		if name == gpu {
			out[name] = q
		}
	}
	return out
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

// bound counts the group's pods with a node, by role replica.
func (w *world) bound(group string) (total int, byTask map[string]int) {
	pods, err := w.kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{LabelSelector: labelGroup + "=" + group})
	require.NoError(w.t, err)
	byTask = map[string]int{}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			total++
			byTask[p.Labels[labelRoleID]]++
		}
	}
	return total, byTask
}

func (w *world) eventually(what string, timeout time.Duration, cond func() bool) {
	w.t.Helper()
	timeout *= raceTimeScale
	err := wait.PollUntilContextTimeout(w.ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond(), nil })
	require.NoError(w.t, err, "timed out after %s waiting until %s", timeout, what)
}

// refused waits until berth-scheduler has tried every unbound pod of group (of its role
// replica task, when task is set) and refused it (PodScheduled=False, Unschedulable). A quiet
// window that follows it watches a scheduler that has looked at the pods, not one that has
// not got to them yet (or never will): nothing binding for a while proves nothing by itself.
func (w *world) refused(group, task string, timeout time.Duration) {
	w.t.Helper()
	what := fmt.Sprintf("berth-scheduler has tried and refused every unbound pod of %s", group)
	if task != "" {
		what += " role replica " + task
	}
	w.eventually(what, timeout, func() bool {
		pods, err := w.kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{LabelSelector: labelGroup + "=" + group})
		require.NoError(w.t, err)
		n := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" || (task != "" && p.Labels[labelRoleID] != task) {
				continue
			}
			n++
			tried := false
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					tried = true
				}
			}
			if !tried {
				return false
			}
		}
		return n > 0
	})
}

// tried waits until berth-scheduler has tried every pod of group: each is bound, or
// refused (PodScheduled=False, Unschedulable). Unlike refused, it does not require the group
// to stay unbound: it is the evidence that the scheduler has looked, whatever it decided.
func (w *world) tried(group string, timeout time.Duration) {
	w.t.Helper()
	w.eventually("berth-scheduler has tried every pod of "+group, timeout, func() bool {
		pods, err := w.kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{LabelSelector: labelGroup + "=" + group})
		require.NoError(w.t, err)
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				continue
			}
			refused := false
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
					refused = true
				}
			}
			if !refused {
				return false
			}
		}
		return len(pods.Items) > 0
	})
}

func (w *world) consistently(what string, d time.Duration, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		require.True(w.t, cond(), "expected %s to hold for %s", what, d)
		time.Sleep(100 * time.Millisecond)
	}
}

func (w *world) podGroup(name string) *volcanov1beta1.PodGroup {
	pg, err := w.vc.SchedulingV1beta1().PodGroups(w.ns).Get(w.ctx, name, metav1.GetOptions{})
	require.NoError(w.t, err)
	return pg
}

func unschedulableMessage(pg *volcanov1beta1.PodGroup) string {
	for _, c := range pg.Status.Conditions {
		if c.Type == volcanov1beta1.PodGroupUnschedulableType && c.Status == corev1.ConditionTrue {
			return c.Message
		}
	}
	return ""
}

func (w *world) deleteGroupPods(group string) {
	w.t.Helper()
	err := w.kube.CoreV1().Pods(w.ns).DeleteCollection(w.ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)},
		metav1.ListOptions{LabelSelector: labelGroup + "=" + group})
	require.NoError(w.t, err)
}

func names(m map[string]int) string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s=%d", k, v))
	}
	return strings.Join(out, ",")
}

// podFollower is a watch of the namespace's pods that lasts as long as the test.
type podFollower struct {
	w        *world
	mu       sync.Mutex
	cond     *sync.Cond
	barriers map[string]bool // barrier pods seen
	ended    bool            // the watch is over
	n        int
	stop     func()
}

// barrierLabel marks the pods sync creates; followPods does not pass them on.
const barrierLabel = "berth.test/barrier"

// followPods calls handle with every change to the namespace's pods from now until the
// test ends, in order and without a gap: the pods that exist now first (as Added), then
// each event. A RetryWatcher resumes from the last resourceVersion when the apiserver
// closes the watch, so no event is missed; should it end anyway (an error event, or the
// resourceVersion expired), the test fails, since a guarantee checked on a watch that
// stopped would pass unseen. The watch ends when the test does, after handle's last call;
// handle is called from one goroutine.
func (w *world) followPods(handle func(watch.EventType, *corev1.Pod)) *podFollower {
	t := w.t
	t.Helper()
	f := &podFollower{w: w, barriers: map[string]bool{}}
	f.cond = sync.NewCond(&f.mu)
	observe := func(typ watch.EventType, p *corev1.Pod) {
		if p.Labels[barrierLabel] == "" {
			handle(typ, p)
			return
		}
		f.mu.Lock()
		f.barriers[p.Name] = true
		f.cond.Broadcast()
		f.mu.Unlock()
	}
	list, err := w.kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for i := range list.Items {
		observe(watch.Added, &list.Items[i])
	}
	lw := &cache.ListWatch{WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		return w.kube.CoreV1().Pods(w.ns).Watch(ctx, opts)
	}}
	rw, err := watchtools.NewRetryWatcherWithContext(w.ctx, list.ResourceVersion, lw)
	require.NoError(t, err)
	var stopping atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			f.mu.Lock()
			f.ended = true
			f.cond.Broadcast() // wake a sync waiting on a watch that ended
			f.mu.Unlock()
		}()
		events, lastRV := 0, list.ResourceVersion
		for ev := range rw.ResultChan() {
			if ev.Type == watch.Error {
				t.Errorf("the pod watch of %s failed after %d events (resourceVersion %s): %v", w.ns, events, lastRV, apierrors.FromObject(ev.Object))
				continue
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			events++
			lastRV = p.ResourceVersion
			observe(ev.Type, p)
		}
		if !stopping.Load() {
			t.Errorf("the pod watch of %s ended before the test did, after %d events (resourceVersion %s): what followed was not checked", w.ns, events, lastRV)
		}
	}()
	var once sync.Once
	f.stop = func() {
		once.Do(func() {
			stopping.Store(true)
			rw.Stop()
			<-done
		})
	}
	t.Cleanup(f.stop)
	return f
}

// sync returns once handle has seen every change to the namespace's pods made before sync
// was called: it creates a pod no scheduler takes and waits for the watch to deliver it
// (a watch delivers in order), then deletes it.
func (f *podFollower) sync() {
	w := f.w
	w.t.Helper()
	f.mu.Lock()
	f.n++
	name := fmt.Sprintf("barrier-%d", f.n)
	f.mu.Unlock()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name, Labels: map[string]string{barrierLabel: "true"}},
		Spec:       corev1.PodSpec{SchedulerName: "berth.test/none", Containers: []corev1.Container{{Name: "c", Image: "barrier"}}},
	}
	_, err := w.kube.CoreV1().Pods(w.ns).Create(w.ctx, pod, metav1.CreateOptions{})
	require.NoError(w.t, err)
	seen := make(chan struct{})
	go func() {
		defer close(seen)
		f.mu.Lock()
		defer f.mu.Unlock()
		for !f.barriers[name] && !f.ended {
			f.cond.Wait()
		}
	}()
	select {
	case <-seen:
	case <-time.After(60 * time.Second):
		w.t.Fatalf("the pod watch did not deliver pod %s within a minute of its creation", name)
	}
	require.True(w.t, f.seenBarrier(name), "the pod watch ended before it delivered pod %s", name)
	require.NoError(w.t, w.kube.CoreV1().Pods(w.ns).Delete(w.ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
}

func (f *podFollower) seenBarrier(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.barriers[name]
}
