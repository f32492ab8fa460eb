package podgroups

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coschedulingv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// Reasons the status of a native PodGroup takes from the gang rules' verdicts.
const (
	// ReasonPreempted is the gang plugin's reason for a group evicted by preemption.
	ReasonPreempted = "Preempted"
)

// WriteStatus writes the status the gang rules derived, in Volcano's shape, onto a group of
// another API, through its status subresource, when it differs from what is there:
//
//   - scheduler-plugins: phase Pending until the minimum is placed, Scheduling once it is,
//     Running once minMember pods run; running/succeeded/failed; scheduleStartTime at the
//     first attempt. Its status has no conditions: the reasons are in the events.
//   - native: condition PodGroupInitiallyScheduled (True, reason Scheduled; or False, reason
//     Unschedulable with the message), and DisruptionTarget (reason PreemptionByScheduler)
//     on a group preemption evicted.
func (s *Source) WriteStatus(ctx context.Context, ref Ref, want volcanov1beta1.PodGroupStatus) error {
	switch ref.API {
	case Coscheduling:
		if s.cosched == nil {
			return nil
		}
		cur, err := s.cosched.PodGroups(ref.Namespace).Get(ref.Name)
		if err != nil {
			return ignoreNotFound(err)
		}
		st := coschedulingStatus(cur, want)
		if equality.Semantic.DeepEqual(cur.Status, st) {
			return nil
		}
		upd := cur.DeepCopy()
		upd.Status = st
		_, err = s.cc.SchedulingV1alpha1().PodGroups(ref.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		return err
	case Workload:
		if s.native == nil {
			return nil
		}
		cur, err := s.native.PodGroups(ref.Namespace).Get(ref.Name)
		if err != nil {
			return ignoreNotFound(err)
		}
		upd := cur.DeepCopy()
		setWorkloadConditions(upd, want)
		if equality.Semantic.DeepEqual(cur.Status, upd.Status) {
			return nil
		}
		_, err = s.kube.SchedulingV1beta1().PodGroups(ref.Namespace).UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		return err
	}
	return fmt.Errorf("podgroups: WriteStatus is for groups of other APIs, not %s", ref.API)
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func condition(st volcanov1beta1.PodGroupStatus, typ volcanov1beta1.PodGroupConditionType) *volcanov1beta1.PodGroupCondition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == typ {
			return &st.Conditions[i]
		}
	}
	return nil
}

func coschedulingStatus(cur *coschedulingv1alpha1.PodGroup, want volcanov1beta1.PodGroupStatus) coschedulingv1alpha1.PodGroupStatus {
	st := cur.Status
	st.Running, st.Succeeded, st.Failed = want.Running, want.Succeeded, want.Failed
	switch {
	case want.Phase == volcanov1beta1.PodGroupRunning && want.Running >= cur.Spec.MinMember:
		st.Phase = coschedulingv1alpha1.PodGroupRunning
	case want.Phase == volcanov1beta1.PodGroupRunning:
		st.Phase = coschedulingv1alpha1.PodGroupScheduling
	default:
		st.Phase = coschedulingv1alpha1.PodGroupPending
	}
	if st.ScheduleStartTime.IsZero() && len(want.Conditions) > 0 {
		st.ScheduleStartTime = metav1.Now()
	}
	return st
}

func setWorkloadConditions(pg *schedulingv1beta1.PodGroup, want volcanov1beta1.PodGroupStatus) {
	set := func(c metav1.Condition) {
		c.ObservedGeneration = pg.Generation
		meta.SetStatusCondition(&pg.Status.Conditions, c)
	}
	if c := condition(want, volcanov1beta1.PodGroupScheduled); c != nil && c.Status == corev1.ConditionTrue {
		set(metav1.Condition{Type: schedulingv1beta1.PodGroupInitiallyScheduled, Status: metav1.ConditionTrue, Reason: "Scheduled", Message: c.Message})
		meta.RemoveStatusCondition(&pg.Status.Conditions, schedulingv1beta1.DisruptionTarget)
		return
	}
	c := condition(want, volcanov1beta1.PodGroupUnschedulableType)
	if c == nil || c.Status != corev1.ConditionTrue {
		return
	}
	if c.Reason == ReasonPreempted {
		set(metav1.Condition{Type: schedulingv1beta1.DisruptionTarget, Status: metav1.ConditionTrue,
			Reason: schedulingv1beta1.PodGroupReasonPreemptionByScheduler, Message: c.Message})
	}
	if cur := meta.FindStatusCondition(pg.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled); cur != nil && cur.Status == metav1.ConditionTrue {
		return // initially scheduled stays true: it says the group was once placed
	}
	set(metav1.Condition{Type: schedulingv1beta1.PodGroupInitiallyScheduled, Status: metav1.ConditionFalse,
		Reason: schedulingv1beta1.PodGroupReasonUnschedulable, Message: c.Message})
}
