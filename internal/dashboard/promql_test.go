package dashboard

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func metrics(t *testing.T, expr string) []string {
	t.Helper()
	selectors, err := Selectors(expr)
	require.NoError(t, err, expr)
	names := []string{}
	for _, s := range selectors {
		names = append(names, s.Metric)
	}
	return names
}

// Only metric names come out: not functions, aggregations, keywords, label names in
// matchers or in by/without/on/ignoring/group_left lists, strings, numbers, durations or
// Grafana variables.
func TestSelectorsNameOnlyMetrics(t *testing.T) {
	for expr, want := range map[string][]string{
		`up`: {"up"},
		`sum by (result) (rate(scheduler_schedule_attempts_total{job=~"$scheduler_job", result!="error"}[$__rate_interval]))`:                      {"scheduler_schedule_attempts_total"},
		`histogram_quantile(0.99, sum by (le, controller) (rate(controller_runtime_reconcile_time_seconds_bucket{job=~"${controller_job}"}[5m])))`: {"controller_runtime_reconcile_time_seconds_bucket"},
		`sum(rate(a_total[5m])) by (le) / ignoring (status) group_left(route) sum without (instance) (rate(b_total[1h30m] offset 1d))`:             {"a_total", "b_total"},
		`x and on (job, instance) rate(y_total{job="a"}[5m]) unless z > bool 0.5`:                                                                  {"x", "y_total", "z"},
		`label_replace(sum by (pod) (m), "dst", "$1", "src", "(.*)") * on(pod) group_right kube_pod_info`:                                          {"m", "kube_pod_info"},
		`topk(5, sum by (server, pod, role) (rate(berth_router_endpoint_picks_total{job=~"$router_job"}[$__rate_interval])))`:                      {"berth_router_endpoint_picks_total"},
		`count_values("version", build_info) or vector(0) + time() - 1e-3 * -Inf + NaN`:                                                            {"build_info"},
		`{__name__="quoted_by_name", job="x"}`:                             {"quoted_by_name"},
		`max_over_time(rate(c_total[1m])[10m:1m] @ end())`:                 {"c_total"},
		`sum(rate(d:recorded:rate5m[5m])) # a comment naming not_a_metric`: {"d:recorded:rate5m"},
		`sum by ("le") (e{'single'='quote\'s'})`:                           {"e"},
		`f{route=~"[[route]]", model="a,b)"}`:                              {"f"},
	} {
		assert.Equal(t, want, metrics(t, expr), expr)
	}
}

func TestSelectorsStructure(t *testing.T) {
	s, err := Selectors(`histogram_quantile(0.9, sum(rate(h_bucket{job=~"$router_job", model!=""}[5m])) by (le, model))`)
	require.NoError(t, err)
	require.Len(t, s, 1)
	assert.True(t, s[0].Range)
	assert.Equal(t, "rate", s[0].Innermost())
	assert.Equal(t, []Matcher{{"job", "=~", "$router_job"}, {"model", "!=", ""}}, s[0].Matchers)
	require.Len(t, s[0].Calls, 3)
	assert.Equal(t, "histogram_quantile", s[0].Calls[0].Func)
	// The grouping written after the aggregation belongs to it.
	assert.Equal(t, Call{Func: "sum", Aggregation: true, Grouping: "by", Labels: []string{"le", "model"}}, *s[0].Calls[1])

	s, err = Selectors(`(g)`)
	require.NoError(t, err)
	assert.Empty(t, s[0].Calls, "plain parentheses are no call")
	assert.False(t, s[0].Range)
}

func TestSelectorsErrors(t *testing.T) {
	for expr, want := range map[string]string{
		`rat(x_total[5m])`:         "unknown function rat",
		`sum by (le) x`:            "aggregation sum without (",
		`{job="a"}`:                "without a metric name",
		`{__name__=~"berth_.*"}`:   "cannot be checked",
		`sum(rate(x[5m])`:          "unbalanced (",
		`x)`:                       "unbalanced )",
		`x{job="a"`:                "unterminated {",
		`x{job=~$var}`:             "want an operator and a string",
		`rate(x[5m]) by (le)`:      "by without an aggregation",
		`x{job="a}`:                "unterminated string",
		`x; y`:                     "unexpected ';'",
		`sum(x) by (le) by (pod)`:  "by without an aggregation",
		`histogram_quantile(0.9,`:  "unbalanced (",
		`y[5m`:                     "unterminated [",
		`sum without (le x`:        "unterminated label list",
		`x{job="a"} offset ${oops`: "bad variable",
	} {
		_, err := Selectors(expr)
		if assert.Error(t, err, expr) {
			assert.True(t, strings.Contains(err.Error(), want), "%s: %v, want %q", expr, err, want)
		}
	}
}
