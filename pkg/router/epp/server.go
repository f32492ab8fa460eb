package epp

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/berth-sh/berth/pkg/router/proxy"
)

// Options configure a Server.
type Options struct {
	// MaxBodyBytes bounds a request body; a larger one is refused with 413.
	MaxBodyBytes int64
}

// Server is the ext_proc service. Register it on a grpc.Server with
// extprocv3.RegisterExternalProcessorServer.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer
	chooser Chooser
	opts    Options
	log     logr.Logger
	m       *metrics
}

// New returns a Server that asks c where requests go; its series are registered on reg.
func New(c Chooser, o Options, log logr.Logger, reg prometheus.Registerer) *Server {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 16 << 20
	}
	return &Server{chooser: c, opts: o, log: log, m: newMetrics(reg)}
}

// phase is where a stream is in its request's life, in the order Envoy sends messages.
type phase int

const (
	awaitRequestHeaders phase = iota
	requestBody               // request headers seen, body coming
	awaitResponse             // decided; the request went upstream
	responseBody              // response headers seen, body coming
	finished                  // the exchange is over (answered, or refused)
)

func (p phase) String() string {
	return [...]string{"before request headers", "reading the request body", "waiting for the response", "reading the response body", "finished"}[p]
}

// Results of a stream, the result label of the metrics.
const (
	resultPicked    = "picked"    // an endpoint was chosen
	resultRefused   = "refused"   // the chooser answered itself (no route, no endpoint, rate limit...)
	resultTooLarge  = "too_large" // the request body exceeded MaxBodyBytes
	resultInvalid   = "invalid"   // the data plane broke the protocol or uses a mode not served
	resultCancelled = "cancelled" // the stream ended before a decision
)

// stream is one ext_proc stream: one HTTP request and its response.
type stream struct {
	s   *Server
	srv extprocv3.ExternalProcessor_ProcessServer
	log logr.Logger

	// The body modes of this filter, from the first message's protocol_config; the
	// protocol's own (full-duplex streamed both ways) when Envoy sent none.
	reqMode, respMode filterv3.ProcessingMode_BodySendMode

	phase  phase
	query  Query
	body   []byte
	result string
	start  time.Time

	choice  *Choice
	decided time.Time
	served  string
	status  int
	first   time.Time
	usage   proxy.Usage
	ended   bool
}

// Process serves one ext_proc stream. It returns nil when the stream ends (Envoy closes it
// after the response, or when the client went away), and an error only for a stream that
// broke the protocol.
func (s *Server) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	s.m.streams.Inc()
	defer s.m.streams.Dec()
	st := &stream{s: s, srv: srv, log: s.log, start: time.Now(),
		reqMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED, respMode: filterv3.ProcessingMode_FULL_DUPLEX_STREAMED}
	defer st.close()
	for {
		req, err := srv.Recv()
		if err == io.EOF || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return err
		}
		if err := st.handle(req); err != nil {
			st.count(resultInvalid)
			return err
		}
		if st.phase == finished && st.choice == nil {
			// Refused: the immediate response ends the exchange (Envoy closes its side
			// too; body chunks it had in flight are of no interest).
			return nil
		}
	}
}

// close ends the stream's accounting: a request that went upstream but whose answer never
// finished (Envoy cancelled the stream: the client went away, or a timeout) frees its
// in-flight slot here.
func (st *stream) close() {
	if st.phase < awaitResponse && st.result == "" {
		st.count(resultCancelled)
		st.log.V(1).Info("ext-proc stream ended before the request was complete", "phase", st.phase.String(), "path", st.query.Path, "bodyBytes", len(st.body))
	}
	if st.choice != nil && !st.ended {
		st.end(false)
	}
}

// count records the stream's result, once: what was decided (or why nothing was).
func (st *stream) count(result string) {
	if st.result != "" {
		return
	}
	st.result = result
	st.s.m.requests.WithLabelValues(result).Inc()
}

func (st *stream) handle(req *extprocv3.ProcessingRequest) error {
	if pc := req.GetProtocolConfig(); pc != nil {
		st.reqMode, st.respMode = pc.GetRequestBodyMode(), pc.GetResponseBodyMode()
	}
	switch v := req.Request.(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		if st.phase != awaitRequestHeaders {
			return st.violation("request headers")
		}
		st.readRequestHeaders(req, v.RequestHeaders)
		switch {
		case v.RequestHeaders.GetEndOfStream() || st.reqMode == filterv3.ProcessingMode_NONE:
			// A bodiless request (or a filter that never shows the body): decided on its
			// headers alone.
			return st.decide(false, false)
		case st.reqMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
			// Envoy sends the body without waiting; the headers answer waits for the
			// decision, which needs the body.
			st.phase = requestBody
			return nil
		case st.reqMode == filterv3.ProcessingMode_BUFFERED:
			// Envoy waits for this answer before it sends the whole body; the decision
			// goes on the body's answer (its header mutation applies: nothing went
			// upstream yet).
			st.phase = requestBody
			return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
				RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}}}})
		default:
			// STREAMED and BUFFERED_PARTIAL pass headers on before the body is whole, and
			// GRPC is for gRPC bodies: no decision from the body could reach the route.
			st.count(resultInvalid)
			return st.refuse(&Refusal{Status: http.StatusInternalServerError, Code: "unsupported_processing_mode",
				Message: fmt.Sprintf("berth-router's endpoint picker needs the ext_proc filter's request_body_mode FULL_DUPLEX_STREAMED (as the Endpoint Picker Protocol asks) or BUFFERED, not %s", st.reqMode)})
		}

	case *extprocv3.ProcessingRequest_RequestBody:
		if st.phase != requestBody {
			return st.violation("a request body chunk")
		}
		chunk := v.RequestBody.GetBody()
		if int64(len(st.body))+int64(len(chunk)) > st.s.opts.MaxBodyBytes {
			st.count(resultTooLarge)
			st.log.Info("request body too large", "limit", st.s.opts.MaxBodyBytes)
			return st.refuse(&Refusal{Status: http.StatusRequestEntityTooLarge, Code: "request_too_large",
				Message: fmt.Sprintf("request body exceeds %d bytes", st.s.opts.MaxBodyBytes)})
		}
		st.body = append(st.body, chunk...)
		// In BUFFERED mode the one body message is the whole body, whether or not
		// trailers follow.
		if v.RequestBody.GetEndOfStream() || st.reqMode == filterv3.ProcessingMode_BUFFERED {
			return st.decide(true, false)
		}
		return nil

	case *extprocv3.ProcessingRequest_RequestTrailers:
		if st.phase == requestBody {
			// The body ended with trailers rather than an end-of-stream chunk.
			return st.decide(true, true)
		}
		if st.phase == finished {
			return nil
		}
		return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}})

	case *extprocv3.ProcessingRequest_ResponseHeaders:
		if st.phase != awaitResponse {
			return st.violation("response headers")
		}
		st.readResponseHeaders(req, v.ResponseHeaders)
		if err := st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
			ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{}}}}); err != nil {
			return err
		}
		st.phase = responseBody
		// With no body to follow, or a filter that does not show it (response body mode
		// NONE), the answer's headers are all the picker will see of it.
		if v.ResponseHeaders.GetEndOfStream() || st.respMode == filterv3.ProcessingMode_NONE {
			st.end(true)
		}
		return nil

	case *extprocv3.ProcessingRequest_ResponseBody:
		if st.phase != responseBody {
			return st.violation("a response body chunk")
		}
		chunk, eos := v.ResponseBody.GetBody(), v.ResponseBody.GetEndOfStream()
		if len(chunk) > 0 {
			if st.first.IsZero() {
				st.first = time.Now()
			}
			st.usage.Feed(chunk)
		}
		var br *extprocv3.BodyResponse
		if st.respMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
			// In full-duplex mode Envoy forwards what the processor sends back: each chunk
			// goes back as it came, so a streamed answer reaches the client token by token.
			br = streamed(chunk, eos)
		} else {
			br = &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{}}
		}
		if err := st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: br}}); err != nil {
			return err
		}
		if eos {
			st.end(true)
		}
		return nil

	case *extprocv3.ProcessingRequest_ResponseTrailers:
		if st.phase < awaitResponse {
			return st.violation("response trailers")
		}
		if err := st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{ResponseTrailers: &extprocv3.TrailersResponse{}}}); err != nil {
			return err
		}
		st.end(true)
		return nil
	}
	return status.Errorf(codes.InvalidArgument, "berth-router endpoint picker: unexpected ext_proc message %T %s", req.Request, st.phase)
}

// violation is a message out of the protocol's order: the stream is failed with a status
// that says what came when.
func (st *stream) violation(what string) error {
	st.log.Info("ext-proc protocol violation", "got", what, "phase", st.phase.String())
	return status.Errorf(codes.FailedPrecondition, "berth-router endpoint picker: got %s while %s", what, st.phase)
}

func (st *stream) readRequestHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) {
	st.query.Header = http.Header{}
	for _, hv := range h.GetHeaders().GetHeaders() {
		v := headerValue(hv)
		switch k := strings.ToLower(hv.GetKey()); k {
		case ":method":
			st.query.Method = v
		case ":path":
			st.query.Path, _, _ = strings.Cut(v, "?")
		default:
			if !strings.HasPrefix(k, ":") {
				st.query.Header.Add(k, v)
			}
		}
	}
	if ns, ok := req.GetMetadataContext().GetFilterMetadata()[SubsetNamespace]; ok {
		if v, ok := ns.GetFields()[SubsetKey]; ok {
			st.query.Subset = subsetOf(v.AsInterface())
		}
	}
	st.log = st.log.WithValues("method", st.query.Method, "path", st.query.Path)
	if id := st.query.Header.Get("x-request-id"); id != "" {
		st.log = st.log.WithValues("requestID", id)
	}
}

// subsetOf reads the subset hint: a list of "ip:port" strings, or one comma-separated
// string (as a header copied into metadata carries it).
func subsetOf(v any) []string {
	out := []string{}
	add := func(s string) {
		for _, e := range strings.Split(s, ",") {
			if e = strings.TrimSpace(e); e != "" {
				out = append(out, e)
			}
		}
	}
	switch v := v.(type) {
	case string:
		add(v)
	case []any:
		for _, e := range v {
			if s, ok := e.(string); ok {
				add(s)
			}
		}
	}
	return out
}

func (st *stream) readResponseHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) {
	for _, hv := range h.GetHeaders().GetHeaders() {
		switch strings.ToLower(hv.GetKey()) {
		case ":status":
			st.status, _ = strconv.Atoi(headerValue(hv))
		case "content-type":
			st.usage.Stream = strings.HasPrefix(headerValue(hv), "text/event-stream")
		}
	}
	if ns, ok := req.GetMetadataContext().GetFilterMetadata()[DestinationNamespace]; ok {
		st.served = ns.GetFields()[ServedKey].GetStringValue()
	}
	if st.served != "" && st.choice != nil {
		st.choice.Lease.Served(st.served)
	}
}

func headerValue(hv *corev3.HeaderValue) string {
	if len(hv.GetRawValue()) > 0 {
		return string(hv.GetRawValue())
	}
	return hv.GetValue()
}

// decide asks the chooser where the request goes and answers Envoy: the destination on the
// request headers' answer (or, in BUFFERED mode, the body's), then the body as Envoy must
// forward it. withBody: the request had a body (st.body, perhaps empty); trailers: it ended
// with trailers, which get their own answer after the body.
func (st *stream) decide(withBody, trailers bool) error {
	q := st.query
	if withBody {
		q.Body = st.body
		if q.Body == nil {
			q.Body = []byte{}
		}
	}
	t0 := time.Now()
	choice, ref := st.s.chooser.Choose(st.srv.Context(), &q)
	if ref != nil {
		st.s.m.decisions.WithLabelValues(resultRefused).Observe(time.Since(t0).Seconds())
		st.count(resultRefused)
		log := st.log.V(1)
		if ref.Status >= 500 {
			log = st.log
		}
		log.Info("refused", "status", ref.Status, "code", ref.Code, "reason", ref.Message)
		return st.refuse(ref)
	}
	st.decided = time.Now()
	st.s.m.decisions.WithLabelValues(resultPicked).Observe(st.decided.Sub(t0).Seconds())
	st.choice = choice
	st.count(resultPicked)
	st.log = st.log.WithValues("route", choice.Route, "model", choice.Model)
	st.log.V(1).Info("picked", "endpoints", choice.Endpoints, "bodyRewritten", choice.Body != nil, "decision", st.decided.Sub(t0).String())

	out := st.body
	if choice.Body != nil {
		out = choice.Body
	}
	dest := strings.Join(choice.Endpoints, ",")
	set := []*corev3.HeaderValueOption{header(DestinationKey, dest)}
	if withBody {
		// The body Envoy forwards is the one sent back here; its length must match.
		set = append(set, header("content-length", strconv.Itoa(len(out))))
	}
	common := &extprocv3.CommonResponse{ClearRouteCache: true, HeaderMutation: &extprocv3.HeaderMutation{SetHeaders: set}}
	meta := destinationMetadata(dest)
	st.phase = awaitResponse
	st.body = nil

	if !withBody || st.reqMode != filterv3.ProcessingMode_BUFFERED {
		if err := st.send(&extprocv3.ProcessingResponse{DynamicMetadata: meta,
			Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{Response: common}}}); err != nil {
			return err
		}
		if !withBody {
			return nil
		}
		// Full duplex: the body goes back in chunks Envoy accepts (62 000 bytes, under its
		// 64 KiB default), the last one ending the stream unless trailers do.
		for i := 0; i == 0 || i < len(out); i += chunkBytes {
			part := out[i:min(i+chunkBytes, len(out))]
			last := i+chunkBytes >= len(out)
			if err := st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
				RequestBody: streamed(part, last && !trailers)}}); err != nil {
				return err
			}
		}
	} else {
		if choice.Body != nil {
			common.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: choice.Body}}
		}
		if err := st.send(&extprocv3.ProcessingResponse{DynamicMetadata: meta,
			Response: &extprocv3.ProcessingResponse_RequestBody{RequestBody: &extprocv3.BodyResponse{Response: common}}}); err != nil {
			return err
		}
	}
	if trailers {
		return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{RequestTrailers: &extprocv3.TrailersResponse{}}})
	}
	return nil
}

// chunkBytes bounds one body chunk sent back to Envoy.
const chunkBytes = 62000

func streamed(body []byte, eos bool) *extprocv3.BodyResponse {
	return &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
		Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{Body: body, EndOfStream: eos}}}}}
}

func header(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}

// refuse answers the client through Envoy's immediate response and finishes the stream.
func (st *stream) refuse(r *Refusal) error {
	st.phase = finished
	st.body = nil
	return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: Immediate(r)}})
}

// end closes the chosen request's accounting with what the response showed.
func (st *stream) end(complete bool) {
	if st.ended || st.choice == nil {
		return
	}
	st.ended = true
	st.phase = finished
	o := Outcome{Status: st.status, TTFT: math.NaN(), Complete: complete}
	if !st.first.IsZero() {
		o.TTFT = st.first.Sub(st.decided).Seconds()
	}
	o.InputTokens, o.OutputTokens = st.usage.Tokens()
	st.choice.Lease.End(o)
	st.log.V(1).Info("served", "served", st.served, "status", st.status, "complete", complete,
		"outputTokens", o.OutputTokens, "duration", time.Since(st.start).Round(time.Microsecond).String())
}

func (st *stream) send(r *extprocv3.ProcessingResponse) error {
	if err := st.srv.Send(r); err != nil {
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return nil
		}
		return err
	}
	return nil
}
