package router

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
)

// metrics are berth-router's Prometheus series, on its own registry (served at /metrics of
// the admin listener).
type metrics struct {
	registry    *prometheus.Registry
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	ttft        *prometheus.HistogramVec
	picks       *prometheus.CounterVec
	pdPairs     *prometheus.CounterVec
	retries     *prometheus.CounterVec
	tokens      *prometheus.CounterVec
	rateLimited *prometheus.CounterVec
	limiterErrs prometheus.Counter
	inflight    prometheus.Gauge
	endpoints   prometheus.Gauge
}

var latencyBuckets = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}

func newMetrics() *metrics {
	m := &metrics{registry: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_router_requests_total",
		Help: "Inference requests by ModelRoute (namespace/name, empty when none matched), requested model and HTTP status.",
	}, []string{"route", "model", "status"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "berth_router_request_duration_seconds", Buckets: latencyBuckets,
		Help: "Time from receiving a request to its last byte reaching the client.",
	}, []string{"route", "model"})
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "berth_router_time_to_first_token_seconds", Buckets: latencyBuckets,
		Help: "Time from receiving a request to the first body byte reaching the client.",
	}, []string{"route", "model"})
	m.picks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_router_endpoint_picks_total",
		Help: "Requests sent to each endpoint (ModelServer, pod and PD role).",
	}, []string{"server", "pod", "role"})
	m.pdPairs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_router_pd_pairs_total",
		Help: "Prefill/decode pairs chosen, by ModelServer, how their revisions relate (same: one revision; compatible: different revisions with the same role templates; cross: allowed by networking.berth.sh/pd-cross-revision only) and how far apart the two endpoints sit in the fabric (node: the same node; the lowest tier they share: nvlink, leaf, ...; far: none; unknown: no fabric, or a node outside it).",
	}, []string{"server", "revisions", "tier"})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_router_retries_total",
		Help: "Attempts retried, by the target that failed (ModelServer or ExternalModelProvider, namespace/name) and reason (status code or transport).",
	}, []string{"server", "reason"})
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_router_tokens_total",
		Help: "Tokens of answered requests by ModelRoute, model, target (kind: ModelServer or ExternalModelProvider; namespace/name) and type (input or output), from the answer's usage (OpenAI's or Anthropic's), else the router's estimate (input) or its count of streamed chunks (output).",
	}, []string{"route", "model", "target_kind", "target", "type"})
	m.rateLimited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_router_rate_limited_total",
		Help: "Requests refused with 429 by a ModelRoute's rate limit.",
	}, []string{"route"})
	m.limiterErrs = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "berth_router_rate_limiter_errors_total",
		Help: "Rate-limit decisions that failed (Redis unreachable); the request was let through.",
	})
	m.inflight = prometheus.NewGauge(prometheus.GaugeOpts{Name: "berth_router_inflight_requests", Help: "Requests being served now."})
	m.endpoints = prometheus.NewGauge(prometheus.GaugeOpts{Name: "berth_router_endpoints", Help: "Ready endpoints across all ModelServers."})
	m.registry.MustRegister(m.requests, m.duration, m.ttft, m.picks, m.pdPairs, m.retries, m.tokens, m.rateLimited, m.limiterErrs, m.inflight, m.endpoints,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// forgetPods deletes the pick series of every pod not in keep. It reads the pods from the
// series that exist rather than from the previous view: a request that picked a pod just
// before the pod left the view counts its pick after the view changed, re-creating a series
// that a diff of two views would never delete.
func (m *metrics) forgetPods(keep map[string]bool) {
	ch := make(chan prometheus.Metric)
	go func() { m.picks.Collect(ch); close(ch) }()
	var gone []string
	for pm := range ch {
		var d dto.Metric
		if pm.Write(&d) != nil {
			continue
		}
		for _, l := range d.GetLabel() {
			if l.GetName() == "pod" && !keep[l.GetValue()] {
				gone = append(gone, l.GetValue())
			}
		}
	}
	for _, pod := range gone {
		m.picks.DeletePartialMatch(prometheus.Labels{"pod": pod})
	}
}
