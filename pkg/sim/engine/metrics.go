package engine

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics holds the Prometheus series of one engine, registered in a per-Server registry
// (never the global one: a test process runs many engines). Names follow the flavor:
// vLLM's current names, vLLM's legacy names (LegacyMetricNames) or SGLang's. Durations
// are observed in simulated seconds so dashboards and routers see GPU-like numbers
// whatever the TimeScale.
type metrics struct {
	reg *prometheus.Registry

	ttft, itl, e2e prometheus.Observer
	promptTokens   prometheus.Counter
	genTokens      prometheus.Counter
	prefixQueries  prometheus.Counter // nil for SGLang, which exports a hit rate instead
	prefixHits     prometheus.Counter
	success        *prometheus.CounterVec // by finished_reason; nil for SGLang
	// Tokens per finished request, as vLLM observes them when a request ends; nil for SGLang.
	requestPrompt, requestGeneration prometheus.Observer
}

// Histogram buckets as the real servers define them.
var (
	vllmTTFTBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	vllmITLBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
		1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	vllmE2EBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
		40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	// vLLM's request token histograms use 1-2-5 buckets up to the model length.
	vllmTokenBuckets  = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}
	sglangTTFTBuckets = []float64{0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 120, 160}
	sglangITLBuckets  = []float64{0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030,
		0.035, 0.040, 0.060, 0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000}
	sglangE2EBuckets = []float64{0.1, 0.25, 0.5, 1, 2, 4, 8, 10, 20, 40, 60, 80, 120, 160, 240,
		300, 400, 600, 800, 1200, 1800, 2400}
)

const labelModel = "model_name"

func newMetrics(s *Server) *metrics {
	cfg := &s.cfg
	m := &metrics{reg: prometheus.NewRegistry()}
	constLabels := prometheus.Labels{labelModel: cfg.Model}
	hist := func(name, help string, buckets []float64) prometheus.Observer {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: constLabels})
		m.reg.MustRegister(h)
		return h
	}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: constLabels})
		m.reg.MustRegister(c)
		return c
	}

	if cfg.Flavor == SGLang {
		m.ttft = hist("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", sglangTTFTBuckets)
		m.itl = hist("sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", sglangITLBuckets)
		m.e2e = hist("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", sglangE2EBuckets)
		m.promptTokens = counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.")
		m.genTokens = counter("sglang:generation_tokens_total", "Number of generation tokens processed.")
	} else {
		itlName, itlHelp := "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."
		queriesName, hitsName := "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"
		if cfg.LegacyMetricNames {
			itlName, itlHelp = "vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds."
			queriesName, hitsName = "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total"
		}
		m.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", vllmTTFTBuckets)
		m.itl = hist(itlName, itlHelp, vllmITLBuckets)
		m.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", vllmE2EBuckets)
		m.prefixQueries = counter(queriesName, "Prefix cache queries, in terms of number of queried tokens.")
		m.prefixHits = counter(hitsName, "Prefix cache hits, in terms of number of cached tokens.")
		m.promptTokens = counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.")
		m.genTokens = counter("vllm:generation_tokens_total", "Number of generation tokens processed.")
		m.success = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: constLabels,
		}, []string{"finished_reason"})
		m.reg.MustRegister(m.success)
		m.requestPrompt = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", vllmTokenBuckets)
		m.requestGeneration = hist("vllm:request_generation_tokens", "Number of generation tokens processed.", vllmTokenBuckets)
		// vLLM exports every finished_reason from the start, so rate() works from the
		// first scrape.
		for _, r := range []string{"stop", "length", "abort"} {
			m.success.WithLabelValues(r)
		}
	}
	m.reg.MustRegister(newStateCollector(s))
	return m
}

// stateCollector exports the gauges that describe the scheduler's state. They are read
// at scrape time from a snapshot, which keeps them exact without updating gauges on
// every step, and lets vllm:lora_requests_info replace its single series atomically.
type stateCollector struct {
	s                                 *Server
	running, waiting, usage, loraInfo *prometheus.Desc
	hitRate, throughput               *prometheus.Desc // SGLang only
}

func newStateCollector(s *Server) *stateCollector {
	cfg := &s.cfg
	constLabels := prometheus.Labels{labelModel: cfg.Model}
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, constLabels)
	}
	c := &stateCollector{s: s}
	if cfg.Flavor == SGLang {
		c.running = d("sglang:num_running_reqs", "The number of running requests.")
		c.waiting = d("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
		c.usage = d("sglang:token_usage", "The token usage.")
		c.hitRate = d("sglang:cache_hit_rate", "The prefix cache hit rate.")
		c.throughput = d("sglang:gen_throughput", "The generation throughput (token/s).")
		return c
	}
	c.running = d("vllm:num_requests_running", "Number of requests in model execution batches.")
	c.waiting = d("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
	if cfg.LegacyMetricNames {
		c.usage = d("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.")
	} else {
		c.usage = d("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
	}
	c.loraInfo = d("vllm:lora_requests_info", "Running stats on lora requests.",
		"running_lora_adapters", "max_lora", "waiting_lora_adapters")
	return c
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.running, c.waiting, c.usage, c.loraInfo, c.hitRate, c.throughput} {
		if d != nil {
			ch <- d
		}
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.s.snapshot()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(c.running, float64(st.running))
	gauge(c.waiting, float64(st.waiting))
	gauge(c.usage, st.kvUsage)
	if c.loraInfo != nil {
		// As vLLM: one series whose labels carry the adapter sets and whose value is
		// the time of the update, so a scraper takes the newest one.
		gauge(c.loraInfo, float64(time.Now().UnixNano())/1e9,
			st.runningLoRAs, strconv.Itoa(c.s.cfg.MaxLoRAs), st.waitingLoRAs)
	}
	if c.hitRate != nil {
		rate := 0.0
		if st.prefixQueryTokens > 0 {
			rate = float64(st.prefixHitTokens) / float64(st.prefixQueryTokens)
		}
		gauge(c.hitRate, rate)
		gauge(c.throughput, st.genThroughput)
	}
}
