package proxy

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/berth-sh/berth/pkg/router/tracing"
)

// TraceWith makes the proxy write the trace context of each request's ctx into the
// upstream request (traceparent, tracestate) and give each leg of a disaggregated
// request (prefill, decode) a span of its own; nil (the default) does neither.
func (p *Proxy) TraceWith(t *tracing.Tracer) { p.tracer = t }

// leg starts the span of one leg (prefill or decode) of a disaggregated request to url;
// end records how it answered. The span ends when the engine's response headers arrive
// (the decode answer's body is relayed under the attempt's span).
func (p *Proxy) leg(ctx context.Context, name, url string) (context.Context, func(*http.Response, error)) {
	if p.tracer == nil {
		return ctx, func(*http.Response, error) {}
	}
	ctx, span := p.tracer.Start(ctx, "berth-router.upstream."+name, trace.SpanKindClient)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("berth.leg", name), attribute.String("url.full", url))
	}
	return ctx, func(resp *http.Response, err error) {
		if resp != nil && span.IsRecording() {
			span.SetAttributes(attribute.Int("http.response.status_code", resp.StatusCode))
			if resp.StatusCode >= 500 {
				tracing.FailMsg(span, resp.Status)
			}
		}
		tracing.Fail(span, err)
		span.End()
	}
}

// sendLeg is Send under a leg's span.
func (p *Proxy) sendLeg(ctx context.Context, name, baseURL, path string, header http.Header, extra map[string]string, body []byte) (*http.Response, error) {
	ctx, end := p.leg(ctx, name, baseURL)
	resp, err := p.Send(ctx, baseURL, path, header, extra, body)
	end(resp, err)
	return resp, err
}
