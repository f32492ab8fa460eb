package binding

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics on berth-controller's /metrics endpoint, labelled by binding.
var (
	currentReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "berth_autoscaler_current_replicas",
		Help: "Replicas of each scale target when the autoscaler last decided.",
	}, []string{"namespace", "binding", "target"})
	desiredReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "berth_autoscaler_desired_replicas",
		Help: "Replicas the autoscaler set on each scale target at its last decision.",
	}, []string{"namespace", "binding", "target"})
	recommendedReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "berth_autoscaler_recommended_replicas",
		Help: "Replicas the metrics asked for (summed over an optimizer's targets) before stabilization, rate limits and panic mode.",
	}, []string{"namespace", "binding"})
	metricValue = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "berth_autoscaler_metric_value",
		Help: "A policy metric per ready pod as the autoscaler last read it (gauges averaged, counters as a rate per second).",
	}, []string{"namespace", "binding", "metric"})
	metricTarget = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "berth_autoscaler_metric_target",
		Help: "A policy metric's target value per pod.",
	}, []string{"namespace", "binding", "metric"})
	panicMode = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "berth_autoscaler_panic_mode",
		Help: "1 while the binding's panic policy governs scale-up.",
	}, []string{"namespace", "binding"})
	scaleEvents = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_autoscaler_scale_total",
		Help: "Replica changes the autoscaler applied, by direction (up, down).",
	}, []string{"namespace", "binding", "direction"})
	decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_autoscaler_decisions_total",
		Help: "Decisions the autoscaler took for each binding (or policy with its own target), one per sync period, whatever their outcome: a series that stops growing is an autoscaler that stopped looking.",
	}, []string{"namespace", "binding"})
	groupsThatFit = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "berth_autoscaler_groups_that_fit",
		Help: "More whole ServingGroups of each ModelServing target that fit the cluster, as berth-scheduler last published and the autoscaler read it (absent while no fresh count exists).",
	}, []string{"namespace", "binding", "target"})
	capacityLimits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_autoscaler_capacity_limited_total",
		Help: "Decisions whose scale-up the groups-that-fit counts held back or moved to another target.",
	}, []string{"namespace", "binding"})
	decisionErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_autoscaler_errors_total",
		Help: "Decisions the autoscaler could not take or apply, by reason.",
	}, []string{"reason"})
)

func init() {
	metrics.Registry.MustRegister(currentReplicas, desiredReplicas, recommendedReplicas, metricValue, metricTarget, panicMode, scaleEvents, decisions, decisionErrors, groupsThatFit, capacityLimits)
}

// forget drops a deleted binding's series.
func forget(namespace, binding string) {
	match := prometheus.Labels{"namespace": namespace, "binding": binding}
	for _, v := range []*prometheus.GaugeVec{currentReplicas, desiredReplicas, recommendedReplicas, metricValue, metricTarget, panicMode, groupsThatFit} {
		v.DeletePartialMatch(match)
	}
	scaleEvents.DeletePartialMatch(match)
	decisions.DeletePartialMatch(match)
	capacityLimits.DeletePartialMatch(match)
}
