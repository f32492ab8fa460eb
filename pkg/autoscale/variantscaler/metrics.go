package variantscaler

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The series llm-d's variant autoscaler exports, under the same names and labels, so an
// HPA or KEDA ScaledObject written for llm-d (reading inferno_desired_replicas through a
// Prometheus adapter) actuates a Berth variant unchanged when --variant-actuation=metric.
var (
	desiredReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "inferno_desired_replicas",
		Help: "Desired number of replicas for each variant",
	}, []string{"variant_name", "namespace", "accelerator_type"})
	currentReplicas = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "inferno_current_replicas",
		Help: "Current number of replicas for each variant",
	}, []string{"variant_name", "namespace", "accelerator_type"})
	replicaScaling = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "inferno_replica_scaling_total",
		Help: "Total number of replica scaling operations",
	}, []string{"variant_name", "namespace", "direction", "reason"})
	runErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_variant_autoscaler_errors_total",
		Help: "VariantAutoscaling runs that could not optimize or actuate, by reason.",
	}, []string{"reason"})
)

func init() {
	metrics.Registry.MustRegister(desiredReplicas, currentReplicas, replicaScaling, runErrors)
}

// forget drops a deleted variant's series.
func forget(namespace, name string) {
	match := prometheus.Labels{"variant_name": name, "namespace": namespace}
	desiredReplicas.DeletePartialMatch(match)
	currentReplicas.DeletePartialMatch(match)
	replicaScaling.DeletePartialMatch(match)
}
