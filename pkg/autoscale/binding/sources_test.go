package binding

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale/podmetrics"
)

// A metric is read where its source says; one without a source, from the pods under its own
// name at the spec's metricEndpoint (or :8100/metrics).
func TestPlanReads(t *testing.T) {
	prom := &workloadv1alpha1.PrometheusMetricSource{ServerURL: "http://prom:9090", Query: "sum(x)"}
	reads, err := planReads(workloadv1alpha1.Target{MetricSources: map[string]workloadv1alpha1.MetricSource{
		"busy":  {Pod: &workloadv1alpha1.PodMetricSource{Name: "vllm:num_requests_running", Port: 8000, Uri: "/m", LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}}},
		"queue": {Prometheus: prom},
		"bare":  {Pod: &workloadv1alpha1.PodMetricSource{}},
	}}, []string{"busy", "queue", "bare", "plain"}, "spec.homogeneousTarget.target")
	require.NoError(t, err)
	require.Len(t, reads, 4)
	assert.Equal(t, "vllm:num_requests_running", reads[0].name)
	assert.Equal(t, podmetrics.Endpoint{Port: 8000, Path: "/m"}, reads[0].ep)
	assert.Equal(t, "tier=gold", reads[0].sel.String())
	assert.Same(t, prom, reads[1].prom)
	assert.Equal(t, metricRead{key: "bare", name: "bare", ep: podmetrics.Endpoint{Port: 8100, Path: "/metrics"}}, reads[2])
	assert.Equal(t, metricRead{key: "plain", name: "plain", ep: podmetrics.Endpoint{Port: 8100, Path: "/metrics"}}, reads[3])

	reads, err = planReads(workloadv1alpha1.Target{MetricEndpoint: &workloadv1alpha1.MetricEndpoint{Port: 8000}}, []string{"vllm:num_requests_waiting"}, "spec.scalingConfiguration.target")
	require.NoError(t, err)
	assert.Equal(t, podmetrics.Endpoint{Port: 8000, Path: "/metrics"}, reads[0].ep, "the spec's endpoint, its uri defaulted")

	_, err = planReads(workloadv1alpha1.Target{MetricSources: map[string]workloadv1alpha1.MetricSource{"x": {}}}, []string{"x"}, "spec.homogeneousTarget.target")
	assert.EqualError(t, err, "spec.homogeneousTarget.target.metricSources[x]: set pod or prometheus")
}

func TestDescribeKey(t *testing.T) {
	assert.Equal(t, "ModelServing chat", describeKey("ModelServing/chat"))
	assert.Equal(t, "role prefill of ModelServing pd", describeKey(roleKey("pd", "prefill")))
}
