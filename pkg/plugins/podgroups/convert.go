package podgroups

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	coschedulingv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// WaitTimeoutAnnotation on a converted group carries its own Permit wait (the gang
// plugin's per-group override; scheduler-plugins' scheduleTimeoutSeconds maps to it).
const WaitTimeoutAnnotation = "gang.berth.sh/wait-timeout"

// typed marks a converted group with its source API in TypeMeta, so events and status go to
// the object the user wrote.
func typed(api API, src *volcanov1beta1.PodGroup) *volcanov1beta1.PodGroup {
	src.APIVersion, src.Kind = api.GroupVersion(), "PodGroup"
	return src
}

// FromCoscheduling reads a scheduler-plugins PodGroup: minMember pods of the group, any of
// them, all or nothing; minResources as Volcano's pre-check; scheduleTimeoutSeconds as the
// group's Permit wait.
func FromCoscheduling(in *coschedulingv1alpha1.PodGroup) *volcanov1beta1.PodGroup {
	pg := &volcanov1beta1.PodGroup{ObjectMeta: *in.ObjectMeta.DeepCopy()}
	pg.Spec.MinMember = in.Spec.MinMember
	if len(in.Spec.MinResources) > 0 {
		r := in.Spec.MinResources.DeepCopy()
		pg.Spec.MinResources = &r
	}
	if t := in.Spec.ScheduleTimeoutSeconds; t != nil && *t > 0 {
		if pg.Annotations == nil {
			pg.Annotations = map[string]string{}
		}
		pg.Annotations[WaitTimeoutAnnotation] = (time.Duration(*t) * time.Second).String()
	}
	return typed(Coscheduling, pg)
}

// FromWorkload reads a kube-scheduler PodGroup: a gang policy's minCount pods all or
// nothing (a basic policy: each pod on its own, a minimum of one); priorityClassName; the
// first topology constraint as a hard network topology whose tier is the node label key
// (berth-scheduler's topology plugin knows each of its label tiers by its key too).
func FromWorkload(in *schedulingv1beta1.PodGroup) *volcanov1beta1.PodGroup {
	pg := &volcanov1beta1.PodGroup{ObjectMeta: *in.ObjectMeta.DeepCopy()}
	pg.Spec.MinMember = 1
	if g := in.Spec.SchedulingPolicy.Gang; g != nil && g.MinCount > 0 {
		pg.Spec.MinMember = g.MinCount
	}
	pg.Spec.PriorityClassName = in.Spec.PriorityClassName
	if c := in.Spec.SchedulingConstraints; c != nil && len(c.Topology) > 0 && c.Topology[0].Key != "" {
		pg.Spec.NetworkTopology = &volcanov1beta1.NetworkTopologySpec{
			Mode: volcanov1beta1.HardNetworkTopologyMode, HighestTierName: c.Topology[0].Key}
	}
	return typed(Workload, pg)
}

// APIOf says which API a group read from a Source was written in.
func APIOf(pg *volcanov1beta1.PodGroup) API {
	switch pg.APIVersion {
	case Coscheduling.GroupVersion():
		return Coscheduling
	case Workload.GroupVersion():
		return Workload
	}
	return Volcano
}

// KeyOf is the scheduler's key of a group read from a Source.
func KeyOf(pg *volcanov1beta1.PodGroup) string {
	return Ref{API: APIOf(pg), Namespace: pg.Namespace, Name: pg.Name}.Key()
}

// ObjectRef refers to the object the group was read from, for events.
func ObjectRef(pg *volcanov1beta1.PodGroup) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion: APIOf(pg).GroupVersion(), Kind: "PodGroup",
		Namespace: pg.Namespace, Name: pg.Name, UID: pg.UID, ResourceVersion: pg.ResourceVersion,
	}
}
