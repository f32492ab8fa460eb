// Package request reads an inference request the way berth-router needs it, whether it
// came in OpenAI's shape (chat and text completions) or Anthropic's (the Messages API): the
// model it asks for, whether it streams, the prompt text (for prefix-aware picking and the
// input-token estimate) and how many tokens it may generate. It also rewrites bodies (the
// model, PD-disaggregation fields) without touching any field it does not know, so a
// client's extra parameters reach the engine unchanged.
package request

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/berth-sh/berth/pkg/router/jsonscan"
)

// Kind is the OpenAI endpoint a request was sent to.
type Kind string

const (
	Chat       Kind = "chat"       // POST /v1/chat/completions
	Completion Kind = "completion" // POST /v1/completions
	Messages   Kind = "messages"   // POST /v1/messages (Anthropic)
)

// Paths of the endpoints.
const (
	ChatPath       = "/v1/chat/completions"
	CompletionPath = "/v1/completions"
	MessagesPath   = "/v1/messages"
)

// KindOf maps a URL path to the endpoint kind, or "" for a path the router does not proxy.
func KindOf(path string) Kind {
	switch path = strings.TrimSuffix(path, "/"); path {
	case ChatPath:
		return Chat
	case CompletionPath:
		return Completion
	case MessagesPath:
		return Messages
	}
	for _, e := range endpoints {
		if e.path == path {
			return e.kind
		}
	}
	return ""
}

// Path is the kind's URL path (the engine's, to which the request is sent).
func (k Kind) Path() string {
	switch k {
	case Completion:
		return CompletionPath
	case Messages:
		return MessagesPath
	case Chat, "":
		return ChatPath
	}
	e, _ := lookup(k)
	return e.path
}

// Request is what the router reads from a body. Body is kept as sent.
type Request struct {
	Kind   Kind
	Body   []byte
	Model  string
	Stream bool
	// IncludeUsage is stream_options.include_usage as the client sent it.
	IncludeUsage bool
	// Prompt is the text the engine prefills: for chat, each message as "role: content\n",
	// the same rendering the simulated engines tokenize, so prefix hashes agree.
	Prompt string
	// MaxTokens is max_completion_tokens, else max_tokens (max_output_tokens for the
	// Responses API), else 0 (engine default).
	MaxTokens int64
	// ContentType is the multipart/form-data Content-Type (with its boundary) of an audio
	// upload, sent on unchanged; "" for JSON bodies.
	ContentType string
}

// BytesPerToken is the router's input-token estimate: about four bytes of English text per
// token for the common BPE vocabularies. It is an estimate on purpose: the router cannot run
// every model's tokenizer, and rate limits correct themselves from the response's usage.
const BytesPerToken = 4

// EstimatedInputTokens estimates the prompt's tokens before the engine has seen it.
func (r *Request) EstimatedInputTokens() int64 {
	n := int64((len(r.Prompt) + BytesPerToken - 1) / BytesPerToken)
	return max(n, 1)
}

// Error is a client error with the OpenAI error fields it should be reported with.
type Error struct {
	Param   string
	Message string
}

func (e *Error) Error() string { return e.Message }

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type contentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type fields struct {
	Model               *string         `json:"model"`
	System              json.RawMessage `json:"system"` // Anthropic: a string or text blocks
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	Messages            []message       `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Parse reads body as a JSON request of the given kind. Errors are *Error, each naming the
// field. A multipart kind (audio uploads) needs its Content-Type: ParseContent.
func Parse(kind Kind, body []byte) (*Request, error) {
	if kind != Chat && kind != Completion && kind != Messages {
		e, ok := lookup(kind)
		switch {
		case !ok:
			return nil, &Error{Message: fmt.Sprintf("berth-router does not proxy requests of kind %q", kind)}
		case e.form:
			return nil, &Error{Message: e.path + " takes a multipart/form-data upload, not JSON"}
		}
		return parsePassThrough(e, body)
	}
	return parse(kind, body, true)
}

// parse is Parse, with scan false to take encoding/json's path whatever the body (for tests
// that compare the two).
func parse(kind Kind, body []byte, scan bool) (*Request, error) {
	var f fields
	ok := false
	if scan {
		f, ok = scanFields(body)
	}
	if !ok {
		// Anything the scan does not take (bad JSON, escaped or case-folded keys, repeated
		// fields, wrong types) is decoded by encoding/json, whose result and errors are the
		// reference.
		f = fields{}
		dec := json.NewDecoder(bytes.NewReader(body))
		if err := dec.Decode(&f); err != nil {
			return nil, &Error{Message: "request body is not a JSON object: " + jsonProblem(err)}
		}
		if dec.More() {
			return nil, &Error{Message: "request body has data after its JSON object"}
		}
	}
	if f.Model == nil || *f.Model == "" {
		return nil, &Error{Param: "model", Message: "model is required"}
	}
	r := &Request{Kind: kind, Body: body, Model: *f.Model, Stream: f.Stream}
	if f.StreamOptions != nil {
		r.IncludeUsage = f.StreamOptions.IncludeUsage
	}
	switch {
	case f.MaxCompletionTokens != nil:
		r.MaxTokens = *f.MaxCompletionTokens
	case f.MaxTokens != nil:
		r.MaxTokens = *f.MaxTokens
	}
	if r.MaxTokens < 0 {
		return nil, &Error{Param: "max_tokens", Message: "max_tokens must not be negative"}
	}
	switch kind {
	case Chat, Messages:
		if len(f.Messages) == 0 {
			return nil, &Error{Param: "messages", Message: "messages must list at least one message"}
		}
		var b strings.Builder
		if kind == Messages {
			if f.MaxTokens == nil {
				return nil, &Error{Param: "max_tokens", Message: "max_tokens: Field required"}
			}
			if len(f.System) > 0 && string(f.System) != "null" {
				// Rendered as the system message the chat translation makes of it, so the
				// prefix hashes agree with what the engine computes.
				text, err := contentText(f.System)
				if err != nil {
					return nil, &Error{Param: "system", Message: "system: must be a string or an array of text blocks"}
				}
				b.WriteString("system: ")
				b.WriteString(text)
				b.WriteByte('\n')
			}
		}
		for i, m := range f.Messages {
			text, err := contentText(m.Content)
			if err != nil {
				return nil, &Error{Param: fmt.Sprintf("messages[%d].content", i), Message: fmt.Sprintf("messages[%d].content: %v", i, err)}
			}
			b.WriteString(m.Role)
			b.WriteString(": ")
			b.WriteString(text)
			b.WriteByte('\n')
		}
		r.Prompt = b.String()
	case Completion:
		text, err := promptText(f.Prompt)
		if err != nil {
			return nil, &Error{Param: "prompt", Message: "prompt: " + err.Error()}
		}
		r.Prompt = text
	}
	return r, nil
}

// contentText is a chat message's text: a string, or the text parts of an array of parts.
func contentText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if p, ok := jsonscan.PlainString(raw); ok {
		return string(p), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("must be a string or an array of content parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// promptText is a completion prompt: a string or an array of strings (joined).
func promptText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", errors.New("is required")
	}
	if p, ok := jsonscan.PlainString(raw); ok {
		return string(p), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		// Token-id prompts ([]int, [][]int) are valid OpenAI input; the router cannot hash
		// them as text, so it treats their JSON as the prompt. Estimates stay in the same order.
		var ids []json.RawMessage
		if json.Unmarshal(raw, &ids) == nil {
			return string(raw), nil
		}
		return "", errors.New("must be a string, an array of strings or token ids")
	}
	return strings.Join(list, ""), nil
}

func jsonProblem(err error) string {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Sprintf("%v (at byte %d)", syn, syn.Offset)
	}
	return err.Error()
}

// Rewrite returns body with the given top-level fields set (nil deletes one). Every other
// field, including ones the router does not know, is kept byte for byte.
func Rewrite(body []byte, set map[string]any) ([]byte, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, err
	}
	for k, v := range set {
		if v == nil {
			delete(obj, k)
			continue
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		obj[k] = raw
	}
	return json.Marshal(obj)
}

// fieldNames are the members fields reads, top level and nested: a key that differs from one
// of them only in case is one encoding/json would match, so the scan leaves it to json.
var fieldNames = []string{"model", "system", "stream", "stream_options", "messages", "prompt", "max_tokens",
	"max_completion_tokens", "include_usage", "role", "content"}

// foldsToField reports whether key (plain ASCII) is not a field name but encoding/json would
// match it to one.
func foldsToField(key []byte) bool {
	for _, n := range fieldNames {
		if len(n) == len(key) && string(key) != n && strings.EqualFold(string(key), n) {
			return true
		}
	}
	return false
}

// scanFields reads body's fields without a reflective decode, for the common request: one
// JSON object, plain keys, each field at most once and of its type. false: decode with
// encoding/json (which this must then agree with; TestScanAgreesWithDecode checks it).
func scanFields(body []byte) (f fields, ok bool) {
	var seen uint
	i := jsonscan.SkipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return f, false
	}
	end, ok := jsonscan.Object(body, i, func(key, v []byte) bool {
		if !jsonscan.PlainKey(key) {
			return false
		}
		var bit uint
		null := string(v) == "null"
		switch string(key) {
		case "model":
			bit = 1
			if !null {
				s, ok := jsonscan.PlainString(v)
				if !ok {
					return false
				}
				m := string(s)
				f.Model = &m
			}
		case "system":
			bit, f.System = 2, v
		case "stream":
			bit = 4
			switch string(v) {
			case "true":
				f.Stream = true
			case "false", "null":
			default:
				return false
			}
		case "stream_options":
			bit = 8
			if !null && !scanStreamOptions(v, &f) {
				return false
			}
		case "messages":
			bit = 16
			if !null && !scanMessages(v, &f) {
				return false
			}
		case "prompt":
			bit, f.Prompt = 32, v
		case "max_tokens":
			bit = 64
			if !scanInt(v, &f.MaxTokens) {
				return false
			}
		case "max_completion_tokens":
			bit = 128
			if !scanInt(v, &f.MaxCompletionTokens) {
				return false
			}
		default:
			return !foldsToField(key)
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	})
	return f, ok && jsonscan.SkipSpace(body, end) == len(body)
}

// scanInt sets *p from v as encoding/json decodes a *int64 field (null leaves it nil).
func scanInt(v []byte, p **int64) bool {
	n, null, ok := jsonscan.Int(v)
	if ok && !null {
		*p = &n
	}
	return ok
}

func scanStreamOptions(v []byte, f *fields) bool {
	if v[0] != '{' {
		return false
	}
	so := &streamOptions{}
	seen := false
	_, ok := jsonscan.Object(v, 0, func(key, v []byte) bool {
		if !jsonscan.PlainKey(key) {
			return false
		}
		if string(key) != "include_usage" {
			return !foldsToField(key)
		}
		if seen {
			return false
		}
		seen = true
		switch string(v) {
		case "true":
			so.IncludeUsage = true
		case "false", "null":
		default:
			return false
		}
		return true
	})
	f.StreamOptions = so
	return ok
}

func scanMessages(v []byte, f *fields) bool {
	if v[0] != '[' {
		return false
	}
	msgs := make([]message, 0, 4)
	_, ok := jsonscan.Array(v, 0, func(e []byte) bool {
		var m message
		switch e[0] {
		case 'n': // null: a zero message, as encoding/json leaves it
		case '{':
			var seen uint
			if _, ok := jsonscan.Object(e, 0, func(key, v []byte) bool {
				if !jsonscan.PlainKey(key) {
					return false
				}
				var bit uint
				switch string(key) {
				case "role":
					bit = 1
					if string(v) != "null" {
						s, ok := jsonscan.PlainString(v)
						if !ok {
							return false
						}
						m.Role = string(s)
					}
				case "content":
					bit, m.Content = 2, v
				default:
					return !foldsToField(key)
				}
				if seen&bit != 0 {
					return false
				}
				seen |= bit
				return true
			}); !ok {
				return false
			}
		default:
			return false
		}
		msgs = append(msgs, m)
		return true
	})
	f.Messages = msgs
	return ok
}
