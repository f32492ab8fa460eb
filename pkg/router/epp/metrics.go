package epp

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	requests  *prometheus.CounterVec
	decisions *prometheus.HistogramVec
	streams   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "berth_router_epp_requests_total",
			Help: "ext_proc streams by result: picked (an endpoint was named), refused (answered by the picker: no route, no endpoint, rate limit), too_large (request body over --max-body-bytes), invalid (the data plane broke the protocol or uses an unsupported body mode), cancelled (ended before a decision).",
		}, []string{"result"}),
		decisions: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "berth_router_epp_decision_duration_seconds",
			Help:    "Time the endpoint picker took to decide once it had the whole request (parse, match, rate limit, scoring), by result (picked or refused).",
			Buckets: []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1},
		}, []string{"result"}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "berth_router_epp_streams",
			Help: "ext_proc streams open now (one per request Envoy is processing).",
		}),
	}
	reg.MustRegister(m.requests, m.decisions, m.streams)
	return m
}
