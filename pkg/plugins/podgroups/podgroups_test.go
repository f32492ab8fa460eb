package podgroups

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	coschedulingv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

func TestAPodBelongsToTheGroupItsAPINames(t *testing.T) {
	pod := func(ann, labels map[string]string, sg *corev1.PodSchedulingGroup) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Annotations: ann, Labels: labels},
			Spec: corev1.PodSpec{SchedulingGroup: sg}}
	}
	for _, c := range []struct {
		name string
		pod  *corev1.Pod
		key  string
	}{
		{"volcano annotation", pod(map[string]string{VolcanoGroupKey: "a"}, nil, nil), "ns/a"},
		{"volcano label", pod(nil, map[string]string{VolcanoGroupKey: "a"}, nil), "ns/a"},
		{"coscheduling label", pod(nil, map[string]string{CoschedulingLabel: "a"}, nil), "ns/a@scheduling.x-k8s.io"},
		{"native schedulingGroup", pod(nil, nil, &corev1.PodSchedulingGroup{PodGroupName: ptr.To("a")}), "ns/a@scheduling.k8s.io"},
		{"volcano first", pod(map[string]string{VolcanoGroupKey: "v"}, map[string]string{CoschedulingLabel: "c"}, nil), "ns/v"},
		{"none", pod(nil, nil, nil), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.key, Key(c.pod))
			if c.key == "" {
				return
			}
			ref, err := ParseKey(c.key)
			require.NoError(t, err)
			assert.Equal(t, c.key, ref.Key(), "ParseKey inverts Key")
		})
	}
	_, err := ParseKey("ns/a@example.com")
	assert.ErrorContains(t, err, "unknown API group")
}

func TestCoschedulingMapsToTheGangRules(t *testing.T) {
	in := &coschedulingv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g", ResourceVersion: "7"},
		Spec: coschedulingv1alpha1.PodGroupSpec{MinMember: 3, ScheduleTimeoutSeconds: ptr.To[int32](90),
			MinResources: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("24")}}}
	pg := FromCoscheduling(in)
	assert.Equal(t, int32(3), pg.Spec.MinMember)
	assert.Equal(t, "1m30s", pg.Annotations[WaitTimeoutAnnotation])
	assert.Equal(t, "24", pg.Spec.MinResources.Name("nvidia.com/gpu", resource.DecimalSI).String())
	assert.Equal(t, Coscheduling, APIOf(pg))
	assert.Equal(t, "ns/g@scheduling.x-k8s.io", KeyOf(pg))
	assert.Equal(t, "scheduling.x-k8s.io/v1alpha1", ObjectRef(pg).APIVersion)
	assert.Empty(t, in.Annotations, "the informer's object is not modified")
}

func TestWorkloadMapsToTheGangRules(t *testing.T) {
	gang := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g"},
		Spec: schedulingv1beta1.PodGroupSpec{PriorityClassName: "high",
			SchedulingPolicy:      schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: 4}},
			SchedulingConstraints: &schedulingv1beta1.PodGroupSchedulingConstraints{Topology: []schedulingv1beta1.TopologyConstraint{{Key: "network.berth.sh/leaf"}}}}}
	pg := FromWorkload(gang)
	assert.Equal(t, int32(4), pg.Spec.MinMember)
	assert.Equal(t, "high", pg.Spec.PriorityClassName)
	require.NotNil(t, pg.Spec.NetworkTopology)
	assert.Equal(t, volcanov1beta1.HardNetworkTopologyMode, pg.Spec.NetworkTopology.Mode)
	assert.Equal(t, "network.berth.sh/leaf", pg.Spec.NetworkTopology.HighestTierName)
	assert.Equal(t, "ns/g@scheduling.k8s.io", KeyOf(pg))

	basic := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Basic: &schedulingv1beta1.BasicSchedulingPolicy{}}}}
	assert.Equal(t, int32(1), FromWorkload(basic).Spec.MinMember, "a basic policy places each pod on its own")
	assert.Nil(t, FromWorkload(basic).Spec.NetworkTopology)
}

func TestWorkloadStatusSaysWhetherTheGroupWasPlaced(t *testing.T) {
	pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
	unsched := volcanov1beta1.PodGroupStatus{Conditions: []volcanov1beta1.PodGroupCondition{{
		Type: volcanov1beta1.PodGroupUnschedulableType, Status: corev1.ConditionTrue, Reason: "NotEnoughResources", Message: "needs 4 pods, 2 fit"}}}
	setWorkloadConditions(pg, unsched)
	require.Len(t, pg.Status.Conditions, 1)
	c := pg.Status.Conditions[0]
	assert.Equal(t, schedulingv1beta1.PodGroupInitiallyScheduled, c.Type)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, schedulingv1beta1.PodGroupReasonUnschedulable, c.Reason)
	assert.Equal(t, "needs 4 pods, 2 fit", c.Message)
	assert.Equal(t, int64(2), c.ObservedGeneration)

	setWorkloadConditions(pg, volcanov1beta1.PodGroupStatus{Phase: volcanov1beta1.PodGroupRunning, Conditions: []volcanov1beta1.PodGroupCondition{{
		Type: volcanov1beta1.PodGroupScheduled, Status: corev1.ConditionTrue, Reason: "GangScheduled", Message: "4/4 pods placed"}}})
	require.Len(t, pg.Status.Conditions, 1)
	assert.Equal(t, metav1.ConditionTrue, pg.Status.Conditions[0].Status)

	setWorkloadConditions(pg, volcanov1beta1.PodGroupStatus{Conditions: []volcanov1beta1.PodGroupCondition{{
		Type: volcanov1beta1.PodGroupUnschedulableType, Status: corev1.ConditionTrue, Reason: ReasonPreempted, Message: "preempted by gang ns/x"}}})
	types := map[string]metav1.ConditionStatus{}
	for _, c := range pg.Status.Conditions {
		types[c.Type] = c.Status
	}
	assert.Equal(t, map[string]metav1.ConditionStatus{schedulingv1beta1.PodGroupInitiallyScheduled: metav1.ConditionTrue,
		schedulingv1beta1.DisruptionTarget: metav1.ConditionTrue}, types, "a preempted group keeps InitiallyScheduled and gains DisruptionTarget")
}
