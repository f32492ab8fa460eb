// Package tracingtest is an in-process OTLP/gRPC trace collector for tests: it serves
// the OTLP TraceService on a loopback port and keeps every span it receives.
package tracingtest

import (
	"context"
	"encoding/hex"
	"net"
	"strconv"
	"sync"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
)

// Span is a received span, flattened for assertions.
type Span struct {
	Name                  string
	TraceID, ID, ParentID string // hex; ParentID "" for a root
	Kind                  tracepb.Span_SpanKind
	Attrs                 map[string]string // every value as its string form
	Status                tracepb.Status_StatusCode
	StatusMessage         string
	Service               string // the resource's service.name
}

// Collector receives spans. Start one with Start; Close it when done.
type Collector struct {
	coltracepb.UnimplementedTraceServiceServer
	srv  *grpc.Server
	addr string

	mu    sync.Mutex
	spans []Span
}

// Start serves the OTLP TraceService on 127.0.0.1 at a free port.
func Start() (*Collector, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &Collector{srv: grpc.NewServer(), addr: ln.Addr().String()}
	coltracepb.RegisterTraceServiceServer(c.srv, c)
	go func() { _ = c.srv.Serve(ln) }()
	return c, nil
}

// Addr is the collector's host:port (plaintext gRPC).
func (c *Collector) Addr() string { return c.addr }

// Close stops the collector.
func (c *Collector) Close() { c.srv.Stop() }

// Export implements the OTLP TraceService.
func (c *Collector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				sp := Span{
					Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()), ID: hex.EncodeToString(s.GetSpanId()),
					Kind: s.GetKind(), Attrs: attrs(s.GetAttributes()), Service: service,
					Status: s.GetStatus().GetCode(), StatusMessage: s.GetStatus().GetMessage(),
				}
				if len(s.GetParentSpanId()) > 0 {
					sp.ParentID = hex.EncodeToString(s.GetParentSpanId())
				}
				got = append(got, sp)
			}
		}
	}
	c.mu.Lock()
	c.spans = append(c.spans, got...)
	c.mu.Unlock()
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// Spans returns the spans received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Span(nil), c.spans...)
}

// Trace returns the spans received of trace id (hex).
func (c *Collector) Trace(id string) []Span {
	var out []Span
	for _, s := range c.Spans() {
		if s.TraceID == id {
			out = append(out, s)
		}
	}
	return out
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = value(kv.GetValue())
	}
	return m
}

func value(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	}
	return v.String()
}
