package request

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseChat(t *testing.T) {
	r, err := Parse(Chat, []byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":7,
		"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"x"}}]}],"seed":3}`))
	require.NoError(t, err)
	assert.Equal(t, "m", r.Model)
	assert.True(t, r.Stream)
	assert.True(t, r.IncludeUsage)
	assert.EqualValues(t, 7, r.MaxTokens)
	assert.Equal(t, "system: be brief\nuser: hi\n", r.Prompt)
	assert.EqualValues(t, 7, r.EstimatedInputTokens(), "26 bytes at 4 per token")
}

func TestParseCompletion(t *testing.T) {
	r, err := Parse(Completion, []byte(`{"model":"m","prompt":["ab","cd"],"max_tokens":1,"max_completion_tokens":9}`))
	require.NoError(t, err)
	assert.Equal(t, "abcd", r.Prompt)
	assert.EqualValues(t, 9, r.MaxTokens, "max_completion_tokens wins over max_tokens")
	r, err = Parse(Completion, []byte(`{"model":"m","prompt":[1,2,3]}`))
	require.NoError(t, err)
	assert.Equal(t, "[1,2,3]", r.Prompt)
}

func TestParseErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		kind  Kind
		body  string
		param string
	}{
		{Chat, `{"messages":[{"role":"user","content":"x"}]}`, "model"},
		{Chat, `{"model":""}`, "model"},
		{Chat, `{"model":"m"}`, "messages"},
		{Chat, `{"model":"m","messages":[{"role":"user","content":5}]}`, "messages[0].content"},
		{Completion, `{"model":"m"}`, "prompt"},
		{Completion, `{"model":"m","prompt":{}}`, "prompt"},
		{Completion, `{"model":"m","prompt":"x","max_tokens":-1}`, "max_tokens"},
		{Messages, `{"model":"m","messages":[{"role":"user","content":"x"}]}`, "max_tokens"},
		{Messages, `{"model":"m","max_tokens":1,"system":5,"messages":[{"role":"user","content":"x"}]}`, "system"},
		{Chat, `not json`, ""},
		{Chat, `{"model":"m"} {"model":"n"}`, ""},
	} {
		_, err := Parse(tc.kind, []byte(tc.body))
		var e *Error
		require.ErrorAs(t, err, &e, tc.body)
		assert.Equal(t, tc.param, e.Param, tc.body)
		assert.NotEmpty(t, e.Message)
	}
}

func TestRewriteKeepsUnknownFields(t *testing.T) {
	out, err := Rewrite([]byte(`{"model":"a","x_vendor":{"k":[1,2]},"stream":true}`), map[string]any{"model": "b", "stream": nil, "max_tokens": 1})
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(out, &got))
	assert.Equal(t, map[string]any{"model": "b", "x_vendor": map[string]any{"k": []any{1.0, 2.0}}, "max_tokens": 1.0}, got)
}

func TestKindOf(t *testing.T) {
	assert.Equal(t, Chat, KindOf("/v1/chat/completions"))
	assert.Equal(t, Completion, KindOf("/v1/completions/"))
	assert.Equal(t, Messages, KindOf("/v1/messages"))
	assert.Equal(t, Embeddings, KindOf("/v1/embeddings"))
	assert.Equal(t, Kind(""), KindOf("/v1/images/generations"))
}

// A Messages request's prompt is rendered as its chat translation is: the system prompt
// first, then the messages, text blocks joined.
func TestParseMessages(t *testing.T) {
	r, err := Parse(Messages, []byte(`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"Be brief."}],"stream":true,
		"messages":[{"role":"user","content":[{"type":"text","text":"Hello"},{"type":"image","source":{"type":"url","url":"x"}}]},{"role":"assistant","content":"Hi"}]}`))
	require.NoError(t, err)
	assert.Equal(t, "system: Be brief.\nuser: Hello\nassistant: Hi\n", r.Prompt)
	assert.EqualValues(t, 5, r.MaxTokens)
	assert.True(t, r.Stream)
	assert.Equal(t, Messages, r.Kind)
	assert.Equal(t, MessagesPath, r.Kind.Path())
}

// FuzzParse: any body either fails with a named *Error or parses to a request whose model
// survives a rewrite with the prompt unchanged. `make test` runs the seed corpus.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hello"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"stream":true}`,
		`{"model":"m","prompt":"p","max_tokens":3}`,
		`{"model":"m","prompt":["a","b"]}`,
		`{"model":"m","prompt":[[1,2],[3]]}`,
		`{"model":null}`, `[]`, `{`, `{"model":"m","messages":null}`, "{\"model\":\"\\u00e9\",\"prompt\":\"\\ud800\"}",
	} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, body string, chat bool) {
		kind := Completion
		if chat {
			kind = Chat
		}
		r, err := Parse(kind, []byte(body))
		if err != nil {
			var e *Error
			if !assert.ErrorAs(t, err, &e) {
				return
			}
			assert.NotEmpty(t, e.Message)
			return
		}
		assert.NotEmpty(t, r.Model)
		assert.Positive(t, r.EstimatedInputTokens())
		out, err := Rewrite(r.Body, map[string]any{"model": "rewritten"})
		require.NoError(t, err)
		r2, err := Parse(kind, out)
		require.NoError(t, err)
		assert.Equal(t, "rewritten", r2.Model)
		assert.Equal(t, r.Prompt, r2.Prompt)
		assert.Equal(t, r.Stream, r2.Stream)
	})
}
