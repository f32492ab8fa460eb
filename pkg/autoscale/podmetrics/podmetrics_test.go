package podmetrics

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
)

// fakePod serves a Prometheus exposition that the test changes between reads.
type fakePod struct {
	body atomic.Value
	addr *net.TCPAddr
}

func newPod(t *testing.T) *fakePod {
	p := &fakePod{}
	p.body.Store("")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p.addr = ln.Addr().(*net.TCPAddr)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, p.body.Load())
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}

func exposition(running float64, success float64, ttftSum float64, ttftCount int) string {
	return fmt.Sprintf(`# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a"} %g
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="stop"} %g
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="+Inf"} %d
vllm:time_to_first_token_seconds_sum %g
vllm:time_to_first_token_seconds_count %d
`, running, success, ttftCount, ttftSum, ttftCount)
}

func TestReadGaugesCountersHistograms(t *testing.T) {
	a := newPod(t)
	port := int32(a.addr.Port)
	pods := []Pod{
		{UID: types.UID("a"), Name: "a", IP: "127.0.0.1", Ready: true},
		{UID: types.UID("starting"), Name: "starting", IP: "127.0.0.1", Ready: false},
	}
	ep := Endpoint{Port: port, Path: "metrics"}
	names := []string{"vllm:num_requests_running", "vllm:request_success", "vllm:time_to_first_token_seconds"}
	r := NewReader(time.Second)
	defer r.Close()
	t0 := time.Now()

	a.body.Store(exposition(3, 100, 10, 20))
	res := r.Read(context.Background(), pods, ep, names, t0)
	assert.Equal(t, 1, res.Answered)
	assert.Empty(t, res.Unexposed)
	// The gauge reads at once; the counter and histogram need a second read. The pod that
	// is not ready counts as missing for every metric.
	assert.Equal(t, 3.0, res.Samples["vllm:num_requests_running"].Sum)
	assert.Equal(t, 1, res.Samples["vllm:num_requests_running"].Reported)
	assert.Equal(t, 1, res.Samples["vllm:num_requests_running"].Missing)
	assert.Equal(t, 0, res.Samples["vllm:request_success"].Reported, "first read of a counter has no rate")
	assert.Equal(t, 2, res.Samples["vllm:request_success"].Missing)

	a.body.Store(exposition(5, 130, 16, 30))
	res = r.Read(context.Background(), pods, ep, names, t0.Add(2*time.Second))
	assert.Equal(t, 5.0, res.Samples["vllm:num_requests_running"].Sum)
	assert.InDelta(t, 15.0, res.Samples["vllm:request_success"].Sum, 1e-9, "counter: 30 more over 2 s, found by its name without _total")
	assert.InDelta(t, 0.6, res.Samples["vllm:time_to_first_token_seconds"].Sum, 1e-9, "histogram: 6 s over 10 observations")

	// Nothing observed since: a histogram's mean is 0 (no slow requests), not missing.
	res = r.Read(context.Background(), pods, ep, names, t0.Add(4*time.Second))
	assert.Equal(t, 1, res.Samples["vllm:time_to_first_token_seconds"].Reported)
	assert.Equal(t, 0.0, res.Samples["vllm:time_to_first_token_seconds"].Sum)
	assert.Equal(t, 0.0, res.Samples["vllm:request_success"].Sum)

	// An engine restart (counter went down) is not a negative rate: missing for one read.
	a.body.Store(exposition(0, 5, 1, 2))
	res = r.Read(context.Background(), pods, ep, names, t0.Add(6*time.Second))
	assert.Equal(t, 0, res.Samples["vllm:request_success"].Reported)

	// A misspelt metric is reported as not exposed; one pod not answering as an error.
	res = r.Read(context.Background(), append(pods, Pod{UID: "gone", Name: "gone", IP: "127.0.0.2", Ready: true}), Endpoint{Port: port, Path: "/metrics"},
		[]string{"vllm:num_requests_runing"}, t0.Add(8*time.Second))
	assert.Equal(t, []string{"vllm:num_requests_runing"}, res.Unexposed)
	require.Len(t, res.Errors, 1)
	assert.Contains(t, res.Errors[0], "pod gone")
	assert.Equal(t, 3, res.Samples["vllm:num_requests_runing"].Missing)
}

func TestReadForgetsPodsThatLeft(t *testing.T) {
	a := newPod(t)
	ep := Endpoint{Port: int32(a.addr.Port), Path: "/metrics"}
	r := NewReader(time.Second)
	a.body.Store(exposition(1, 10, 0, 0))
	pod := Pod{UID: "a", Name: "a", IP: "127.0.0.1", Ready: true}
	t0 := time.Now()
	r.Read(context.Background(), []Pod{pod}, ep, []string{"vllm:request_success"}, t0)
	r.Read(context.Background(), nil, ep, []string{"vllm:request_success"}, t0.Add(time.Second))
	// The pod's history went with it: coming back it needs two reads again.
	res := r.Read(context.Background(), []Pod{pod}, ep, []string{"vllm:request_success"}, t0.Add(2*time.Second))
	assert.Equal(t, 0, res.Samples["vllm:request_success"].Reported)
}

// A read right after another (a sync triggered by the previous sync's own writes) does not
// read a counter that had no time to move as "no load": the last interval's rate stands.
func TestAReadTooSoonKeepsTheLastRate(t *testing.T) {
	a := newPod(t)
	ep := Endpoint{Port: int32(a.addr.Port), Path: "/metrics"}
	r := NewReader(time.Second)
	pod := Pod{UID: "a", Name: "a", IP: "127.0.0.1", Ready: true}
	names := []string{"vllm:request_success"}
	t0 := time.Now()
	a.body.Store(exposition(1, 10, 0, 0))
	res := r.Read(context.Background(), []Pod{pod}, ep, names, t0)
	assert.Equal(t, 0, res.Samples[names[0]].Reported, "a first read has no rate")
	res = r.Read(context.Background(), []Pod{pod}, ep, names, t0.Add(10*time.Millisecond))
	assert.Equal(t, 0, res.Samples[names[0]].Reported, "nor a second one right after it")
	a.body.Store(exposition(1, 30, 0, 0))
	res = r.Read(context.Background(), []Pod{pod}, ep, names, t0.Add(2*time.Second))
	require.Equal(t, 1, res.Samples[names[0]].Reported)
	assert.InDelta(t, 10, res.Samples[names[0]].Sum, 0.01, "20 requests over 2s")
	res = r.Read(context.Background(), []Pod{pod}, ep, names, t0.Add(2*time.Second+5*time.Millisecond))
	require.Equal(t, 1, res.Samples[names[0]].Reported)
	assert.InDelta(t, 10, res.Samples[names[0]].Sum, 0.01, "5 ms later the rate of the last interval stands")
	a.body.Store(exposition(1, 40, 0, 0))
	res = r.Read(context.Background(), []Pod{pod}, ep, names, t0.Add(4*time.Second))
	assert.InDelta(t, 5, res.Samples[names[0]].Sum, 0.01, "the baseline stayed at 2s: 10 requests over 2s")
}
