package dashboard

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	k8smetrics "k8s.io/component-base/metrics"
)

func load(t *testing.T, model any) *Dashboard {
	t.Helper()
	raw, err := json.Marshal(model)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "dashboard.json")
	require.NoError(t, os.WriteFile(path, raw, 0o600))
	d, err := Load(path)
	require.NoError(t, err)
	return d
}

func panel(title string, exprs ...string) map[string]any {
	var targets []map[string]any
	for i, e := range exprs {
		targets = append(targets, map[string]any{"refId": string(rune('A' + i)), "expr": e})
	}
	return map[string]any{"type": "timeseries", "title": title, "targets": targets}
}

// Queries come from panels at the top, in open rows, inside collapsed rows, and from query
// variables (both forms of their query); other variables hold none.
func TestQueries(t *testing.T) {
	d := load(t, map[string]any{
		"panels": []any{
			panel("top", "a"),
			map[string]any{"type": "row", "title": "open", "panels": []any{}},
			panel("in open", "b", "c"),
			map[string]any{"type": "row", "title": "collapsed", "collapsed": true, "panels": []any{panel("in collapsed", "d")}},
		},
		"templating": map[string]any{"list": []any{
			map[string]any{"name": "datasource", "type": "datasource", "query": "prometheus"},
			map[string]any{"name": "router_job", "type": "query", "query": map[string]any{"query": `label_values(berth_router_endpoints{x=~"a,b"}, job)`, "refId": "V"}},
			map[string]any{"name": "old", "type": "query", "query": "query_result(sum(e))"},
			map[string]any{"name": "labels", "type": "query", "query": "label_values(job)"},
			map[string]any{"name": "custom", "type": "custom", "query": "a,b"},
		}},
	})
	q, err := d.Queries()
	require.NoError(t, err)
	var got []string
	for _, x := range q {
		got = append(got, x.Where+" = "+x.Expr)
	}
	assert.Equal(t, []string{
		`row "" panel "top" query A = a`,
		`row "open" panel "in open" query A = b`,
		`row "open" panel "in open" query B = c`,
		`row "collapsed" panel "in collapsed" query A = d`,
		`variable router_job = berth_router_endpoints{x=~"a,b"}`,
		`variable old = sum(e)`,
	}, got)
}

// A registry's families include vectors without series, typed by their collector, for
// client_golang's and component-base's metrics alike.
func TestExported(t *testing.T) {
	r := prometheus.NewRegistry()
	r.MustRegister(
		prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "h"}, []string{"l"}),
		prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "g", Help: "h"}, []string{"l"}),
		prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "h_seconds", Help: "h"}, []string{"l"}),
		prometheus.NewSummaryVec(prometheus.SummaryOpts{Name: "s_seconds", Help: "h"}, []string{"l"}),
		prometheus.NewHistogram(prometheus.HistogramOpts{Name: "plain_seconds", Help: "h"}),
		collectors.NewGoCollector(),
	)
	kube := k8smetrics.NewKubeRegistry()
	kube.MustRegister(
		k8smetrics.NewCounterVec(&k8smetrics.CounterOpts{Subsystem: "k", Name: "c_total", Help: "h", StabilityLevel: k8smetrics.ALPHA}, []string{"l"}),
		k8smetrics.NewHistogramVec(&k8smetrics.HistogramOpts{Subsystem: "k", Name: "h_seconds", Help: "h", StabilityLevel: k8smetrics.ALPHA}, []string{"l"}),
		k8smetrics.NewGaugeVec(&k8smetrics.GaugeOpts{Subsystem: "k", Name: "g", Help: "h", StabilityLevel: k8smetrics.ALPHA}, []string{"l"}),
	)
	for _, reg := range []prometheus.Registerer{r, kube.Registerer()} {
		f, err := Exported(reg.(Registry))
		require.NoError(t, err)
		if reg == r {
			assert.Equal(t, Gauge, f["go_goroutines"], "gathered")
			assert.Equal(t, Counter, f["c_total"])
			assert.Equal(t, Gauge, f["g"])
			assert.Equal(t, Histogram, f["h_seconds"])
			assert.Equal(t, Summary, f["s_seconds"])
			assert.Equal(t, Histogram, f["plain_seconds"])
		} else {
			assert.Equal(t, Counter, f["k_c_total"])
			assert.Equal(t, Histogram, f["k_h_seconds"])
			assert.Equal(t, Gauge, f["k_g"])
		}
	}
	// Probing left the registry as it was.
	again, err := Exported(r)
	require.NoError(t, err)
	assert.Len(t, again, len(mustExported(t, r)))

	f := mustExported(t, r)
	for series, family := range map[string]string{"c_total": "c_total", "h_seconds_bucket": "h_seconds", "h_seconds_count": "h_seconds", "s_seconds_sum": "s_seconds", "s_seconds": "s_seconds"} {
		got, _, ok := f.Lookup(series)
		assert.True(t, ok, series)
		assert.Equal(t, family, got, series)
	}
	for _, series := range []string{"h_seconds", "s_seconds_bucket", "c_total_bucket", "g_count", "nope"} {
		_, _, ok := f.Lookup(series)
		assert.False(t, ok, series)
	}
}

func mustExported(t *testing.T, r Registry) Families {
	t.Helper()
	f, err := Exported(r)
	require.NoError(t, err)
	return f
}

var components = map[string]Families{
	"scheduler":  {"s_attempts_total": Counter, "s_latency_seconds": Histogram, "s_pending": Gauge, "process_rss_bytes": Gauge},
	"controller": {"c_reconcile_total": Counter, "process_rss_bytes": Gauge},
	"router":     {"r_requests_total": Counter, "r_endpoints": Gauge},
}

func TestCheckAcceptsCorrectQueries(t *testing.T) {
	d := load(t, map[string]any{
		"panels": []any{
			map[string]any{"type": "row", "title": "scheduler"},
			panel("attempts", `sum by (result) (rate(s_attempts_total{job=~"$scheduler_job"}[$__rate_interval]))`),
			panel("latency", `histogram_quantile(0.99, sum by (le) (rate(s_latency_seconds_bucket{job=~"$scheduler_job"}[5m])))`,
				`sum(rate(s_latency_seconds_sum{job=~"$scheduler_job"}[5m])) / sum(rate(s_latency_seconds_count{job=~"$scheduler_job"}[5m]))`),
			panel("pending", `sum(s_pending{job=~"$scheduler_job"} and on (job, instance) rate(s_attempts_total{job=~"${scheduler_job}"}[5m]))`),
			panel("memory", `process_rss_bytes{job=~"$scheduler_job|$controller_job"}`),
		},
		"templating": map[string]any{"list": []any{
			map[string]any{"name": "router_job", "type": "query", "query": "label_values(r_endpoints, job)"},
			map[string]any{"name": "any", "type": "query", "query": "label_values(c_reconcile_total, controller)"},
		}},
	})
	problems, err := Check(d, components)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

func TestCheckFindsProblems(t *testing.T) {
	for expr, want := range map[string]string{
		`rate(s_atempts_total{job=~"$scheduler_job"}[5m])`:                                                      `s_atempts_total is not a metric berth-scheduler exports (did you mean s_attempts_total?)`,
		`rate(r_requests_total{job=~"$scheduler_job"}[5m])`:                                                     `r_requests_total is not a metric berth-scheduler exports`,
		`s_latency_seconds{job=~"$scheduler_job"}`:                                                              `(a histogram: query s_latency_seconds_bucket, _sum or _count)`,
		`process_rss_bytes{job=~"$scheduler_job|$router_job"}`:                                                  `process_rss_bytes is not a metric berth-router exports`,
		`rate(s_attempts_total[5m])`:                                                                            `s_attempts_total: no job matcher`,
		`rate(s_attempts_total{job="berth-scheduler"}[5m])`:                                                     `want only $<component>_job variables`,
		`rate(s_attempts_total{job!~"$scheduler_job"}[5m])`:                                                     `want =~ with job variables`,
		`rate(s_attempts_total{job=~"$nobody_job"}[5m])`:                                                        `want only $<component>_job variables`,
		`sum(s_attempts_total{job=~"$scheduler_job"})`:                                                          `s_attempts_total is a counter: read it through rate(), irate() or increase(), not sum()`,
		`s_latency_seconds_count{job=~"$scheduler_job"}`:                                                        `s_latency_seconds_count is a histogram's series and only grows`,
		`rate(s_pending{job=~"$scheduler_job"}[5m])`:                                                            `s_pending is a gauge: rate() is for counters`,
		`rate(s_attempts_total{job=~"$scheduler_job"})`:                                                         `rate() needs a range`,
		`sum(rate(s_latency_seconds_bucket{job=~"$scheduler_job"}[5m]))`:                                        `give them to histogram_quantile()`,
		`histogram_quantile(0.9, sum(rate(s_latency_seconds_bucket{job=~"$scheduler_job"}[5m])))`:               `sum between histogram_quantile() and the buckets drops le`,
		`histogram_quantile(0.9, sum without (le) (rate(s_latency_seconds_bucket{job=~"$scheduler_job"}[5m])))`: `drops le`,
		`histogram_quantile(0.9, sum by (pod) (rate(s_latency_seconds_bucket{job=~"$scheduler_job"}[5m])))`:     `drops le`,
		`sum(rate(s_attempts_total{job=~"$scheduler_job"}[5m])`:                                                 `unbalanced (`,
		``: `no expression`,
	} {
		d := load(t, map[string]any{"panels": []any{
			map[string]any{"type": "row", "title": "r", "collapsed": true, "panels": []any{panel("p", expr)}},
		}})
		problems, err := Check(d, components)
		require.NoError(t, err)
		if assert.Len(t, problems, 1, expr) {
			assert.Contains(t, problems[0], want, expr)
			assert.True(t, strings.HasPrefix(problems[0], `row "r" panel "p" query A: `), problems[0])
		}
	}
}

func TestCheckVariables(t *testing.T) {
	for query, want := range map[string]string{
		"label_values(r_endpoints, job)":       "",
		"query_result(max(r_endpoints))":       "",
		"label_values(s_pending, job)":         "s_pending is not a metric berth-router exports",
		"label_values(r_endpoint, job)":        "did you mean r_endpoints?",
		"query_result(sum(c_reconcile_total))": "c_reconcile_total is not a metric berth-router exports",
	} {
		d := load(t, map[string]any{"templating": map[string]any{"list": []any{
			map[string]any{"name": "router_job", "type": "query", "query": query},
		}}})
		problems, err := Check(d, components)
		require.NoError(t, err)
		if want == "" {
			assert.Empty(t, problems, query)
		} else if assert.Len(t, problems, 1, query) {
			assert.Contains(t, problems[0], want)
		}
	}

	d := load(t, map[string]any{"templating": map[string]any{"list": []any{
		map[string]any{"name": "model", "type": "query", "query": "label_values(c_reconcile_total, controller)"},
		map[string]any{"name": "other", "type": "query", "query": "label_values(nothing_total, x)"},
	}}})
	problems, err := Check(d, components)
	require.NoError(t, err)
	assert.Equal(t, []string{"variable other: nothing_total is not a metric any component exports"}, problems)
}

// Berth's dashboard, as Grafana imports it: every query parses, every panel and query reads
// the ${datasource} variable (so it imports into any Grafana, from the UI or a sidecar), and
// panel ids are unique. pkg/scheduler's TestDashboardQueriesExportedMetrics checks the
// metrics against the components.
func TestBerthDashboardModel(t *testing.T) {
	const path = "../../manifests/observability/berth-dashboard.json"
	d, err := Load(path)
	require.NoError(t, err)
	queries, err := d.Queries()
	require.NoError(t, err)
	assert.Greater(t, len(queries), 50)
	for _, q := range queries {
		_, err := Selectors(q.Expr)
		assert.NoError(t, err, q.Where)
	}

	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var model struct {
		SchemaVersion int              `json:"schemaVersion"`
		UID           string           `json:"uid"`
		Panels        []map[string]any `json:"panels"`
		Templating    struct {
			List []map[string]any `json:"list"`
		} `json:"templating"`
	}
	require.NoError(t, json.Unmarshal(raw, &model))
	assert.GreaterOrEqual(t, model.SchemaVersion, 39)
	assert.NotEmpty(t, model.UID)
	require.NotEmpty(t, model.Templating.List)
	assert.Equal(t, map[string]any{"name": "datasource", "type": "datasource", "query": "prometheus"},
		map[string]any{"name": model.Templating.List[0]["name"], "type": model.Templating.List[0]["type"], "query": model.Templating.List[0]["query"]})
	want := map[string]any{"type": "prometheus", "uid": "${datasource}"}
	ids := map[float64]string{}
	var walk func(panels []map[string]any)
	walk = func(panels []map[string]any) {
		for _, p := range panels {
			title, _ := p["title"].(string)
			id, _ := p["id"].(float64)
			if other, dup := ids[id]; dup || id == 0 {
				t.Errorf("panel %q: id %v (also %q)", title, id, other)
			}
			ids[id] = title
			if p["type"] == "row" {
				nested, _ := json.Marshal(p["panels"])
				var children []map[string]any
				require.NoError(t, json.Unmarshal(nested, &children))
				walk(children)
				continue
			}
			assert.Equal(t, want, p["datasource"], "panel %q", title)
			targets, _ := p["targets"].([]any)
			for _, target := range targets {
				assert.Equal(t, want, target.(map[string]any)["datasource"], "panel %q", title)
			}
		}
	}
	walk(model.Panels)
	for _, v := range model.Templating.List[1:] {
		assert.Equal(t, want, v["datasource"], "variable %v", v["name"])
	}
}
