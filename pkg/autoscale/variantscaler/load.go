package variantscaler

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/berth-sh/berth/pkg/autoscale"
	"github.com/berth-sh/berth/pkg/autoscale/podmetrics"
)

// The vLLM series a variant's load and latencies are read from: llm-d reads the same ones
// through Prometheus (rate over a minute); Berth reads the pods directly, as its other
// autoscaler does, and takes the rate between two runs.
const (
	metricRequests   = "vllm:request_success_total"
	metricPrompt     = "vllm:prompt_tokens_total"
	metricGeneration = "vllm:generation_tokens_total"
	// Tokens per finished request, observed as each request ends: the interval's mean of
	// these is tokens per request over the same requests the success counter counts, where
	// the token counters also count tokens of requests still running (noisy over a short
	// interval: 54 per request was read for requests of 100).
	metricRequestPrompt     = "vllm:request_prompt_tokens"
	metricRequestGeneration = "vllm:request_generation_tokens"
	metricTTFT              = "vllm:time_to_first_token_seconds"
	metricITL               = "vllm:inter_token_latency_seconds"
	metricITLLegacy         = "vllm:time_per_output_token_seconds"
	metricRunning           = "vllm:num_requests_running"
	metricWaiting           = "vllm:num_requests_waiting"
)

// load is a variant's traffic and measured latencies over the last interval.
type load struct {
	// RatePerMinute is completed requests per minute over all pods.
	RatePerMinute float64
	// AvgInput and AvgOutput are tokens per request (0 when no request completed).
	AvgInput, AvgOutput float64
	// ITL and TTFT are measured means in milliseconds (0 when nothing was observed).
	ITL, TTFT float64
	// Pods is how many pods reported the request counter; Ready how many were read.
	Pods, Ready int
}

// errNoReading means the pods gave no usable reading yet (a first read has no rate).
type errNoReading struct{ msg string }

func (e errNoReading) Error() string { return e.msg }

// readLoad reads the pods' counters and histograms. A pod read for the first time has no
// rate yet; the total is scaled from the pods that have one, so one new pod does not make
// the load look smaller than it is.
func readLoad(ctx context.Context, r *podmetrics.Reader, pods []podmetrics.Pod, ep podmetrics.Endpoint, now time.Time) (load, error) {
	names := []string{metricRequests, metricPrompt, metricGeneration, metricRequestPrompt, metricRequestGeneration, metricTTFT, metricITL, metricITLLegacy, metricRunning, metricWaiting}
	res := r.Read(ctx, pods, ep, names, now)
	var l load
	l.Ready = res.Answered
	if res.Answered == 0 {
		msg := fmt.Sprintf("none of the %d pods served metrics at :%d%s", len(pods), ep.Port, ep.Path)
		if len(res.Errors) > 0 {
			msg += ": " + strings.Join(res.Errors, "; ")
		}
		return l, errNoReading{msg}
	}
	for _, n := range []string{metricRequests, metricPrompt, metricGeneration} {
		for _, u := range res.Unexposed {
			if u == n {
				return l, fmt.Errorf("metric %s is not exposed by any of the %d ready pods at :%d%s (a VariantAutoscaling reads vLLM's metrics)", n, res.Answered, ep.Port, ep.Path)
			}
		}
	}
	req := res.Samples[metricRequests]
	if req.Reported == 0 {
		return l, errNoReading{"no pod has a request rate yet (the first read of a counter has none)"}
	}
	l.Pods = req.Reported
	if inFlight := res.Samples[metricRunning].Sum + res.Samples[metricWaiting].Sum; req.Sum == 0 && inFlight > 0 {
		// Requests are running or queued but none finished since the last read (long
		// generations, a stalled engine): that is not "no load", and sizing on it would
		// take the variant down to one replica under load.
		return l, errNoReading{fmt.Sprintf("%.0f requests are in flight but none completed since the last read", inFlight)}
	}
	scale := float64(req.Reported+req.Missing) / float64(req.Reported)
	perSecond := req.Sum * scale
	l.RatePerMinute = perSecond * 60
	if req.Sum > 0 {
		l.AvgInput = perRequest(res.Samples[metricRequestPrompt], res.Samples[metricPrompt], req)
		l.AvgOutput = perRequest(res.Samples[metricRequestGeneration], res.Samples[metricGeneration], req)
	}
	l.TTFT = mean(res.Samples[metricTTFT]) * 1000
	itl := res.Samples[metricITL]
	if itl.Reported == 0 {
		itl = res.Samples[metricITLLegacy]
	}
	l.ITL = mean(itl) * 1000
	for _, v := range []float64{l.RatePerMinute, l.AvgInput, l.AvgOutput, l.TTFT, l.ITL} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			// Never size on a reading that is not a number: the status would show it as 0
			// beside a count the optimizer derived from it.
			return l, errNoReading{fmt.Sprintf("the load read is not a finite number (%.2f req/min of %.1f input and %.1f output tokens)", l.RatePerMinute, l.AvgInput, l.AvgOutput)}
		}
	}
	return l, nil
}

// perRequest is tokens per request: the mean of the per-request histogram where the pods
// export it (vLLM does), else the ratio of the token and request rates.
func perRequest(histogram, tokens, requests autoscale.Sample) float64 {
	if histogram.Reported > 0 {
		return mean(histogram)
	}
	return ratio(tokens, requests)
}

// ratio is tokens per request from two summed rates over the same pods.
func ratio(tokens, requests autoscale.Sample) float64 {
	if requests.Sum <= 0 || tokens.Reported == 0 {
		return 0
	}
	// Both rates are summed over the pods that reported them; compare like with like.
	return (tokens.Sum / float64(tokens.Reported)) / (requests.Sum / float64(requests.Reported))
}

// mean averages the per-pod interval means of a histogram over the pods that observed any.
func mean(s autoscale.Sample) float64 {
	if s.Reported == 0 {
		return 0
	}
	return s.Sum / float64(s.Reported)
}
