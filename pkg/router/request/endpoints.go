package request

import (
	"encoding/json"
	"strings"
)

// The engine APIs beside completions that berth-router passes through: each names its model
// in the body (a JSON field, or a form field of a multipart upload for audio), so ModelRoutes
// match them like completions; the body reaches the engine unchanged but for the model.
// Field names are vLLM's (vllm/entrypoints/openai and entrypoints/pooling) and OpenAI's,
// which SGLang follows.
const (
	Embeddings     Kind = "embeddings"     // POST /v1/embeddings: model, input
	Responses      Kind = "responses"      // POST /v1/responses: model, input, instructions, max_output_tokens
	Rerank         Kind = "rerank"         // POST /v1/rerank (Jina's shape): model, query, documents
	RerankBare     Kind = "rerank-bare"    // POST /rerank, vLLM's alias of /v1/rerank
	RerankV2       Kind = "rerank-v2"      // POST /v2/rerank (Cohere's v2 shape)
	Score          Kind = "score"          // POST /v1/score: model, text_1/text_2 (queries/documents in newer vLLM)
	ScoreBare      Kind = "score-bare"     // POST /score, vLLM's alias of /v1/score
	Transcriptions Kind = "transcriptions" // POST /v1/audio/transcriptions, multipart/form-data: model, file
	Translations   Kind = "translations"   // POST /v1/audio/translations, multipart/form-data: model, file
	Speech         Kind = "speech"         // POST /v1/audio/speech: model, input, voice
	Tokenize       Kind = "tokenize"       // POST /tokenize: model, prompt or messages
	Detokenize     Kind = "detokenize"     // POST /detokenize: model, tokens
)

// endpoint describes a path the router passes through.
type endpoint struct {
	kind Kind
	path string
	// form: the body is multipart/form-data (an audio upload), its model a form field.
	form bool
	// text are the JSON fields (strings, arrays of strings, or chat messages) whose text is
	// the prompt: for the prefix index and the input-token estimate of rate limits.
	text []string
	// openAI: OpenAI's own API has the path, so an OpenAI-compatible provider may serve it.
	openAI bool
}

var endpoints = []endpoint{
	{kind: Chat, path: ChatPath, openAI: true},
	{kind: Completion, path: CompletionPath, openAI: true},
	{kind: Messages, path: MessagesPath},
	{kind: Embeddings, path: "/v1/embeddings", text: []string{"input", "messages"}, openAI: true},
	{kind: Responses, path: "/v1/responses", text: []string{"instructions", "input"}, openAI: true},
	{kind: Rerank, path: "/v1/rerank", text: []string{"query", "documents"}},
	{kind: RerankBare, path: "/rerank", text: []string{"query", "documents"}},
	{kind: RerankV2, path: "/v2/rerank", text: []string{"query", "documents"}},
	{kind: Score, path: "/v1/score", text: []string{"text_1", "text_2", "queries", "documents", "data_1", "data_2"}},
	{kind: ScoreBare, path: "/score", text: []string{"text_1", "text_2", "queries", "documents", "data_1", "data_2"}},
	{kind: Transcriptions, path: "/v1/audio/transcriptions", form: true, openAI: true},
	{kind: Translations, path: "/v1/audio/translations", form: true, openAI: true},
	{kind: Speech, path: "/v1/audio/speech", text: []string{"input"}, openAI: true},
	{kind: Tokenize, path: "/tokenize", text: []string{"prompt", "messages"}},
	{kind: Detokenize, path: "/detokenize"},
}

func lookup(k Kind) (endpoint, bool) {
	for _, e := range endpoints {
		if e.kind == k {
			return e, true
		}
	}
	return endpoint{}, false
}

// Paths lists every path the router proxies, in a stable order (completions first).
func Paths() []string {
	out := make([]string, len(endpoints))
	for i, e := range endpoints {
		out[i] = e.path
	}
	return out
}

// Generates reports whether the kind produces tokens one by one: the completions, whose
// requests PD disaggregation splits and whose prefix the KV cache keeps. The others
// (embeddings, rerank, score, tokenize, audio) go whole to one endpoint.
func (k Kind) Generates() bool {
	return k == Chat || k == Completion || k == Messages || k == Responses
}

// Multipart reports whether the kind's body is multipart/form-data.
func (k Kind) Multipart() bool {
	e, _ := lookup(k)
	return e.form
}

// OpenAIPath reports whether OpenAI's own API serves the kind's path, so that an
// OpenAI-compatible provider can be sent it (rerank, score and tokenize are vLLM's own).
func (k Kind) OpenAIPath() bool {
	e, _ := lookup(k)
	return e.openAI
}

// parsePassThrough reads a JSON body of a pass-through kind: the model (required: it is how
// the request is routed, even where an engine serving one model would default it), stream,
// a generation bound where the API has one, and the text of the kind's prompt fields. Keys
// match exactly, as the engines' (pydantic) parsers match them.
func parsePassThrough(e endpoint, body []byte) (*Request, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, &Error{Message: "request body is not a JSON object: " + jsonProblem(err)}
	}
	var model string
	if raw, ok := obj["model"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &model); err != nil {
			return nil, &Error{Param: "model", Message: "model must be a string"}
		}
	}
	if model == "" {
		return nil, &Error{Param: "model", Message: "model is required: berth-router routes " + e.path + " by the model it names"}
	}
	r := &Request{Kind: e.kind, Body: body, Model: model}
	if raw, ok := obj["stream"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &r.Stream); err != nil {
			return nil, &Error{Param: "stream", Message: "stream must be a boolean"}
		}
	}
	if raw, ok := obj["max_output_tokens"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &r.MaxTokens); err != nil || r.MaxTokens < 0 {
			return nil, &Error{Param: "max_output_tokens", Message: "max_output_tokens must be a non-negative integer"}
		}
	}
	var b strings.Builder
	for _, f := range e.text {
		if raw, ok := obj[f]; ok {
			appendText(&b, raw)
		}
	}
	r.Prompt = b.String()
	return r, nil
}

// appendText writes the text inside a JSON value: a string, the strings of an array, the
// content (or text) of objects such as chat messages and Responses input items, nested.
// Anything else (numbers: token ids; images) adds nothing: the text is for an estimate and
// a prefix hash, not for the engine.
func appendText(b *strings.Builder, raw json.RawMessage) {
	if len(raw) == 0 {
		return
	}
	switch raw[0] {
	case '"':
		var s string
		if json.Unmarshal(raw, &s) == nil {
			b.WriteString(s)
		}
	case '[':
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) == nil {
			for _, it := range items {
				appendText(b, it)
			}
		}
	case '{':
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return
		}
		if role, ok := obj["role"]; ok {
			var s string
			if json.Unmarshal(role, &s) == nil {
				b.WriteString(s)
				b.WriteString(": ")
			}
		}
		for _, f := range []string{"content", "text"} {
			if v, ok := obj[f]; ok {
				appendText(b, v)
			}
		}
	}
}
