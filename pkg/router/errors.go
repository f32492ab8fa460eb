package router

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// apiError is an OpenAI-style error body: clients written for the OpenAI API read
// error.message, error.type and error.code from it.
type apiError struct {
	Error apiErrorBody `json:"error"`
}

type apiErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    any     `json:"code"`
}

// OpenAI's error types by status.
func errorType(status int) string {
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

// writeError answers with an OpenAI-style JSON error. code is OpenAI's string code (e.g.
// "model_not_found"); empty uses the status.
func writeError(w http.ResponseWriter, status int, code, param, message string) {
	body := apiError{Error: apiErrorBody{Message: message, Type: errorType(status), Code: code}}
	if code == "" {
		body.Error.Code = strconv.Itoa(status)
	}
	if param != "" {
		body.Error.Param = &param
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
