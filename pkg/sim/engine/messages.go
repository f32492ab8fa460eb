package engine

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// The Anthropic Messages API (POST /v1/messages), as vLLM serves it since v0.11.1
// (vllm/entrypoints/anthropic) and as Anthropic-compatible providers do: the same
// scheduling and tokens as a chat completion whose first message is the system prompt.

type messagesRequest struct {
	Model     string          `json:"model"`
	MaxTokens *int            `json:"max_tokens"`
	Messages  []chatMessage   `json:"messages"`
	System    json.RawMessage `json:"system"`
	Stream    bool            `json:"stream"`
}

type messagesUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// anthropicErrorTypes are the Messages API's error types by status.
var anthropicErrorTypes = map[int]string{
	400: "invalid_request_error",
	401: "authentication_error",
	403: "permission_error",
	404: "not_found_error",
	413: "request_too_large",
	429: "rate_limit_error",
	503: "overloaded_error",
	529: "overloaded_error",
}

// writeAnthropicError writes {"type":"error","error":{"type","message"}}.
func writeAnthropicError(w http.ResponseWriter, status int, message, _ string) {
	typ, ok := anthropicErrorTypes[status]
	if !ok {
		typ = "api_error"
	}
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": message}})
}

func stopReasonOf(finish string) string {
	if finish == "length" {
		return "max_tokens"
	}
	return "end_turn"
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	body, ok := s.faultAndBody(w, r, writeAnthropicError)
	if !ok {
		return
	}
	var in messagesRequest
	if err := json.Unmarshal(body, &in); err != nil {
		writeAnthropicError(w, http.StatusBadRequest, "JSON decode error: "+err.Error(), "")
		return
	}
	switch {
	case in.MaxTokens == nil:
		writeAnthropicError(w, http.StatusBadRequest, "max_tokens: Field required", "")
		return
	case len(in.Messages) == 0:
		writeAnthropicError(w, http.StatusBadRequest, "messages: Field required", "")
		return
	}
	msgs := in.Messages
	if len(in.System) > 0 && string(in.System) != "null" {
		msgs = append([]chatMessage{{Role: "system", Content: in.System}}, msgs...)
	}
	text, err := chatPromptText(msgs)
	if err != nil {
		writeAnthropicError(w, http.StatusBadRequest, err.Error(), "")
		return
	}
	req := completionRequest{Model: in.Model, Messages: msgs, MaxTokens: in.MaxTokens}
	q, model, ok := s.admit(w, r, &req, text, "msg_", writeAnthropicError)
	if !ok {
		return
	}
	if in.Stream {
		s.streamMessages(w, r, q, model)
		return
	}
	if !s.await(ctx, q) {
		if ctx.Err() == nil {
			writeAnthropicError(w, http.StatusServiceUnavailable, "The engine is shutting down.", "")
		}
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": q.id, "type": "message", "role": "assistant", "model": model,
		"content":     []map[string]string{{"type": "text", "text": generatedText(q.generated)}},
		"stop_reason": stopReasonOf(q.finishReason), "stop_sequence": nil,
		"usage": messagesUsage{InputTokens: q.promptTokens, OutputTokens: q.generated},
	})
}

// streamMessages writes q's tokens as the Messages API's server-sent events.
func (s *Server) streamMessages(w http.ResponseWriter, r *http.Request, q *seq, model string) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	send := func(name string, v any) bool {
		b, err := json.Marshal(v)
		if err == nil {
			_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
		}
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			s.cancel(q)
			return false
		}
		return true
	}
	if !send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": q.id, "type": "message", "role": "assistant", "model": model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": messagesUsage{InputTokens: q.promptTokens, OutputTokens: 1},
	}}) || !send("content_block_start", map[string]any{"type": "content_block_start", "index": 0,
		"content_block": map[string]string{"type": "text", "text": ""}}) {
		return
	}
	for {
		var i int
		var ok bool
		select {
		case i, ok = <-q.events:
		case <-ctx.Done():
			s.cancel(q)
			return
		case <-s.done:
			return
		}
		if !ok {
			break
		}
		if !send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]string{"type": "text_delta", "text": generatedWord(i)}}) {
			return
		}
	}
	if q.finishReason == "abort" {
		return
	}
	_ = send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}) &&
		send("message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": stopReasonOf(q.finishReason), "stop_sequence": nil},
			"usage": messagesUsage{OutputTokens: q.generated}}) &&
		send("message_stop", map[string]any{"type": "message_stop"})
}
