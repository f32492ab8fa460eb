// Package openaierror is the error body of the OpenAI-compatible HTTP API,
// {"error":{"message","type","param","code"}}, as clients written for the OpenAI API read it.
// berth-router answers with it, and so does the simulated engine (as vLLM does); each
// chooses the type and code names of the server it speaks for.
package openaierror

import (
	"encoding/json"
	"net/http"
)

// Error is one error answer.
type Error struct {
	Message string
	// Type is the error class: OpenAI's ("invalid_request_error", ...) or vLLM's
	// ("BadRequestError", ...).
	Type string
	// Param names the request field at fault; empty is JSON null.
	Param string
	// Code is OpenAI's string code (for example "model_not_found") or vLLM's numeric status.
	Code any
}

type body struct {
	Error detail `json:"error"`
}

type detail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    any     `json:"code"`
}

// Marshal is e as the JSON error body, newline-terminated: what Write sends, for answers that
// are not written to an http.ResponseWriter (the endpoint picker's immediate responses to
// Envoy).
func Marshal(e Error) []byte {
	d := detail{Message: e.Message, Type: e.Type, Code: e.Code}
	if e.Param != "" {
		d.Param = &e.Param
	}
	b, err := json.Marshal(body{Error: d})
	if err != nil { // Code is a string or a number; nothing else is passed
		b, _ = json.Marshal(body{Error: detail{Message: e.Message, Type: e.Type, Code: err.Error()}})
	}
	return append(b, '\n')
}

// Write answers with status and e as a JSON error body.
func Write(w http.ResponseWriter, status int, e Error) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(Marshal(e))
}

// TypeFor is OpenAI's error type for an HTTP status, as berth-router answers.
func TypeFor(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusMethodNotAllowed:
		return "invalid_request_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusTooManyRequests:
		return "rate_limit_exceeded"
	case http.StatusGatewayTimeout:
		return "timeout"
	}
	return "server_error"
}
