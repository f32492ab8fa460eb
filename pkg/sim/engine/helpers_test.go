package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// startEngine serves a new engine on a loopback port for the duration of the test.
func startEngine(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	s := New(cfg)
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, "http://" + s.Addr()
}

// post sends a JSON request and returns the response with its body read.
func post(t *testing.T, url string, body any, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	return postCtx(t, context.Background(), url, body, header)
}

func postCtx(t *testing.T, ctx context.Context, url string, body any, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	resp, err := do(ctx, url, body, header)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: reading body: %v", url, err)
	}
	return resp, b
}

// do sends a request without reading the response (for streaming).
func do(ctx context.Context, url string, body any, header map[string]string) (*http.Response, error) {
	var rd io.Reader
	if s, ok := body.(string); ok {
		rd = strings.NewReader(s)
	} else {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return http.DefaultClient.Do(req)
}

// decode unmarshals a JSON body into a generic map.
func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("bad JSON %q: %v", b, err)
	}
	return m
}

// readSSE parses an event stream into its JSON chunks, and reports whether it ended
// with [DONE].
func readSSE(t *testing.T, r io.Reader) (chunks []map[string]any, done bool) {
	t.Helper()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("unexpected SSE line %q", line)
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		if done {
			t.Fatalf("data after [DONE]: %q", data)
		}
		chunks = append(chunks, decode(t, []byte(data)))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return chunks, done
}

// scrape fetches and parses an engine's /metrics.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// value returns the value of the first series of a counter or gauge family.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil || len(f.Metric) == 0 {
		t.Fatalf("metric %s missing", name)
	}
	m := f.Metric[0]
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	t.Fatalf("metric %s is neither counter nor gauge", name)
	return 0
}

// histogram returns the sum and count of a histogram family's first series.
func histogram(t *testing.T, fams map[string]*dto.MetricFamily, name string) (sum float64, count uint64) {
	t.Helper()
	f := fams[name]
	if f == nil || len(f.Metric) == 0 || f.Metric[0].Histogram == nil {
		t.Fatalf("histogram %s missing", name)
	}
	h := f.Metric[0].Histogram
	return h.GetSampleSum(), h.GetSampleCount()
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// chatBody builds a chat request.
func chatBody(model, content string, maxTokens int) map[string]any {
	return map[string]any{
		"model":      model,
		"messages":   []map[string]any{{"role": "user", "content": content}},
		"max_tokens": maxTokens,
	}
}
