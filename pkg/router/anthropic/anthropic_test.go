package anthropic

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestToChat(t *testing.T) {
	out, err := ToChat([]byte(`{"model":"m","max_tokens":7,"system":[{"type":"text","text":"Be "},{"type":"text","text":"brief."}],
		"messages":[{"role":"user","content":[{"type":"text","text":"Look:"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAA="}}]},
		{"role":"assistant","content":"A cat."},{"role":"user","content":"Sure?"}],
		"stop_sequences":["\n\n"],"temperature":0.2,"top_k":5,"metadata":{"user_id":"u1"},"stream":true}`))
	require.NoError(t, err)
	assert.JSONEq(t, `{"model":"m","max_tokens":7,"messages":[
		{"role":"system","content":"Be brief."},
		{"role":"user","content":[{"type":"text","text":"Look:"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAA="}}]},
		{"role":"assistant","content":"A cat."},{"role":"user","content":"Sure?"}],
		"stop":["\n\n"],"temperature":0.2,"top_k":5,"user":"u1","stream":true,"stream_options":{"include_usage":true}}`, string(out))
}

func TestToChatRefusesWhatDoesNotTranslate(t *testing.T) {
	for body, param := range map[string]string{
		`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f"}]}`:                             "tools",
		`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]}]}`:             "messages[0].content[0].type",
		`{"model":"m","max_tokens":1,"messages":[{"role":"system","content":"x"}]}`:                                                  "messages[0].role",
		`{"model":"m","max_tokens":1,"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"x"}]}`: "thinking",
		`{"model":"m","max_tokens":1,"system":[{"type":"image","source":{}}],"messages":[{"role":"user","content":"x"}]}`:            "system[0].type",
	} {
		_, err := ToChat([]byte(body))
		var re *RequestError
		require.True(t, errors.As(err, &re), "%s: %v", body, err)
		assert.Equal(t, param, re.Param, body)
	}
}

func TestResponse(t *testing.T) {
	out, u := Response(http.StatusOK, []byte(`{"id":"chatcmpl-abc","model":"base","choices":[{"message":{"role":"assistant","content":"Hi there"},
		"finish_reason":"stop","stop_reason":"\n\n"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`))
	assert.JSONEq(t, `{"id":"msg_abc","type":"message","role":"assistant","content":[{"type":"text","text":"Hi there"}],"model":"base",
		"stop_reason":"stop_sequence","stop_sequence":"\n\n","usage":{"input_tokens":9,"output_tokens":2}}`, string(out))
	assert.Equal(t, Usage{Input: 9, Output: 2}, u)

	out, _ = Response(http.StatusOK, []byte(`{"id":"x","choices":[{"message":{"content":"a"},"finish_reason":"length"}]}`))
	assert.Contains(t, string(out), `"stop_reason":"max_tokens"`)

	out, u = Response(http.StatusBadRequest, []byte(`{"error":{"message":"max_tokens is too large","type":"BadRequestError","code":400}}`))
	assert.JSONEq(t, `{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens is too large"}}`, string(out))
	assert.Zero(t, u)
	out, _ = Response(http.StatusNotFound, []byte(`{"detail":"Not Found"}`))
	assert.JSONEq(t, `{"type":"error","error":{"type":"not_found_error","message":"Not Found"}}`, string(out))
}

const chatStream = `data: {"id":"chatcmpl-1","model":"base","choices":[{"index":0,"delta":{"role":"assistant","content":"tok0"},"finish_reason":null}]}

data: {"id":"chatcmpl-1","model":"base","choices":[{"index":0,"delta":{"content":" tok1"},"finish_reason":"length"}]}

data: {"id":"chatcmpl-1","model":"base","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}

data: [DONE]

`

type sseEvent struct {
	name string
	data map[string]any
}

func events(t *testing.T, b []byte) []sseEvent {
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		switch l := sc.Text(); {
		case strings.HasPrefix(l, "event: "):
			cur.name = l[len("event: "):]
		case strings.HasPrefix(l, "data: "):
			require.NoError(t, json.Unmarshal([]byte(l[len("data: "):]), &cur.data))
		case l == "":
			out = append(out, cur)
			cur = sseEvent{}
		}
	}
	return out
}

// The translation does not depend on how the upstream bytes are cut.
func TestStream(t *testing.T) {
	for _, cut := range []int{1, 7, 64, len(chatStream)} {
		s := &Stream{InputEstimate: 4}
		var out []byte
		for rest := []byte(chatStream); len(rest) > 0; {
			n := min(cut, len(rest))
			out = append(out, s.Feed(rest[:n])...)
			rest = rest[n:]
		}
		out = append(out, s.End()...)
		ev := events(t, out)
		var names []string
		for _, e := range ev {
			names = append(names, e.name)
			assert.Equal(t, e.name, e.data["type"])
		}
		require.Equal(t, []string{"message_start", "content_block_start", "content_block_delta", "content_block_delta",
			"content_block_stop", "message_delta", "message_stop"}, names, "cut %d", cut)
		msg := ev[0].data["message"].(map[string]any)
		assert.Equal(t, "msg_1", msg["id"])
		assert.Equal(t, "base", msg["model"])
		assert.EqualValues(t, 4, msg["usage"].(map[string]any)["input_tokens"], "the estimate: the usage chunk comes last")
		assert.Equal(t, " tok1", ev[3].data["delta"].(map[string]any)["text"])
		assert.Equal(t, map[string]any{"stop_reason": "max_tokens", "stop_sequence": nil}, ev[5].data["delta"])
		assert.Equal(t, map[string]any{"input_tokens": 5.0, "output_tokens": 2.0}, ev[5].data["usage"])
		assert.Equal(t, Usage{Input: 5, Output: 2}, s.Usage())
	}
}

// An upstream that ends without [DONE] or usage still closes the message, counting chunks;
// an error inside the stream becomes an error event.
func TestStreamCutShortAndErrors(t *testing.T) {
	s := &Stream{InputEstimate: 3}
	out := s.Feed([]byte("data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"))
	out = append(out, s.End()...)
	ev := events(t, out)
	assert.Equal(t, "message_stop", ev[len(ev)-1].name)
	assert.Equal(t, Usage{Input: 3, Output: 1}, s.Usage())

	s = &Stream{}
	out = s.Feed([]byte("data: {\"id\":\"c\",\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\":{\"message\":\"engine died\"}}\n\n"))
	out = append(out, s.End()...)
	ev = events(t, out)
	last := ev[len(ev)-1]
	assert.Equal(t, "error", last.name)
	assert.Equal(t, map[string]any{"type": "api_error", "message": "engine died"}, last.data["error"])
}
