package variantscaler

// ReasonScaled is the event a VariantAutoscaling gets when berth-controller scales its
// ModelServing. A problem that stops a run (Reason* in reconciler.go, except
// WaitingForMetrics) is sent once as a warning when it appears.
const ReasonScaled = "Scaled"

// Actions of those events (events.k8s.io/v1 requires one).
const (
	actionSize  = "Size"
	actionScale = "Scale"
)
