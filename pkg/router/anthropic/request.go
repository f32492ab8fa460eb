// Package anthropic translates between Anthropic's Messages API and OpenAI's chat
// completions, for the requests berth-router receives on POST /v1/messages and sends to a
// target that speaks only OpenAI's API (a ModelServer's engines, an OpenAI-type
// ExternalModelProvider). A request becomes a chat completion (ToChat); the answer comes
// back as a message (Response), a stream of chat chunks as Anthropic's server-sent events
// (Stream), an OpenAI error as an Anthropic one (Error). An Anthropic-type provider gets the
// request as it came; nothing here is used then.
//
// What translates: text (a string or text blocks) and images (base64 or URL) in user and
// assistant messages, a system prompt, max_tokens, stop_sequences, temperature, top_p,
// top_k, metadata.user_id and stream. Tool use, documents and extended thinking have no
// faithful chat-completions form across engines; such a request is refused (400) naming
// the field, rather than answered without them.
package anthropic

import (
	"encoding/json"
	"fmt"
	"strings"
)

// RequestError is a request the translation refuses; Param names the field.
type RequestError struct {
	Param   string
	Message string
}

func (e *RequestError) Error() string { return e.Message }

type messagesRequest struct {
	Model         string          `json:"model"`
	MaxTokens     *int64          `json:"max_tokens"`
	Messages      []message       `json:"messages"`
	System        json.RawMessage `json:"system"`
	Stream        bool            `json:"stream"`
	StopSequences []string        `json:"stop_sequences"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	TopK          *int64          `json:"top_k"`
	Metadata      *struct {
		UserID string `json:"user_id"`
	} `json:"metadata"`
	Tools    json.RawMessage `json:"tools"`
	Thinking json.RawMessage `json:"thinking"`
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type block struct {
	Type   string `json:"type"`
	Text   string `json:"text"`
	Source *struct {
		Type      string `json:"type"` // base64 or url
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"`
}

// ToChat turns a Messages request into the chat completion request an OpenAI engine
// answers the same way. A streaming request asks for the usage chunk (stream_options), which
// the translated stream needs for its final usage.
func ToChat(body []byte) ([]byte, error) {
	var in messagesRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, &RequestError{Message: "request body is not a Messages request: " + err.Error()}
	}
	if len(in.Tools) > 0 && string(in.Tools) != "null" && string(in.Tools) != "[]" {
		return nil, &RequestError{Param: "tools", Message: "tools: tool use is not translated for a target that speaks only the OpenAI API; send it to an Anthropic-type ExternalModelProvider"}
	}
	if len(in.Thinking) > 0 && string(in.Thinking) != "null" {
		return nil, &RequestError{Param: "thinking", Message: "thinking: extended thinking is not translated for a target that speaks only the OpenAI API"}
	}
	out := map[string]any{"model": in.Model}
	if in.MaxTokens != nil {
		out["max_tokens"] = *in.MaxTokens
	}
	var msgs []map[string]any
	if len(in.System) > 0 && string(in.System) != "null" {
		text, err := systemText(in.System)
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, map[string]any{"role": "system", "content": text})
	}
	for i, m := range in.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return nil, &RequestError{Param: fmt.Sprintf("messages[%d].role", i), Message: fmt.Sprintf("messages[%d].role: %q is neither user nor assistant", i, m.Role)}
		}
		content, err := chatContent(m.Content, fmt.Sprintf("messages[%d].content", i))
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, map[string]any{"role": m.Role, "content": content})
	}
	out["messages"] = msgs
	if len(in.StopSequences) > 0 {
		out["stop"] = in.StopSequences
	}
	if in.Temperature != nil {
		out["temperature"] = *in.Temperature
	}
	if in.TopP != nil {
		out["top_p"] = *in.TopP
	}
	if in.TopK != nil {
		out["top_k"] = *in.TopK // vLLM's and SGLang's sampling parameter
	}
	if in.Metadata != nil && in.Metadata.UserID != "" {
		out["user"] = in.Metadata.UserID
	}
	if in.Stream {
		out["stream"] = true
		out["stream_options"] = map[string]any{"include_usage": true}
	}
	return json.Marshal(out)
}

func systemText(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []block
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return "", &RequestError{Param: "system", Message: "system: must be a string or an array of text blocks"}
	}
	var b strings.Builder
	for i, bl := range blocks {
		if bl.Type != "text" {
			return "", &RequestError{Param: fmt.Sprintf("system[%d].type", i), Message: fmt.Sprintf("system[%d]: a system block must be text, not %q", i, bl.Type)}
		}
		b.WriteString(bl.Text)
	}
	return b.String(), nil
}

// chatContent is a message's content in the chat shape: a string stays a string; blocks
// become content parts (text, image_url).
func chatContent(raw json.RawMessage, field string) (any, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var blocks []block
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, &RequestError{Param: field, Message: field + ": must be a string or an array of content blocks"}
	}
	parts := make([]map[string]any, 0, len(blocks))
	for i, bl := range blocks {
		switch {
		case bl.Type == "text":
			parts = append(parts, map[string]any{"type": "text", "text": bl.Text})
		case bl.Type == "image" && bl.Source != nil && bl.Source.Type == "base64":
			parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:" + bl.Source.MediaType + ";base64," + bl.Source.Data}})
		case bl.Type == "image" && bl.Source != nil && bl.Source.Type == "url":
			parts = append(parts, map[string]any{"type": "image_url", "image_url": map[string]any{"url": bl.Source.URL}})
		default:
			return nil, &RequestError{Param: fmt.Sprintf("%s[%d].type", field, i),
				Message: fmt.Sprintf("%s[%d]: a %q block is not translated for a target that speaks only the OpenAI API (text and image are)", field, i, bl.Type)}
		}
	}
	return parts, nil
}
