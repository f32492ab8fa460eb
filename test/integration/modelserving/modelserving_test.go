package modelserving

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// pd is 1 prefill + 2 decode per group, decode with 1 worker: 5 pods of 1 GPU per group.
func pd(name, scheduler string, replicas int) string {
	return fmt.Sprintf(`
metadata: {name: %s}
spec:
  replicas: %d
  schedulerName: %s
  template:
    roles:
    - name: prefill
      replicas: 1
      entryTemplate:
        spec:
          containers: [{name: vllm, image: vllm, resources: {requests: {nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}}]
    - name: decode
      replicas: 2
      workerReplicas: 1
      entryTemplate:
        spec:
          containers: [{name: vllm, image: vllm, resources: {requests: {nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}}]
      workerTemplate:
        spec:
          containers: [{name: vllm, image: vllm, resources: {requests: {nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}}]
`, name, replicas, scheduler)
}

func (w *world) availableWith(name string, replicas int32) func() bool {
	return func() bool {
		ms := w.get(name)
		st := ms.Status
		return st.ObservedGeneration == ms.Generation && st.Replicas == replicas && st.AvailableReplicas == replicas &&
			st.UpdatedReplicas == replicas && len(w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: name})) == int(replicas)*5
	}
}

// 3 groups of 1 prefill + 2 decode (decode with 1 worker) reach Available with exact counts,
// pods named, labelled and wired as the contract says.
func TestGroupsReachAvailable(t *testing.T) {
	w := newWorld(t, 2)
	w.apply(pd("llm", "berth-scheduler", 3))
	w.eventually("3 groups are available", 60*time.Second, w.availableWith("llm", 3))

	ms := w.get("llm")
	cond := findCondition(ms.Status.Conditions, workloadv1alpha1.ModelServingAvailable)
	require.NotNil(t, cond)
	assert.Equal(t, "True", string(cond.Status))
	assert.Equal(t, "3/3 ServingGroups ready", cond.Message)

	pods := w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "llm"})
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
		assert.Equal(t, "berth-scheduler", p.Spec.SchedulerName)
		assert.NotEmpty(t, p.Spec.NodeName)
	}
	sort.Strings(names)
	assert.Contains(t, names, "llm-2-decode-1-1")
	assert.Contains(t, names, "llm-0-prefill-0-0")

	// berth-scheduler keeps each group's PodGroup status current as its pods start.
	w.eventually("the PodGroups report their running pods", 30*time.Second, func() bool {
		pg := &volcanov1beta1.PodGroup{}
		return cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "llm-2"}, pg) == nil &&
			pg.Status.Phase == volcanov1beta1.PodGroupRunning && pg.Status.Running == 5
	})

	worker := podNamed(pods, "llm-1-decode-0-1")
	require.NotNil(t, worker)
	assert.Equal(t, map[string]string{"GROUP_SIZE": "2", "ENTRY_ADDRESS": "llm-1-decode-0-0.llm-1-decode-0." + w.ns + ".svc", "WORKER_INDEX": "1"}, envOf(worker))
	assert.Equal(t, "decode-0", worker.Labels[workloadv1alpha1.RoleIDLabel])
	assert.Equal(t, "llm-1", worker.Annotations["scheduling.k8s.io/group-name"])
	assert.Equal(t, "decode-0", worker.Annotations["volcano.sh/task-spec"])
}

// Scaling through spec.replicas: 3 → 5 → 2, with exact counts at each step.
func TestScale(t *testing.T) {
	w := newWorld(t, 4)
	w.apply(pd("llm", "berth-scheduler", 3))
	w.eventually("3 groups are available", 60*time.Second, w.availableWith("llm", 3))

	// 3 → 5 through the scale subresource, as kubectl scale, HPA and KEDA do it.
	scale := &autoscalingv1.Scale{}
	require.NoError(t, cl.SubResource("scale").Get(w.ctx, w.get("llm"), scale))
	assert.Equal(t, int32(3), scale.Status.Replicas)
	assert.Contains(t, scale.Status.Selector, "modelserving.volcano.sh/name=llm")
	scale.Spec.Replicas = 5
	require.NoError(t, cl.SubResource("scale").Update(w.ctx, w.get("llm"), client.WithSubResourceBody(scale)))
	w.eventually("5 groups are available", 60*time.Second, w.availableWith("llm", 5))

	// 5 → 2 through the spec.
	ms := w.get("llm")
	ms.Spec.Replicas = ptr.To[int32](2)
	require.NoError(t, cl.Update(w.ctx, ms))
	w.eventually("2 groups are available", 60*time.Second, w.availableWith("llm", 2))
	// Scale-down removed the highest ordinals.
	groups := map[string]bool{}
	for _, p := range w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "llm"}) {
		groups[p.Labels[workloadv1alpha1.GroupNameLabel]] = true
	}
	assert.Equal(t, map[string]bool{"llm-0": true, "llm-1": true}, groups)
}

// schedulerName volcano yields one PodGroup per ServingGroup with exactly DESIGN.md's fields.
func TestVolcanoPodGroups(t *testing.T) {
	w := newWorld(t, 0)
	ms := w.apply(pd("vc", "volcano", 2))
	pg := &volcanov1beta1.PodGroup{}
	w.eventually("PodGroups exist", 30*time.Second, func() bool {
		return cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "vc-1"}, pg) == nil
	})
	assert.Equal(t, int32(5), pg.Spec.MinMember)
	assert.Equal(t, map[string]int32{"prefill-0": 1, "decode-0": 2, "decode-1": 2}, pg.Spec.MinTaskMember)
	require.NotNil(t, pg.Spec.MinResources)
	assert.Equal(t, "5", ptr.To((*pg.Spec.MinResources)[gpu]).String())
	require.Len(t, pg.Spec.SubGroupPolicy, 1)
	sg := pg.Spec.SubGroupPolicy[0]
	assert.Equal(t, "decode", sg.Name)
	assert.Equal(t, int32(2), *sg.SubGroupSize)
	assert.Equal(t, int32(0), *sg.MinSubGroups)
	assert.Equal(t, []string{workloadv1alpha1.RoleIDLabel}, sg.MatchLabelKeys)
	assert.True(t, metav1IsControlledBy(pg, ms), "the PodGroup is owned by the ModelServing")
	// Volcano is not running here: the group's pods name volcano and none is bound. The
	// controller creates the PodGroup before the pods, so wait for all five: over a short
	// (or empty) list the loop below would check nothing.
	var pods []corev1.Pod
	w.eventually("the 5 pods of vc-1 exist", 30*time.Second, func() bool {
		pods = w.pods(map[string]string{workloadv1alpha1.GroupNameLabel: "vc-1"})
		return len(pods) == 5
	})
	require.Len(t, pods, 5)
	for _, p := range pods {
		assert.Equal(t, "volcano", p.Spec.SchedulerName, "pod %s", p.Name)
		assert.Empty(t, p.Spec.NodeName, "pod %s is bound, but no scheduler here serves volcano", p.Name)
	}
}

// Delete a ModelServing and recreate it at once under the same name: it comes up without a
// stall, even though its old pods are still there (the garbage collector has not removed
// them yet).
func TestDeleteAndRecreate(t *testing.T) {
	w := newWorld(t, 2)
	w.apply(pd("again", "berth-scheduler", 1))
	w.eventually("the first one is available", 60*time.Second, w.availableWith("again", 1))
	require.NoError(t, cl.Delete(w.ctx, w.get("again")))
	second := w.apply(pd("again", "berth-scheduler", 1))
	w.eventually("the second one is available", 60*time.Second, func() bool {
		ms := w.get("again")
		if ms.UID != second.UID || ms.Status.AvailableReplicas != 1 {
			return false
		}
		for _, p := range w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "again"}) {
			if !metav1IsControlledBy(&p, ms) {
				return false
			}
		}
		return true
	})
}

func findCondition(conds []metav1Condition, typ string) *metav1Condition {
	for i := range conds {
		if conds[i].Type == typ {
			return &conds[i]
		}
	}
	return nil
}

func podNamed(pods []corev1.Pod, name string) *corev1.Pod {
	for i := range pods {
		if pods[i].Name == name {
			return &pods[i]
		}
	}
	return nil
}

func envOf(p *corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, e := range p.Spec.Containers[0].Env {
		out[e.Name] = e.Value
	}
	return out
}

// Scaling a role scales it inside every group, in place: decode 2 → 3 → 1 adds and removes
// decode replicas without replacing the other pods, and the PodGroups follow.
func TestScaleRole(t *testing.T) {
	w := newWorld(t, 2)
	w.apply(pd("roles", "berth-scheduler", 2))
	w.eventually("2 groups are available", 60*time.Second, w.availableWith("roles", 2))
	prefill := podNamed(w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "roles"}), "roles-0-prefill-0-0")
	require.NotNil(t, prefill)
	revision := w.get("roles").Status.UpdateRevision

	for _, decode := range []int32{3, 1} {
		ms := w.get("roles")
		ms.Spec.Template.Roles[1].Replicas = ptr.To(decode)
		require.NoError(t, cl.Update(w.ctx, ms))
		perGroup := 1 + 2*int(decode)
		w.eventually(fmt.Sprintf("decode has %d replicas in both groups", decode), 60*time.Second, func() bool {
			ms := w.get("roles")
			pods := w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "roles"})
			live := 0
			for _, p := range pods {
				if p.DeletionTimestamp == nil {
					live++
				}
			}
			return ms.Status.ObservedGeneration == ms.Generation && ms.Status.AvailableReplicas == 2 && live == 2*perGroup
		})
		pg := &volcanov1beta1.PodGroup{}
		require.NoError(t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "roles-1"}, pg))
		assert.Equal(t, int32(perGroup), pg.Spec.MinMember, "the PodGroup follows the role's replicas")
	}
	assert.Equal(t, revision, w.get("roles").Status.UpdateRevision, "scaling a role is not a new revision")
	after := podNamed(w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "roles"}), "roles-0-prefill-0-0")
	require.NotNil(t, after)
	assert.Equal(t, prefill.UID, after.UID, "the other roles' pods were not replaced")
}
