package engine

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// POST /v1/messages answers as Anthropic's Messages API does, with the tokens and timing
// of the chat completion whose first message is the system prompt.
func TestMessages(t *testing.T) {
	_, url := startEngine(t, Config{Model: "m", TimeScale: 0.001})
	body := `{"model":"m","max_tokens":3,"system":"Be brief.","messages":[{"role":"user","content":[{"type":"text","text":"Hello"}]}]}`
	resp, b := post(t, url+"/v1/messages", body, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Equal(t, "message", m["type"])
	assert.Equal(t, "assistant", m["role"])
	assert.True(t, strings.HasPrefix(m["id"].(string), "msg_"))
	assert.Equal(t, []any{map[string]any{"type": "text", "text": "tok0 tok1 tok2"}}, m["content"])
	assert.Equal(t, "max_tokens", m["stop_reason"])
	// "system: Be brief.\nuser: Hello\n": 30 bytes, 8 tokens, as the chat completion has.
	assert.Equal(t, map[string]any{"input_tokens": 8.0, "output_tokens": 3.0}, m["usage"])

	resp, b = post(t, url+"/v1/messages", strings.Replace(body, `"max_tokens":3,`, `"max_tokens":2,"stream":true,`, 1), nil)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	assert.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream"))
	var names []string
	for _, l := range strings.Split(string(b), "\n") {
		if n, ok := strings.CutPrefix(l, "event: "); ok {
			names = append(names, n)
		}
	}
	assert.Equal(t, []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop"}, names)
	assert.Contains(t, string(b), `"usage":{"input_tokens":8,"output_tokens":1}`, "message_start carries the input")
	assert.Contains(t, string(b), `"delta":{"stop_reason":"max_tokens","stop_sequence":null},"type":"message_delta","usage":{"input_tokens":0,"output_tokens":2}`)

	resp, b = post(t, url+"/v1/messages", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.JSONEq(t, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: Field required"}}`, string(b))
	resp, b = post(t, url+"/v1/messages", `{"model":"other","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`, nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Contains(t, string(b), `"not_found_error"`)
}
