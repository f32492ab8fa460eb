package variantscaler

// ReasonScaled is the event a VariantAutoscaling gets when berth-controller scales its
// ModelServing. A problem that stops a run (Reason* in reconciler.go, except
// WaitingForMetrics) is sent once as a warning when it appears.
const ReasonScaled = "Scaled"

// ReasonCapacityLimited is the event a VariantAutoscaling gets when berth-scheduler's
// published count held its scale-up back: the replicas the model asked for that cannot land
// now are not made into pending pods (docs/autoscaling.md, placement-aware scale-up).
const ReasonCapacityLimited = "CapacityLimited"

// Actions of those events (events.k8s.io/v1 requires one).
const (
	actionSize  = "Size"
	actionScale = "Scale"
)
