// Package epp is berth-router's endpoint picker: the Gateway API Inference Extension's
// Endpoint Picker Protocol (its docs/proposals/004-endpoint-picker-protocol) over Envoy's
// external processing stream (envoy.service.ext_proc.v3), and the gRPC health services
// the protocol asks for.
//
// Envoy (or any data plane speaking ext_proc) shows the picker each request's headers
// and body; the picker chooses where it goes and answers with the
// x-gateway-destination-endpoint header and the same value in the envoy.lb dynamic
// metadata (the primary endpoint first, then fallbacks), rewriting the body when the
// model name changes. Envoy then shows it the response, which passes through unchanged
// and tells the picker which endpoint served, when the first token came and how many
// tokens were used: the load accounting the next picks rely on.
//
// The choice itself is a Chooser's; package router supplies one that picks as its proxy
// mode does (ModelRoute, ModelServer endpoints, the same scorers and rate limits).
package epp

import (
	"context"
	"net/http"
)

// Names of the protocol: metadata namespaces and keys, and the header.
const (
	// DestinationNamespace wraps DestinationKey in the ext_proc response's dynamic
	// metadata, and ServedKey in the request's metadata context.
	DestinationNamespace = "envoy.lb"
	// DestinationKey is the header and metadata key naming the chosen endpoints,
	// "ip:port" or "ip:port,ip:port,..." (primary first, then fallbacks in order).
	DestinationKey = "x-gateway-destination-endpoint"
	// ServedKey is where the data plane reports the endpoint that produced the answer.
	ServedKey = "x-gateway-destination-endpoint-served"
	// SubsetNamespace wraps SubsetKey in the request's metadata context: when set, the
	// endpoints the picker may choose from.
	SubsetNamespace = "envoy.lb.subset_hint"
	SubsetKey       = "x-gateway-destination-endpoint-subset"
)

// Services the health server answers for (grpc.health.v1), as the protocol names them;
// "" (the server as a whole) answers as readiness does.
const (
	LivenessService  = "liveness"
	ReadinessService = "readiness"
	ExtProcService   = "envoy.service.ext_proc.v3.ExternalProcessor"
)

// Query is one request as the data plane showed it.
type Query struct {
	Method string
	// Path is the request's path without its query string.
	Path   string
	Header http.Header
	// Body is the whole request body; nil when the request has none.
	Body []byte
	// Subset is the data plane's endpoint subset hint ("ip:port" or bare "ip" entries),
	// non-nil (perhaps empty) when it sent one: the choice must come from it.
	Subset []string
}

// Choice is where a request goes.
type Choice struct {
	// Endpoints are "ip:port", the primary first, then fallbacks in the order the data
	// plane should try them.
	Endpoints []string
	// Body replaces the request body when the chooser changed it (the model name
	// rewritten for the target); nil forwards the body unchanged.
	Body []byte
	// Route and Model name the decision in logs (ModelRoute namespace/name, model).
	Route, Model string
	// Lease accounts the request to the endpoint serving it until End.
	Lease Lease
}

// Lease is a chosen request's place in the load accounting: counted in flight on the
// primary endpoint from the choice on.
type Lease interface {
	// Served moves the request to the endpoint the data plane reports served it, when
	// that is not the primary (the primary failed and a fallback answered).
	Served(endpoint string)
	// End closes the lease, once; later calls do nothing.
	End(Outcome)
}

// Outcome is how a chosen request ended.
type Outcome struct {
	// Status is the answer's HTTP status; 0 when no answer came.
	Status int
	// TTFT is the time from the choice to the first response body byte, in seconds;
	// NaN when unknown.
	TTFT float64
	// InputTokens and OutputTokens are the usage the answer reported (output counted
	// from stream chunks when a stream reported none).
	InputTokens, OutputTokens int64
	// Complete: the answer reached its end; false when the stream was cut.
	Complete bool
}

// Refusal is an answer the picker gives the client itself, through the data plane's
// immediate response.
type Refusal struct {
	Status int
	// Code, Param and Message make the OpenAI error body.
	Code, Param, Message string
	// Header is sent with the answer (e.g. Retry-After).
	Header map[string]string
	// Body, when set, is the whole answer instead of an error (e.g. the model list of a
	// GET /v1/models); ContentType is its type.
	Body        []byte
	ContentType string
}

// Chooser decides where a request goes, or refuses it.
type Chooser interface {
	Choose(ctx context.Context, q *Query) (*Choice, *Refusal)
}
