package modelvariants

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The series llm-d's workload variant autoscaler exports (v0.5: internal/constants/metrics.go
// and internal/metrics/metrics.go), under the same names and label names, so an HPA's
// External metric or a KEDA prometheus trigger written for llm-d selects Berth's.
// variant_name is the variant's name: the VariantAutoscaling's, or the annotated HPA's or
// ScaledObject's own name. llm-d adds a controller_instance label only when its
// CONTROLLER_INSTANCE is set; Berth never sets it.
const (
	MetricDesiredReplicas = "wva_desired_replicas"
	MetricCurrentReplicas = "wva_current_replicas"
	MetricDesiredRatio    = "wva_desired_ratio"
	MetricReplicaScaling  = "wva_replica_scaling_total"

	LabelVariantName     = "variant_name"
	LabelNamespace       = "namespace"
	LabelAcceleratorType = "accelerator_type"
	LabelDirection       = "direction"
	LabelReason          = "reason"

	// UnresolvedAccelerator is the accelerator_type of a variant whose accelerator is not
	// known (no inference.optimization/acceleratorName label): llm-d's value for it.
	UnresolvedAccelerator = "unresolved"
)

var (
	desiredReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricDesiredReplicas, Help: "Desired number of replicas for each variant",
	}, []string{LabelVariantName, LabelNamespace, LabelAcceleratorType})
	currentReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricCurrentReplicas, Help: "Current number of replicas for each variant",
	}, []string{LabelVariantName, LabelNamespace, LabelAcceleratorType})
	desiredRatio = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricDesiredRatio, Help: "Ratio of the desired number of replicas and the current number of replicas for each variant",
	}, []string{LabelVariantName, LabelNamespace, LabelAcceleratorType})
	replicaScaling = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricReplicaScaling, Help: "Total number of replica scaling operations",
	}, []string{LabelVariantName, LabelNamespace, LabelDirection, LabelReason})

	// Berth's own, beside llm-d's series: how often each variant was sized.
	sizings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_variant_sizings_total",
		Help: "Sizings of each variant (a VariantAutoscaling in llm-d v0.5's shape, or an HPA or ScaledObject annotated llm-d.ai/managed) whose result was exported, one per sync period: a series that stops growing is a variant no longer looked at, not one whose size holds.",
	}, []string{LabelVariantName, LabelNamespace})
)

func init() {
	metrics.Registry.MustRegister(desiredReplicas, currentReplicas, desiredRatio, replicaScaling, sizings)
}

// exported remembers each variant's accelerator_type, so that a variant whose accelerator
// changes drops the old series and two variants of one name (a VariantAutoscaling and an
// HPA) do not share one.
var (
	exportedMu sync.Mutex
	exported   = map[seriesKey]string{} // → accelerator_type
)

type seriesKey struct{ namespace, name string }

// Export sets a variant's wva_current_replicas, wva_desired_replicas and wva_desired_ratio
// (desired itself when current is 0, as llm-d does), and counts the sizing in
// berth_variant_sizings_total.
func Export(namespace, name, accelerator string, current, desired int32) {
	sizings.WithLabelValues(name, namespace).Inc()
	if accelerator == "" {
		accelerator = UnresolvedAccelerator
	}
	l := prometheus.Labels{LabelVariantName: name, LabelNamespace: namespace, LabelAcceleratorType: accelerator}
	exportedMu.Lock()
	defer exportedMu.Unlock()
	k := seriesKey{namespace, name}
	currentReplicas.With(l).Set(float64(current))
	desiredReplicas.With(l).Set(float64(desired))
	if current == 0 {
		desiredRatio.With(l).Set(float64(desired))
	} else {
		desiredRatio.With(l).Set(float64(desired) / float64(current))
	}
	// Set before delete: a scrape between the two sees both series, never none.
	if prev, ok := exported[k]; ok && prev != accelerator {
		old := prometheus.Labels{LabelVariantName: name, LabelNamespace: namespace, LabelAcceleratorType: prev}
		currentReplicas.Delete(old)
		desiredReplicas.Delete(old)
		desiredRatio.Delete(old)
	}
	exported[k] = accelerator
}

// CountScaling counts one scaling Berth itself applied (a VariantAutoscaling with
// --variant-actuation=scale): direction "up" or "down".
func CountScaling(namespace, name, direction, reason string) {
	replicaScaling.WithLabelValues(name, namespace, direction, reason).Inc()
}

// Forget drops a variant's series (its object is gone, or no longer declares a variant).
func Forget(namespace, name string) {
	exportedMu.Lock()
	defer exportedMu.Unlock()
	delete(exported, seriesKey{namespace, name})
	match := prometheus.Labels{LabelVariantName: name, LabelNamespace: namespace}
	currentReplicas.DeletePartialMatch(match)
	desiredReplicas.DeletePartialMatch(match)
	desiredRatio.DeletePartialMatch(match)
	replicaScaling.DeletePartialMatch(match)
	sizings.DeletePartialMatch(match)
}
