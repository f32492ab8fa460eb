// Package coexist runs berth-controller with --manage=berth beside a foreign controller (a
// test client that writes ModelServing status the way Kthena's controller does) in one
// namespace: neither side touches the other's objects. The stand-in leaves Berth's
// ModelServings alone; Kthena's real ModelServing controller acts on every ModelServing, which
// is why docs/migration.md stops it before one moves (migrate_test.go follows those steps).
package coexist

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/inprocess"
	"github.com/berth-sh/berth/internal/systemtest"
	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/scope"
	"github.com/berth-sh/berth/pkg/sim"
)

var (
	cp   *controlplane.ControlPlane
	seed = flag.Int64("coexist.seed", 0, "seed of the random workload (0: from the clock)")
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(klog.NewKlogr())
	cptest.Main(m, &cp)
}

// berth-scheduler, berth-controller with --manage=berth and the simulated kubelet are shared
// by the package's tests (started on first use); each test works in its own namespace on
// its own nodes.
var (
	startOnce sync.Once
	kube      kubernetes.Interface
	cl        client.WithWatch
	kubelet   *sim.Kubelet
)

func startSystem(t *testing.T) {
	startOnce.Do(func() {
		cfg := cp.RESTConfig()
		kube = kubernetes.NewForConfigOrDie(cfg)
		var err error
		cl, err = client.NewWithWatch(cfg, client.Options{Scheme: controller.Scheme()})
		require.NoError(t, err)
		dir, err := os.MkdirTemp("", "berth-coexist")
		require.NoError(t, err)
		kubeconfig := filepath.Join(dir, "kubeconfig")
		require.NoError(t, cp.WriteKubeconfig(kubeconfig))
		// Not a test's context: it ends before the cleanups, and a namespace's pods need the
		// kubelet until they are gone.
		sys, err := inprocess.Start(context.Background(), cfg, inprocess.Options{Dir: dir, Kubeconfig: kubeconfig,
			Scheduler:  &inprocess.SchedulerOptions{},
			Controller: &controller.Options{Manage: string(scope.Berth)},
			Kubelet:    &inprocess.KubeletOptions{PodStartDelay: 50 * time.Millisecond, Client: kube},
		})
		require.NoError(t, err)
		cptest.BeforeStop(sys.Stop)
		cptest.BeforeStop(func() { _ = os.RemoveAll(dir) })
		kubelet = sys.Kubelet
	})
	require.NotNil(t, cl, "the shared system did not start")
}

// newNamespace creates a namespace for one test and removes it, and the nodes labelled for
// it, when the test ends.
func newNamespace(t *testing.T, ns string) {
	t.Helper()
	_, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		zero := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
		assert.NoError(t, kube.CoreV1().Nodes().DeleteCollection(context.Background(), zero, metav1.ListOptions{LabelSelector: systemtest.OwnerLabel + "=" + ns}))
		assert.NoError(t, systemtest.RemoveNamespace(kube, ns))
	})
}

// Field managers: who wrote what, as the apiserver records it.
const (
	creator      = "coexist-user"
	foreignOwner = "kthena-controller"
)

func TestForeignObjectsAreLeftAlone(t *testing.T) {
	s := *seed
	if s == 0 {
		s = time.Now().UnixNano()
	}
	t.Logf("seed %d (replay with -coexist.seed=%d)", s, s)
	rng := rand.New(rand.NewPCG(uint64(s), 7))
	ctx := t.Context()
	startSystem(t)
	ns := fmt.Sprintf("coexist-%d", rng.IntN(1e6))
	newNamespace(t, ns)
	// Two node pools of 8-GPU nodes; each ModelServing asks for 1–2 groups of 1–2 GPUs.
	for i := range 4 {
		_, err := kube.CoreV1().Nodes().Create(ctx, sim.NewNode(fmt.Sprintf("%s-gpu-%d", ns, i), sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: 8},
			map[string]string{systemtest.OwnerLabel: ns, "pool": fmt.Sprintf("p%d", i%2)}), metav1.CreateOptions{})
		require.NoError(t, err)
	}

	// The watch, for the whole run: every write to a foreign object is the foreign
	// controller's or the creator's, and nothing of Berth's appears for it.
	var mu sync.Mutex
	// foreign: not Berth's; berth: Berth's and placed by berth-scheduler; optedIn: Berth's
	// but placed by a scheduler that does not run here (Volcano), so they stay Pending.
	foreign, berth, optedIn := map[string]bool{}, map[string]bool{}, map[string]bool{}
	var violations []string
	violate := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		violations = append(violations, fmt.Sprintf(format, args...))
	}
	isForeign := func(name string) bool { mu.Lock(); defer mu.Unlock(); return foreign[name] }
	watchAll(t, ctx, cl, kube, ns, isForeign, violate)
	volcanoMade := volcanoPodGroupController(t, ctx, ns)

	// The workload: ModelServings arrive during the run, each for berth-scheduler, for
	// Volcano (Kthena's default) or for the default scheduler, some of the foreign ones
	// opted in with the label; a labelled and an unlabelled ModelRoute.
	type kind struct {
		scheduler string
		optIn     bool
	}
	kinds := []kind{{"berth-scheduler", false}, {"volcano", false}, {"", false}, {"volcano", true}}
	stopForeign := make(chan struct{})
	foreignDone := make(chan struct{})
	go func() { defer close(foreignDone); foreignController(ctx, cl, ns, isForeign, stopForeign, t) }()
	for i := range 8 {
		k := kinds[rng.IntN(len(kinds))]
		if i < len(kinds) {
			k = kinds[i] // every kind at least once
		}
		ms := modelServing(fmt.Sprintf("ms-%d", i), k.scheduler, k.optIn, 1+rng.IntN(2), 1+rng.IntN(2), fmt.Sprintf("p%d", rng.IntN(2)))
		ms.Namespace = ns
		mine := scope.Berth.Manages(ms)
		mu.Lock()
		switch {
		case mine && k.scheduler == workloadv1alpha1.BerthSchedulerName:
			berth[ms.Name] = true
		case mine:
			optedIn[ms.Name] = true
		default:
			foreign[ms.Name] = true
		}
		mu.Unlock()
		require.NoError(t, cl.Create(ctx, ms, client.FieldOwner(creator)))
		t.Logf("%s: scheduler %q, opted in %v: Berth's %v", ms.Name, k.scheduler, k.optIn, mine)
		time.Sleep(time.Duration(rng.IntN(800)) * time.Millisecond)
	}
	for name, labelled := range map[string]bool{"route-berth": true, "route-kthena": false} {
		mr := &networkingv1alpha1.ModelRoute{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: networkingv1alpha1.ModelRouteSpec{ModelName: name, Rules: []networkingv1alpha1.Rule{{
				TargetModels: []networkingv1alpha1.TargetModel{{ModelServerName: "nowhere"}}}}}}
		if labelled {
			mr.Labels = map[string]string{workloadv1alpha1.ManagedLabel: "true"}
		}
		require.NoError(t, cl.Create(ctx, mr, client.FieldOwner(creator)))
	}

	// Berth's ModelServings become Available; the labelled route gets its conditions.
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		for name := range berth {
			var ms workloadv1alpha1.ModelServing
			if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ms); err != nil {
				return false, nil
			}
			if ms.Status.ObservedGeneration != ms.Generation || ms.Status.AvailableReplicas != ptr.Deref(ms.Spec.Replicas, 1) {
				return false, nil
			}
		}
		var mr networkingv1alpha1.ModelRoute
		return cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "route-berth"}, &mr) == nil && len(mr.Status.Conditions) > 0, nil
	})
	require.NoError(t, err, "Berth's ModelServings %v did not all become Available, or its route got no status", keys(berth))
	// Some more time with both controllers active, then the end state.
	time.Sleep(3 * time.Second)
	close(stopForeign)
	<-foreignDone

	for name := range foreign {
		var ms workloadv1alpha1.ModelServing
		require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ms))
		assert.Equal(t, "Pending", conditionReason(ms.Status.Conditions, "Available"), "%s: the foreign controller's status stands", name)
		assert.Empty(t, ms.Finalizers, "%s: finalizers", name)
		for _, list := range []client.ObjectList{&corev1.PodList{}, &corev1.ServiceList{}, &volcanov1beta1.PodGroupList{}} {
			require.NoError(t, cl.List(ctx, list, client.InNamespace(ns), client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: name}))
			assert.Zero(t, meta.LenList(list), "%s: Berth created %T for it", name, list)
		}
	}
	for name := range optedIn {
		var pods corev1.PodList
		require.NoError(t, cl.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: name}))
		assert.NotEmpty(t, pods.Items, "%s opted in with the label: Berth creates its pods", name)
	}
	// The PodGroups Volcano's podgroup controller made for the opted-in ModelServings' pods
	// (which ask for no gang, so Berth makes none) stay: the pods name them.
	made := volcanoMade()
	assert.NotEmpty(t, made, "Volcano's podgroup controller made no PodGroup for the opted-in ModelServings' pods")
	for _, name := range made {
		var pg volcanov1beta1.PodGroup
		if assert.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &pg), "PodGroup %s Volcano made for a volcano pod", name) {
			assert.Nil(t, pg.DeletionTimestamp, "PodGroup %s Volcano made is being deleted", name)
		}
	}
	for name := range mergeSets(berth, optedIn) {
		var ms workloadv1alpha1.ModelServing
		require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ms))
		for _, f := range ms.ManagedFields {
			assert.NotEqual(t, foreignOwner, f.Manager, "%s: the foreign controller wrote Berth's ModelServing", name)
		}
	}
	var unlabelled networkingv1alpha1.ModelRoute
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "route-kthena"}, &unlabelled))
	assert.Empty(t, unlabelled.Status.Conditions, "Berth wrote the status of a ModelRoute not meant for it")
	events, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, e := range events.Items {
		if e.Regarding.Name == "route-kthena" || isForeign(e.Regarding.Name) || isForeign(ownerOfGroup(e.Regarding.Name)) {
			violate("event %s %s on %s %s: %s", e.Reason, e.Action, e.Regarding.Kind, e.Regarding.Name, e.Note)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Empty(t, violations, "seed %d", s)
}

// watchAll watches ModelServings, pods and PodGroups of ns until ctx ends and reports every
// write to a foreign ModelServing by a manager other than its creator and the foreign
// controller, and any pod or PodGroup of a foreign one.
func watchAll(t *testing.T, ctx context.Context, cl client.WithWatch, kube kubernetes.Interface, ns string, isForeign func(string) bool, violate func(string, ...any)) {
	t.Helper()
	msW, err := cl.Watch(ctx, &workloadv1alpha1.ModelServingList{}, client.InNamespace(ns))
	require.NoError(t, err)
	podW, err := kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	pgW, err := cl.Watch(ctx, &volcanov1beta1.PodGroupList{}, client.InNamespace(ns))
	require.NoError(t, err)
	t.Cleanup(func() { msW.Stop(); podW.Stop(); pgW.Stop() })
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-msW.ResultChan():
				if !ok {
					return
				}
				ms, isMS := e.Object.(*workloadv1alpha1.ModelServing)
				if !isMS || e.Type == watch.Deleted || !isForeign(ms.Name) {
					continue
				}
				for _, f := range ms.ManagedFields {
					if f.Manager != creator && f.Manager != foreignOwner {
						violate("%s: written by %s (%s %s)", ms.Name, f.Manager, f.Operation, f.Subresource)
					}
				}
				if len(ms.Finalizers) > 0 {
					violate("%s: finalizers %v", ms.Name, ms.Finalizers)
				}
			case e, ok := <-podW.ResultChan():
				if !ok {
					return
				}
				if p, isPod := e.Object.(*corev1.Pod); isPod && isForeign(p.Labels[workloadv1alpha1.ModelServingNameLabel]) {
					violate("pod %s of foreign %s", p.Name, p.Labels[workloadv1alpha1.ModelServingNameLabel])
				}
			case e, ok := <-pgW.ResultChan():
				if !ok {
					return
				}
				if pg, isPG := e.Object.(*volcanov1beta1.PodGroup); isPG && isForeign(ownerOfGroup(pg.Name)) {
					violate("PodGroup %s of foreign %s", pg.Name, ownerOfGroup(pg.Name))
				}
			}
		}
	}()
}

// foreignController writes every foreign ModelServing's status as Kthena's controller does
// while it waits for Volcano: observed, no group available, an Available condition False.
func foreignController(ctx context.Context, cl client.Client, ns string, isForeign func(string) bool, stop <-chan struct{}, t *testing.T) {
	tick := time.NewTicker(150 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var list workloadv1alpha1.ModelServingList
		if err := cl.List(ctx, &list, client.InNamespace(ns)); err != nil {
			continue
		}
		for i := range list.Items {
			ms := &list.Items[i]
			if !isForeign(ms.Name) {
				continue
			}
			ms.Status.ObservedGeneration = ms.Generation
			ms.Status.Replicas = ptr.Deref(ms.Spec.Replicas, 1)
			ms.Status.AvailableReplicas = 0
			ms.Status.Conditions = []metav1.Condition{{Type: "Available", Status: metav1.ConditionFalse, Reason: "Pending",
				Message: fmt.Sprintf("waiting for volcano (%s)", time.Now().Format(time.RFC3339Nano)), LastTransitionTime: metav1.Now(), ObservedGeneration: ms.Generation}}
			if err := cl.Status().Update(ctx, ms, client.FieldOwner(foreignOwner)); err != nil && !apierrors.IsConflict(err) && ctx.Err() == nil {
				t.Logf("foreign controller: %v", err)
			}
		}
	}
}

// volcanoPodGroupController does for the pods of ns what Volcano's podgroup controller does
// (volcano-sh/volcano pkg/controllers/podgroup: processNextReq, createNormalPodPGIfNotExist,
// buildPodGroupFromPod, newPGOwnerReferences, updatePodAnnotations): for each new pod that
// names the scheduler "volcano" and no PodGroup, it creates the PodGroup
// "podgroup-<UID of the pod's controller>" with minMember 1 and the pod's owner references,
// and writes its name into the pod's scheduling.k8s.io/group-name annotation. It returns
// the names of the PodGroups it made.
func volcanoPodGroupController(t *testing.T, ctx context.Context, ns string) func() []string {
	t.Helper()
	w, err := kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	t.Cleanup(w.Stop)
	var mu sync.Mutex
	made := map[string]bool{}
	go func() {
		for e := range w.ResultChan() {
			pod, ok := e.Object.(*corev1.Pod)
			if !ok || e.Type != watch.Added || pod.Spec.SchedulerName != "volcano" || pod.Annotations[volcanov1beta1.KubeGroupNameAnnotationKey] != "" {
				continue
			}
			name, owners := "podgroup-"+string(pod.UID), []metav1.OwnerReference{*metav1.NewControllerRef(pod, corev1.SchemeGroupVersion.WithKind("Pod"))}
			if ref := metav1.GetControllerOf(pod); ref != nil {
				name, owners = "podgroup-"+string(ref.UID), pod.OwnerReferences
			}
			pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, OwnerReferences: owners},
				Spec: volcanov1beta1.PodGroupSpec{MinMember: 1}, Status: volcanov1beta1.PodGroupStatus{Phase: volcanov1beta1.PodGroupPending}}
			if err := cl.Create(ctx, pg, client.FieldOwner("volcano-controllers")); err != nil && !apierrors.IsAlreadyExists(err) {
				if ctx.Err() == nil {
					t.Logf("volcano podgroup controller: %v", err)
				}
				continue
			}
			mu.Lock()
			made[name] = true
			mu.Unlock()
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, volcanov1beta1.KubeGroupNameAnnotationKey, name)
			if _, err := kube.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "volcano-controllers"}); err != nil && ctx.Err() == nil {
				t.Logf("volcano podgroup controller: annotate %s: %v", pod.Name, err)
			}
		}
	}()
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return keys(made)
	}
}

func modelServing(name, scheduler string, optIn bool, replicas, gpus int, pool string) *workloadv1alpha1.ModelServing {
	ms := &workloadv1alpha1.ModelServing{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: workloadv1alpha1.ModelServingSpec{Replicas: ptr.To(int32(replicas)), SchedulerName: scheduler,
			Template: workloadv1alpha1.ServingGroup{Roles: []workloadv1alpha1.Role{{Name: "server", Replicas: ptr.To[int32](1),
				EntryTemplate: workloadv1alpha1.PodTemplateSpec{Spec: corev1.PodSpec{NodeSelector: map[string]string{"pool": pool},
					Containers: []corev1.Container{{Name: "vllm", Image: "vllm", Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(fmt.Sprint(gpus))},
						Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(fmt.Sprint(gpus))}}}}}}}}}}}
	if optIn {
		ms.Labels = map[string]string{workloadv1alpha1.ManagedLabel: "true"}
	}
	return ms
}

func conditionReason(cs []metav1.Condition, typ string) string {
	for _, c := range cs {
		if c.Type == typ {
			return c.Reason
		}
	}
	return ""
}

// ownerOfGroup is the ModelServing of ServingGroup "<ms>-<i>" and of its pods
// "<ms>-<i>-<role>-<j>-<k>" (names in this test have no other dashes than "ms-<n>").
func ownerOfGroup(group string) string {
	parts := strings.Split(group, "-")
	if len(parts) < 3 {
		return ""
	}
	return strings.Join(parts[:2], "-")
}

func mergeSets(a, b map[string]bool) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
