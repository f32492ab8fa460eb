package tracing_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/berth-sh/berth/pkg/router/tracing"
	"github.com/berth-sh/berth/pkg/router/tracing/tracingtest"
)

// Without an endpoint (flag or environment) tracing is off: New returns nil, and a nil
// Tracer reads and writes no headers and allocates nothing.
func TestOffByDefault(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	tr, err := tracing.New(tracing.Config{}, nil)
	require.NoError(t, err)
	require.Nil(t, tr)
	h := http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c := tr.Extract(ctx, h)
		c, span := tr.Start(c, "x", trace.SpanKindServer)
		tr.Inject(c, h)
		tracing.Fail(span, nil)
		span.End()
	})
	assert.Zero(t, allocs)
	assert.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", h.Get("Traceparent"), "the header is left as it came")

	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
	t.Setenv("OTEL_SDK_DISABLED", "true")
	assert.False(t, tracing.Config{}.Enabled(), "OTEL_SDK_DISABLED turns it off")
}

// Configured, spans are exported to the collector in the inbound trace, the upstream
// header names the current span, and the counters say what was exported.
func TestExports(t *testing.T) {
	coll, err := tracingtest.Start()
	require.NoError(t, err)
	defer coll.Close()
	reg := prometheus.NewRegistry()
	tr, err := tracing.New(tracing.Config{Endpoint: coll.Addr(), Insecure: true, BatchTimeout: 20 * time.Millisecond}, reg)
	require.NoError(t, err)
	require.NotNil(t, tr)
	assert.Equal(t, coll.Addr(), tr.Target)

	const id = "4bf92f3577b34da6a3ce929d0e0e4736"
	ctx := tr.Extract(context.Background(), http.Header{"Traceparent": {"00-" + id + "-00f067aa0ba902b7-01"}})
	ctx, server := tr.Start(ctx, "request", trace.SpanKindServer)
	_, child := tr.Start(ctx, "attempt", trace.SpanKindClient)
	out := http.Header{}
	tr.Inject(trace.ContextWithSpan(ctx, child), out)
	child.End()
	server.End()
	require.Eventually(t, func() bool { return len(coll.Trace(id)) == 2 }, 10*time.Second, 20*time.Millisecond)
	spans := map[string]tracingtest.Span{}
	for _, s := range coll.Trace(id) {
		spans[s.Name] = s
	}
	assert.Equal(t, "00f067aa0ba902b7", spans["request"].ParentID)
	assert.Equal(t, spans["request"].ID, spans["attempt"].ParentID)
	assert.Equal(t, "berth-router", spans["request"].Service)
	assert.True(t, strings.HasPrefix(out.Get("Traceparent"), "00-"+id+"-"+spans["attempt"].ID+"-"), out.Get("Traceparent"))
	require.NoError(t, tr.Shutdown(context.Background()))
	n, err := testutil.GatherAndCount(reg, "berth_router_trace_spans_total")
	require.NoError(t, err)
	assert.Equal(t, 3, n, "three outcomes")
	assert.Equal(t, 2.0, counted(t, reg, "exported"))
	assert.Equal(t, 2.0, counted(t, reg, "ended"))
	assert.Zero(t, counted(t, reg, "failed"))
}

// counted is the span counter's value for outcome.
func counted(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if mf.GetName() == "berth_router_trace_spans_total" && m.GetLabel()[0].GetValue() == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s series", outcome)
	return 0
}
