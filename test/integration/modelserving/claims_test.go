package modelserving

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// withWorkers is a ModelServing whose groups have a role without workers (router, 1
// replica) and a role with them (server, 2 replicas of an entry and 1 worker): 5 pods of
// 1 GPU per group. Only the server's role replicas get a headless Service.
func withWorkers(name string, replicas int) string {
	return fmt.Sprintf(`
metadata: {name: %s}
spec:
  replicas: %d
  schedulerName: berth-scheduler
  template:
    roles:
    - name: router
      replicas: 1
      entryTemplate:
        spec:
          containers: [{name: vllm, image: vllm, resources: {limits: {nvidia.com/gpu: "1"}}}]
    - name: server
      replicas: 2
      workerReplicas: 1
      entryTemplate:
        spec:
          containers: [{name: vllm, image: vllm, resources: {limits: {nvidia.com/gpu: "1"}}}]
      workerTemplate:
        spec:
          containers: [{name: vllm, image: vllm, resources: {limits: {nvidia.com/gpu: "1"}}}]
`, name, replicas)
}

const podsPerGroup = 5

// settled is true once the controller has seen the latest spec, every group it asks for
// exists on the latest revision, `available` of them are available, and the pods that exist
// are exactly the groups' (none left over, none terminating).
func (w *world) settled(name string, replicas, available int32) func() bool {
	return func() bool {
		ms := w.get(name)
		st := ms.Status
		if st.ObservedGeneration != ms.Generation || st.Replicas != replicas || st.UpdatedReplicas != replicas ||
			st.AvailableReplicas != available || st.CurrentRevision != st.UpdateRevision {
			return false
		}
		pods := w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: name})
		for _, p := range pods {
			if p.DeletionTimestamp != nil {
				return false
			}
		}
		return len(pods) == int(replicas)*podsPerGroup
	}
}

// Every role replica with workers gets one headless Service named <ms>-<i>-<role>-<j>,
// owned by the ModelServing, publishing not-ready addresses and selecting exactly that
// replica's pods: the entry, whose ENTRY_ADDRESS <entry>.<service>.<ns>.svc its workers
// dial, and its workers, each with the Service as subdomain. A role without workers gets
// none. Scaling down removes the Services of the groups that go.
func TestHeadlessServicePerRoleReplicaWithWorkers(t *testing.T) {
	w := newWorld(t, 2)
	ms := w.apply(withWorkers("hs", 2))
	w.eventually("2 groups are available", 60*time.Second, w.settled("hs", 2, 2))

	want := []string{"hs-0-server-0", "hs-0-server-1", "hs-1-server-0", "hs-1-server-1"}
	assert.Equal(t, want, w.serviceNames("hs"), "one headless Service per server replica, none for the router")

	pods := w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "hs"})
	for _, name := range want {
		svc := &corev1.Service{}
		require.NoError(t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, svc))
		assert.Equal(t, corev1.ClusterIPNone, svc.Spec.ClusterIP, "Service %s is headless", name)
		assert.Equal(t, []string{corev1.ClusterIPNone}, svc.Spec.ClusterIPs, "Service %s has no virtual IP", name)
		assert.True(t, svc.Spec.PublishNotReadyAddresses, "Service %s publishes its pods before they are Ready", name)
		assert.True(t, metav1.IsControlledBy(svc, ms), "Service %s is owned by the ModelServing", name)

		entry := name + "-0"
		var selected []string
		for _, p := range pods {
			if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(p.Labels)) {
				selected = append(selected, p.Name)
			}
		}
		sort.Strings(selected)
		assert.Equal(t, []string{entry, name + "-1"}, selected, "Service %s selects its replica's entry and worker, nothing else", name)
		for _, podName := range selected {
			p := podByName(pods, podName)
			assert.Equal(t, name, p.Spec.Subdomain, "pod %s", podName)
			assert.Equal(t, podName, p.Spec.Hostname, "pod %s", podName)
			assert.Contains(t, p.Spec.Containers[0].Env, corev1.EnvVar{Name: workloadv1alpha1.EntryAddressEnv, Value: fmt.Sprintf("%s.%s.%s.svc", entry, name, w.ns)}, "pod %s", podName)
		}
	}
	for _, p := range pods {
		if p.Labels[workloadv1alpha1.RoleLabel] == "router" {
			assert.Empty(t, p.Spec.Subdomain, "pod %s of a role without workers has no Service", p.Name)
		}
	}

	// Scale down to 1: group 1 goes with its Services.
	w.change("hs", func(ms *workloadv1alpha1.ModelServing) { ms.Spec.Replicas = ptr.To[int32](1) })
	w.eventually("1 group is available", 60*time.Second, w.settled("hs", 1, 1))
	w.eventually("the Services of group 1 are gone", 30*time.Second, func() bool {
		return strings.Join(w.serviceNames("hs"), ",") == "hs-0-server-0,hs-0-server-1"
	})
}

func podByName(pods []corev1.Pod, name string) *corev1.Pod {
	for i := range pods {
		if pods[i].Name == name {
			return &pods[i]
		}
	}
	return &corev1.Pod{}
}

// serviceNames lists the Services of a ModelServing, sorted.
func (w *world) serviceNames(ms string) []string {
	w.t.Helper()
	var list corev1.ServiceList
	require.NoError(w.t, cl.List(w.ctx, &list, client.InNamespace(w.ns), client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: ms}))
	var out []string
	for _, s := range list.Items {
		if s.DeletionTimestamp == nil {
			out = append(out, s.Name)
		}
	}
	sort.Strings(out)
	return out
}

// One ControllerRevision per template: named <ms>-<hash>, owned by the ModelServing,
// holding the template, its hash in status and in every pod's revision label. Scaling
// (groups or a role's replicas) is no new template; an image change is, and the pods move
// to it; going back to the first template reuses its revision instead of making a third.
func TestControllerRevisionPerTemplate(t *testing.T) {
	w := newWorld(t, 2)
	ms := w.apply(withWorkers("rev", 1))
	w.eventually("the group is available", 60*time.Second, w.settled("rev", 1, 1))

	first := w.get("rev").Status.UpdateRevision
	require.NotEmpty(t, first)
	revs := w.revisions("rev")
	require.Len(t, revs, 1, "one ControllerRevision for one template")
	cr := revs[0]
	assert.Equal(t, "rev-"+first, cr.Name)
	assert.Equal(t, first, cr.Labels[workloadv1alpha1.RevisionLabel])
	assert.True(t, metav1.IsControlledBy(&cr, ms), "the ControllerRevision is owned by the ModelServing")
	var recorded workloadv1alpha1.ServingGroup
	require.NoError(t, json.Unmarshal(cr.Data.Raw, &recorded), "the revision holds the template")
	assert.Equal(t, "vllm", recorded.Roles[1].EntryTemplate.Spec.Containers[0].Image)
	w.assertPodsOn("rev", first)

	// Scaling is not a new template: 1 → 2 groups and server 2 → 3 replicas in one update.
	w.change("rev", func(ms *workloadv1alpha1.ModelServing) {
		ms.Spec.Replicas = ptr.To[int32](2)
		ms.Spec.Template.Roles[1].Replicas = ptr.To[int32](3)
	})
	w.eventually("2 groups of 7 pods are available", 60*time.Second, func() bool {
		ms := w.get("rev")
		return ms.Status.ObservedGeneration == ms.Generation && ms.Status.AvailableReplicas == 2 &&
			len(w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "rev"})) == 14
	})
	assert.Equal(t, first, w.get("rev").Status.UpdateRevision, "scaling made a new revision")
	assert.Len(t, w.revisions("rev"), 1, "scaling made a new ControllerRevision")
	w.assertPodsOn("rev", first)
	w.change("rev", func(ms *workloadv1alpha1.ModelServing) {
		ms.Spec.Replicas = ptr.To[int32](1)
		ms.Spec.Template.Roles[1].Replicas = ptr.To[int32](2)
	})
	w.eventually("back to 1 group", 60*time.Second, w.settled("rev", 1, 1))

	// A new image is a new template: a second revision, and the group rolls to it.
	w.change("rev", serverImage("vllm:v2"))
	w.eventually("the group runs the second template", 60*time.Second, func() bool {
		return w.settled("rev", 1, 1)() && w.get("rev").Status.UpdateRevision != first
	})
	second := w.get("rev").Status.UpdateRevision
	assert.Equal(t, []string{"rev-" + first, "rev-" + second}, revisionNames(w.revisions("rev")), "one ControllerRevision per template")
	w.assertPodsOn("rev", second)

	// The first template again: its revision is reused.
	w.change("rev", serverImage("vllm"))
	w.eventually("the group runs the first template again", 60*time.Second, func() bool {
		return w.settled("rev", 1, 1)() && w.get("rev").Status.UpdateRevision == first
	})
	assert.ElementsMatch(t, []string{"rev-" + first, "rev-" + second}, revisionNames(w.revisions("rev")), "going back made a third revision")
	w.assertPodsOn("rev", first)
}

// revisions lists a ModelServing's ControllerRevisions, oldest first.
func (w *world) revisions(ms string) []appsv1.ControllerRevision {
	w.t.Helper()
	var list appsv1.ControllerRevisionList
	require.NoError(w.t, cl.List(w.ctx, &list, client.InNamespace(w.ns), client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: ms}))
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Revision < list.Items[j].Revision })
	return list.Items
}

func revisionNames(revs []appsv1.ControllerRevision) []string {
	var out []string
	for _, r := range revs {
		out = append(out, r.Name)
	}
	return out
}

// assertPodsOn checks every pod of the ModelServing carries the revision's hash.
func (w *world) assertPodsOn(ms, revision string) {
	w.t.Helper()
	for _, p := range w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: ms}) {
		assert.Equal(w.t, revision, p.Labels[workloadv1alpha1.RevisionLabel], "revision label of pod %s", p.Name)
	}
}

// change applies edit to the latest ModelServing, retrying on conflicts: the controller's
// status writes move its resourceVersion too.
func (w *world) change(name string, edit func(*workloadv1alpha1.ModelServing)) {
	w.t.Helper()
	w.eventually("ModelServing "+name+" is updated", 30*time.Second, func() bool {
		ms := w.get(name)
		edit(ms)
		return cl.Update(w.ctx, ms) == nil
	})
}

// serverImage sets the image of the server role's entry template: a new template.
func serverImage(image string) func(*workloadv1alpha1.ModelServing) {
	return func(ms *workloadv1alpha1.ModelServing) {
		ms.Spec.Template.Roles[1].EntryTemplate.Spec.Containers[0].Image = image
	}
}

// The controller says what it decides, as events on the ModelServing (CreateGroup,
// RecreateRole, ScaledDown, RollingUpdate, each naming the group), and counts it on the
// metrics its manager serves: berth_modelserving_groups by state for this ModelServing,
// berth_modelserving_recoveries_total by decision, berth_modelserving_reconcile_seconds.
func TestEventsAndMetricsFollowDecisions(t *testing.T) {
	w := newWorld(t, 2)
	// The counters are the process's: other tests' decisions count too, so only growth is checked.
	recoveriesBefore, _ := metricValue(t, "berth_modelserving_recoveries_total", map[string]string{"decision": "RecreateRole"})
	reconcilesBefore, _ := metricValue(t, "berth_modelserving_reconcile_seconds", nil)
	groups := func(state string) (float64, bool) {
		return metricValue(t, "berth_modelserving_groups", map[string]string{"namespace": w.ns, "modelserving": "ev", "state": state})
	}

	w.apply(withWorkers("ev", 2))
	w.eventually("2 groups are available", 60*time.Second, w.settled("ev", 2, 2))
	w.expectEvent("ev", "Normal", "CreateGroup", "creating ServingGroup ev-0")
	w.expectEvent("ev", "Normal", "CreateGroup", "creating ServingGroup ev-1")
	w.expectMetric("berth_modelserving_groups{state=available}", 2, func() (float64, bool) { return groups("available") })
	w.expectMetric("berth_modelserving_groups{state=unavailable}", 0, func() (float64, bool) { return groups("unavailable") })

	// A failed worker: the default policy recreates its role replica.
	require.NoError(t, kubelet.FailPod(w.ctx, w.ns, "ev-1-server-0-1"))
	w.expectEvent("ev", "Warning", "RecreateRole", "ev-1")
	w.eventually("both groups are available again", 60*time.Second, w.settled("ev", 2, 2))
	recoveries, _ := metricValue(t, "berth_modelserving_recoveries_total", map[string]string{"decision": "RecreateRole"})
	assert.GreaterOrEqual(t, recoveries, recoveriesBefore+1, "berth_modelserving_recoveries_total{decision=RecreateRole} counts the recovery")

	w.change("ev", func(ms *workloadv1alpha1.ModelServing) { ms.Spec.Replicas = ptr.To[int32](1) })
	w.expectEvent("ev", "Normal", "ScaledDown", "deleting ServingGroup ev-1")
	w.eventually("1 group is available", 60*time.Second, w.settled("ev", 1, 1))
	w.expectMetric("berth_modelserving_groups{state=available}", 1, func() (float64, bool) { return groups("available") })

	w.change("ev", serverImage("vllm:v2"))
	w.expectEvent("ev", "Normal", "RollingUpdate", "deleting ServingGroup ev-0")
	w.eventually("the group runs the new template", 60*time.Second, w.settled("ev", 1, 1))
	w.expectMetric("berth_modelserving_groups{state=available}", 1, func() (float64, bool) { return groups("available") })
	w.expectMetric("berth_modelserving_groups{state=unavailable}", 0, func() (float64, bool) { return groups("unavailable") })
	reconciles, _ := metricValue(t, "berth_modelserving_reconcile_seconds", nil)
	assert.Greater(t, reconciles, reconcilesBefore, "berth_modelserving_reconcile_seconds observes every reconcile")
}

// expectEvent waits for an event on the ModelServing with the type and reason whose message
// contains the text, as `kubectl describe modelserving` lists them, and fails with every
// event seen otherwise.
func (w *world) expectEvent(ms, typ, reason, text string) {
	w.t.Helper()
	var seen []string
	ok := poll(w.ctx, 30*time.Second, func() bool {
		list, err := kube.CoreV1().Events(w.ns).List(w.ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=ModelServing,involvedObject.name=" + ms})
		if err != nil {
			return false
		}
		seen = seen[:0]
		for _, e := range list.Items {
			seen = append(seen, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, e.Message))
			if e.Type == typ && e.Reason == reason && strings.Contains(e.Message, text) &&
				(e.Source.Component == "berth-controller" || e.ReportingController == "berth-controller") {
				return true
			}
		}
		return false
	})
	assert.True(w.t, ok, "no %s event %s mentioning %q on ModelServing %s; events: %v", typ, reason, text, ms, seen)
}

// expectMetric waits for a series to exist with a value and fails with the last one read.
func (w *world) expectMetric(what string, want float64, read func() (float64, bool)) {
	w.t.Helper()
	var got float64
	var found bool
	ok := poll(w.ctx, 30*time.Second, func() bool { got, found = read(); return found && got == want })
	assert.True(w.t, ok, "%s = %v (series exists: %t), want %v", what, got, found, want)
}

func poll(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond(), nil }) == nil
}

// metricValue reads a series from the registry the controller manager serves on /metrics
// (the package's manager runs with its listener off): a counter's or gauge's value, a
// histogram's sample count; false when the series does not exist.
func metricValue(t *testing.T, name string, want map[string]string) (float64, bool) {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, want) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), true
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), true
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	have := map[string]string{}
	for _, l := range m.GetLabel() {
		have[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// `kubectl get ms` shows the counts the controller keeps: with room for one of two groups,
// DESIRED 2, CURRENT 2, UPDATED 2 and AVAILABLE 1; with a second node, AVAILABLE 2.
// (test/integration/api checks every kind's short name and columns; this is the live view.)
func TestKubectlGetModelServingShowsLiveCounts(t *testing.T) {
	w := newWorld(t, 1) // 8 GPUs: one group of 5
	w.apply(withWorkers("live", 2))
	w.eventually("1 of 2 groups is available", 60*time.Second, w.settled("live", 2, 1))
	assert.Equal(t, map[string]string{"Name": "live", "Desired": "2", "Current": "2", "Updated": "2", "Available": "1"}, w.getTable("modelservings", "live"))

	w.addNode("gpu-1")
	w.eventually("2 of 2 groups are available", 60*time.Second, w.settled("live", 2, 2))
	assert.Equal(t, map[string]string{"Name": "live", "Desired": "2", "Current": "2", "Updated": "2", "Available": "2"}, w.getTable("modelservings", "live"))
}

// getTable is one row of `kubectl get <resource>` in the world's namespace, as the
// apiserver builds it from the CRD's printer columns (the Table kubectl asks for), by
// column name; Age (always set) and the -o wide columns are left out.
func (w *world) getTable(resource, name string) map[string]string {
	w.t.Helper()
	raw, err := kube.CoreV1().RESTClient().Get().
		AbsPath("/apis", workloadv1alpha1.SchemeGroupVersion.Group, workloadv1alpha1.SchemeGroupVersion.Version, "namespaces", w.ns, resource).
		Param("fieldSelector", "metadata.name="+name).
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(w.ctx).Raw()
	require.NoError(w.t, err)
	var table metav1.Table
	require.NoError(w.t, json.Unmarshal(raw, &table))
	require.Len(w.t, table.Rows, 1, "kubectl get %s lists %s", resource, name)
	out := map[string]string{}
	for i, col := range table.ColumnDefinitions {
		if col.Priority > 0 || col.Name == "Age" {
			continue
		}
		switch v := table.Rows[0].Cells[i].(type) {
		case nil:
			out[col.Name] = "<none>"
		case float64:
			out[col.Name] = strconv.FormatFloat(v, 'f', -1, 64)
		default:
			out[col.Name] = fmt.Sprint(v)
		}
	}
	return out
}
