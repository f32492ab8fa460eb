// Package epptest drives an endpoint picker as Envoy's ext_proc filter does, for tests:
// one ext_proc stream per HTTP request, built from go-control-plane's
// envoy.service.ext_proc.v3 types. The request goes in the filter's request body mode
// (FULL_DUPLEX_STREAMED: headers and body chunks without waiting, the header answer after
// the body; BUFFERED: the headers, their answer, then the whole body), announced in the
// first message's protocol_config as Envoy announces it; the response follows with the
// served endpoint in the metadata context, its body chunk by chunk, and trailers.
package epptest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Names of the Endpoint Picker Protocol, spelled here as the data plane's side knows
// them (not imported from the picker under test).
const (
	lbNamespace     = "envoy.lb"
	destinationKey  = "x-gateway-destination-endpoint"
	servedKey       = "x-gateway-destination-endpoint-served"
	subsetNamespace = "envoy.lb.subset_hint"
	subsetKey       = "x-gateway-destination-endpoint-subset"
)

// Request is an HTTP request as the client sent it to Envoy.
type Request struct {
	Method, Path string
	Header       map[string]string
	// Body is nil for a bodiless request (headers end the stream).
	Body []byte
	// ChunkSize splits Body into chunks as Envoy receives it (0: one chunk).
	ChunkSize int
	// Trailers, when set, end the request instead of the last body chunk.
	Trailers map[string]string
	// Subset, when non-nil, is sent as the endpoint subset hint.
	Subset []any
}

// Decision is what the picker told Envoy.
type Decision struct {
	// Immediate is set when the picker answered the client itself.
	Immediate *extprocv3.ImmediateResponse
	// Header is the request header mutation (lower-case keys).
	Header map[string]string
	// Metadata is envoy.lb's x-gateway-destination-endpoint in the dynamic metadata.
	Metadata string
	// ClearRouteCache: the picker asked Envoy to route again (to the endpoint named).
	ClearRouteCache bool
	// Body is the request body as Envoy forwards it upstream.
	Body []byte
	// Trailers: the picker answered the request trailers.
	Trailers bool
	// Sent is when the request's last message went to the picker (its headers, end of
	// body or trailers, whichever ended it), Answered when the message carrying the
	// decision (header answer, buffered body answer or immediate response) came back:
	// Answered − Sent is the decision's latency as the data plane sees it.
	Sent, Answered time.Time
}

// Endpoints is the destination header's list, primary first.
func (d *Decision) Endpoints() []string {
	if d.Header[destinationKey] == "" {
		return nil
	}
	return strings.Split(d.Header[destinationKey], ",")
}

// Exchange is one ext_proc stream.
type Exchange struct {
	Stream            extprocv3.ExternalProcessor_ProcessClient
	reqMode, respMode filterv3.ProcessingMode_BodySendMode
	first             bool
	lastSent          time.Time
}

// Start opens a stream with the given request and response body modes.
func Start(ctx context.Context, c extprocv3.ExternalProcessorClient, reqMode, respMode filterv3.ProcessingMode_BodySendMode) (*Exchange, error) {
	s, err := c.Process(ctx)
	if err != nil {
		return nil, err
	}
	return &Exchange{Stream: s, reqMode: reqMode, respMode: respMode, first: true}, nil
}

func headerMap(kv map[string]string, pseudo ...string) *corev3.HeaderMap {
	m := &corev3.HeaderMap{}
	for i := 0; i+1 < len(pseudo); i += 2 {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: pseudo[i], RawValue: []byte(pseudo[i+1])})
	}
	for k, v := range kv {
		m.Headers = append(m.Headers, &corev3.HeaderValue{Key: strings.ToLower(k), RawValue: []byte(v)})
	}
	return m
}

func (x *Exchange) send(r *extprocv3.ProcessingRequest) error {
	if x.first {
		// Envoy encodes its protocol configuration in the first message only.
		r.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: x.reqMode, ResponseBodyMode: x.respMode}
		x.first = false
	}
	err := x.Stream.Send(r)
	x.lastSent = time.Now()
	if err != io.EOF {
		return err
	}
	// The picker ended the stream (after an immediate response): as Envoy, stop sending
	// and read what it answered.
	return nil
}

// SendRequest sends the request as Envoy does in the exchange's mode and returns what the
// picker decided.
func (x *Exchange) SendRequest(req Request) (*Decision, error) {
	h := &extprocv3.HttpHeaders{EndOfStream: req.Body == nil && req.Trailers == nil}
	pseudo := []string{":method", req.Method, ":path", req.Path, ":authority", "gateway.test", ":scheme", "http"}
	hdr := map[string]string{}
	for k, v := range req.Header {
		hdr[k] = v
	}
	if req.Body != nil {
		hdr["content-length"] = strconv.Itoa(len(req.Body))
	}
	h.Headers = headerMap(hdr, pseudo...)
	first := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: h}}
	if req.Subset != nil {
		list, err := structpb.NewList(req.Subset)
		if err != nil {
			return nil, err
		}
		first.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			subsetNamespace: {Fields: map[string]*structpb.Value{subsetKey: structpb.NewListValue(list)}}}}
	}
	if err := x.send(first); err != nil {
		return nil, err
	}
	d := &Decision{Header: map[string]string{}}
	if h.EndOfStream {
		return d, x.expectHeaders(d)
	}
	switch x.reqMode {
	case filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		if err := x.sendBody(req, 0); err != nil {
			return nil, err
		}
		if err := x.expectHeaders(d); err != nil || d.Immediate != nil {
			return d, err
		}
		// The body comes back in streamed chunks; its end is an end-of-stream chunk or,
		// when the request had trailers, the trailers' answer.
		for {
			resp, err := x.Stream.Recv()
			if err != nil {
				return d, err
			}
			switch v := resp.Response.(type) {
			case *extprocv3.ProcessingResponse_RequestBody:
				sr := v.RequestBody.GetResponse().GetBodyMutation().GetStreamedResponse()
				if sr == nil {
					return d, fmt.Errorf("full-duplex request body answered without a streamed body: %v", v.RequestBody)
				}
				d.Body = append(d.Body, sr.GetBody()...)
				if sr.GetEndOfStream() {
					return d, nil
				}
			case *extprocv3.ProcessingResponse_RequestTrailers:
				d.Trailers = true
				return d, nil
			case *extprocv3.ProcessingResponse_ImmediateResponse:
				d.Immediate = v.ImmediateResponse
				return d, nil
			default:
				return d, fmt.Errorf("expected request body answers, got %T", resp.Response)
			}
		}
	case filterv3.ProcessingMode_BUFFERED:
		if err := x.expectHeaders(d); err != nil || d.Immediate != nil {
			return d, err
		}
		// Envoy buffers the whole body and sends it as one message.
		if err := x.sendBody(Request{Body: req.Body, Trailers: req.Trailers}, len(req.Body)+1); err != nil {
			return nil, err
		}
		d.Sent = x.lastSent
		resp, err := x.Stream.Recv()
		d.Answered = time.Now()
		if err != nil {
			return d, err
		}
		switch v := resp.Response.(type) {
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			d.Immediate = v.ImmediateResponse
			return d, nil
		case *extprocv3.ProcessingResponse_RequestBody:
			d.read(resp, v.RequestBody.GetResponse())
			d.Body = req.Body
			if b, ok := v.RequestBody.GetResponse().GetBodyMutation().GetMutation().(*extprocv3.BodyMutation_Body); ok {
				d.Body = b.Body
			}
		default:
			return d, fmt.Errorf("expected the request body's answer, got %T", resp.Response)
		}
		if req.Trailers != nil {
			resp, err := x.Stream.Recv()
			if err != nil {
				return d, err
			}
			_, d.Trailers = resp.Response.(*extprocv3.ProcessingResponse_RequestTrailers)
		}
		return d, nil
	}
	// Any other mode: headers only, as Envoy sends them when it is configured not to show
	// the body (the picker may refuse such a mode).
	return d, x.expectHeaders(d)
}

// sendBody sends req.Body in chunks of size (0: req.ChunkSize, else whole), then the
// trailers if any.
func (x *Exchange) sendBody(req Request, size int) error {
	if size == 0 {
		size = req.ChunkSize
	}
	if size <= 0 {
		size = len(req.Body) + 1
	}
	for i := 0; i == 0 || i < len(req.Body); i += size {
		part := req.Body[i:min(i+size, len(req.Body))]
		last := i+size >= len(req.Body)
		if err := x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: part, EndOfStream: last && req.Trailers == nil}}}); err != nil {
			return err
		}
	}
	if req.Trailers != nil {
		return x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestTrailers{
			RequestTrailers: &extprocv3.HttpTrailers{Trailers: headerMap(req.Trailers)}}})
	}
	return nil
}

// SendPartialBody sends chunks of a request body without ending it (a client that went
// away mid-upload), for tests of early ends.
func (x *Exchange) SendPartialBody(chunks ...[]byte) error {
	for _, c := range chunks {
		if err := x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: &extprocv3.HttpBody{Body: c}}}); err != nil {
			return err
		}
	}
	return nil
}

// SendHeadersOnly sends request headers announcing a body, and nothing else.
func (x *Exchange) SendHeadersOnly(method, path string) error {
	return x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(map[string]string{"content-type": "application/json"}, ":method", method, ":path", path)}}})
}

func (x *Exchange) expectHeaders(d *Decision) error {
	d.Sent = x.lastSent
	resp, err := x.Stream.Recv()
	d.Answered = time.Now()
	if err != nil {
		return err
	}
	switch v := resp.Response.(type) {
	case *extprocv3.ProcessingResponse_ImmediateResponse:
		d.Immediate = v.ImmediateResponse
	case *extprocv3.ProcessingResponse_RequestHeaders:
		d.read(resp, v.RequestHeaders.GetResponse())
	default:
		return fmt.Errorf("expected the request headers' answer, got %T", resp.Response)
	}
	return nil
}

func (d *Decision) read(resp *extprocv3.ProcessingResponse, c *extprocv3.CommonResponse) {
	for _, h := range c.GetHeaderMutation().GetSetHeaders() {
		v := string(h.GetHeader().GetRawValue())
		if v == "" {
			v = h.GetHeader().GetValue()
		}
		d.Header[strings.ToLower(h.GetHeader().GetKey())] = v
	}
	d.ClearRouteCache = d.ClearRouteCache || c.GetClearRouteCache()
	if ns, ok := resp.GetDynamicMetadata().GetFields()[lbNamespace]; ok {
		d.Metadata = ns.GetStructValue().GetFields()[destinationKey].GetStringValue()
	}
}

// Response is what came back from the endpoint Envoy chose.
type Response struct {
	Status int
	Header http.Header
	// Served is reported as the endpoint that served ("" reports none).
	Served string
	// Body is read piece by piece, each piece one ext_proc body chunk, as Envoy passes a
	// streamed answer on.
	Body io.Reader
	// Trailers, when set, end the response (as an HTTP/2 or gRPC answer's do).
	Trailers map[string]string
	// OnChunk, when set, gets each chunk the picker sends back for the client, as it
	// arrives.
	OnChunk func([]byte)
}

// SendResponse passes the response through the picker as Envoy does and returns the body
// the client gets.
func (x *Exchange) SendResponse(r Response) ([]byte, error) {
	hdr := map[string]string{}
	for k := range r.Header {
		hdr[k] = r.Header.Get(k)
	}
	req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(hdr, ":status", strconv.Itoa(r.Status)), EndOfStream: r.Body == nil && r.Trailers == nil}}}
	if r.Served != "" {
		req.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			lbNamespace: {Fields: map[string]*structpb.Value{servedKey: structpb.NewStringValue(r.Served)}}}}
	}
	if err := x.send(req); err != nil {
		return nil, err
	}
	resp, err := x.Stream.Recv()
	if err != nil {
		return nil, err
	}
	if _, ok := resp.Response.(*extprocv3.ProcessingResponse_ResponseHeaders); !ok {
		return nil, fmt.Errorf("expected the response headers' answer, got %T", resp.Response)
	}
	var out []byte
	if r.Body != nil {
		buf := make([]byte, 16<<10)
		for {
			n, rerr := r.Body.Read(buf)
			if rerr != nil && rerr != io.EOF {
				return out, rerr
			}
			eos := rerr == io.EOF && r.Trailers == nil
			if n == 0 && !eos {
				if rerr == io.EOF {
					break
				}
				continue
			}
			chunk := append([]byte(nil), buf[:n]...)
			if err := x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
				ResponseBody: &extprocv3.HttpBody{Body: chunk, EndOfStream: eos}}}); err != nil {
				return out, err
			}
			resp, err := x.Stream.Recv()
			if err != nil {
				return out, err
			}
			rb, ok := resp.Response.(*extprocv3.ProcessingResponse_ResponseBody)
			if !ok {
				return out, fmt.Errorf("expected a response body answer, got %T", resp.Response)
			}
			back := chunk // STREAMED / BUFFERED: an empty answer passes the chunk on
			if x.respMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
				back = rb.ResponseBody.GetResponse().GetBodyMutation().GetStreamedResponse().GetBody()
			}
			out = append(out, back...)
			if r.OnChunk != nil && len(back) > 0 {
				r.OnChunk(back)
			}
			if rerr == io.EOF {
				break
			}
		}
	}
	if r.Trailers != nil {
		if err := x.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
			ResponseTrailers: &extprocv3.HttpTrailers{Trailers: headerMap(r.Trailers)}}}); err != nil {
			return out, err
		}
		resp, err := x.Stream.Recv()
		if err != nil {
			return out, err
		}
		if _, ok := resp.Response.(*extprocv3.ProcessingResponse_ResponseTrailers); !ok {
			return out, fmt.Errorf("expected the response trailers' answer, got %T", resp.Response)
		}
	}
	// Envoy closes its side once the exchange is over.
	return out, x.Stream.CloseSend()
}
