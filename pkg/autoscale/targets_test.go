package autoscale

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

func TestValidateTargets(t *testing.T) {
	metric := func(name string) workloadv1alpha1.AutoscalingPolicyMetric {
		return workloadv1alpha1.AutoscalingPolicyMetric{Name: name, TargetValue: resource.MustParse("4")}
	}
	pd := func(mut func(*workloadv1alpha1.DisaggregatedTarget)) *workloadv1alpha1.AutoscalingPolicySpec {
		dt := &workloadv1alpha1.DisaggregatedTarget{
			TargetRef: corev1.ObjectReference{Name: "pd"},
			Roles: map[string]workloadv1alpha1.RoleScalingParam{
				"prefill": {MinReplicas: 1, MaxReplicas: 4},
				"decode":  {MinReplicas: 1, MaxReplicas: 8},
			},
			RatioConstraint: &workloadv1alpha1.RoleRatioConstraint{NumeratorRole: "prefill", DenominatorRole: "decode",
				MinRatio: resource.MustParse("0.25"), MaxRatio: resource.MustParse("1")},
		}
		if mut != nil {
			mut(dt)
		}
		return &workloadv1alpha1.AutoscalingPolicySpec{Metrics: []workloadv1alpha1.AutoscalingPolicyMetric{metric("running")}, DisaggregatedTarget: dt}
	}
	setRole := func(dt *workloadv1alpha1.DisaggregatedTarget, role string, f func(*workloadv1alpha1.RoleScalingParam)) {
		p := dt.Roles[role]
		f(&p)
		dt.Roles[role] = p
	}
	for name, tc := range map[string]struct {
		spec *workloadv1alpha1.AutoscalingPolicySpec
		want string // "" for valid
	}{
		"valid P/D": {pd(nil), ""},
		"unknown source key": {&workloadv1alpha1.AutoscalingPolicySpec{
			Metrics: []workloadv1alpha1.AutoscalingPolicyMetric{metric("running")},
			HomogeneousTarget: &workloadv1alpha1.ScalingConfiguration{MaxReplicas: 2, Target: workloadv1alpha1.Target{
				MetricSources: map[string]workloadv1alpha1.MetricSource{"runing": {Pod: &workloadv1alpha1.PodMetricSource{}}}}},
		}, `spec.homogeneousTarget.target.metricSources[runing]: names no metric of the policy (it has "running")`},
		"prometheus without a scheme": {&workloadv1alpha1.AutoscalingPolicySpec{
			Metrics: []workloadv1alpha1.AutoscalingPolicyMetric{metric("running")},
			HeterogeneousTarget: &workloadv1alpha1.OptimizerConfiguration{Params: []workloadv1alpha1.OptimizerParam{{MaxReplicas: 2, Target: workloadv1alpha1.Target{
				MetricSources: map[string]workloadv1alpha1.MetricSource{"running": {Prometheus: &workloadv1alpha1.PrometheusMetricSource{ServerURL: "prometheus:9090", Query: "x"}}}}}}},
		}, `spec.heterogeneousTarget.params[0].target.metricSources[running].prometheus.serverURL: "prometheus:9090" is not an http or https URL`},
		"scaled role without metrics": {func() *workloadv1alpha1.AutoscalingPolicySpec { s := pd(nil); s.Metrics = nil; return s }(),
			"spec.disaggregatedTarget.roles[decode].metrics: a role scaled between 1 and 8 replicas needs metrics"},
		"role source for another metric": {pd(func(dt *workloadv1alpha1.DisaggregatedTarget) {
			setRole(dt, "prefill", func(p *workloadv1alpha1.RoleScalingParam) {
				p.MetricSources = map[string]workloadv1alpha1.MetricSource{"waiting": {Pod: &workloadv1alpha1.PodMetricSource{}}}
			})
		}), "spec.disaggregatedTarget.roles[prefill].metricSources[waiting]: names no metric"},
		"not a ModelServing": {pd(func(dt *workloadv1alpha1.DisaggregatedTarget) { dt.TargetRef.Kind = "Deployment" }),
			`spec.disaggregatedTarget.targetRef.kind: "Deployment"`},
		"scale to zero alone": {pd(func(dt *workloadv1alpha1.DisaggregatedTarget) {
			setRole(dt, "prefill", func(p *workloadv1alpha1.RoleScalingParam) { p.MinReplicas = 0 })
		}), "must scale to zero together"},
		"ratio above reach": {pd(func(dt *workloadv1alpha1.DisaggregatedTarget) {
			setRole(dt, "prefill", func(p *workloadv1alpha1.RoleScalingParam) { p.MinReplicas = 3 })
			setRole(dt, "decode", func(p *workloadv1alpha1.RoleScalingParam) { p.MaxReplicas = 2 })
		}), "even at their bounds prefill:decode is at least 3:2, above maxRatio 1"},
		"ratio below reach": {pd(func(dt *workloadv1alpha1.DisaggregatedTarget) {
			setRole(dt, "decode", func(p *workloadv1alpha1.RoleScalingParam) { p.MinReplicas = 8 })
			setRole(dt, "prefill", func(p *workloadv1alpha1.RoleScalingParam) { p.MaxReplicas = 1 })
		}), "at most 1:8, below minRatio 250m"},
		"fixed role needs no metrics": {func() *workloadv1alpha1.AutoscalingPolicySpec {
			s := pd(func(dt *workloadv1alpha1.DisaggregatedTarget) {
				setRole(dt, "decode", func(p *workloadv1alpha1.RoleScalingParam) { p.MinReplicas, p.MaxReplicas = 4, 4 })
				setRole(dt, "prefill", func(p *workloadv1alpha1.RoleScalingParam) {
					p.Metrics = []workloadv1alpha1.AutoscalingPolicyMetric{metric("waiting")}
				})
			})
			s.Metrics = nil
			return s
		}(), ""},
	} {
		t.Run(name, func(t *testing.T) {
			err := ValidateTargets(tc.spec)
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			if assert.Error(t, err) {
				assert.Contains(t, err.Error(), tc.want)
			}
		})
	}
}
