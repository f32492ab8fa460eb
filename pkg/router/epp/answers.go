package epp

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/berth-sh/berth/pkg/openaierror"
)

// Immediate is r as Envoy's immediate response: the status, an OpenAI error body (or r's
// own body) and r's headers. Details, which Envoy logs as the response code details,
// carries the error code.
func Immediate(r *Refusal) *extprocv3.ImmediateResponse {
	body, ctype := r.Body, r.ContentType
	if body == nil {
		code := r.Code
		if code == "" {
			code = "berth_epp_error"
		}
		body = openaierror.Marshal(openaierror.Error{Message: r.Message, Type: openaierror.TypeFor(r.Status), Param: r.Param, Code: code})
		ctype = "application/json"
	}
	set := []*corev3.HeaderValueOption{header("content-type", ctype)}
	for k, v := range r.Header {
		set = append(set, header(k, v))
	}
	details := r.Code
	if details == "" {
		details = "berth_epp"
	}
	return &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(r.Status)},
		Headers: &extprocv3.HeaderMutation{SetHeaders: set},
		Body:    body,
		Details: details,
	}
}

// destinationMetadata is the dynamic metadata naming the chosen endpoints:
// envoy.lb: {x-gateway-destination-endpoint: dest}.
func destinationMetadata(dest string) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{
		DestinationNamespace: structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
			DestinationKey: structpb.NewStringValue(dest),
		}}),
	}}
}
