package api

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// AutoscalingPolicy as Kthena 1.0 writes it: the targets inside the policy.
const (
	validHomogeneousPolicy = `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: bad}
spec:
  metrics: [{name: running, targetValue: "4"}]
  homogeneousTarget:
    target:
      targetRef: {kind: ModelServing, name: chat}
      metricSources:
        running: {pod: {name: vllm:num_requests_running, port: 8000}}
    minReplicas: 1
    maxReplicas: 4
`
	validDisaggregatedPolicy = `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: bad}
spec:
  metrics: [{name: running, targetValue: "4"}]
  disaggregatedTarget:
    targetRef: {name: pd}
    roles:
      prefill: {minReplicas: 1, maxReplicas: 4}
      decode: {minReplicas: 1, maxReplicas: 8}
    ratioConstraint: {numeratorRole: prefill, denominatorRole: decode, minRatio: "0.25", maxRatio: "1"}
`
)

// Both shapes are accepted; a mix of the two, and what Kthena 1.0's webhook refuses where a
// schema can say it, is refused naming the field.
func TestValidationAutoscalingPolicyShapes(t *testing.T) {
	homogeneous := func(o map[string]any) map[string]any { return dig(o, "spec", "homogeneousTarget") }
	source := func(o map[string]any) map[string]any {
		return dig(o, "spec", "homogeneousTarget", "target", "metricSources", "running")
	}
	disaggregated := func(o map[string]any) map[string]any { return dig(o, "spec", "disaggregatedTarget") }
	ratio := func(o map[string]any) map[string]any { return dig(o, "spec", "disaggregatedTarget", "ratioConstraint") }
	metric := func(o map[string]any) map[string]any { return dig(o, "spec")["metrics"].([]any)[0].(map[string]any) }

	cases := []badInput{
		{"metric with both metricName and name", validHomogeneousPolicy, func(o map[string]any) { metric(o)["metricName"] = "x" },
			"spec.metrics[0]", "set exactly one of metricName (Kthena 0.1) and name (Kthena 1.0)"},
		{"metric with neither", validPolicy, func(o map[string]any) { delete(metric(o), "metricName") },
			"spec.metrics[0]", "set exactly one of metricName"},
		{"own target with metricName", validHomogeneousPolicy, func(o map[string]any) {
			dig(o, "spec")["metrics"] = []any{map[string]any{"metricName": "running", "targetValue": "4"}}
		}, "spec.metrics", "name its metrics with name, not metricName"},
		{"two targets", validHomogeneousPolicy, func(o map[string]any) {
			dig(o, "spec", "heterogeneousTarget")["params"] = []any{map[string]any{"target": map[string]any{"targetRef": map[string]any{"name": "a"}}, "maxReplicas": 2}}
		}, "spec", "set at most one of homogeneousTarget, heterogeneousTarget and disaggregatedTarget"},
		{"homogeneous target without metrics", validHomogeneousPolicy, func(o map[string]any) { delete(dig(o, "spec"), "metrics") },
			"spec.metrics", "metrics is required"},
		{"homogeneous min above max", validHomogeneousPolicy, func(o map[string]any) { homogeneous(o)["minReplicas"] = 5 },
			"spec.homogeneousTarget.minReplicas", "minReplicas cannot exceed maxReplicas"},
		{"metricSources beside metricEndpoint", validHomogeneousPolicy, func(o map[string]any) {
			dig(o, "spec", "homogeneousTarget", "target")["metricEndpoint"] = map[string]any{"port": 8000}
		}, "spec.homogeneousTarget.target", "metricSources (Kthena 1.0) cannot be combined with metricEndpoint or additionalMatchLabels (Kthena 0.1)"},
		{"pod and prometheus in one source", validHomogeneousPolicy, func(o map[string]any) {
			source(o)["prometheus"] = map[string]any{"serverURL": "http://prom:9090", "query": "sum(x)"}
		}, "spec.homogeneousTarget.target.metricSources[running]", "pod and prometheus configs are mutually exclusive"},
		{"empty source", validHomogeneousPolicy, func(o map[string]any) { delete(source(o), "pod") },
			"spec.homogeneousTarget.target.metricSources[running]", "one metric source backend config is required"},
		{"prometheus without a query", validHomogeneousPolicy, func(o map[string]any) {
			delete(source(o), "pod")
			source(o)["prometheus"] = map[string]any{"serverURL": "http://prom:9090"}
		}, "spec.homogeneousTarget.target.metricSources.running.prometheus.query", "Required value"},
		{"pod uri without a slash", validHomogeneousPolicy, func(o map[string]any) { dig(source(o), "pod")["uri"] = "metrics" },
			"spec.homogeneousTarget.target.metricSources.running.pod.uri", "should match"},
		{"binding target with metricSources and additionalMatchLabels", validBinding, func(o map[string]any) {
			t := dig(o, "spec", "scalingConfiguration", "target")
			t["additionalMatchLabels"] = map[string]any{"tier": "gold"}
			t["metricSources"] = map[string]any{"waiting": map[string]any{"pod": map[string]any{}}}
		}, "spec.scalingConfiguration.target", "cannot be combined with metricEndpoint or additionalMatchLabels"},
		{"ratio with one role", validDisaggregatedPolicy, func(o map[string]any) { delete(dig(disaggregated(o), "roles"), "decode") },
			"spec.disaggregatedTarget", "roles must contain at least two entries when ratioConstraint is configured"},
		{"ratio naming no role", validDisaggregatedPolicy, func(o map[string]any) { ratio(o)["denominatorRole"] = "decoder" },
			"spec.disaggregatedTarget.ratioConstraint", "must be keys of roles"},
		{"ratio of a role to itself", validDisaggregatedPolicy, func(o map[string]any) { ratio(o)["denominatorRole"] = "prefill" },
			"spec.disaggregatedTarget.ratioConstraint", "numeratorRole and denominatorRole must differ"},
		{"minRatio above maxRatio", validDisaggregatedPolicy, func(o map[string]any) { ratio(o)["minRatio"] = "1.5" },
			"spec.disaggregatedTarget.ratioConstraint.minRatio", "minRatio cannot exceed maxRatio"},
		{"maxRatio 0", validDisaggregatedPolicy, func(o map[string]any) { ratio(o)["minRatio"], ratio(o)["maxRatio"] = "0", "0" },
			"spec.disaggregatedTarget.ratioConstraint.maxRatio", "maxRatio must be greater than 0"},
		{"three roles", validDisaggregatedPolicy, func(o map[string]any) {
			dig(disaggregated(o), "roles")["router"] = map[string]any{"minReplicas": 1, "maxReplicas": 1}
		}, "spec.disaggregatedTarget.roles", "must have at most 2 items"},
		{"role min above max", validDisaggregatedPolicy, func(o map[string]any) { dig(disaggregated(o), "roles", "prefill")["minReplicas"] = 9 },
			"spec.disaggregatedTarget.roles[prefill].minReplicas", "minReplicas cannot exceed maxReplicas"},
		{"role metric with metricName", validDisaggregatedPolicy, func(o map[string]any) {
			dig(disaggregated(o), "roles", "prefill")["metrics"] = []any{map[string]any{"metricName": "x", "targetValue": "1"}}
		}, "spec.disaggregatedTarget.roles", "name them with name, not metricName"},
		{"disaggregated target without a ModelServing name", validDisaggregatedPolicy, func(o map[string]any) { delete(disaggregated(o), "targetRef") },
			"spec.disaggregatedTarget.targetRef", "Required value"},
	}

	c := newClient(t)
	ns := newNamespace(t, c)
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := decodeYAML(t, tc.base)[0]
			obj.SetNamespace(ns)
			require.NoError(t, c.Create(ctx, obj.DeepCopy(), dryRunAll), "the unmodified base must be accepted")
			tc.patch(obj.Object)
			err := c.Create(ctx, obj, dryRunAll)
			require.Error(t, err, "the apiserver accepted a bad %s", obj.GetKind())
			assert.True(t, apierrors.IsInvalid(err), "want an Invalid error, got %v", err)
			assert.Contains(t, err.Error(), tc.field, "the error must name the field")
			assert.Contains(t, err.Error(), tc.words, "the error must explain the mistake")
			t.Logf("rejected as a user sees it: %v", err)
		})
	}

	// Accepted as written: the spec's policy, Kthena 1.0's targets with every source, a
	// policy without a target naming its metrics the 1.0 way (a binding may still use it),
	// and a disaggregatedTarget whose roles bring their own metrics.
	for name, doc := range map[string]string{
		"spec policy":          validPolicy,
		"homogeneous target":   validHomogeneousPolicy,
		"disaggregated":        validDisaggregatedPolicy,
		"1.0 names, no target": "apiVersion: workload.serving.volcano.sh/v1alpha1\nkind: AutoscalingPolicy\nmetadata: {name: ok}\nspec:\n  metrics: [{name: vllm:num_requests_waiting, targetValue: \"4\"}]\n",
		"prometheus with auth": `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: ok}
spec:
  metrics: [{name: waiting, targetValue: "4"}]
  heterogeneousTarget:
    costExpansionRatePercent: 150
    params:
    - target:
        targetRef: {name: h100}
        metricSources:
          waiting:
            prometheus:
              serverURL: https://prometheus.monitoring.svc:9090
              query: sum(vllm:num_requests_waiting{model_name="llama"})
              auth:
                bearerTokenSecret: {name: prom-token, key: token}
                tlsConfig: {caSecret: {name: prom-ca, key: ca.crt}}
      cost: 100
      minReplicas: 1
      maxReplicas: 4
`,
		"Kthena 1.0's empty auth": `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: ok}
spec:
  metrics: [{name: waiting, targetValue: "4"}]
  homogeneousTarget:
    target:
      targetRef: {name: chat}
      metricSources: {waiting: {prometheus: {serverURL: "http://prom:9090", query: "sum(x)", auth: {}}}}
    maxReplicas: 4
`,
		"roles with their own metrics": `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: ok}
spec:
  disaggregatedTarget:
    targetRef: {name: pd}
    roles:
      prefill: {minReplicas: 1, maxReplicas: 2, metrics: [{name: waiting, targetValue: "2"}]}
      decode: {minReplicas: 2, maxReplicas: 2}
`,
	} {
		obj := decodeYAML(t, doc)[0]
		obj.SetNamespace(ns)
		assert.NoError(t, c.Create(ctx, obj, dryRunAll), name)
	}
}
