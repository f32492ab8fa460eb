package gang

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

const roleIDLabel = "modelserving.volcano.sh/role-id"

// pdGroup is the PodGroup Berth's controller writes for 1 prefill + 2 decode, each with
// `workers` workers: one task and one subgroup per role replica.
func pdGroup(workers int32) *volcanov1beta1.PodGroup {
	size := 1 + workers
	pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g"}}
	pg.Spec.MinTaskMember = map[string]int32{"prefill-0": size, "decode-0": size, "decode-1": size}
	pg.Spec.MinMember = 3 * size
	for _, role := range []string{"prefill", "decode"} {
		pg.Spec.SubGroupPolicy = append(pg.Spec.SubGroupPolicy, volcanov1beta1.SubGroupPolicySpec{
			Name: role, SubGroupSize: ptr.To(size), MinSubGroups: ptr.To[int32](0),
			LabelSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{RoleLabel: role}},
			MatchLabelKeys: []string{roleIDLabel},
		})
	}
	return pg
}

func gangPod(role string, replica, index int, gpus int64) *corev1.Pod {
	task := fmt.Sprintf("%s-%d", role, replica)
	name := fmt.Sprintf("g-%s-%d", task, index)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: name, UID: types.UID(name),
			Labels:      map[string]string{RoleLabel: role, roleIDLabel: task},
			Annotations: map[string]string{GroupNameKey: "g", TaskSpecKey: task},
		},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)},
		}}}},
	}
}

func gpuNodes(free ...int64) staticCapacity {
	out := make(staticCapacity, len(free))
	for i, f := range free {
		out[i] = nodeFree{name: fmt.Sprintf("n%d", i), free: map[corev1.ResourceName]int64{"nvidia.com/gpu": f, corev1.ResourcePods: 110}}
	}
	return out
}

func TestCheckNeverReleasesASplitRoleReplica(t *testing.T) {
	req, err := newRequirement(pdGroup(1))
	require.NoError(t, err)
	all := []*corev1.Pod{
		gangPod("prefill", 0, 0, 1), gangPod("prefill", 0, 1, 1),
		gangPod("decode", 0, 0, 1), gangPod("decode", 0, 1, 1),
		gangPod("decode", 1, 0, 1), gangPod("decode", 1, 1, 1),
	}
	assert.True(t, req.check(all).ok)
	assert.False(t, req.check(all[:5]).ok, "decode-1 has its entry but not its worker")
	assert.Contains(t, req.check(all[:5]).reason, "5/6 pods placed")
	assert.True(t, req.enough(all).ok)
	assert.False(t, req.enough(all[:4]).ok, "PreEnqueue holds the group until every minimum pod exists")
	req.minMember, req.minTask = 0, nil
	assert.Contains(t, req.check(all[:5]).reason, "decode: a subgroup has 1/2 pods placed", "the subgroup rule alone also refuses a split replica")
}

func TestCheckHonoursMinSubGroups(t *testing.T) {
	pg := &volcanov1beta1.PodGroup{}
	pg.Spec.SubGroupPolicy = []volcanov1beta1.SubGroupPolicySpec{{
		Name: "decode", SubGroupSize: ptr.To[int32](2), MinSubGroups: ptr.To[int32](2),
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{RoleLabel: "decode"}}, MatchLabelKeys: []string{roleIDLabel},
	}}
	req, err := newRequirement(pg)
	require.NoError(t, err)
	one := []*corev1.Pod{gangPod("decode", 0, 0, 1), gangPod("decode", 0, 1, 1)}
	two := append(one, gangPod("decode", 1, 0, 1), gangPod("decode", 1, 1, 1))
	assert.False(t, req.check(one).ok)
	assert.True(t, req.check(two).ok)
	assert.Equal(t, 4, req.members())
}

func TestFeasibilityExplainsWhatIsMissing(t *testing.T) {
	pg := pdGroup(0)
	req, err := newRequirement(pg)
	require.NoError(t, err)
	pending := []*corev1.Pod{gangPod("prefill", 0, 0, 4), gangPod("decode", 0, 0, 8), gangPod("decode", 1, 0, 8)}

	// Room for the prefill and one decode only.
	f := checkFeasible(req, nil, pending, gpuNodes(8, 4, 2))
	require.False(t, f.ok)
	assert.Equal(t, "decode needs 2 complete replicas, 1 fits: 0/3 nodes have 8 free nvidia.com/gpu", f.message)

	assert.True(t, checkFeasible(req, nil, pending, gpuNodes(8, 4, 8)).ok)
}

func TestFeasibilityPlacesAReplicaWhole(t *testing.T) {
	req, err := newRequirement(pdGroup(3)) // every replica: entry + 3 workers of 8 GPUs
	require.NoError(t, err)
	var pending []*corev1.Pod
	for i := 0; i < 4; i++ {
		pending = append(pending, gangPod("prefill", 0, i, 8))
	}
	req.minTask = map[string]int{"prefill-0": 4}
	req.minMember = 4
	assert.False(t, checkFeasible(req, nil, pending, gpuNodes(8, 8, 8)).ok, "3 nodes cannot hold a 4-pod replica")
	assert.True(t, checkFeasible(req, nil, pending, gpuNodes(8, 8, 8, 8)).ok)
}

func TestArgsDefaultsAndValidation(t *testing.T) {
	args, err := decodeArgs(nil)
	require.NoError(t, err)
	assert.Equal(t, int64(60), *args.PermitWaitingTimeSeconds)
	_, err = decodeArgs(&Args{PermitWaitingTimeSeconds: ptr.To[int64](0)})
	assert.ErrorContains(t, err, "permitWaitingTimeSeconds must be positive")

	pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{WaitTimeoutAnnotation: "5s"}}}
	assert.Equal(t, "5s", args.waitTimeout(pg).String())
}

func TestCompareNaturalOrdersReplicasNumerically(t *testing.T) {
	assert.Negative(t, compareNatural("decode-2", "decode-10"))
	assert.Positive(t, compareNatural("decode-10", "decode-9"))
	assert.Negative(t, compareNatural("decode-1", "prefill-0"))
	assert.Zero(t, compareNatural("a-1", "a-1"))
}

func TestMinResourcesPreCheck(t *testing.T) {
	want := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("24")}
	f := checkMinResources(want, gpuNodes(8, 8))
	require.False(t, f.ok)
	assert.Equal(t, "the group's minResources ask for 24 nvidia.com/gpu, 16 free in the cluster", f.message)
	assert.True(t, checkMinResources(want, gpuNodes(8, 8, 8)).ok)
	assert.True(t, checkMinResources(nil, gpuNodes()).ok)
}
