package workload

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

func gpuTemplate(n string) workloadv1alpha1.PodTemplateSpec {
	return workloadv1alpha1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "vllm", Image: "vllm",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse(n)}},
	}}}}
}

// 1 prefill (4 GPUs) + 3 decode replicas of an entry and 1 worker (8 GPUs each), of which
// the gang minimum counts 2.
func pdServing() *workloadv1alpha1.ModelServing {
	worker := gpuTemplate("8")
	return &workloadv1alpha1.ModelServing{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "qwen", UID: "uid-1"},
		Spec: workloadv1alpha1.ModelServingSpec{
			SchedulerName: "berth-scheduler",
			Template: workloadv1alpha1.ServingGroup{
				GangPolicy:      &workloadv1alpha1.GangPolicy{MinRoleReplicas: map[string]int32{"decode": 2}},
				NetworkTopology: &workloadv1alpha1.NetworkTopology{NetworkTopologySpec: volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.HardNetworkTopologyMode, HighestTierAllowed: ptr.To(1)}},
				Roles: []workloadv1alpha1.Role{
					{Name: "prefill", Replicas: ptr.To[int32](1), EntryTemplate: gpuTemplate("4")},
					{Name: "decode", Replicas: ptr.To[int32](3), EntryTemplate: gpuTemplate("8"), WorkerReplicas: 1, WorkerTemplate: &worker},
				},
			},
		},
	}
}

func TestBuildPodGroupFollowsTheContract(t *testing.T) {
	pg := BuildPodGroup(pdServing(), 2)
	assert.Equal(t, "qwen-2", pg.Name)
	assert.Equal(t, map[string]int32{"prefill-0": 1, "decode-0": 2, "decode-1": 2}, pg.Spec.MinTaskMember)
	assert.Equal(t, int32(5), pg.Spec.MinMember)
	require.NotNil(t, pg.Spec.MinResources)
	gpus := (*pg.Spec.MinResources)["nvidia.com/gpu"]
	assert.Equal(t, "36", gpus.String(), "4 + 2 replicas x (8 + 8)")
	require.Len(t, pg.Spec.SubGroupPolicy, 1)
	assert.Equal(t, int32(2), *pg.Spec.SubGroupPolicy[0].SubGroupSize)
	assert.Equal(t, []string{workloadv1alpha1.RoleIDLabel}, pg.Spec.SubGroupPolicy[0].MatchLabelKeys)
	assert.Equal(t, 1, *pg.Spec.NetworkTopology.HighestTierAllowed)
	require.Len(t, pg.OwnerReferences, 1)
	assert.Equal(t, "qwen", pg.OwnerReferences[0].Name)
	assert.True(t, *pg.OwnerReferences[0].Controller)
}

func TestBuildPodWiresWorkersToTheirEntry(t *testing.T) {
	ms := pdServing()
	pod := BuildPod(ms, "rev1", 2, &ms.Spec.Template.Roles[1], 1, 1)
	assert.Equal(t, "qwen-2-decode-1-1", pod.Name)
	assert.Equal(t, map[string]string{
		workloadv1alpha1.ModelServingNameLabel: "qwen",
		workloadv1alpha1.GroupNameLabel:        "qwen-2",
		workloadv1alpha1.RoleLabel:             "decode",
		workloadv1alpha1.RoleIDLabel:           "decode-1",
		workloadv1alpha1.RevisionLabel:         "rev1",
		workloadv1alpha1.RoleTemplateHashLabel: RoleTemplateHash(&ms.Spec.Template.Roles[1]),
	}, pod.Labels)
	assert.Equal(t, "qwen-2", pod.Annotations["scheduling.k8s.io/group-name"])
	assert.Equal(t, "decode-1", pod.Annotations["volcano.sh/task-spec"])
	assert.Equal(t, "berth-scheduler", pod.Spec.SchedulerName)
	assert.Equal(t, "qwen-2-decode-1", pod.Spec.Subdomain)
	env := map[string]string{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	assert.Equal(t, map[string]string{"GROUP_SIZE": "2", "ENTRY_ADDRESS": "qwen-2-decode-1-0.qwen-2-decode-1.ns.svc", "WORKER_INDEX": "1"}, env)

	entry := BuildPod(ms, "rev1", 2, &ms.Spec.Template.Roles[1], 1, 0)
	assert.Equal(t, "true", entry.Labels[workloadv1alpha1.EntryLabel])
}

// With the LeaderWorkerSet compatibility annotation (an llmaz Service's ModelServing), pods
// also get LWS's variables and labels; a variable the container defines itself is kept.
func TestBuildPodLeaderWorkerSetCompat(t *testing.T) {
	ms := pdServing()
	ms.Annotations = map[string]string{workloadv1alpha1.LeaderWorkerSetCompatAnnotation: "true"}
	role := &ms.Spec.Template.Roles[1]
	role.WorkerTemplate.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "LWS_WORKER_INDEX", ValueFrom: &corev1.EnvVarSource{
		FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"}}}}
	pod := BuildPod(ms, "rev1", 2, role, 1, 1)
	assert.Equal(t, "1", pod.Labels[workloadv1alpha1.LWSWorkerIndexLabel])
	assert.Equal(t, "2", pod.Labels[workloadv1alpha1.LWSGroupIndexLabel])
	env := map[string]corev1.EnvVar{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	assert.Equal(t, "qwen-2-decode-1-0.qwen-2-decode-1.ns.svc", env["LWS_LEADER_ADDRESS"].Value)
	assert.Equal(t, "2", env["LWS_GROUP_SIZE"].Value)
	assert.NotNil(t, env["LWS_WORKER_INDEX"].ValueFrom, "the container's own definition (from the label) is kept")
	assert.Equal(t, "1", env["WORKER_INDEX"].Value)

	ms.Annotations = nil
	pod = BuildPod(ms, "rev1", 2, role, 1, 1)
	assert.NotContains(t, pod.Labels, workloadv1alpha1.LWSWorkerIndexLabel, "only on request")
}

func TestNoPodGroupForTheDefaultScheduler(t *testing.T) {
	ms := pdServing()
	ms.Spec.SchedulerName = ""
	assert.False(t, needsPodGroup(ms))
	pod := BuildPod(ms, "rev1", 0, &ms.Spec.Template.Roles[0], 0, 0)
	assert.NotContains(t, pod.Annotations, "scheduling.k8s.io/group-name")
	assert.Empty(t, pod.Spec.SchedulerName)
}

func TestScaleDownRemovesNotReadyGroupsFirstThenHighestOrdinal(t *testing.T) {
	ms := pdServing()
	ready := func(i int) *servingGroup {
		g := &servingGroup{index: i, pods: map[string]*corev1.Pod{}}
		for n := 0; n < expectedPods(ms); n++ {
			g.pods[string(rune('a'+n))] = &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
		}
		return g
	}
	groups := map[int]*servingGroup{0: ready(0), 1: {index: 1, pods: map[string]*corev1.Pod{}}, 2: ready(2), 3: ready(3)}
	assert.Equal(t, []int{1, 3, 2, 0}, scaleDownOrder(ms, groups, deletionCosts(groups)))
	assert.Equal(t, []int{4, 5}, freeOrdinals(groups, 2))
}

// The routers publish a per-pod deletion cost (the ReplicaSet annotation): among Ready
// groups the cheapest to lose goes first, whatever its ordinal; a broken group still goes
// before any serving one, and equal costs fall back to the highest ordinal.
func TestScaleDownRemovesTheCheapestReadyGroup(t *testing.T) {
	ms := pdServing()
	group := func(i int, ready bool, costs ...string) *servingGroup {
		g := &servingGroup{index: i, pods: map[string]*corev1.Pod{}}
		for n := 0; n < expectedPods(ms); n++ {
			p := &corev1.Pod{}
			if ready {
				p.Status = corev1.PodStatus{Phase: corev1.PodRunning,
					Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
			}
			if n < len(costs) {
				p.Annotations = map[string]string{corev1.PodDeletionCost: costs[n]}
			}
			g.pods[string(rune('a'+n))] = p
		}
		return g
	}
	groups := map[int]*servingGroup{
		0: group(0, true, "3"),       // warm
		1: group(1, true),            // cold: no cost published
		2: group(2, true, "5", "4"),  // hot: the sum of its pods counts
		3: group(3, false, "100"),    // broken, however costly
		4: group(4, true, "garbage"), // unreadable counts 0, like absent
	}
	cost := deletionCosts(groups)
	assert.Equal(t, map[int]int64{0: 3, 1: 0, 2: 9, 3: 100, 4: 0}, cost)
	assert.Equal(t, []int{3, 4, 1, 0, 2}, scaleDownOrder(ms, groups, cost))
	assert.Equal(t, "not ready", scaleDownWhy(ms, groups, cost, 3, []int{0, 2}))
	assert.Equal(t, "lowest deletion cost 0 (kept: qwen-0 3, qwen-2 9)", scaleDownWhy(ms, groups, cost, 4, []int{0, 2}))

	// A negative cost (set by a user, as on a ReplicaSet's pods) goes before absent ones.
	groups[0] = group(0, true, "-1")
	assert.Equal(t, []int{3, 0, 4, 1, 2}, scaleDownOrder(ms, groups, deletionCosts(groups)))

	// Nobody publishes: today's rule, the highest ordinal.
	plain := map[int]*servingGroup{0: group(0, true), 1: group(1, true), 2: group(2, true)}
	assert.Equal(t, []int{2, 1, 0}, scaleDownOrder(ms, plain, deletionCosts(plain)))
	assert.Equal(t, "highest ordinal; no pod has a deletion cost", scaleDownWhy(ms, plain, deletionCosts(plain), 2, []int{0, 1}))
}

func TestRecoveryWaitsOutTheGracePeriod(t *testing.T) {
	ms := pdServing()
	ms.Spec.RecoveryPolicy = workloadv1alpha1.RoleRecreate
	ms.Spec.Template.RestartGracePeriodSeconds = ptr.To[int64](30)
	now := time.Now()
	failed := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: PodName("qwen", 0, "prefill", 0, 0)},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{FinishedAt: metav1.NewTime(now.Add(-10 * time.Second))}}}}}}
	g := &servingGroup{index: 0, pods: map[string]*corev1.Pod{failed.Name: failed}}

	plan := planRecovery(ms, g, groupUnits(ms, g), now)
	assert.Empty(t, plan.deletions, "inside the grace period nothing is recreated")
	assert.InDelta(t, 20*time.Second, plan.wait, float64(time.Second))

	plan = planRecovery(ms, g, groupUnits(ms, g), now.Add(25*time.Second))
	require.Len(t, plan.deletions, 1)
	assert.Equal(t, "RecreateRole", plan.deletions[0].reason)
	assert.Contains(t, plan.deletions[0].message, "pod qwen-0-prefill-0-0 failed")
}

func TestRolloutBudgetResolvesPercentages(t *testing.T) {
	ms := pdServing()
	ms.Spec.Replicas = ptr.To[int32](10)
	ms.Spec.RolloutStrategy = &workloadv1alpha1.RolloutStrategy{RollingUpdateConfiguration: &workloadv1alpha1.RollingUpdateConfiguration{
		MaxUnavailable: ptr.To(intstr.FromString("25%")), // rounds down: 2
		MaxSurge:       ptr.To(intstr.FromString("15%")), // rounds up: 2
		Partition:      ptr.To(intstr.FromInt32(3)),
	}}
	assert.Equal(t, rolloutBudget{maxUnavailable: 2, maxSurge: 2, partition: 3}, budgetFor(ms))
	ms.Spec.RolloutStrategy.RollingUpdateConfiguration.Partition = ptr.To(intstr.FromString("25%"))
	assert.Equal(t, 3, budgetFor(ms).partition, "a percentage partition (Kthena 1.0) rounds up: 2.5 → 3")

	ms.Spec.RolloutStrategy.RollingUpdateConfiguration.MaxUnavailable = ptr.To(intstr.FromString("5%")) // 0
	ms.Spec.RolloutStrategy.RollingUpdateConfiguration.MaxSurge = ptr.To(intstr.FromInt32(0))
	assert.Equal(t, 1, budgetFor(ms).maxUnavailable, "a budget that rounds to 0/0 still makes progress")
}

func TestRolloutStepKeepsAvailability(t *testing.T) {
	ms := pdServing()
	ms.Spec.Replicas = ptr.To[int32](4)
	readyGroup := func(i int, rev string) *servingGroup {
		g := &servingGroup{index: i, pods: map[string]*corev1.Pod{}}
		for n := 0; n < expectedPods(ms); n++ {
			g.pods[fmt.Sprint(n)] = &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{workloadv1alpha1.RevisionLabel: rev}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning,
					Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
		}
		return g
	}
	groups := map[int]*servingGroup{0: readyGroup(0, "old"), 1: readyGroup(1, "old"), 2: readyGroup(2, "old"), 3: readyGroup(3, "old")}
	remove, allowed := rolloutStep(ms, groups, "new", rolloutBudget{maxUnavailable: 1, maxSurge: 1, partition: 1})
	assert.Equal(t, []int{3}, remove, "one ready group at a time, highest ordinal first, never below the partition")
	assert.Equal(t, 5, allowed, "one surge group while old ones remain")

	groups[3] = readyGroup(3, "new")
	groups[1].pods["0"].Status.Phase = corev1.PodFailed
	remove, _ = rolloutStep(ms, groups, "new", rolloutBudget{maxUnavailable: 1, partition: 1})
	assert.Equal(t, []int{1}, remove, "a broken old group goes first, and uses up the budget")
}
