package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// Usage is a response's token counts.
type Usage struct {
	Input, Output int64
}

type chatUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}

type chatResponse struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Content *string `json:"content"`
		} `json:"message"`
		Delta struct {
			Content *string `json:"content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
		// StopReason is vLLM's: the stop string (or token id) that ended the text.
		StopReason any `json:"stop_reason"`
	} `json:"choices"`
	Usage *chatUsage      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type messageUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

type messageResponse struct {
	ID           string       `json:"id"`
	Type         string       `json:"type"`
	Role         string       `json:"role"`
	Content      []textBlock  `json:"content"`
	Model        string       `json:"model"`
	StopReason   *string      `json:"stop_reason"`
	StopSequence *string      `json:"stop_sequence"`
	Usage        messageUsage `json:"usage"`
}

// stopReason maps a chat finish_reason (and vLLM's stop_reason) to the Messages API's.
func stopReason(finish *string, stop any) (reason string, sequence *string) {
	if finish == nil {
		return "end_turn", nil
	}
	switch *finish {
	case "length":
		return "max_tokens", nil
	case "tool_calls", "function_call":
		return "tool_use", nil
	case "stop":
		if s, ok := stop.(string); ok && s != "" {
			return "stop_sequence", &s
		}
	}
	return "end_turn", nil
}

func messageID(chatID string) string {
	id := strings.TrimPrefix(strings.TrimPrefix(chatID, "chatcmpl-"), "cmpl-")
	if id == "" {
		id = "berth"
	}
	return "msg_" + id
}

// Response turns a non-streaming chat completion answer into a Messages API answer, or an
// OpenAI error (any status but 2xx) into an Anthropic error. usage is the completion's.
func Response(status int, body []byte) (out []byte, usage Usage) {
	if status/100 != 2 {
		return Error(status, openAIMessage(body)), Usage{}
	}
	var c chatResponse
	if err := json.Unmarshal(body, &c); err != nil || len(c.Choices) == 0 {
		return Error(http.StatusBadGateway, "the engine's answer is not a chat completion"), Usage{}
	}
	ch := c.Choices[0]
	text := ""
	if ch.Message.Content != nil {
		text = *ch.Message.Content
	}
	reason, seq := stopReason(ch.FinishReason, ch.StopReason)
	m := messageResponse{ID: messageID(c.ID), Type: "message", Role: "assistant", Content: []textBlock{{Type: "text", Text: text}},
		Model: c.Model, StopReason: &reason, StopSequence: seq}
	if c.Usage != nil {
		usage = Usage{Input: c.Usage.PromptTokens, Output: c.Usage.CompletionTokens}
		m.Usage = messageUsage{InputTokens: usage.Input, OutputTokens: usage.Output}
	}
	out, _ = json.Marshal(m)
	return out, usage
}

// openAIMessage is the message of an OpenAI error body ({"error":{"message"}}), else the
// body itself (short).
func openAIMessage(body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
		Detail any `json:"detail"`
	}
	if json.Unmarshal(body, &e) == nil {
		if e.Error.Message != "" {
			return e.Error.Message
		}
		if e.Detail != nil {
			return fmt.Sprint(e.Detail)
		}
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 512 {
		s = s[:512] + "..."
	}
	return s
}

// ErrorType is the Messages API's error type for an HTTP status.
func ErrorType(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusUnprocessableEntity:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusGatewayTimeout:
		return "timeout_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	return "api_error"
}

// Error is an Anthropic error body: {"type":"error","error":{"type","message"}}.
func Error(status int, message string) []byte {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": ErrorType(status), "message": message}})
	return b
}

// Stream turns a chat completion stream (server-sent events with "data: {chunk}" lines and
// a final "data: [DONE]") into the Messages API's events: message_start, one text
// content_block_start, a content_block_delta per chunk with text, content_block_stop,
// message_delta with the stop reason and usage, message_stop. It is fed the upstream bytes
// as they come and returns what to send on; End finishes a stream the engine cut short.
type Stream struct {
	// InputEstimate is message_start's input_tokens: the true count arrives only with the
	// final usage chunk, and goes into message_delta.
	InputEstimate int64

	partial  []byte
	started  bool
	finished bool
	id       string
	model    string
	finish   *string
	stop     any
	usage    Usage
	chunks   int64
	sawUsage bool
}

// Feed takes upstream bytes and returns the translated events ready so far.
func (s *Stream) Feed(p []byte) []byte {
	var out bytes.Buffer
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.partial = append(s.partial, p...)
			break
		}
		s.partial = append(s.partial, p[:i]...)
		s.line(&out, bytes.TrimRight(s.partial, "\r"))
		s.partial = s.partial[:0]
		p = p[i+1:]
	}
	return out.Bytes()
}

// End returns the events that close the message if the upstream ended without [DONE].
func (s *Stream) End() []byte {
	var out bytes.Buffer
	if len(s.partial) > 0 {
		s.line(&out, s.partial)
		s.partial = nil
	}
	s.close(&out)
	return out.Bytes()
}

// Usage is the stream's token counts: the usage chunk's, else one output token per chunk
// with text.
func (s *Stream) Usage() Usage {
	if s.sawUsage {
		return s.usage
	}
	return Usage{Input: s.InputEstimate, Output: s.chunks}
}

func event(out *bytes.Buffer, name string, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintf(out, "event: %s\ndata: %s\n\n", name, b)
}

func (s *Stream) start(out *bytes.Buffer) {
	if s.started {
		return
	}
	s.started = true
	event(out, "message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": messageID(s.id), "type": "message", "role": "assistant", "content": []any{}, "model": s.model,
		"stop_reason": nil, "stop_sequence": nil,
		"usage": messageUsage{InputTokens: s.InputEstimate, OutputTokens: 0},
	}})
	event(out, "content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": textBlock{Type: "text", Text: ""}})
}

func (s *Stream) close(out *bytes.Buffer) {
	if s.finished {
		return
	}
	s.finished = true
	s.start(out)
	event(out, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	reason, seq := stopReason(s.finish, s.stop)
	u := s.Usage()
	event(out, "message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": reason, "stop_sequence": seq},
		"usage": messageUsage{InputTokens: u.Input, OutputTokens: u.Output}})
	event(out, "message_stop", map[string]any{"type": "message_stop"})
}

func (s *Stream) line(out *bytes.Buffer, l []byte) {
	data, ok := bytes.CutPrefix(l, []byte("data:"))
	if !ok || s.finished {
		return
	}
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		s.close(out)
		return
	}
	var c chatResponse
	if json.Unmarshal(data, &c) != nil {
		return
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		// vLLM reports an error inside a started stream as a data line with "error".
		s.finished = true
		event(out, "error", map[string]any{"type": "error", "error": map[string]string{"type": "api_error", "message": openAIMessage(data)}})
		return
	}
	if s.id == "" {
		s.id, s.model = c.ID, c.Model
	}
	if c.Usage != nil {
		s.usage, s.sawUsage = Usage{Input: c.Usage.PromptTokens, Output: c.Usage.CompletionTokens}, true
	}
	for _, ch := range c.Choices {
		s.start(out)
		if ch.Delta.Content != nil && *ch.Delta.Content != "" {
			s.chunks++
			event(out, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
				"delta": map[string]string{"type": "text_delta", "text": *ch.Delta.Content}})
		}
		if ch.FinishReason != nil {
			s.finish, s.stop = ch.FinishReason, ch.StopReason
		}
	}
}
