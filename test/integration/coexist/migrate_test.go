package coexist

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	volcanobatchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/internal/systemtest"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/sim"
)

// The phases of a ModelServing moving from Kthena's controller to Berth's and back.
type phase int

const (
	onKthena     phase = iota // schedulerName volcano: Kthena's controller and Volcano own it
	onBerth                   // schedulerName berth-scheduler: Berth's
	backOnKthena              // schedulerName volcano again
	deleting                  // the user deletes it
)

func (p phase) String() string {
	return [...]string{"on Kthena", "on Berth", "back on Kthena", "deleting"}[p]
}

// kthenaRevision is the revision label Kthena's pods carry. Kthena hashes the roles with
// FNV-32 over a spew dump (pkg/model-serving-controller/utils/revision_util.go,
// ModelServingRevision), Berth the template with FNV-32a over JSON: the two never agree, so
// any value other than Berth's stands for Kthena's.
const kthenaRevision = "kthena-7d9c5b"

// TestModelServingMovesBetweenControllers moves one ModelServing from Kthena's controller to
// Berth's and back, as docs/migration.md tells a user to: berth-controller runs with
// --manage=berth. Kthena's controller acts on every ModelServing whatever its scheduler
// (pkg/model-serving-controller: no filter), so the guide stops it before the move; here a
// test client stands in for it, writing the ModelServing's status only while the
// ModelServing is not Berth's. The ModelServing starts with what Kthena's controller and
// Volcano make for it (each group's PodGroup "<ms>-<i>", headless Service "<entry pod>" and
// pods "<ms>-<i>-<role>-<j>-<k>" owned by the ModelServing, with Kthena's labels and revision,
// bound to nodes as Volcano binds them). A watch over the whole run checks that Berth leaves
// it alone while it names volcano, that nothing anyone made carries a finalizer, and that
// it keeps serving (at least one ServingGroup ready) while Berth replaces Kthena's groups.
func TestModelServingMovesBetweenControllers(t *testing.T) {
	ctx := t.Context()
	startSystem(t)
	ns := fmt.Sprintf("migrate-%d", time.Now().UnixNano()%1e6)
	newNamespace(t, ns)
	for i := range 4 {
		_, err := kube.CoreV1().Nodes().Create(ctx, sim.NewNode(fmt.Sprintf("%s-gpu-%d", ns, i), sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: 8},
			map[string]string{systemtest.OwnerLabel: ns, "pool": ns}), metav1.CreateOptions{})
		require.NoError(t, err)
	}

	const name = "llm"
	ms := migratingServing(ns, name)
	require.NoError(t, cl.Create(ctx, ms, client.FieldOwner(creator)))
	w := watchMove(t, ctx, ns, name)

	// Kthena's controller writes the status while the ModelServing is not Berth's.
	stopForeign, foreignDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(foreignDone)
		foreignController(ctx, cl, ns, func(n string) bool { return n == name && w.phase() != onBerth }, stopForeign, t)
	}()
	t.Cleanup(func() { close(stopForeign); <-foreignDone })

	// What Kthena's controller and Volcano made for it.
	kthenaObjects(t, ctx, ms, 2)
	waitFor(t, ctx, "Kthena's pods to run", func() (bool, error) {
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: name}); err != nil {
			return false, err
		}
		return len(pods.Items) == 4 && allReady(pods.Items), nil
	})
	waitFor(t, ctx, "Kthena's status", func() (bool, error) {
		got := getServing(t, ctx, ns, name)
		return conditionReason(got.Status.Conditions, "Available") == "Pending" && got.Status.ObservedGeneration == got.Generation, nil
	})
	// A worker of group 1 fails (its container exits): Kthena's controller would recreate it;
	// Berth, and berth-scheduler, must not touch it, nor its PodGroup.
	require.NoError(t, kubelet.FailPod(ctx, ns, "llm-1-server-0-1"))
	time.Sleep(2 * time.Second) // time for Berth to act, if it were to
	w.check(t)

	// To Berth: the user sets schedulerName: berth-scheduler.
	t.Log("schedulerName: berth-scheduler")
	berthEvents := berthEventCounts(t, ctx, ns, name)
	w.setPhase(onBerth)
	patchScheduler(t, ctx, ns, name, workloadv1alpha1.BerthSchedulerName)
	var onBerthStatus workloadv1alpha1.ModelServingStatus
	waitFor(t, ctx, "Berth to replace Kthena's groups and report them available", func() (bool, error) {
		got := getServing(t, ctx, ns, name)
		if got.Status.ObservedGeneration != got.Generation || got.Status.AvailableReplicas != 2 || got.Status.UpdatedReplicas != 2 ||
			conditionReason(got.Status.Conditions, "Available") != "AllGroupsReady" {
			return false, nil
		}
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: name}); err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			if p.Labels[workloadv1alpha1.RevisionLabel] != got.Status.UpdateRevision {
				return false, nil
			}
		}
		onBerthStatus = got.Status
		return len(pods.Items) == 4 && allReady(pods.Items), nil
	})
	w.stopCountingReadyGroups()
	assert.GreaterOrEqual(t, w.minReadyGroups(), 1, "a ServingGroup stays ready while Berth replaces Kthena's (maxUnavailable 1 of 2)")

	got := getServing(t, ctx, ns, name)
	assert.Equal(t, metav1.ConditionTrue, meta.FindStatusCondition(got.Status.Conditions, "Available").Status, "Berth's status: %+v", got.Status.Conditions)
	// What tells Berth's status from Kthena's (docs/migration.md): Kthena's reasons for these
	// are GroupProgressing and GroupsUpdating.
	assert.Equal(t, "Stable", conditionReason(got.Status.Conditions, "Progressing"), "Berth's Progressing reason")
	assert.Equal(t, "UpToDate", conditionReason(got.Status.Conditions, "UpdateInProgress"), "Berth's UpdateInProgress reason")
	pods := listPods(t, ctx, ns, name)
	for _, p := range pods {
		assert.Equal(t, workloadv1alpha1.BerthSchedulerName, p.Spec.SchedulerName, "pod %s", p.Name)
		assert.NotEmpty(t, p.Spec.NodeName, "pod %s placed", p.Name)
		assert.True(t, metav1.IsControlledBy(&p, got), "pod %s is controlled by the ModelServing", p.Name)
		assert.Equal(t, p.Labels[workloadv1alpha1.GroupNameLabel], p.Annotations[volcanov1beta1.KubeGroupNameAnnotationKey], "pod %s names its group's PodGroup", p.Name)
	}
	for _, pg := range listPodGroups(t, ctx, ns, name) {
		assert.True(t, metav1.IsControlledBy(&pg, got), "PodGroup %s is controlled by the ModelServing", pg.Name)
		assert.Equal(t, map[string]int32{"server-0": 2}, pg.Spec.MinTaskMember, "PodGroup %s has Berth's spec", pg.Name)
		assert.Equal(t, int32(2), pg.Spec.MinMember, "PodGroup %s", pg.Name)
	}
	assert.Equal(t, []string{"llm-0", "llm-1"}, names(listPodGroups(t, ctx, ns, name)))
	assert.Equal(t, []string{"llm-0-server-0", "llm-1-server-0"}, names(listServices(t, ctx, ns, name)),
		"Berth's headless Services replace Kthena's (named after the entry pod)")
	reasons := newBerthEvents(t, ctx, ns, name, berthEvents)
	assert.Contains(t, reasons, "RollingUpdate", "Berth replaced Kthena's groups with a rolling update: %v", reasons)
	assert.Contains(t, reasons, "DeleteService", "Berth deleted Kthena's headless Services: %v", reasons)
	assert.Equal(t, map[string]float64{"available": 2, "unavailable": 0}, groupSeries(t, ns, name), "berth_modelserving_groups")
	w.check(t)

	// Back to Kthena: the user sets schedulerName: volcano again, and Kthena's controller
	// writes its status again.
	t.Log("schedulerName: volcano")
	berthEvents = berthEventCounts(t, ctx, ns, name)
	before := snapshot(t, ctx, ns, name)
	w.setPhase(backOnKthena)
	patchScheduler(t, ctx, ns, name, "volcano")
	waitFor(t, ctx, "Kthena's status again", func() (bool, error) {
		got := getServing(t, ctx, ns, name)
		return conditionReason(got.Status.Conditions, "Available") == "Pending" && got.Status.ObservedGeneration == got.Generation, nil
	})
	// A pod fails: Berth no longer replaces it.
	lost := "llm-1-server-0-1"
	w.expectDeleted(lost)
	require.NoError(t, kube.CoreV1().Pods(ns).Delete(ctx, lost, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	time.Sleep(3 * time.Second)
	w.check(t)

	after := snapshot(t, ctx, ns, name)
	t.Logf("left behind: %s", after)
	assert.Equal(t, slices.DeleteFunc(slices.Clone(before.pods), func(p string) bool { return p == lost }), after.pods,
		"the pods stay, and the lost one is not replaced")
	assert.Equal(t, before.podGroups, after.podGroups, "the PodGroups stay as Berth left them")
	assert.Equal(t, before.services, after.services, "the headless Services stay")
	assert.NotEmpty(t, after.revisions, "the ControllerRevisions stay")
	for _, p := range listPods(t, ctx, ns, name) {
		assert.Equal(t, workloadv1alpha1.BerthSchedulerName, p.Spec.SchedulerName, "pod %s keeps its scheduler (a pod's is immutable)", p.Name)
		assert.Equal(t, onBerthStatus.UpdateRevision, p.Labels[workloadv1alpha1.RevisionLabel], "pod %s keeps Berth's revision", p.Name)
		assert.Equal(t, corev1.PodRunning, p.Status.Phase, "pod %s keeps running", p.Name)
	}
	assert.Empty(t, newBerthEvents(t, ctx, ns, name, berthEvents), "berth-controller events after the ModelServing left it")
	assert.Empty(t, groupSeries(t, ns, name), "berth_modelserving_groups series of a ModelServing Berth no longer manages")

	// Nothing Berth left blocks deleting it: the garbage collector removes the rest.
	w.setPhase(deleting)
	require.NoError(t, cl.Delete(ctx, getServing(t, ctx, ns, name)))
	waitFor(t, ctx, "the ModelServing and everything it owns to go", func() (bool, error) {
		var ms workloadv1alpha1.ModelServing
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ms); !apierrors.IsNotFound(err) {
			return false, nil
		}
		s := snapshot(t, ctx, ns, name)
		return len(s.pods)+len(s.podGroups)+len(s.services)+len(s.revisions) == 0, nil
	})
	w.check(t)
}

// migratingServing is a ModelServing for Volcano, as Kthena users write them: two groups of
// one server replica (an entry and a worker, one GPU each).
func migratingServing(ns, name string) *workloadv1alpha1.ModelServing {
	tmpl := func() workloadv1alpha1.PodTemplateSpec {
		return workloadv1alpha1.PodTemplateSpec{Spec: corev1.PodSpec{NodeSelector: map[string]string{"pool": ns},
			Containers: []corev1.Container{{Name: "vllm", Image: "vllm", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
				Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}}}
	}
	worker := tmpl()
	return &workloadv1alpha1.ModelServing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: workloadv1alpha1.ModelServingSpec{Replicas: ptr.To[int32](2), SchedulerName: "volcano",
			Template: workloadv1alpha1.ServingGroup{Roles: []workloadv1alpha1.Role{{Name: "server", Replicas: ptr.To[int32](1),
				EntryTemplate: tmpl(), WorkerReplicas: 1, WorkerTemplate: &worker}}}}}
}

// kthenaObjects makes, for each of the ModelServing's groups, what Kthena's controller makes
// for a ModelServing on volcano (volcano-sh/kthena pkg/model-serving-controller:
// podgroupmanager/manager.go createPodGroup; utils/utils.go GenerateEntryPod,
// GenerateWorkerPod, createBasePod, CreateHeadlessService; podgroupmanager AnnotatePodWithPodGroup)
// and binds the pods to nodes as Volcano's scheduler would.
func kthenaObjects(t *testing.T, ctx context.Context, ms *workloadv1alpha1.ModelServing, groups int) {
	t.Helper()
	owner := metav1.OwnerReference{APIVersion: workloadv1alpha1.SchemeGroupVersion.String(), Kind: "ModelServing", Name: ms.Name, UID: ms.UID,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
	role := ms.Spec.Template.Roles[0]
	var pods []string
	for i := range groups {
		group := fmt.Sprintf("%s-%d", ms.Name, i)
		roleID := role.Name + "-0"
		pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ms.Namespace, Name: group,
			Labels:          map[string]string{workloadv1alpha1.ModelServingNameLabel: ms.Name, workloadv1alpha1.GroupNameLabel: group},
			Annotations:     map[string]string{volcanov1beta1.KubeGroupNameAnnotationKey: group},
			OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: volcanov1beta1.PodGroupSpec{MinMember: 2, MinResources: &corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")},
				SubGroupPolicy: []volcanov1beta1.SubGroupPolicySpec{{Name: role.Name, SubGroupSize: ptr.To[int32](2), MinSubGroups: ptr.To[int32](1),
					LabelSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{workloadv1alpha1.ModelServingNameLabel: ms.Name, workloadv1alpha1.RoleLabel: role.Name}},
					MatchLabelKeys: []string{workloadv1alpha1.RoleIDLabel}}}}}
		require.NoError(t, cl.Create(ctx, pg, client.FieldOwner(foreignOwner)))
		entry := fmt.Sprintf("%s-%s-0", group, roleID)
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ms.Namespace, Name: entry, OwnerReferences: []metav1.OwnerReference{owner},
			Labels: map[string]string{workloadv1alpha1.ModelServingNameLabel: ms.Name, workloadv1alpha1.GroupNameLabel: group,
				workloadv1alpha1.RoleLabel: role.Name, workloadv1alpha1.RoleIDLabel: roleID}},
			Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, PublishNotReadyAddresses: true, Selector: map[string]string{
				workloadv1alpha1.GroupNameLabel: group, workloadv1alpha1.RoleLabel: role.Name, workloadv1alpha1.RoleIDLabel: roleID, workloadv1alpha1.EntryLabel: "true"}}}
		require.NoError(t, cl.Create(ctx, svc, client.FieldOwner(foreignOwner)))
		for k, tmpl := range []workloadv1alpha1.PodTemplateSpec{role.EntryTemplate, *role.WorkerTemplate} {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ms.Namespace, Name: fmt.Sprintf("%s-%s-%d", group, roleID, k),
				OwnerReferences: []metav1.OwnerReference{owner},
				Labels: map[string]string{workloadv1alpha1.ModelServingNameLabel: ms.Name, workloadv1alpha1.GroupNameLabel: group,
					workloadv1alpha1.RoleLabel: role.Name, workloadv1alpha1.RoleIDLabel: roleID, workloadv1alpha1.RevisionLabel: kthenaRevision,
					"modelserving.volcano.sh/role-template-hash": "kthena-role"},
				Annotations: map[string]string{volcanov1beta1.KubeGroupNameAnnotationKey: group, volcanobatchv1alpha1.TaskSpecKey: roleID}},
				Spec: *tmpl.Spec.DeepCopy()}
			if k == 0 {
				pod.Labels[workloadv1alpha1.EntryLabel] = "true"
			}
			pod.Spec.SchedulerName = ms.Spec.SchedulerName
			for c := range pod.Spec.Containers {
				pod.Spec.Containers[c].Env = append(pod.Spec.Containers[c].Env,
					corev1.EnvVar{Name: workloadv1alpha1.GroupSizeEnv, Value: "2"},
					corev1.EnvVar{Name: workloadv1alpha1.EntryAddressEnv, Value: entry + "." + ms.Namespace},
					corev1.EnvVar{Name: workloadv1alpha1.WorkerIndexEnv, Value: fmt.Sprint(k)})
			}
			require.NoError(t, cl.Create(ctx, pod, client.FieldOwner(foreignOwner)))
			pods = append(pods, pod.Name)
		}
	}
	// Volcano places them a moment later: every component watching pods sees them pending,
	// then bound, then running.
	time.Sleep(2 * time.Second)
	for node, pod := range pods {
		require.NoError(t, kube.CoreV1().Pods(ms.Namespace).Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pod},
			Target: corev1.ObjectReference{Kind: "Node", Name: fmt.Sprintf("%s-gpu-%d", ms.Namespace, node%4)}}, metav1.CreateOptions{}))
	}
}

// moveWatch watches the ModelServing, its pods, PodGroups and Services for the whole run and
// records what should not happen in the phase it happens in.
type moveWatch struct {
	ns, name string

	mu         sync.Mutex
	ph         phase
	violations []string
	deletable  map[string]bool // pods the test itself deletes
	// While counting: the fewest ServingGroups with every pod Ready seen at once.
	counting bool
	minReady int
	pods     map[string]*corev1.Pod
	pgSpecs  map[string]volcanov1beta1.PodGroupSpec
	// Kthena's status was seen after the move back: a later Berth condition is Berth's write.
	foreignSeen bool
}

func watchMove(t *testing.T, ctx context.Context, ns, name string) *moveWatch {
	t.Helper()
	w := &moveWatch{ns: ns, name: name, deletable: map[string]bool{}, minReady: 1 << 30, pods: map[string]*corev1.Pod{},
		pgSpecs: map[string]volcanov1beta1.PodGroupSpec{}}
	sel := metav1.ListOptions{LabelSelector: workloadv1alpha1.ModelServingNameLabel + "=" + name}
	msW, err := cl.Watch(ctx, &workloadv1alpha1.ModelServingList{}, client.InNamespace(ns))
	require.NoError(t, err)
	podW, err := kube.CoreV1().Pods(ns).Watch(ctx, sel)
	require.NoError(t, err)
	pgW, err := cl.Watch(ctx, &volcanov1beta1.PodGroupList{}, client.InNamespace(ns))
	require.NoError(t, err)
	svcW, err := kube.CoreV1().Services(ns).Watch(ctx, sel)
	require.NoError(t, err)
	t.Cleanup(func() { msW.Stop(); podW.Stop(); pgW.Stop(); svcW.Stop() })
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-msW.ResultChan():
				if !ok {
					return
				}
				if ms, is := e.Object.(*workloadv1alpha1.ModelServing); is && ms.Name == name {
					w.servingEvent(e.Type, ms)
				}
			case e, ok := <-podW.ResultChan():
				if !ok {
					return
				}
				if p, is := e.Object.(*corev1.Pod); is {
					w.podEvent(e.Type, p)
				}
			case e, ok := <-pgW.ResultChan():
				if !ok {
					return
				}
				if pg, is := e.Object.(*volcanov1beta1.PodGroup); is && strings.HasPrefix(pg.Name, name+"-") {
					w.podGroupEvent(e.Type, pg)
				}
			case e, ok := <-svcW.ResultChan():
				if !ok {
					return
				}
				if s, is := e.Object.(*corev1.Service); is {
					w.serviceEvent(e.Type, s)
				}
			}
		}
	}()
	return w
}

func (w *moveWatch) violate(format string, args ...any) {
	w.violations = append(w.violations, fmt.Sprintf("%s: ", w.ph)+fmt.Sprintf(format, args...))
}

// berthConditions are condition types only Berth writes on a ModelServing (Kthena's
// stand-in writes Available alone).
var berthConditions = []string{string(workloadv1alpha1.ModelServingProgressing), string(workloadv1alpha1.ModelServingUpdateInProgress)}

func (w *moveWatch) servingEvent(typ watch.EventType, ms *workloadv1alpha1.ModelServing) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(ms.Finalizers) > 0 && w.ph != deleting {
		w.violate("ModelServing finalizers %v", ms.Finalizers)
	}
	berthStatus := slices.ContainsFunc(berthConditions, func(c string) bool { return meta.FindStatusCondition(ms.Status.Conditions, c) != nil })
	switch w.ph {
	case onKthena:
		for _, f := range ms.ManagedFields {
			if f.Manager != creator && f.Manager != foreignOwner {
				w.violate("ModelServing written by %s (%s %s)", f.Manager, f.Operation, f.Subresource)
			}
		}
	case backOnKthena:
		if !berthStatus {
			w.foreignSeen = true
		} else if w.foreignSeen {
			w.violate("Berth wrote the ModelServing's status: %+v", ms.Status.Conditions)
		}
	}
}

func (w *moveWatch) podEvent(typ watch.EventType, p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(p.Finalizers) > 0 {
		w.violate("pod %s finalizers %v", p.Name, p.Finalizers)
	}
	switch {
	case w.ph == onKthena && typ == watch.Added && p.Labels[workloadv1alpha1.RevisionLabel] != kthenaRevision:
		w.violate("pod %s created by Berth", p.Name)
	case w.ph == onKthena && typ == watch.Deleted:
		w.violate("pod %s deleted", p.Name)
	case w.ph == backOnKthena && typ == watch.Added:
		w.violate("pod %s created", p.Name)
	case w.ph == backOnKthena && typ == watch.Deleted && !w.deletable[p.Name]:
		w.violate("pod %s deleted", p.Name)
	}
	if typ == watch.Deleted {
		delete(w.pods, p.Name)
	} else {
		w.pods[p.Name] = p
	}
	if w.counting {
		w.minReady = min(w.minReady, readyGroups(w.pods))
	}
}

func (w *moveWatch) podGroupEvent(typ watch.EventType, pg *volcanov1beta1.PodGroup) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(pg.Finalizers) > 0 {
		w.violate("PodGroup %s finalizers %v", pg.Name, pg.Finalizers)
	}
	switch w.ph {
	case onKthena:
		for _, f := range pg.ManagedFields {
			if f.Manager != foreignOwner {
				w.violate("PodGroup %s written by %s (%s %s)", pg.Name, f.Manager, f.Operation, f.Subresource)
			}
		}
	case backOnKthena:
		if typ == watch.Added || typ == watch.Deleted {
			w.violate("PodGroup %s %s", pg.Name, strings.ToLower(string(typ)))
		} else if old, ok := w.pgSpecs[pg.Name]; ok && !equality.Semantic.DeepEqual(old, pg.Spec) {
			w.violate("PodGroup %s spec changed", pg.Name)
		}
	}
	if typ == watch.Deleted {
		delete(w.pgSpecs, pg.Name)
	} else {
		w.pgSpecs[pg.Name] = *pg.Spec.DeepCopy()
	}
}

func (w *moveWatch) serviceEvent(typ watch.EventType, s *corev1.Service) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(s.Finalizers) > 0 {
		w.violate("Service %s finalizers %v", s.Name, s.Finalizers)
	}
	kthenas := slices.ContainsFunc(s.ManagedFields, func(f metav1.ManagedFieldsEntry) bool { return f.Manager == foreignOwner })
	if (w.ph == onKthena || w.ph == backOnKthena) && (typ == watch.Added && !kthenas || typ == watch.Deleted) {
		w.violate("Service %s %s", s.Name, strings.ToLower(string(typ)))
	}
}

func (w *moveWatch) phase() phase { w.mu.Lock(); defer w.mu.Unlock(); return w.ph }

func (w *moveWatch) setPhase(p phase) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ph = p
	if p == onBerth {
		w.counting, w.minReady = true, readyGroups(w.pods)
	}
}

func (w *moveWatch) stopCountingReadyGroups() { w.mu.Lock(); defer w.mu.Unlock(); w.counting = false }
func (w *moveWatch) minReadyGroups() int      { w.mu.Lock(); defer w.mu.Unlock(); return w.minReady }
func (w *moveWatch) expectDeleted(pod string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deletable[pod] = true
}

func (w *moveWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	assert.Empty(t, w.violations)
	w.violations = nil
}

// readyGroups counts the ServingGroups whose two pods exist, are not terminating and are Ready.
func readyGroups(pods map[string]*corev1.Pod) int {
	ready := map[string]int{}
	for _, p := range pods {
		if p.DeletionTimestamp == nil && podReady(p) {
			ready[p.Labels[workloadv1alpha1.GroupNameLabel]]++
		}
	}
	n := 0
	for _, c := range ready {
		if c == 2 {
			n++
		}
	}
	return n
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func allReady(pods []corev1.Pod) bool {
	for i := range pods {
		if pods[i].DeletionTimestamp != nil || !podReady(&pods[i]) {
			return false
		}
	}
	return true
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, error)) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) { return cond() })
	require.NoError(t, err, "waiting for %s", what)
}

func getServing(t *testing.T, ctx context.Context, ns, name string) *workloadv1alpha1.ModelServing {
	t.Helper()
	var ms workloadv1alpha1.ModelServing
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ms))
	return &ms
}

// patchScheduler is the user's edit: spec.schedulerName, nothing else.
func patchScheduler(t *testing.T, ctx context.Context, ns, name, scheduler string) {
	t.Helper()
	patch := client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"schedulerName":%q}}`, scheduler))
	require.NoError(t, cl.Patch(ctx, &workloadv1alpha1.ModelServing{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}, patch, client.FieldOwner(creator)))
}

func listPods(t *testing.T, ctx context.Context, ns, name string) []corev1.Pod {
	t.Helper()
	var l corev1.PodList
	require.NoError(t, cl.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: name}))
	return l.Items
}

func listPodGroups(t *testing.T, ctx context.Context, ns, name string) []volcanov1beta1.PodGroup {
	t.Helper()
	var l volcanov1beta1.PodGroupList
	require.NoError(t, cl.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: name}))
	return l.Items
}

func listServices(t *testing.T, ctx context.Context, ns, name string) []corev1.Service {
	t.Helper()
	var l corev1.ServiceList
	require.NoError(t, cl.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: name}))
	return l.Items
}

func names[T any, P interface {
	*T
	client.Object
}](items []T) []string {
	out := make([]string, 0, len(items))
	for i := range items {
		out = append(out, P(&items[i]).GetName())
	}
	slices.Sort(out)
	return out
}

// left is what a ModelServing has in the cluster besides itself.
type left struct {
	pods, podGroups, services, revisions []string
}

func (l left) String() string {
	return fmt.Sprintf("pods %v, PodGroups %v, Services %v, ControllerRevisions %v", l.pods, l.podGroups, l.services, l.revisions)
}

func snapshot(t *testing.T, ctx context.Context, ns, name string) left {
	t.Helper()
	var crs appsv1.ControllerRevisionList
	require.NoError(t, cl.List(ctx, &crs, client.InNamespace(ns), client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: name}))
	return left{pods: names(listPods(t, ctx, ns, name)), podGroups: names(listPodGroups(t, ctx, ns, name)),
		services: names(listServices(t, ctx, ns, name)), revisions: names(crs.Items)}
}

// berthEventCounts counts berth-controller's events about the ModelServing and what it owns
// (events.k8s.io/v1 folds repeats into a series), by event name.
func berthEventCounts(t *testing.T, ctx context.Context, ns, name string) map[string]int32 {
	t.Helper()
	list, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	out := map[string]int32{}
	for _, e := range list.Items {
		if e.ReportingController == "berth-controller" && (e.Regarding.Name == name || strings.HasPrefix(e.Regarding.Name, name+"-")) {
			out[e.Name] = eventCount(&e)
		}
	}
	return out
}

func eventCount(e *eventsv1.Event) int32 {
	if e.Series != nil {
		return e.Series.Count
	}
	return 1
}

// newBerthEvents lists the reasons of berth-controller's events since counts were taken.
func newBerthEvents(t *testing.T, ctx context.Context, ns, name string, counts map[string]int32) []string {
	t.Helper()
	list, err := kube.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var out []string
	now := berthEventCounts(t, ctx, ns, name)
	for _, e := range list.Items {
		if n, ok := now[e.Name]; ok && n > counts[e.Name] {
			out = append(out, e.Reason)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// groupSeries is berth-controller's berth_modelserving_groups for one ModelServing, by
// state (the controller runs in this process, so its registry is this one).
func groupSeries(t *testing.T, ns, name string) map[string]float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "berth_modelserving_groups" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["namespace"] == ns && l["modelserving"] == name {
				out[l["state"]] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}
