package router

import (
	"context"
	"fmt"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/berth-sh/berth/pkg/router/epp"
	"github.com/berth-sh/berth/pkg/router/tracing"
)

// The spans of a request (package tracing; all no-ops when tracing is off):
//
//	POST /v1/chat/completions            server: the whole request, its route, model and status
//	├── berth-router.pick                 the endpoint choice of each attempt
//	└── berth-router.upstream             client: one per attempt, its endpoint, number, status, retry reason
//	    ├── berth-router.upstream.prefill   a disaggregated ModelServer's legs (package proxy)
//	    └── berth-router.upstream.decode
//
// The engine's traceparent names the attempt's span (or the leg's) as its parent.

// startRequest starts a request's server span under the caller's trace context; req is
// returned with it in its context (unchanged when tracing is off).
func (r *Router) startRequest(req *http.Request, x *exchange) *http.Request {
	if r.tracer == nil {
		x.span = noSpan
		return req
	}
	ctx := r.tracer.Extract(req.Context(), req.Header)
	ctx, x.span = r.tracer.Start(ctx, req.Method+" "+req.URL.Path, trace.SpanKindServer)
	if x.span.IsRecording() {
		x.span.SetAttributes(attribute.String("http.request.method", req.Method), attribute.String("url.path", req.URL.Path))
	}
	return req.WithContext(ctx)
}

// noSpan is a non-recording span, for an exchange when tracing is off.
var noSpan = trace.SpanFromContext(context.Background())

// endRequest ends x's server span with what finish logs.
func endRequest(x *exchange) {
	if x.span == nil {
		return
	}
	if x.span.IsRecording() {
		x.span.SetAttributes(attribute.Int("http.response.status_code", x.status), attribute.String("berth.route", x.route),
			attribute.String("berth.model", x.asked), attribute.String("berth.server", x.server),
			attribute.String("berth.endpoint", x.endpoint), attribute.Int("berth.attempts", x.attempts))
		if x.status >= 500 || x.status == 0 {
			tracing.FailMsg(x.span, x.reason)
		}
	}
	x.span.End()
}

// startPick starts the span of attempt's endpoint choice.
func (r *Router) startPick(ctx context.Context, attempt int) trace.Span {
	if r.tracer == nil {
		return noSpan
	}
	_, span := r.tracer.Start(ctx, "berth-router.pick", trace.SpanKindInternal)
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("berth.attempt", attempt), attribute.String("berth.policy", string(r.opts.Policy)))
	}
	return span
}

// endPick ends a pick span with the target and endpoint chosen (or why none was).
func endPick(span trace.Span, x *exchange, b backend, dst target, err error) {
	if span.IsRecording() {
		span.SetAttributes(attribute.String("berth.route", x.route), attribute.String("berth.model", x.asked), attribute.String("berth.server", b.String()))
		if err == nil {
			span.SetAttributes(attribute.String("berth.endpoint", dst.name))
		}
		tracing.Fail(span, err)
	}
	span.End()
}

// startAttempt starts the span of one upstream attempt to dst; its context goes into the
// upstream request, so the engine's spans are its children.
func (r *Router) startAttempt(ctx context.Context, attempt int, b backend, dst target) (context.Context, trace.Span) {
	if r.tracer == nil {
		return ctx, noSpan
	}
	ctx, span := r.tracer.Start(ctx, "berth-router.upstream", trace.SpanKindClient)
	if span.IsRecording() {
		span.SetAttributes(attribute.Int("berth.attempt", attempt), attribute.String("berth.endpoint", dst.name), attribute.String("berth.server", b.String()))
		if b.server != nil && b.server.Disaggregated() {
			span.SetAttributes(attribute.String("berth.kv_connector", string(b.server.Connector)))
		}
	}
	return ctx, span
}

// endAttempt ends an attempt's span: the engine's status (0 when none answered), the
// error, and the reason it is retried ("" when it is not).
func endAttempt(span trace.Span, status int, err error, retry string) {
	if span.IsRecording() {
		if status != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", status))
		}
		if retry != "" {
			span.SetAttributes(attribute.String("berth.retry_reason", retry))
		}
		switch {
		case err != nil:
			tracing.Fail(span, err)
		case status >= 500 || status == http.StatusTooManyRequests:
			tracing.FailMsg(span, fmt.Sprintf("the endpoint answered %d", status))
		}
	}
	span.End()
}

// eppPickSpan starts the span of an endpoint picker's decision, under the trace context
// of the request's headers as the data plane sent them.
func (r *Router) eppPickSpan(ctx context.Context, q *epp.Query) trace.Span {
	if r.tracer == nil {
		return noSpan
	}
	ctx = r.tracer.Extract(ctx, q.Header)
	_, span := r.tracer.Start(ctx, "berth-router.pick", trace.SpanKindServer)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("http.request.method", q.Method), attribute.String("url.path", q.Path),
			attribute.String("berth.policy", string(r.opts.Policy)), attribute.String("berth.mode", ModeEPP))
	}
	return span
}

// endEPPPick ends an endpoint picker's span with its choice or refusal.
func endEPPPick(span trace.Span, c *epp.Choice, ref *epp.Refusal) {
	if span.IsRecording() {
		if c != nil {
			span.SetAttributes(attribute.String("berth.route", c.Route), attribute.String("berth.model", c.Model),
				attribute.StringSlice("berth.endpoints", c.Endpoints))
			if len(c.Endpoints) > 0 {
				span.SetAttributes(attribute.String("berth.endpoint", c.Endpoints[0]))
			}
		}
		if ref != nil {
			span.SetAttributes(attribute.Int("http.response.status_code", ref.Status))
			if ref.Status >= 400 {
				tracing.FailMsg(span, ref.Message)
			}
		}
	}
	span.End()
}
