package binding

import corev1 "k8s.io/api/core/v1"

// Reasons of the events the autoscaler records on an AutoscalingPolicyBinding, besides the
// reasons of a problem that stops it acting (Reason* in binding.go), each sent once as a
// warning when it appears.
const (
	// ReasonScaledUp and ReasonScaledDown: a target was scaled through its scale subresource.
	ReasonScaledUp   = "ScaledUp"
	ReasonScaledDown = "ScaledDown"
	// ReasonPanicModeStarted and ReasonPanicModeEnded: a burst handed scale-up to the panic
	// policy, and the hold passed without another.
	ReasonPanicModeStarted = "PanicModeStarted"
	ReasonPanicModeEnded   = "PanicModeEnded"
	// ReasonScaledFromZero: a target at zero replicas was scaled up because a router held
	// requests for it (its demand annotation), before any metric could ask.
	ReasonScaledFromZero = "ScaledFromZero"
	// ReasonManualScaleObserved: a target has a replica count the autoscaler did not set.
	ReasonManualScaleObserved = "ManualScaleObserved"
)

// Actions of those events (events.k8s.io/v1 requires one).
const (
	actionDecide = "Decide"
	actionScale  = "Scale"
)

// ref is the target as the related object of the events about it: events.k8s.io/v1 folds
// a binding's events that share reason, action and related object into one series keeping
// the first note, so an optimizer scaling two targets at once must name each.
func (t *target) ref() *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: t.gvk.GroupVersion().String(), Kind: t.gvk.Kind, Namespace: t.ns, Name: t.name}
}
