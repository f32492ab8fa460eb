package workload

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/scope"
)

func servingScheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, workloadv1alpha1.AddToScheme(s))
	require.NoError(t, volcanov1beta1.AddToScheme(s))
	return s
}

// withServer is one group of a router (no workers) and `replicas` server replicas of an
// entry and `workers` workers.
func withServer(replicas, workers int32) *workloadv1alpha1.ModelServing {
	worker := gpuTemplate("1")
	return &workloadv1alpha1.ModelServing{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "llm", UID: "uid-llm", Generation: 1},
		Spec: workloadv1alpha1.ModelServingSpec{
			Replicas:      ptr.To[int32](1),
			SchedulerName: "berth-scheduler",
			Template: workloadv1alpha1.ServingGroup{Roles: []workloadv1alpha1.Role{
				{Name: "router", EntryTemplate: gpuTemplate("1")},
				{Name: "server", Replicas: ptr.To(replicas), EntryTemplate: gpuTemplate("1"), WorkerReplicas: workers, WorkerTemplate: &worker},
			}},
		},
	}
}

// service is a Service as BuildService makes it for replica j of the server in group i,
// as a pass under an earlier spec left it.
func service(ms *workloadv1alpha1.ModelServing, i, j int) *corev1.Service {
	role := &workloadv1alpha1.Role{Name: "server"}
	svc := BuildService(ms, i, role, j)
	svc.UID = types.UID(svc.Name)
	return svc
}

// A pass deletes exactly the ModelServing's headless Services that no role replica with
// workers of a kept group needs, whatever made them unneeded, says so in an event, and
// leaves the ones it needs and those it does not own alone.
func TestReconcileDeletesServicesNoRoleReplicaNeeds(t *testing.T) {
	removeServer := func(ms *workloadv1alpha1.ModelServing) *workloadv1alpha1.ModelServing {
		ms.Spec.Template.Roles = ms.Spec.Template.Roles[:1]
		return ms
	}
	for _, tc := range []struct {
		name    string
		ms      *workloadv1alpha1.ModelServing
		have    [][2]int // (group, server replica) of the Services that exist
		want    []string
		deleted []string
	}{
		{name: "role scaled down 2 to 1", ms: withServer(1, 1), have: [][2]int{{0, 0}, {0, 1}},
			want: []string{"llm-0-server-0"}, deleted: []string{"llm-0-server-1"}},
		{name: "workerReplicas to 0", ms: withServer(2, 0), have: [][2]int{{0, 0}, {0, 1}},
			deleted: []string{"llm-0-server-0", "llm-0-server-1"}},
		{name: "role removed from the template", ms: removeServer(withServer(2, 1)), have: [][2]int{{0, 0}, {0, 1}},
			deleted: []string{"llm-0-server-0", "llm-0-server-1"}},
		{name: "left by a group that is gone", ms: withServer(2, 1), have: [][2]int{{0, 0}, {1, 0}, {1, 1}},
			want: []string{"llm-0-server-0", "llm-0-server-1"}, deleted: []string{"llm-1-server-0", "llm-1-server-1"}},
		{name: "nothing to delete", ms: withServer(2, 1), have: [][2]int{{0, 0}},
			want: []string{"llm-0-server-0", "llm-0-server-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			var objs []client.Object
			for _, h := range tc.have {
				objs = append(objs, service(tc.ms, h[0], h[1]))
			}
			// Another owner's Service with the ModelServing's label is not the controller's to delete.
			foreign := service(tc.ms, 0, 7)
			foreign.OwnerReferences = nil
			objs = append(objs, foreign)
			cl, events := reconcileOnce(t, tc.ms, objs...)

			var list corev1.ServiceList
			require.NoError(t, cl.List(ctx, &list, client.InNamespace("ns")))
			var names []string
			for _, s := range list.Items {
				names = append(names, s.Name)
			}
			sort.Strings(names)
			assert.Equal(t, append(append([]string{}, tc.want...), "llm-0-server-7"), names)

			var deleted []string
			for _, e := range events {
				if strings.HasPrefix(e, "Normal DeleteService ") {
					deleted = append(deleted, strings.TrimSuffix(strings.Fields(e)[5], ":"))
				}
			}
			sort.Strings(deleted)
			assert.Equal(t, tc.deleted, deleted, "one DeleteService event per Service deleted")
		})
	}
}

// reconcileOnce runs one pass of the ModelServing reconciler over a fake client holding ms
// and objs (with the cache index the reconciler lists through), and returns the client and
// the events the pass sent. The ModelServing's series are dropped when the test ends.
func reconcileOnce(t *testing.T, ms *workloadv1alpha1.ModelServing, objs ...client.Object) (client.Client, []string) {
	t.Helper()
	cl := fake.NewClientBuilder().WithScheme(servingScheme(t)).
		WithIndex(&corev1.Service{}, controllerUIDIndex, controllerUID).WithIndex(&volcanov1beta1.PodGroup{}, controllerUIDIndex, controllerUID).
		WithIndex(&corev1.Pod{}, controllerUIDIndex, controllerUID).WithIndex(&appsv1.ControllerRevision{}, controllerUIDIndex, controllerUID).
		WithStatusSubresource(&workloadv1alpha1.ModelServing{}).WithObjects(append([]client.Object{ms}, objs...)...).Build()
	recorder := events.NewFakeRecorder(100)
	r := &Reconciler{Client: cl, Scheme: cl.Scheme(), Recorder: recorder}
	_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ms)})
	require.NoError(t, err)
	t.Cleanup(func() { forgetModelServing(ms.Namespace, ms.Name) })
	close(recorder.Events)
	var events []string
	for e := range recorder.Events {
		events = append(events, e)
	}
	return cl, events
}

// An entry pod left on an old revision whose role has no workers in the new template keeps
// the Service its hostname resolves through until it is gone; a terminating one does not.
func TestWantedServicesKeepsThoseLivePodsUse(t *testing.T) {
	ms := withServer(1, 0)
	old := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "llm-0-server-1-0"}, Spec: corev1.PodSpec{Subdomain: "llm-0-server-1"}}
	dying := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "llm-0-server-2-0", DeletionTimestamp: ptr.To(metav1.Now())},
		Spec: corev1.PodSpec{Subdomain: "llm-0-server-2"}}
	groups := map[int]*servingGroup{0: {index: 0, pods: map[string]*corev1.Pod{old.Name: old, dying.Name: dying}}}
	assert.Equal(t, map[string]bool{"llm-0-server-1": true}, wantedServices(ms, groups))

	// With workers back in the spec, the spec's replicas are wanted and still nothing for
	// the terminating pod.
	assert.Equal(t, map[string]bool{"llm-0-server-0": true, "llm-0-server-1": true}, wantedServices(withServer(2, 1), groups))
}

// groupSeries lists the berth_modelserving_groups series as namespace/modelserving/state.
func groupSeries(t *testing.T) []string {
	t.Helper()
	ch := make(chan prometheus.Metric, 100)
	groupsByState.Collect(ch)
	close(ch)
	var out []string
	for m := range ch {
		var d dto.Metric
		require.NoError(t, m.Write(&d))
		l := map[string]string{}
		for _, p := range d.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		out = append(out, l["namespace"]+"/"+l["modelserving"]+"/"+l["state"])
	}
	sort.Strings(out)
	return out
}

// A ModelServing that is gone, being deleted, or no longer Berth's (--manage=berth, its
// schedulerName changed to volcano) loses its series; the others keep theirs.
func TestReconcileForgetsSeriesOfDeletedModelServing(t *testing.T) {
	ctx := context.Background()
	for _, ms := range [][2]string{{"ns", "gone"}, {"ns", "terminating"}, {"ns", "moved"}, {"ns", "kept"}, {"other", "gone"}} {
		groupsByState.WithLabelValues(ms[0], ms[1], "available").Set(1)
		groupsByState.WithLabelValues(ms[0], ms[1], "unavailable").Set(0)
		defer forgetModelServing(ms[0], ms[1])
	}
	terminating := withServer(1, 1)
	terminating.Name = "terminating"
	terminating.Finalizers = []string{"test/hold"}
	terminating.DeletionTimestamp = ptr.To(metav1.Now())
	moved := withServer(1, 1)
	moved.Name = "moved"
	moved.Spec.SchedulerName = "volcano"
	cl := fake.NewClientBuilder().WithScheme(servingScheme(t)).
		WithIndex(&corev1.Service{}, controllerUIDIndex, controllerUID).WithIndex(&volcanov1beta1.PodGroup{}, controllerUIDIndex, controllerUID).
		WithIndex(&corev1.Pod{}, controllerUIDIndex, controllerUID).WithIndex(&appsv1.ControllerRevision{}, controllerUIDIndex, controllerUID).
		WithObjects(terminating, moved).Build()
	r := &Reconciler{Scope: scope.Berth, Client: cl, Scheme: cl.Scheme(), Recorder: events.NewFakeRecorder(10)}

	for _, name := range []string{"gone", "terminating", "moved"} {
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}})
		require.NoError(t, err)
	}
	assert.Equal(t, []string{"ns/kept/available", "ns/kept/unavailable", "other/gone/available", "other/gone/unavailable"}, groupSeries(t))
}
