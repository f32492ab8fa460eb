// Package tracing gives berth-router OpenTelemetry spans exported over OTLP/gRPC: a
// server span per request, a span for the endpoint pick and one per upstream attempt (a
// span per leg, prefill and decode, for a disaggregated ModelServer), joined to the
// caller's trace by the W3C trace context of the inbound request and passed on to the
// engine in the upstream request's traceparent, so the engine's own spans join too.
//
// Tracing is off unless an OTLP endpoint is configured (Config.Endpoint, or the standard
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT). Off, New returns a nil
// *Tracer, whose methods do nothing and allocate nothing: the router then neither reads
// nor writes trace headers, and the inbound traceparent and tracestate reach the engine
// unchanged with the other end-to-end headers (the router is transparent, as any proxy
// that does not trace is; the engine's spans are then children of the caller's).
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Config says where spans go.
type Config struct {
	// Endpoint is the OTLP/gRPC collector: "host:port" (TLS unless Insecure) or a URL
	// ("http://host:4317" is plaintext, "https://…" TLS). Empty: the standard
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT; none set: off.
	Endpoint string
	// Insecure sends to a host:port Endpoint without TLS.
	Insecure bool
	// BatchTimeout is the longest a finished span waits before it is sent (zero: the
	// SDK's default, 5 s, or OTEL_BSP_SCHEDULE_DELAY).
	BatchTimeout time.Duration
	// ServiceName is the resource's service.name unless OTEL_SERVICE_NAME sets it
	// (default "berth-router").
	ServiceName string
}

// Enabled says whether c (with the environment) asks for tracing.
func (c Config) Enabled() bool {
	if v, _ := strconv.ParseBool(os.Getenv("OTEL_SDK_DISABLED")); v {
		return false
	}
	return c.target() != ""
}

// target is where spans go, for the log: the configured endpoint or the environment's.
func (c Config) target() string {
	if c.Endpoint != "" {
		return c.Endpoint
	}
	if v := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); v != "" {
		return v
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
}

// Tracer starts the router's spans. A nil *Tracer is tracing off: every method is a no-op.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	// Where spans go and how they are sampled, for the startup log.
	Target, Sampler string
}

// noSpan is what a nil Tracer's Start returns: one value made once, so returning it
// allocates nothing.
var noSpan trace.Span = noop.Span{}

// Spans counted, by what became of them: ended (handed to the batch processor), exported
// (the collector took them) and failed (an export that returned an error). Ended minus
// exported and failed is what is queued or was dropped by a full queue.
type counters struct {
	ended, exported, failed prometheus.Counter
}

func newCounters(reg prometheus.Registerer) *counters {
	spans := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_router_trace_spans_total",
		Help: "Trace spans by outcome: ended (queued for export), exported (the OTLP collector accepted them), failed (an export that failed); ended minus the others were dropped by a full queue or are still queued.",
	}, []string{"outcome"})
	if reg != nil {
		reg.MustRegister(spans)
	}
	return &counters{ended: spans.WithLabelValues("ended"), exported: spans.WithLabelValues("exported"), failed: spans.WithLabelValues("failed")}
}

// countingExporter counts what its exporter sends.
type countingExporter struct {
	sdktrace.SpanExporter
	c *counters
}

func (e countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		e.c.failed.Add(float64(len(spans)))
	} else {
		e.c.exported.Add(float64(len(spans)))
	}
	return err
}

// endCounter counts ended spans (sampled ones: only those reach the processors' OnEnd).
type endCounter struct{ c *counters }

func (endCounter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (e endCounter) OnEnd(sdktrace.ReadOnlySpan)                   { e.c.ended.Inc() }
func (endCounter) Shutdown(context.Context) error                  { return nil }
func (endCounter) ForceFlush(context.Context) error                { return nil }

// New returns a Tracer exporting as c says, or nil (tracing off) when c asks for none.
// Its span counters are registered with reg. The sampler is the SDK's: parent-based
// always-on, or OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG.
func New(c Config, reg prometheus.Registerer) (*Tracer, error) {
	if !c.Enabled() {
		return nil, nil
	}
	var opts []otlptracegrpc.Option
	switch {
	case strings.Contains(c.Endpoint, "://"):
		opts = append(opts, otlptracegrpc.WithEndpointURL(c.Endpoint))
	case c.Endpoint != "":
		opts = append(opts, otlptracegrpc.WithEndpoint(c.Endpoint))
		if c.Insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
	}
	// The exporter connects lazily: a collector that is not up yet delays nothing here.
	exp, err := otlptracegrpc.New(context.Background(), opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter for %s: %w", c.target(), err)
	}
	name := c.ServiceName
	if name == "" {
		name = "berth-router"
	}
	attrs := []attribute.KeyValue{}
	if os.Getenv("OTEL_SERVICE_NAME") == "" {
		attrs = append(attrs, attribute.String("service.name", name))
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, err
	}
	cnt := newCounters(reg)
	var bopts []sdktrace.BatchSpanProcessorOption
	if c.BatchTimeout > 0 {
		bopts = append(bopts, sdktrace.WithBatchTimeout(c.BatchTimeout))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSpanProcessor(endCounter{cnt}),
		sdktrace.WithBatcher(countingExporter{exp, cnt}, bopts...),
	)
	t := &Tracer{
		provider: tp,
		tracer:   tp.Tracer("github.com/berth-sh/berth/pkg/router"),
		prop:     propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		Target:   c.target(),
		Sampler:  samplerName(),
	}
	return t, nil
}

func samplerName() string {
	s := os.Getenv("OTEL_TRACES_SAMPLER")
	if s == "" {
		return "parentbased_always_on"
	}
	if arg := os.Getenv("OTEL_TRACES_SAMPLER_ARG"); arg != "" {
		s += "(" + arg + ")"
	}
	return s
}

// Shutdown sends the spans still queued and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Extract returns ctx with the remote span context of an inbound request's traceparent
// and tracestate (and its baggage), if it has them.
func (t *Tracer) Extract(ctx context.Context, h http.Header) context.Context {
	if t == nil {
		return ctx
	}
	return t.prop.Extract(ctx, propagation.HeaderCarrier(h))
}

// Inject writes ctx's span context into an upstream request's headers (replacing the
// caller's traceparent, which they were copied with).
func (t *Tracer) Inject(ctx context.Context, h http.Header) {
	if t == nil {
		return
	}
	t.prop.Inject(ctx, propagation.HeaderCarrier(h))
}

// Start starts a span of kind under ctx's. Set attributes on it only when
// span.IsRecording(), so that tracing off (or a span not sampled) costs nothing more.
func (t *Tracer) Start(ctx context.Context, name string, kind trace.SpanKind) (context.Context, trace.Span) {
	if t == nil {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, name, trace.WithSpanKind(kind))
}

// Fail marks span as failed with err's message (nothing when err is nil).
func Fail(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		span.SetStatus(codes.Error, err.Error())
	}
}

// FailMsg marks span as failed with msg.
func FailMsg(span trace.Span, msg string) {
	if span.IsRecording() {
		span.SetStatus(codes.Error, msg)
	}
}
