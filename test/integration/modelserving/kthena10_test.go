package modelserving

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/sim"
)

// Network tiers as berth-scheduler's shipped configuration reads them from node labels.
const (
	leafLabel  = "network.berth.sh/leaf"
	spineLabel = "network.berth.sh/spine"
)

// addLeafNode adds an 8-GPU node in a leaf of the test's own spine.
func (w *world) addLeafNode(name, leaf string) {
	_, err := kube.CoreV1().Nodes().Create(w.ctx, sim.NewNode(w.ns+"-"+name, sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: 8},
		map[string]string{"berth.test/owner": w.ns, leafLabel: w.ns + "-" + leaf, spineLabel: w.ns + "-spine"}), metav1.CreateOptions{})
	require.NoError(w.t, err)
}

// gpuPod is a pod template's spec asking for n GPUs.
func gpuPod(image string, n int) string {
	return fmt.Sprintf(`{spec: {containers: [{name: vllm, image: %s, resources: {requests: {nvidia.com/gpu: "%d"}, limits: {nvidia.com/gpu: "%d"}}}]}}`, image, n, n)
}

// Kthena 1.0's networkTopology: groupPolicy becomes the PodGroup's networkTopology and
// rolePolicy every role's subGroupPolicy entry's, and berth-scheduler places each decode
// replica (an entry and a worker of 6 GPUs, two nodes) inside one leaf.
func TestKthena10NetworkTopology(t *testing.T) {
	w := newWorld(t, 0)
	for i, leaf := range []string{"a", "a", "b", "b"} {
		w.addLeafNode(fmt.Sprintf("n%d", i), leaf)
	}
	w.apply(fmt.Sprintf(`
metadata: {name: topo}
spec:
  schedulerName: berth-scheduler
  replicas: 1
  template:
    networkTopology:
      groupPolicy: {mode: hard, highestTierName: spine}
      rolePolicy: {mode: hard, highestTierAllowed: 1}
    roles:
    - name: prefill
      replicas: 1
      entryTemplate: %s
    - name: decode
      replicas: 2
      workerReplicas: 1
      entryTemplate: %s
      workerTemplate: %s
`, gpuPod("vllm", 2), gpuPod("vllm", 6), gpuPod("vllm", 6)))
	w.eventually("the group is available", 60*time.Second, func() bool {
		st := w.get("topo").Status
		return st.AvailableReplicas == 1 && len(w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "topo"})) == 5
	})

	pg := &volcanov1beta1.PodGroup{}
	require.NoError(t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "topo-0"}, pg))
	require.NotNil(t, pg.Spec.NetworkTopology, "groupPolicy is the PodGroup's networkTopology")
	assert.Equal(t, volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.HardNetworkTopologyMode, HighestTierName: "spine"}, *pg.Spec.NetworkTopology)
	require.Len(t, pg.Spec.SubGroupPolicy, 2, "with a rolePolicy every role has a subgroup, as Kthena writes it")
	for i, role := range []string{"prefill", "decode"} {
		sg := pg.Spec.SubGroupPolicy[i]
		assert.Equal(t, role, sg.Name)
		require.NotNil(t, sg.NetworkTopology, "role %s carries the rolePolicy", role)
		assert.Equal(t, volcanov1beta1.HardNetworkTopologyMode, sg.NetworkTopology.Mode)
		assert.Equal(t, 1, *sg.NetworkTopology.HighestTierAllowed)
		assert.Equal(t, []string{workloadv1alpha1.RoleIDLabel}, sg.MatchLabelKeys)
	}
	assert.Equal(t, int32(2), *pg.Spec.SubGroupPolicy[1].SubGroupSize)

	leafOf := map[string]string{}
	nodes, err := kube.CoreV1().Nodes().List(w.ctx, metav1.ListOptions{LabelSelector: "berth.test/owner=" + w.ns})
	require.NoError(t, err)
	for _, n := range nodes.Items {
		leafOf[n.Name] = n.Labels[leafLabel]
	}
	for _, replica := range []string{"decode-0", "decode-1"} {
		pods := w.pods(map[string]string{workloadv1alpha1.GroupNameLabel: "topo-0", workloadv1alpha1.RoleIDLabel: replica})
		require.Len(t, pods, 2)
		for _, p := range pods {
			assert.Equal(t, corev1.PodRunning, p.Status.Phase, "pod %s", p.Name)
		}
		assert.NotEmpty(t, leafOf[pods[0].Spec.NodeName])
		assert.Equal(t, leafOf[pods[0].Spec.NodeName], leafOf[pods[1].Spec.NodeName],
			"%s is one leaf (rolePolicy highestTierAllowed 1): %s on %s, %s on %s", replica, pods[0].Name, pods[0].Spec.NodeName, pods[1].Name, pods[1].Spec.NodeName)
	}
}

// unitWatch follows a ModelServing's pods through a watch and records, per ServingGroup,
// the fewest role replicas of one role that were available (every pod present, not
// terminating, Ready) at any moment.
type unitWatch struct {
	mu     sync.Mutex
	pods   map[string]*corev1.Pod
	units  map[string][]string // "<group>/<role-id>" → pod names
	lowest map[string]int      // group → fewest available replicas of role
	seen   int
}

func (u *unitWatch) record() {
	avail := map[string]int{}
	for key, names := range u.units {
		group, _, _ := strings.Cut(key, "/")
		avail[group] += 0 // a group with none available counts too
		ok := true
		for _, n := range names {
			if p := u.pods[n]; p == nil || p.DeletionTimestamp != nil || !podIsReady(p) {
				ok = false
			}
		}
		if ok {
			avail[group]++
		}
	}
	for g, n := range avail {
		if low, ok := u.lowest[g]; !ok || n < low {
			u.lowest[g] = n
		}
	}
}

func podIsReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue && p.Status.Phase == corev1.PodRunning
		}
	}
	return false
}

func (w *world) watchUnits(ms, role string, groups, replicas, workers int) *unitWatch {
	u := &unitWatch{pods: map[string]*corev1.Pod{}, units: map[string][]string{}, lowest: map[string]int{}}
	for g := range groups {
		for j := range replicas {
			for k := 0; k <= workers; k++ {
				key := fmt.Sprintf("%s-%d/%s-%d", ms, g, role, j)
				u.units[key] = append(u.units[key], fmt.Sprintf("%s-%d-%s-%d-%d", ms, g, role, j, k))
			}
		}
	}
	list, err := kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{LabelSelector: workloadv1alpha1.ModelServingNameLabel + "=" + ms})
	require.NoError(w.t, err)
	for i := range list.Items {
		u.pods[list.Items[i].Name] = &list.Items[i]
	}
	u.record()
	watcher, err := kube.CoreV1().Pods(w.ns).Watch(w.ctx, metav1.ListOptions{
		LabelSelector: workloadv1alpha1.ModelServingNameLabel + "=" + ms, ResourceVersion: list.ResourceVersion})
	require.NoError(w.t, err)
	w.t.Cleanup(watcher.Stop)
	go func() {
		for ev := range watcher.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			u.mu.Lock()
			if ev.Type == watch.Deleted {
				delete(u.pods, p.Name)
			} else {
				u.pods[p.Name] = p
			}
			u.seen++
			u.record()
			u.mu.Unlock()
		}
	}()
	return u
}

// image of a running pod's first container, by name.
func (w *world) images(ms string) map[string]string {
	out := map[string]string{}
	for _, p := range w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: ms}) {
		if p.DeletionTimestamp == nil && podIsReady(&p) {
			out[p.Name] = p.Spec.Containers[0].Image
		}
	}
	return out
}

// A RoleRollingUpdate as Kthena 1.0 writes it: a new decode template replaces decode
// replicas one at a time (decode's maxUnavailable 1), never touches prefill, keeps
// ServingGroup 0 (partition "50%" of 2) and decode-0 of every group (decode's partition 1)
// on the old template; lifting both partitions finishes the rollout. A watch on the pods
// checks decode availability throughout.
func TestKthena10RoleRollingUpdate(t *testing.T) {
	w := newWorld(t, 3) // 2 groups × 7 GPUs; a role replica is replaced in place
	w.apply(fmt.Sprintf(`
metadata: {name: roles}
spec:
  schedulerName: berth-scheduler
  replicas: 2
  rolloutStrategy:
    type: RoleRollingUpdate
    rollingUpdateConfiguration: {partition: "50%%"}
  template:
    roles:
    - name: prefill
      replicas: 1
      entryTemplate: %s
    - name: decode
      replicas: 3
      maxUnavailable: 1
      partition: 1
      workerReplicas: 1
      entryTemplate: %s
      workerTemplate: %s
`, gpuPod("vllm:v1", 1), gpuPod("vllm:v1", 1), gpuPod("vllm:v1", 1)))
	const pods = 2 * (1 + 3*2)
	w.eventually("both groups are available", 60*time.Second, func() bool {
		st := w.get("roles").Status
		return st.AvailableReplicas == 2 && st.UpdatedReplicas == 2 && len(w.images("roles")) == pods
	})
	before := w.uids("roles")
	oldRevision := w.get("roles").Status.UpdateRevision
	units := w.watchUnits("roles", "decode", 2, 3, 1)

	w.change("roles", func(ms *workloadv1alpha1.ModelServing) {
		for _, tmpl := range []*workloadv1alpha1.PodTemplateSpec{&ms.Spec.Template.Roles[1].EntryTemplate, ms.Spec.Template.Roles[1].WorkerTemplate} {
			tmpl.Spec.Containers[0].Image = "vllm:v2"
		}
	})
	// Group 1's decode-1 and decode-2 move to v2; everything else stays.
	want := map[string]string{}
	for name := range before {
		want[name] = "vllm:v1"
	}
	for _, n := range []string{"roles-1-decode-1-0", "roles-1-decode-1-1", "roles-1-decode-2-0", "roles-1-decode-2-1"} {
		want[n] = "vllm:v2"
	}
	w.eventually("group 1's decode-1 and decode-2 run the new template, the rest the old", 90*time.Second, func() bool {
		return assert.ObjectsAreEqual(want, w.images("roles"))
	})
	st := w.get("roles").Status
	assert.NotEqual(t, oldRevision, st.UpdateRevision)
	assert.Equal(t, oldRevision, st.CurrentRevision, "groups below a partition are on the old revision")
	assert.Equal(t, int32(0), st.UpdatedReplicas, "group 0 is below the group partition, group 1 keeps decode-0")
	assert.Equal(t, int32(2), st.CurrentReplicas)
	cond := findCondition(st.Conditions, workloadv1alpha1.ModelServingUpdateInProgress)
	require.NotNil(t, cond)
	assert.Equal(t, metav1.ConditionTrue, cond.Status)
	now := w.uids("roles")
	for name, uid := range before {
		if want[name] == "vllm:v1" {
			assert.Equal(t, uid, now[name], "pod %s is below a partition or of an unchanged role: never replaced", name)
		}
	}
	w.expectEvent("roles", "Normal", "RoleRollingUpdate", "replacing role replica decode-2 of roles-1")

	// Lift both partitions: the rest of decode follows, prefill is still never replaced.
	w.change("roles", func(ms *workloadv1alpha1.ModelServing) {
		ms.Spec.RolloutStrategy.RollingUpdateConfiguration.Partition = nil
		ms.Spec.Template.Roles[1].Partition = nil
	})
	w.eventually("every decode replica runs the new template and both groups count as updated", 90*time.Second, func() bool {
		ms := w.get("roles")
		st := ms.Status
		if st.ObservedGeneration != ms.Generation || st.UpdatedReplicas != 2 || st.AvailableReplicas != 2 || st.CurrentRevision != st.UpdateRevision {
			return false
		}
		images := w.images("roles")
		if len(images) != pods {
			return false
		}
		for name, image := range images {
			if (image == "vllm:v2") != strings.Contains(name, "-decode-") {
				return false
			}
		}
		return true
	})
	now = w.uids("roles")
	for _, name := range []string{"roles-0-prefill-0-0", "roles-1-prefill-0-0"} {
		assert.Equal(t, before[name], now[name], "prefill's template never changed: %s was never replaced", name)
	}
	units.mu.Lock()
	defer units.mu.Unlock()
	assert.Greater(t, units.seen, 8, "the watch saw the rollout")
	assert.Equal(t, map[string]int{"roles-0": 2, "roles-1": 2}, units.lowest,
		"decode never had fewer than replicas − maxUnavailable = 2 replicas available in a group")
}

// lwsCRD is a minimal LeaderWorkerSet CRD: Berth needs none, but a ModelServing that a
// LeaderWorkerSet owns (as Kthena's LWS controller makes them) needs its owner to exist.
const lwsCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: leaderworkersets.leaderworkerset.x-k8s.io}
spec:
  group: leaderworkerset.x-k8s.io
  names: {kind: LeaderWorkerSet, listKind: LeaderWorkerSetList, plural: leaderworkersets, singular: leaderworkerset}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`

// Kthena 1.0's built-in plugins: lws-standard-labels gives the pods of a ModelServing a
// LeaderWorkerSet owns LeaderWorkerSet's labels; demo-pod-tweaks, scoped to the workers,
// sets their runtime class, an annotation and an environment variable.
func TestKthena10Plugins(t *testing.T) {
	w := newWorld(t, 1)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "lws.yaml"), []byte(lwsCRD), 0o600))
	require.NoError(t, cp.InstallCRDs(w.ctx, dir))
	lwsGVR := schema.GroupVersionResource{Group: "leaderworkerset.x-k8s.io", Version: "v1", Resource: "leaderworkersets"}
	lws, err := dynamic.NewForConfigOrDie(cp.RESTConfig()).Resource(lwsGVR).Namespace(w.ns).Create(w.ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet", "metadata": map[string]any{"name": "llama"}, "spec": map[string]any{}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	runtimeClass := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: w.ns + "-nvidia"}, Handler: "nvidia"}
	require.NoError(t, cl.Create(w.ctx, runtimeClass))
	t.Cleanup(func() { _ = cl.Delete(w.ctx, runtimeClass) })

	ms := &workloadv1alpha1.ModelServing{}
	require.NoError(t, yaml.UnmarshalStrict([]byte(fmt.Sprintf(`
metadata: {name: llama}
spec:
  schedulerName: berth-scheduler
  replicas: 2
  plugins:
  - name: lws-standard-labels
    type: BuiltIn
  - name: demo-pod-tweaks
    type: BuiltIn
    scope: {roles: [server], target: Worker}
    config:
      runtimeClassName: %s
      annotations: {example.com/tweaked: "true"}
      env: [{name: TWEAKED, value: "1"}]
  template:
    roles:
    - name: server
      replicas: 1
      workerReplicas: 1
      entryTemplate: %s
      workerTemplate: %s
`, runtimeClass.Name, gpuPod("vllm", 1), gpuPod("vllm", 1))), ms))
	ms.Namespace = w.ns
	ms.OwnerReferences = []metav1.OwnerReference{{APIVersion: "leaderworkerset.x-k8s.io/v1", Kind: "LeaderWorkerSet", Name: lws.GetName(), UID: lws.GetUID()}}
	require.NoError(t, cl.Create(w.ctx, ms))
	w.eventually("both groups are available", 60*time.Second, func() bool {
		return w.get("llama").Status.AvailableReplicas == 2 && len(w.images("llama")) == 4
	})

	for _, p := range w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "llama"}) {
		group, worker := 0, 0
		_, err := fmt.Sscanf(p.Name, "llama-%d-server-0-%d", &group, &worker)
		require.NoError(t, err, p.Name)
		key := sha1.Sum([]byte(fmt.Sprintf("llama-%d", group)))
		assert.Equal(t, map[string]string{
			"leaderworkerset.sigs.k8s.io/name":         "llama",
			"leaderworkerset.sigs.k8s.io/group-index":  fmt.Sprint(group),
			"leaderworkerset.sigs.k8s.io/worker-index": fmt.Sprint(worker),
			"leaderworkerset.sigs.k8s.io/group-key":    hex.EncodeToString(key[:]),
		}, lwsLabelsOf(p), "pod %s", p.Name)
		assert.Equal(t, corev1.PodRunning, p.Status.Phase, "pod %s", p.Name)
		tweaked := worker > 0
		assert.Equal(t, tweaked, p.Annotations["example.com/tweaked"] == "true", "pod %s: annotation only on workers", p.Name)
		assert.Equal(t, tweaked, p.Spec.RuntimeClassName != nil && *p.Spec.RuntimeClassName == runtimeClass.Name, "pod %s: runtime class only on workers", p.Name)
		assert.Equal(t, tweaked, envOf(&p)["TWEAKED"] == "1", "pod %s: env only on workers", p.Name)
	}
	cond := findCondition(w.get("llama").Status.Conditions, workloadv1alpha1.ModelServingPluginsAccepted)
	require.NotNil(t, cond)
	assert.Equal(t, metav1.ConditionTrue, cond.Status)
	assert.Contains(t, cond.Message, "lws-standard-labels, demo-pod-tweaks")
}

func lwsLabelsOf(p corev1.Pod) map[string]string {
	out := map[string]string{}
	for k, v := range p.Labels {
		if strings.HasPrefix(k, "leaderworkerset.sigs.k8s.io/") {
			out[k] = v
		}
	}
	return out
}

// A plugin the controller does not have stops pod creation: the PluginsAccepted condition
// and a Warning event name it. Removing it lets the ModelServing come up.
func TestKthena10UnknownPlugin(t *testing.T) {
	w := newWorld(t, 1)
	w.apply(fmt.Sprintf(`
metadata: {name: unknown}
spec:
  schedulerName: berth-scheduler
  plugins:
  - name: gpu-driver-injector
    type: BuiltIn
  template:
    roles:
    - name: server
      entryTemplate: %s
`, gpuPod("vllm", 1)))
	var cond *metav1.Condition
	w.eventually("the PluginsAccepted condition names the plugin", 30*time.Second, func() bool {
		ms := w.get("unknown")
		cond = meta.FindStatusCondition(ms.Status.Conditions, workloadv1alpha1.ModelServingPluginsAccepted)
		return ms.Status.ObservedGeneration == ms.Generation && cond != nil && cond.Status == metav1.ConditionFalse
	})
	assert.Equal(t, "UnknownPlugin", cond.Reason)
	assert.Contains(t, cond.Message, `spec.plugins[0] "gpu-driver-injector"`)
	t.Logf("condition as a user sees it: %s: %s", cond.Reason, cond.Message)
	w.expectEvent("unknown", "Warning", "UnknownPlugin", "gpu-driver-injector")
	assert.Empty(t, w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "unknown"}), "no pod is created without its plugins")

	w.change("unknown", func(ms *workloadv1alpha1.ModelServing) { ms.Spec.Plugins = nil })
	w.eventually("without the plugin the group comes up", 60*time.Second, func() bool {
		ms := w.get("unknown")
		return ms.Status.AvailableReplicas == 1 && meta.FindStatusCondition(ms.Status.Conditions, workloadv1alpha1.ModelServingPluginsAccepted) == nil
	})
}

// The scale subresource's selector finds exactly one pod per ServingGroup, as Kthena 1.0
// writes it, so an HPA sizing by the pods its selector finds gets the group count right.
// The test acts as the HPA does: it reads the scale, lists the pods, and writes a replica
// count computed from them.
func TestKthena10ScaleSelector(t *testing.T) {
	w := newWorld(t, 3)
	ms := w.apply(pd("hpa", "berth-scheduler", 2))
	w.eventually("2 groups are available", 60*time.Second, w.availableWith("hpa", 2))

	scale := &autoscalingv1.Scale{}
	require.NoError(t, cl.SubResource("scale").Get(w.ctx, ms, scale))
	assert.Equal(t, "modelserving.volcano.sh/entry=true,modelserving.volcano.sh/name=hpa,modelserving.volcano.sh/role-id=prefill-0,modelserving.volcano.sh/role=prefill",
		scale.Status.Selector)
	sel, err := labels.Parse(scale.Status.Selector)
	require.NoError(t, err)
	selected := func() []corev1.Pod {
		var list corev1.PodList
		require.NoError(t, cl.List(w.ctx, &list, client.InNamespace(w.ns), client.MatchingLabelsSelector{Selector: sel}))
		return list.Items
	}
	require.Len(t, selected(), int(scale.Status.Replicas), "one pod per ServingGroup")

	// The HPA's rule: desired = ceil(pods × usage / target), here at 150% of the target.
	desired := int32(math.Ceil(float64(len(selected())) * 1.5))
	require.Equal(t, int32(3), desired)
	scale.Spec.Replicas = desired
	require.NoError(t, cl.SubResource("scale").Update(w.ctx, w.get("hpa"), client.WithSubResourceBody(scale)))
	w.eventually("3 groups are available", 60*time.Second, w.availableWith("hpa", 3))
	require.NoError(t, cl.SubResource("scale").Get(w.ctx, w.get("hpa"), scale))
	assert.Equal(t, int32(3), scale.Status.Replicas)
	assert.Len(t, selected(), 3, "the selector follows the groups")
}
