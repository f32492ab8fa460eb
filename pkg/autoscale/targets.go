package autoscale

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"sort"

	"k8s.io/apimachinery/pkg/runtime/schema"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// ValidateTargets checks what the schema cannot of a policy's own target (Kthena 1.0's
// shape), as Kthena 1.0's admission webhook does: metricSources name the policy's metrics,
// Prometheus servers are http(s) URLs, a disaggregatedTarget names a ModelServing, every role
// it scales has metrics, and its ratioConstraint is one the roles' bounds can meet. It
// returns every problem found, each with its field.
func ValidateTargets(spec *workloadv1alpha1.AutoscalingPolicySpec) error {
	var errs []error
	keys := metricKeys(spec.Metrics)
	if t := spec.HomogeneousTarget; t != nil {
		errs = append(errs, ValidateSources(t.Target.MetricSources, keys, "spec.homogeneousTarget.target.metricSources")...)
	}
	if t := spec.HeterogeneousTarget; t != nil {
		for i, p := range t.Params {
			errs = append(errs, ValidateSources(p.Target.MetricSources, keys, fmt.Sprintf("spec.heterogeneousTarget.params[%d].target.metricSources", i))...)
		}
	}
	if t := spec.DisaggregatedTarget; t != nil {
		errs = append(errs, validateDisaggregated(spec, t)...)
	}
	return errors.Join(errs...)
}

// ValidateSources checks that every metric source names one of keys (the policy's metric
// names) and that every Prometheus server is an http(s) URL.
func ValidateSources(sources map[string]workloadv1alpha1.MetricSource, keys map[string]bool, field string) []error {
	var errs []error
	for _, k := range sortedKeys(sources) {
		if !keys[k] {
			errs = append(errs, fmt.Errorf("%s[%s]: names no metric of the policy (it has %s)", field, k, listKeys(keys)))
		}
		if p := sources[k].Prometheus; p != nil {
			if u, err := url.Parse(p.ServerURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				errs = append(errs, fmt.Errorf("%s[%s].prometheus.serverURL: %q is not an http or https URL", field, k, p.ServerURL))
			}
		}
	}
	return errs
}

func validateDisaggregated(spec *workloadv1alpha1.AutoscalingPolicySpec, t *workloadv1alpha1.DisaggregatedTarget) []error {
	var errs []error
	const field = "spec.disaggregatedTarget"
	ref := t.TargetRef
	if ref.Kind != "" && ref.Kind != "ModelServing" {
		errs = append(errs, fmt.Errorf("%s.targetRef.kind: %q: the roles of a ModelServing are scaled, nothing else", field, ref.Kind))
	}
	if ref.APIVersion != "" {
		if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != workloadv1alpha1.GroupName {
			errs = append(errs, fmt.Errorf("%s.targetRef.apiVersion: %q is not %s", field, ref.APIVersion, workloadv1alpha1.GroupName))
		}
	}
	if ref.Name == "" {
		errs = append(errs, fmt.Errorf("%s.targetRef.name: must name the ModelServing", field))
	}
	for _, role := range sortedKeys(t.Roles) {
		param := t.Roles[role]
		rf := fmt.Sprintf("%s.roles[%s]", field, role)
		metrics, err := RoleMetrics(spec, role, param)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !FixedRole(param) && len(metrics) == 0 {
			errs = append(errs, fmt.Errorf("%s.metrics: a role scaled between %d and %d replicas needs metrics (its own, or spec.metrics)", rf, param.MinReplicas, param.MaxReplicas))
		}
		keys := map[string]bool{}
		for _, m := range metrics {
			keys[m.Name] = true
		}
		if FixedRole(param) {
			continue // held at its size: its sources are never read
		}
		errs = append(errs, ValidateSources(param.MetricSources, keys, rf+".metricSources")...)
	}
	if c := t.RatioConstraint; c != nil {
		rf := field + ".ratioConstraint"
		lo, hi := c.MinRatio.AsApproximateFloat64(), c.MaxRatio.AsApproximateFloat64()
		num, nok := t.Roles[c.NumeratorRole]
		den, dok := t.Roles[c.DenominatorRole]
		switch {
		case math.IsNaN(lo) || math.IsInf(lo, 0) || math.IsNaN(hi) || math.IsInf(hi, 0):
			errs = append(errs, fmt.Errorf("%s: minRatio and maxRatio must be finite", rf))
		case lo < 0:
			errs = append(errs, fmt.Errorf("%s.minRatio: %s is negative", rf, c.MinRatio.String()))
		case !nok || !dok:
			// the schema refuses roles that are not keys of roles
		case (num.MinReplicas == 0) != (den.MinReplicas == 0):
			errs = append(errs, fmt.Errorf("%s: %s and %s must scale to zero together (both minReplicas 0, or neither)", rf, c.NumeratorRole, c.DenominatorRole))
		case float64(num.MinReplicas) > hi*float64(den.MaxReplicas)+1e-9:
			errs = append(errs, fmt.Errorf("%s: even at their bounds %s:%s is at least %d:%d, above maxRatio %s", rf, c.NumeratorRole, c.DenominatorRole, num.MinReplicas, den.MaxReplicas, c.MaxRatio.String()))
		case den.MinReplicas > 0 && float64(num.MaxReplicas) < lo*float64(den.MinReplicas)-1e-9:
			errs = append(errs, fmt.Errorf("%s: even at their bounds %s:%s is at most %d:%d, below minRatio %s", rf, c.NumeratorRole, c.DenominatorRole, num.MaxReplicas, den.MinReplicas, c.MinRatio.String()))
		}
	}
	return errs
}

func metricKeys(list []workloadv1alpha1.AutoscalingPolicyMetric) map[string]bool {
	out := map[string]bool{}
	for _, m := range list {
		out[m.Key()] = true
	}
	return out
}

func listKeys(keys map[string]bool) string {
	if len(keys) == 0 {
		return "none"
	}
	var out []string
	for k := range keys {
		out = append(out, fmt.Sprintf("%q", k))
	}
	sort.Strings(out)
	s := out[0]
	for _, k := range out[1:] {
		s += ", " + k
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
