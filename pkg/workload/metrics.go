package workload

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics on the controller manager's /metrics endpoint.
var (
	reconcileSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "berth_modelserving_reconcile_seconds",
		Help:    "Time one ModelServing reconcile pass takes.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
	})
	recoveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_modelserving_recoveries_total",
		Help: "Recovery decisions taken, by kind (ReplacePod, RecreateRole, RecreateGroup).",
	}, []string{"decision"})
	computeDomainOps = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_modelserving_compute_domains_total",
		Help: "NVIDIA ComputeDomains the ModelServing reconciler created or deleted for ServingGroups, by operation (create, delete).",
	}, []string{"operation"})
	drainMoves = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "berth_modelserving_drain_moves_total",
		Help: "ServingGroups moved whole off drained nodes.",
	})
	drainWaiting = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "berth_modelserving_drain_waiting_groups",
		Help: "ServingGroups on drained nodes that wait for the ModelServing's minimum of Ready groups to allow their move.",
	}, []string{"namespace", "modelserving"})
	groupsByState = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "berth_modelserving_groups",
		Help: "ServingGroups of each ModelServing by state (available, unavailable).",
	}, []string{"namespace", "modelserving", "state"})
)

func init() {
	metrics.Registry.MustRegister(reconcileSeconds, groupsByState, recoveries, computeDomainOps, drainMoves, drainWaiting)
}

// forgetModelServing deletes a ModelServing's per-ModelServing series.
func forgetModelServing(namespace, name string) {
	groupsByState.DeletePartialMatch(prometheus.Labels{"namespace": namespace, "modelserving": name})
	drainWaiting.DeleteLabelValues(namespace, name)
}
