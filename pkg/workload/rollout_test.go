package workload

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// roleGroup is group i of ms with every pod present and ready, built from role templates
// (role name → the role as it was when its pods were created) under revision rev.
func roleGroup(ms *workloadv1alpha1.ModelServing, i int, rev string, built map[string]*workloadv1alpha1.Role) *servingGroup {
	g := &servingGroup{index: i, pods: map[string]*corev1.Pod{}}
	for ri := range ms.Spec.Template.Roles {
		r := &ms.Spec.Template.Roles[ri]
		from := r
		if b, ok := built[r.Name]; ok {
			from = b
		}
		for j := 0; j < roleReplicas(r); j++ {
			for k := 0; k <= int(r.WorkerReplicas); k++ {
				p := BuildPod(ms, rev, i, from, j, k)
				p.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
				g.pods[p.Name] = p
			}
		}
	}
	return g
}

func replaced(reps []roleReplacement) []string {
	var out []string
	for _, r := range reps {
		out = append(out, workloadv1alpha1.ServingGroupName("qwen", r.group)+"/"+workloadv1alpha1.RoleReplicaName(r.unit.role.Name, r.unit.replica))
	}
	return out
}

// A RoleRollingUpdate replaces only the role whose template changed, within its
// maxUnavailable, above its partition, in every group above the group partition.
func TestRoleRolloutStep(t *testing.T) {
	ms := pdServing() // prefill ×1, decode ×3 (each an entry and a worker)
	ms.Spec.Replicas = ptr.To[int32](3)
	old := ms.Spec.Template.Roles[1].DeepCopy()
	ms.Spec.Template.Roles[1].EntryTemplate.Spec.Containers[0].Image = "vllm:v2"
	ms.Spec.Template.Roles[1].MaxUnavailable = ptr.To(intstr.FromInt32(1))
	ms.Spec.Template.Roles[1].Partition = ptr.To(intstr.FromInt32(1))
	ms.Spec.RolloutStrategy = &workloadv1alpha1.RolloutStrategy{Type: workloadv1alpha1.RoleRollingUpdate,
		RollingUpdateConfiguration: &workloadv1alpha1.RollingUpdateConfiguration{Partition: ptr.To(intstr.FromString("34%"))}} // 1.02 → 2
	groups := map[int]*servingGroup{}
	for i := range 3 {
		groups[i] = roleGroup(ms, i, "r1", map[string]*workloadv1alpha1.Role{"decode": old})
	}

	assert.Equal(t, []string{"qwen-2/decode-2"}, replaced(roleRolloutStep(ms, groups, "r2")),
		"groups 0 and 1 are below the group partition, decode-0 below the role's, one decode at a time, prefill untouched")
	remove, allowed := rolloutStep(ms, groups, "r2", budgetFor(ms))
	assert.Empty(t, remove, "no ServingGroup is replaced whole")
	assert.Equal(t, 3, allowed)

	// decode-2 came back from the new template; decode-1 goes next.
	for _, p := range roleGroup(ms, 2, "r2", nil).pods {
		if p.Labels[workloadv1alpha1.RoleIDLabel] == "decode-2" {
			groups[2].pods[p.Name] = p
		}
	}
	assert.Equal(t, []string{"qwen-2/decode-1"}, replaced(roleRolloutStep(ms, groups, "r2")))

	// A replica that is not ready goes at once: it costs no availability.
	groups[2].pods["qwen-2-decode-1-1"].Status.Phase = corev1.PodFailed
	assert.Equal(t, []string{"qwen-2/decode-1"}, replaced(roleRolloutStep(ms, groups, "r2")))

	// Without maxUnavailable every outdated replica above the partition goes at once.
	ms.Spec.Template.Roles[1].MaxUnavailable = nil
	ms.Spec.Template.Roles[1].Partition = nil
	ms.Spec.RolloutStrategy.RollingUpdateConfiguration.Partition = nil
	groups[2].pods["qwen-2-decode-1-1"].Status.Phase = corev1.PodRunning
	assert.Equal(t, []string{"qwen-0/decode-2", "qwen-0/decode-1", "qwen-0/decode-0", "qwen-1/decode-2", "qwen-1/decode-1", "qwen-1/decode-0",
		"qwen-2/decode-1", "qwen-2/decode-0"}, replaced(roleRolloutStep(ms, groups, "r2")))

	// The status counts a group updated once every role is on its current template.
	assert.False(t, groups[2].rolesCurrent(roleHashes(ms), "r2"))
	assert.True(t, roleGroup(ms, 0, "r1", nil).rolesCurrent(roleHashes(ms), "r2"),
		"pods created under an older revision, from templates that did not change, are current")
}

// A RoleRollingUpdate of a prefill/decode group keeps a complete pair of one version: a
// prefill on the new template and decodes all on the old one serve nothing, so a role's
// ready old replica goes only while the group keeps as many complete pairs as the roles'
// budgets promise (here 1 of 2), old or new.
func TestRoleRolloutKeepsCompletePairs(t *testing.T) {
	ms := pdServing()
	ms.Spec.Replicas = ptr.To[int32](1)
	ms.Spec.RolloutStrategy = &workloadv1alpha1.RolloutStrategy{Type: workloadv1alpha1.RoleRollingUpdate}
	roles := ms.Spec.Template.Roles
	roles[0].Replicas, roles[1].Replicas = ptr.To[int32](2), ptr.To[int32](2)
	roles[1].WorkerReplicas, roles[1].WorkerTemplate = 0, nil
	old := map[string]*workloadv1alpha1.Role{"prefill": roles[0].DeepCopy(), "decode": roles[1].DeepCopy()}
	for i := range roles {
		roles[i].EntryTemplate.Spec.Containers[0].Image = "vllm:v2"
		roles[i].MaxUnavailable = ptr.To(intstr.FromInt32(1))
	}
	groups := map[int]*servingGroup{0: roleGroup(ms, 0, "r1", old)}
	assert.Equal(t, []string{"qwen-0/prefill-1", "qwen-0/decode-1"}, replaced(roleRolloutStep(ms, groups, "r2")),
		"one replica of each role: the old prefill-0 and decode-0 stay a pair")

	// prefill-1 is back on the new template and ready, decode-1 is not ready yet.
	renew := func(role string, ready bool) {
		for _, p := range roleGroup(ms, 0, "r2", nil).pods {
			if p.Labels[workloadv1alpha1.RoleIDLabel] == role {
				if !ready {
					p.Status.Conditions[0].Status = corev1.ConditionFalse
				}
				groups[0].pods[p.Name] = p
			}
		}
	}
	renew("prefill-1", true)
	renew("decode-1", false)
	assert.Empty(t, replaced(roleRolloutStep(ms, groups, "r2")),
		"prefill-0 would be within the prefill budget, but it is the last old prefill while no new decode is ready: the group would serve nothing")

	renew("decode-1", true)
	assert.Equal(t, []string{"qwen-0/prefill-0", "qwen-0/decode-0"}, replaced(roleRolloutStep(ms, groups, "r2")),
		"a new pair is ready: the old one may go")

	// Without maxUnavailable (every replica at once, as Kthena) nothing is held back.
	groups = map[int]*servingGroup{0: roleGroup(ms, 0, "r1", old)}
	renew("prefill-1", true)
	for i := range roles {
		roles[i].MaxUnavailable = nil
	}
	assert.Equal(t, []string{"qwen-0/prefill-0", "qwen-0/decode-1", "qwen-0/decode-0"}, replaced(roleRolloutStep(ms, groups, "r2")))
}

// A role's rollout settings and replica count are not part of what it renders: changing
// them neither changes the revision nor marks its pods outdated.
func TestRolloutSettingsAreNotTemplate(t *testing.T) {
	ms := pdServing()
	before, err := templateHash(&ms.Spec.Template)
	assert.NoError(t, err)
	hash := RoleTemplateHash(&ms.Spec.Template.Roles[1])
	r := &ms.Spec.Template.Roles[1]
	r.Replicas, r.MaxUnavailable, r.Partition = ptr.To[int32](7), ptr.To(intstr.FromString("50%")), ptr.To(intstr.FromInt32(2))
	after, err := templateHash(&ms.Spec.Template)
	assert.NoError(t, err)
	assert.Equal(t, before, after)
	assert.Equal(t, hash, RoleTemplateHash(r))
}

// A role replica kept below a partition comes back on the revision not yet updated.
func TestUnitRevision(t *testing.T) {
	ms := pdServing()
	ms.Spec.Replicas = ptr.To[int32](2)
	ms.Status.CurrentRevision = "r1"
	ms.Spec.RolloutStrategy = &workloadv1alpha1.RolloutStrategy{Type: workloadv1alpha1.RoleRollingUpdate,
		RollingUpdateConfiguration: &workloadv1alpha1.RollingUpdateConfiguration{Partition: ptr.To(intstr.FromInt32(1))}}
	ms.Spec.Template.Roles[1].Partition = ptr.To(intstr.FromInt32(1))
	g := &servingGroup{index: 1, pods: map[string]*corev1.Pod{}}
	units := groupUnits(ms, g)
	decode0, decode1 := units[1], units[2]
	assert.Equal(t, "r1", unitRevision(ms, 1, decode0, "", "r2"), "below the role's partition")
	assert.Equal(t, "r2", unitRevision(ms, 1, decode1, "", "r2"))
	assert.Equal(t, "r1", unitRevision(ms, 0, decode1, "", "r2"), "below the group partition")
	decode1.present = []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{workloadv1alpha1.RevisionLabel: "r0"}}}}
	assert.Equal(t, "r0", unitRevision(ms, 1, decode1, "", "r2"), "a replica keeps the revision of its live pods")

	ms.Spec.RolloutStrategy.Type = workloadv1alpha1.ServingGroupRollingUpdate
	assert.Equal(t, "r1", unitRevision(ms, 1, decode0, "r1", "r2"), "a group keeps its revision until it is replaced")
}
