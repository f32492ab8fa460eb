package router

import (
	"net/http"
	"strconv"

	"github.com/berth-sh/berth/pkg/openaierror"
	"github.com/berth-sh/berth/pkg/router/anthropic"
	"github.com/berth-sh/berth/pkg/router/request"
)

// writeError answers with an OpenAI-style JSON error. code is OpenAI's string code (e.g.
// "model_not_found"); empty uses the status.
func writeError(w http.ResponseWriter, status int, code, param, message string) {
	if code == "" {
		code = strconv.Itoa(status)
	}
	openaierror.Write(w, status, openaierror.Error{Message: message, Type: openaierror.TypeFor(status), Param: param, Code: code})
}

// writeErrorFor answers in the API the client spoke: Anthropic's error body on
// /v1/messages, OpenAI's elsewhere.
func writeErrorFor(kind request.Kind, w http.ResponseWriter, status int, code, param, message string) {
	if kind != request.Messages {
		writeError(w, status, code, param, message)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(anthropic.Error(status, message))
}
