package engine

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
)

func checkNames(t *testing.T, fams map[string]*dto.MetricFamily, present, absent []string) {
	t.Helper()
	for _, n := range present {
		f := fams[n]
		if f == nil {
			t.Errorf("missing %s", n)
			continue
		}
		for _, m := range f.Metric {
			ok := false
			for _, l := range m.Label {
				ok = ok || (l.GetName() == "model_name" && l.GetValue() == "base")
			}
			if !ok {
				t.Errorf("%s has no model_name=\"base\" label: %v", n, m.Label)
			}
		}
	}
	for _, n := range absent {
		if fams[n] != nil {
			t.Errorf("unexpected %s", n)
		}
	}
}

func TestMetricsVLLM(t *testing.T) {
	s, base := startEngine(t, Config{Model: "base", TimeScale: 0.001, MaxLoRAs: 2})
	post(t, base+"/v1/load_lora_adapter", map[string]any{"lora_name": "ad", "lora_path": "/p"}, nil)
	post(t, base+"/v1/chat/completions", chatBody("base", "hello world", 4), nil)
	post(t, base+"/v1/chat/completions", chatBody("ad", "hello world", 4), nil)
	fams := scrape(t, base)
	checkNames(t, fams, []string{
		"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
		"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds",
		"vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total",
		"vllm:generation_tokens_total", "vllm:request_success_total", "vllm:lora_requests_info",
	}, []string{"vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_queries_total", "vllm:time_per_output_token_seconds"})

	if fams["vllm:num_requests_running"].GetType() != dto.MetricType_GAUGE ||
		fams["vllm:time_to_first_token_seconds"].GetType() != dto.MetricType_HISTOGRAM ||
		fams["vllm:generation_tokens_total"].GetType() != dto.MetricType_COUNTER {
		t.Error("wrong metric types")
	}
	if v := value(t, fams, "vllm:generation_tokens_total"); v != 8 {
		t.Errorf("generation tokens %v", v)
	}
	if v := value(t, fams, "vllm:prompt_tokens_total"); v != float64(s.Stats().PromptTokens) || v == 0 {
		t.Errorf("prompt tokens %v", v)
	}
	for _, m := range fams["vllm:request_success_total"].Metric {
		for _, l := range m.Label {
			if l.GetName() == "finished_reason" && l.GetValue() == "length" && m.Counter.GetValue() != 2 {
				t.Errorf("length successes %v", m.Counter.GetValue())
			}
		}
	}
	// Latencies in simulated seconds: each token of a lone request costs a step of 8.15ms,
	// whatever the TimeScale.
	if sum, n := histogram(t, fams, "vllm:e2e_request_latency_seconds"); n != 2 || sum < 2*4*0.008 || sum > 2*4*0.0085 {
		t.Errorf("e2e sum %v over %d requests, want ~0.065s", sum, n)
	}
	lora := fams["vllm:lora_requests_info"].Metric
	if len(lora) != 1 || value(t, fams, "vllm:lora_requests_info") < 1e9 {
		t.Fatalf("lora_requests_info %v", lora)
	}
	labels := map[string]string{}
	for _, l := range lora[0].Label {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["max_lora"] != "2" || labels["running_lora_adapters"] != "" || labels["waiting_lora_adapters"] != "" {
		t.Errorf("lora_requests_info labels %v", labels)
	}
}

func TestLoRARunningLabel(t *testing.T) {
	s, base := startEngine(t, Config{Model: "base", TimeScale: 0.05})
	post(t, base+"/v1/load_lora_adapter", map[string]any{"lora_name": "b-ad", "lora_path": "/p"}, nil)
	post(t, base+"/v1/load_lora_adapter", map[string]any{"lora_name": "a-ad", "lora_path": "/p"}, nil)
	seen := ""
	runConcurrently(t, base, 2, func(i int) map[string]any { return chatBody([]string{"b-ad", "a-ad"}[i], "x", 100) }, func() {
		if seen != "" || s.Stats().Running != 2 {
			return
		}
		for _, l := range scrape(t, base)["vllm:lora_requests_info"].Metric[0].Label {
			if l.GetName() == "running_lora_adapters" {
				seen = l.GetValue()
			}
		}
	})
	if seen != "a-ad,b-ad" {
		t.Errorf("running_lora_adapters = %q", seen)
	}
}

func TestMetricsLegacy(t *testing.T) {
	_, base := startEngine(t, Config{Model: "base", TimeScale: 0.001, LegacyMetricNames: true})
	post(t, base+"/v1/chat/completions", chatBody("base", "hello", 3), nil)
	checkNames(t, scrape(t, base), []string{
		"vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total",
		"vllm:time_per_output_token_seconds", "vllm:num_requests_running", "vllm:time_to_first_token_seconds",
	}, []string{"vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries_total", "vllm:inter_token_latency_seconds"})
}

func TestMetricsSGLang(t *testing.T) {
	_, base := startEngine(t, Config{Model: "base", Flavor: SGLang, TimeScale: 0.001})
	post(t, base+"/v1/chat/completions", chatBody("base", "hello", 3), nil)
	fams := scrape(t, base)
	checkNames(t, fams, []string{
		"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:cache_hit_rate",
		"sglang:time_to_first_token_seconds", "sglang:inter_token_latency_seconds", "sglang:e2e_request_latency_seconds",
		"sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:gen_throughput",
	}, []string{"vllm:num_requests_running", "vllm:kv_cache_usage_perc"})
	for name := range fams {
		if name[:7] != "sglang:" {
			t.Errorf("non-SGLang metric %s", name)
		}
	}
	if v := value(t, fams, "sglang:generation_tokens_total"); v != 3 {
		t.Errorf("generation tokens %v", v)
	}
}
