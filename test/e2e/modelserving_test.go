package e2e

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// serving is a ModelServing of `replicas` groups of one role "server" with an entry pod and
// one worker, each pod holding one GPU: 2 pods and 2 GPUs per group.
func serving(name string, replicas int) *workloadv1alpha1.ModelServing {
	pod := func() string {
		return fmt.Sprintf(`
        spec:
          terminationGracePeriodSeconds: 1
          containers:
          - name: engine
            image: %s
            imagePullPolicy: IfNotPresent
            resources:
              requests: {cpu: 10m, memory: 16Mi, nvidia.com/gpu: "1"}
              limits: {nvidia.com/gpu: "1"}`, image)
	}
	manifest := fmt.Sprintf(`
metadata: {name: %s}
spec:
  replicas: %d
  schedulerName: %s
  template:
    roles:
    - name: server
      replicas: 1
      workerReplicas: 1
      entryTemplate:%s
      workerTemplate:%s
`, name, replicas, schedulerName, pod(), pod())
	ms := &workloadv1alpha1.ModelServing{}
	if err := yaml.UnmarshalStrict([]byte(manifest), ms); err != nil {
		panic(fmt.Sprintf("test manifest: %v\n%s", err, manifest))
	}
	return ms
}

const podsPerGroup = 2

func (e *env) serving(name string) (*workloadv1alpha1.ModelServing, error) {
	ms := &workloadv1alpha1.ModelServing{}
	return ms, cl.Get(e.ctx, client.ObjectKey{Namespace: e.ns, Name: name}, ms)
}

// available: the status has caught up with the spec, every one of `replicas` groups is
// ready on the update revision, and exactly their pods exist (none still terminating).
func (e *env) available(name string, replicas int32) func() error {
	return func() error {
		ms, err := e.serving(name)
		if err != nil {
			return err
		}
		st := ms.Status
		if st.ObservedGeneration != ms.Generation || st.Replicas != replicas || st.AvailableReplicas != replicas || st.UpdatedReplicas != replicas {
			return fmt.Errorf("generation=%d observed=%d replicas=%d available=%d updated=%d, want %d",
				ms.Generation, st.ObservedGeneration, st.Replicas, st.AvailableReplicas, st.UpdatedReplicas, replicas)
		}
		pods := e.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: name})
		if len(pods) != int(replicas)*podsPerGroup {
			return fmt.Errorf("%d pods, want %d", len(pods), int(replicas)*podsPerGroup)
		}
		for _, p := range pods {
			if !podReady(&p) {
				return fmt.Errorf("pod %s is %s on %q, not ready", p.Name, p.Status.Phase, p.Spec.NodeName)
			}
		}
		return nil
	}
}

// A ModelServing of 2 groups × (entry + worker) becomes Available on berth-scheduler: pods
// named, labelled, annotated and wired as the contract says, a headless Service whose
// EndpointSlice publishes the entry pod's hostname (what makes ENTRY_ADDRESS resolve), and
// one PodGroup per group, owned by the ModelServing and kept current by the scheduler.
func TestModelServingBecomesAvailable(t *testing.T) {
	e := newEnv(t)
	e.fakeGPUs(e.workers(2)...)
	ms := serving("llm", 2)
	e.create(ms)
	e.eventually("2 groups are available", 5*time.Minute, e.available("llm", 2))

	ms, err := e.serving("llm")
	require.NoError(t, err)
	avail := findCondition(ms.Status.Conditions, workloadv1alpha1.ModelServingAvailable)
	require.NotNil(t, avail)
	assert.Equal(t, metav1.ConditionTrue, avail.Status)
	assert.Equal(t, "2/2 ServingGroups ready", avail.Message)
	// Kthena 1.0's scale selector: one pod per ServingGroup (the first role replica's entry
	// pod), so an HPA counts groups.
	assert.Equal(t, "modelserving.volcano.sh/entry=true,modelserving.volcano.sh/name=llm,modelserving.volcano.sh/role-id=server-0,modelserving.volcano.sh/role=server", ms.Status.LabelSelector)

	pods := e.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "llm"})
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{"llm-0-server-0-0", "llm-0-server-0-1", "llm-1-server-0-0", "llm-1-server-0-1"}, names)
	for _, p := range pods {
		group := p.Labels[workloadv1alpha1.GroupNameLabel]
		k := p.Name[len(p.Name)-1:]
		entry := group + "-server-0-0"
		svc := group + "-server-0"
		assert.Equal(t, schedulerName, p.Spec.SchedulerName, p.Name)
		assert.True(t, metav1.IsControlledBy(&p, ms), "pod %s is owned by the ModelServing", p.Name)
		assert.Equal(t, map[string]string{
			workloadv1alpha1.ModelServingNameLabel: "llm",
			workloadv1alpha1.GroupNameLabel:        strings.TrimSuffix(p.Name, "-server-0-"+k),
			workloadv1alpha1.RoleLabel:             "server",
			workloadv1alpha1.RoleIDLabel:           "server-0",
			workloadv1alpha1.RevisionLabel:         ms.Status.UpdateRevision,
		}, without(p.Labels, workloadv1alpha1.EntryLabel, workloadv1alpha1.RoleTemplateHashLabel), p.Name)
		assert.NotEmpty(t, p.Labels[workloadv1alpha1.RoleTemplateHashLabel], "%s: the role template's hash (Kthena's RoleRollingUpdate)", p.Name)
		if k == "0" {
			assert.Equal(t, "true", p.Labels[workloadv1alpha1.EntryLabel], p.Name)
		} else {
			assert.NotContains(t, p.Labels, workloadv1alpha1.EntryLabel, p.Name)
		}
		assert.Equal(t, group, p.Annotations[volcanov1beta1.KubeGroupNameAnnotationKey], p.Name)
		assert.Equal(t, "server-0", p.Annotations[taskSpecAnnotation], p.Name)
		assert.Equal(t, map[string]string{
			workloadv1alpha1.GroupSizeEnv:    "2",
			workloadv1alpha1.EntryAddressEnv: fmt.Sprintf("%s.%s.%s.svc", entry, svc, e.ns),
			workloadv1alpha1.WorkerIndexEnv:  k,
		}, envOf(&p.Spec.Containers[0]), p.Name)
		assert.Equal(t, svc, p.Spec.Subdomain, p.Name)
		assert.Equal(t, p.Name, p.Spec.Hostname, p.Name)
	}

	for _, group := range []string{"llm-0", "llm-1"} {
		svc := &corev1.Service{}
		require.NoError(t, cl.Get(e.ctx, client.ObjectKey{Namespace: e.ns, Name: group + "-server-0"}, svc))
		assert.Equal(t, corev1.ClusterIPNone, svc.Spec.ClusterIP)
		entry := group + "-server-0-0"
		if onSandbox {
			// The sandbox's pods have loopback IPs (their simulated engines listen there),
			// which EndpointSlices refuse, so no EndpointSlice controller runs there: check
			// what the slice would be built from, the Service selecting the entry pod.
			pod, err := kube.CoreV1().Pods(e.ns).Get(e.ctx, entry, metav1.GetOptions{})
			require.NoError(t, err)
			assert.True(t, labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)), "Service %s selects %s", svc.Name, entry)
		} else {
			e.eventually("the EndpointSlice of "+svc.Name+" publishes the entry pod's hostname", 2*time.Minute, func() error {
				var slices discoveryv1.EndpointSliceList
				if err := cl.List(e.ctx, &slices, client.InNamespace(e.ns), client.MatchingLabels{discoveryv1.LabelServiceName: svc.Name}); err != nil {
					return err
				}
				for _, s := range slices.Items {
					for _, ep := range s.Endpoints {
						if ep.TargetRef != nil && ep.TargetRef.Name == entry && ptr.Deref(ep.Hostname, "") == entry {
							return nil
						}
					}
				}
				return fmt.Errorf("no endpoint with hostname %s in %d slices", entry, len(slices.Items))
			})
		}

		pg, err := e.podGroup(group)
		require.NoError(t, err, "PodGroup %s", group)
		assert.True(t, metav1.IsControlledBy(pg, ms), "PodGroup %s is owned by the ModelServing", group)
		assert.Equal(t, int32(2), pg.Spec.MinMember)
		assert.Equal(t, map[string]int32{"server-0": 2}, pg.Spec.MinTaskMember)
		require.NotNil(t, pg.Spec.MinResources)
		assert.Equal(t, "2", ptr.To((*pg.Spec.MinResources)[gpu]).String())
		require.Len(t, pg.Spec.SubGroupPolicy, 1)
		assert.Equal(t, int32(2), ptr.Deref(pg.Spec.SubGroupPolicy[0].SubGroupSize, 0))
		assert.Equal(t, []string{workloadv1alpha1.RoleIDLabel}, pg.Spec.SubGroupPolicy[0].MatchLabelKeys)
		e.eventually("PodGroup "+group+" reports its running pods", 2*time.Minute, func() error {
			pg, err := e.podGroup(group)
			if err != nil {
				return err
			}
			if pg.Status.Phase != volcanov1beta1.PodGroupRunning || pg.Status.Running != podsPerGroup {
				return fmt.Errorf("phase=%s running=%d", pg.Status.Phase, pg.Status.Running)
			}
			return nil
		})
	}
}

// Scaling: 1 → 3 through the scale subresource (as kubectl scale, HPA and KEDA do), then
// 3 → 1 through the spec. Scale-down removes the highest ordinals with their PodGroups and
// Services, and leaves group 0 untouched.
func TestModelServingScales(t *testing.T) {
	e := newEnv(t)
	e.fakeGPUs(e.workers(2)...)
	e.create(serving("scale", 1))
	e.eventually("1 group is available", 5*time.Minute, e.available("scale", 1))
	first := e.uids("scale")

	ms, err := e.serving("scale")
	require.NoError(t, err)
	sc := &autoscalingv1.Scale{}
	require.NoError(t, cl.SubResource("scale").Get(e.ctx, ms, sc))
	assert.Equal(t, int32(1), sc.Status.Replicas)
	assert.Contains(t, sc.Status.Selector, "modelserving.volcano.sh/name=scale")
	sc.Spec.Replicas = 3
	require.NoError(t, cl.SubResource("scale").Update(e.ctx, ms, client.WithSubResourceBody(sc)))
	e.eventually("3 groups are available", 5*time.Minute, e.available("scale", 3))
	for _, group := range []string{"scale-0", "scale-1", "scale-2"} {
		_, err := e.podGroup(group)
		assert.NoError(t, err, "PodGroup %s", group)
	}

	e.update("scale", func(ms *workloadv1alpha1.ModelServing) { ms.Spec.Replicas = ptr.To[int32](1) })
	e.eventually("1 group is available again", 5*time.Minute, e.available("scale", 1))
	e.eventually("the PodGroups and Services of groups 1 and 2 are gone", 2*time.Minute, func() error {
		for _, group := range []string{"scale-1", "scale-2"} {
			if _, err := e.podGroup(group); !apierrors.IsNotFound(err) {
				return fmt.Errorf("PodGroup %s: %v", group, err)
			}
			err := cl.Get(e.ctx, client.ObjectKey{Namespace: e.ns, Name: group + "-server-0"}, &corev1.Service{})
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("Service %s-server-0: %v", group, err)
			}
		}
		return nil
	})
	assert.Equal(t, first, e.uids("scale"), "group 0's pods were not replaced")
}

// A rolling update (an env var added to both templates) ends with every pod on the new
// revision and the status saying so; availability never drops below replicas −
// maxUnavailable (2 − 1) on the way, and the status counts add up at every step.
func TestModelServingRollingUpdate(t *testing.T) {
	e := newEnv(t)
	e.fakeGPUs(e.workers(2)...)
	e.create(serving("roll", 2))
	e.eventually("2 groups are available", 5*time.Minute, e.available("roll", 2))
	ms, err := e.serving("roll")
	require.NoError(t, err)
	oldRevision := ms.Status.UpdateRevision

	watcher, err := cl.Watch(e.ctx, &workloadv1alpha1.ModelServingList{}, client.InNamespace(e.ns))
	require.NoError(t, err)
	defer watcher.Stop()
	var mu sync.Mutex
	lowest := int32(2)
	var inexact []string
	seen := 0
	go func() {
		for ev := range watcher.ResultChan() {
			ms, ok := ev.Object.(*workloadv1alpha1.ModelServing)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			mu.Lock()
			seen++
			st := ms.Status
			lowest = min(lowest, st.AvailableReplicas)
			if st.CurrentRevision != st.UpdateRevision && st.CurrentReplicas+st.UpdatedReplicas != st.Replicas {
				inexact = append(inexact, fmt.Sprintf("replicas=%d current=%d updated=%d", st.Replicas, st.CurrentReplicas, st.UpdatedReplicas))
			}
			mu.Unlock()
		}
	}()

	version := corev1.EnvVar{Name: "BERTH_E2E_TEMPLATE", Value: "v2"}
	e.update("roll", func(ms *workloadv1alpha1.ModelServing) {
		r := &ms.Spec.Template.Roles[0]
		r.EntryTemplate.Spec.Containers[0].Env = append(r.EntryTemplate.Spec.Containers[0].Env, version)
		r.WorkerTemplate.Spec.Containers[0].Env = append(r.WorkerTemplate.Spec.Containers[0].Env, version)
	})
	e.eventually("both groups run the new revision", 5*time.Minute, func() error {
		if err := e.available("roll", 2)(); err != nil {
			return err
		}
		ms, err := e.serving("roll")
		if err != nil {
			return err
		}
		st := ms.Status
		if st.UpdateRevision == oldRevision || st.CurrentRevision != st.UpdateRevision || st.CurrentReplicas != 2 {
			return fmt.Errorf("current=%s (%d) update=%s, old=%s", st.CurrentRevision, st.CurrentReplicas, st.UpdateRevision, oldRevision)
		}
		for _, p := range e.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "roll"}) {
			if rev := p.Labels[workloadv1alpha1.RevisionLabel]; rev != st.UpdateRevision {
				return fmt.Errorf("pod %s is on revision %s", p.Name, rev)
			}
		}
		return nil
	})

	ms, err = e.serving("roll")
	require.NoError(t, err)
	newRevision := ms.Status.UpdateRevision
	upToDate := findCondition(ms.Status.Conditions, workloadv1alpha1.ModelServingUpdateInProgress)
	require.NotNil(t, upToDate)
	assert.Equal(t, metav1.ConditionFalse, upToDate.Status)
	assert.Equal(t, "UpToDate", upToDate.Reason)
	for _, p := range e.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "roll"}) {
		assert.Equal(t, "v2", envOf(&p.Spec.Containers[0])[version.Name], "pod %s runs the new template", p.Name)
	}
	for _, rev := range []string{oldRevision, newRevision} {
		cr := &appsv1.ControllerRevision{}
		assert.NoError(t, cl.Get(e.ctx, client.ObjectKey{Namespace: e.ns, Name: "roll-" + rev}, cr), "ControllerRevision of %s", rev)
	}

	mu.Lock()
	defer mu.Unlock()
	assert.Greater(t, seen, 2, "the watch saw the rollout")
	assert.GreaterOrEqual(t, lowest, int32(1), "availability dropped below replicas - maxUnavailable")
	assert.Empty(t, inexact, "status counts that do not add up")
}

// Deleting an entry pod (RoleRecreate, the default) recreates its role replica, entry and
// worker, under the same names; the other group is untouched and the ModelServing is
// Available again, with an event that says why.
func TestModelServingRecoversDeletedEntryPod(t *testing.T) {
	e := newEnv(t)
	e.fakeGPUs(e.workers(2)...)
	e.create(serving("heal", 2))
	e.eventually("2 groups are available", 5*time.Minute, e.available("heal", 2))
	before := e.uids("heal")

	require.NoError(t, kube.CoreV1().Pods(e.ns).Delete(e.ctx, "heal-0-server-0-0", metav1.DeleteOptions{}))
	e.eventually("the role replica is recreated and both groups are available", 5*time.Minute, func() error {
		if err := e.available("heal", 2)(); err != nil {
			return err
		}
		after := e.uids("heal")
		for _, name := range []string{"heal-0-server-0-0", "heal-0-server-0-1"} {
			if after[name] == "" || after[name] == before[name] {
				return fmt.Errorf("pod %s not recreated yet", name)
			}
		}
		return nil
	})
	after := e.uids("heal")
	for _, name := range []string{"heal-1-server-0-0", "heal-1-server-0-1"} {
		assert.Equal(t, before[name], after[name], "pod %s of the other group was not replaced", name)
	}
	events, err := kube.CoreV1().Events(e.ns).List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=heal"})
	require.NoError(t, err)
	var reasons []string
	for _, ev := range events.Items {
		reasons = append(reasons, ev.Reason+": "+ev.Message)
	}
	sort.Strings(reasons)
	assert.True(t, containsPrefix(reasons, "RecreateRole: recreating role replica server-0 of heal-0"), "events: %v", reasons)
	_, err = e.podGroup("heal-0")
	assert.NoError(t, err, "the group keeps its PodGroup")
}

// update applies change to the latest ModelServing, retrying on conflicts (the controller
// writes its status concurrently).
func (e *env) update(name string, change func(*workloadv1alpha1.ModelServing)) {
	e.t.Helper()
	e.eventually("update ModelServing "+name, time.Minute, func() error {
		ms, err := e.serving(name)
		if err != nil {
			return err
		}
		change(ms)
		return cl.Update(e.ctx, ms)
	})
}

// uids maps the ModelServing's live pods to their UIDs.
func (e *env) uids(name string) map[string]types.UID {
	out := map[string]types.UID{}
	for _, p := range e.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: name}) {
		if p.DeletionTimestamp == nil {
			out[p.Name] = p.UID
		}
	}
	return out
}

func findCondition(conds []metav1.Condition, typ string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

func envOf(c *corev1.Container) map[string]string {
	out := map[string]string{}
	for _, e := range c.Env {
		out[e.Name] = e.Value
	}
	return out
}

func without(m map[string]string, keys ...string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if !slices.Contains(keys, k) {
			out[k] = v
		}
	}
	return out
}

func containsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}
