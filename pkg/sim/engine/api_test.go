package engine

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestChatCompletion(t *testing.T) {
	_, base := startEngine(t, Config{Model: "m", ID: "ns/pod-0", TimeScale: 0.001})
	resp, b := post(t, base+"/v1/chat/completions", chatBody("m", "hello", 5), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if got := resp.Header.Get("X-Sim-Engine"); got != "ns/pod-0" {
		t.Errorf("X-Sim-Engine = %q", got)
	}
	m := decode(t, b)
	if m["object"] != "chat.completion" || m["model"] != "m" || !strings.HasPrefix(m["id"].(string), "chatcmpl-") {
		t.Errorf("unexpected envelope: %s", b)
	}
	choice := m["choices"].([]any)[0].(map[string]any)
	msg := choice["message"].(map[string]any)
	if msg["role"] != "assistant" || msg["content"] != "tok0 tok1 tok2 tok3 tok4" {
		t.Errorf("message = %v", msg)
	}
	if choice["finish_reason"] != "length" {
		t.Errorf("finish_reason = %v", choice["finish_reason"])
	}
	u := m["usage"].(map[string]any)
	wantPrompt := CountTokens("user: hello\n") // 12 bytes → 3 tokens
	if u["prompt_tokens"] != float64(wantPrompt) || u["completion_tokens"] != 5.0 || u["total_tokens"] != float64(wantPrompt+5) {
		t.Errorf("usage = %v, want prompt %d", u, wantPrompt)
	}
}

func TestCompletionAndMaxCompletionTokens(t *testing.T) {
	s, base := startEngine(t, Config{Model: "m", TimeScale: 0.001})
	// An array prompt is concatenated; no max_tokens → DefaultMaxTokens.
	resp, b := post(t, base+"/v1/completions", map[string]any{"model": "m", "prompt": []string{"abcd", "efgh"}}, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	m := decode(t, b)
	choice := m["choices"].([]any)[0].(map[string]any)
	if m["object"] != "text_completion" || choice["finish_reason"] != "length" {
		t.Errorf("unexpected response %s", b)
	}
	if got := len(strings.Fields(choice["text"].(string))); got != 16 {
		t.Errorf("generated %d words, want the default 16", got)
	}
	if u := m["usage"].(map[string]any); u["prompt_tokens"] != 2.0 {
		t.Errorf("prompt_tokens = %v, want 2", u["prompt_tokens"])
	}
	// max_completion_tokens wins over max_tokens, as in vLLM.
	body := chatBody("m", "x", 9)
	body["max_completion_tokens"] = 3
	_, b = post(t, base+"/v1/chat/completions", body, nil)
	if u := decode(t, b)["usage"].(map[string]any); u["completion_tokens"] != 3.0 {
		t.Errorf("completion_tokens = %v, want 3", u["completion_tokens"])
	}
	if st := s.Stats(); st.Requests != 2 || st.GenerationTokens != 19 || st.Running != 0 {
		t.Errorf("stats = %+v", st)
	}
}

func TestStreamingChat(t *testing.T) {
	_, base := startEngine(t, Config{Model: "m", TimeScale: 0.001})
	body := chatBody("m", "hi there", 7)
	body["stream"] = true
	body["stream_options"] = map[string]any{"include_usage": true}
	resp, err := do(context.Background(), base+"/v1/chat/completions", body, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("Content-Type = %q", ct)
	}
	chunks, done := readSSE(t, resp.Body)
	if !done {
		t.Error("stream did not end with [DONE]")
	}
	if len(chunks) != 8 {
		t.Fatalf("got %d chunks, want 7 tokens + usage", len(chunks))
	}
	var text strings.Builder
	for i, c := range chunks[:7] {
		if c["object"] != "chat.completion.chunk" {
			t.Errorf("chunk %d object %v", i, c["object"])
		}
		choice := c["choices"].([]any)[0].(map[string]any)
		delta := choice["delta"].(map[string]any)
		text.WriteString(delta["content"].(string))
		if (i == 0) != (delta["role"] == "assistant") {
			t.Errorf("chunk %d role = %v", i, delta["role"])
		}
		if (i == 6) != (choice["finish_reason"] == "length") {
			t.Errorf("chunk %d finish_reason = %v", i, choice["finish_reason"])
		}
	}
	if text.String() != generatedText(7) {
		t.Errorf("streamed text %q", text.String())
	}
	last := chunks[7]
	if len(last["choices"].([]any)) != 0 {
		t.Errorf("usage chunk has choices: %v", last)
	}
	if u := last["usage"].(map[string]any); u["completion_tokens"] != 7.0 || u["prompt_tokens"] != float64(CountTokens("user: hi there\n")) {
		t.Errorf("usage = %v", u)
	}
}

func TestStreamingCompletion(t *testing.T) {
	_, base := startEngine(t, Config{Model: "m", TimeScale: 0.001})
	resp, err := do(context.Background(), base+"/v1/completions", map[string]any{"model": "m", "prompt": "once upon", "max_tokens": 4, "stream": true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	chunks, done := readSSE(t, resp.Body)
	if !done || len(chunks) != 4 {
		t.Fatalf("done=%v chunks=%d, want 4 chunks and no usage chunk", done, len(chunks))
	}
	for i, c := range chunks {
		choice := c["choices"].([]any)[0].(map[string]any)
		if c["object"] != "text_completion" || choice["text"] != generatedWord(i) {
			t.Errorf("chunk %d = %v", i, c)
		}
	}
}

// Streamed chunks arrive as the simulated decode loop produces them, not all at once.
func TestStreamingPacing(t *testing.T) {
	// Steps of ~8ms simulated at scale 0.5 → ~4ms real between chunks.
	_, base := startEngine(t, Config{Model: "m", TimeScale: 0.5})
	body := chatBody("m", "x", 10)
	body["stream"] = true
	start := time.Now()
	resp, err := do(context.Background(), base+"/v1/chat/completions", body, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	chunks, _ := readSSE(t, resp.Body)
	if len(chunks) != 10 {
		t.Fatalf("%d chunks", len(chunks))
	}
	if el := time.Since(start); el < 30*time.Millisecond {
		t.Errorf("10 tokens took %v, want about 41ms", el)
	}
}

func TestErrors(t *testing.T) {
	_, base := startEngine(t, Config{Model: "m", TimeScale: 0.001, MaxModelLen: 100})
	resp, b := post(t, base+"/v1/chat/completions", chatBody("nope", "hi", 2), nil)
	want := "{\"error\":{\"code\":404,\"message\":\"The model `nope` does not exist.\",\"param\":\"model\",\"type\":\"NotFoundError\"}}"
	if resp.StatusCode != 404 || !sameJSON(b, []byte(want)) {
		t.Errorf("unknown model: %d %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type %q", ct)
	}
	for name, body := range map[string]any{
		"bad json":     "{not json",
		"no messages":  map[string]any{"model": "m"},
		"zero tokens":  chatBody("m", "hi", 0),
		"too long":     chatBody("m", "hi", 200),
		"prompt > max": chatBody("m", strings.Repeat("x", 500), 1),
		"bad content":  map[string]any{"model": "m", "messages": []map[string]any{{"role": "user", "content": 3}}},
	} {
		resp, b := post(t, base+"/v1/chat/completions", body, nil)
		m := decode(t, b)
		e, _ := m["error"].(map[string]any)
		if resp.StatusCode != 400 || e == nil || e["code"] != 400.0 || e["type"] != "BadRequestError" {
			t.Errorf("%s: %d %s", name, resp.StatusCode, b)
		}
	}
}

func TestModelsHealthAndLoRA(t *testing.T) {
	s, base := startEngine(t, Config{Model: "base-model", TimeScale: 0.001})
	models := func() []any {
		resp, err := http.Get(base + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		m := decode(t, b)
		if m["object"] != "list" {
			t.Fatalf("models: %v", m)
		}
		return m["data"].([]any)
	}
	data := models()
	if len(data) != 1 {
		t.Fatalf("models %v", data)
	}
	card := data[0].(map[string]any)
	if card["id"] != "base-model" || card["object"] != "model" || card["owned_by"] != "vllm" || card["root"] != "base-model" || card["parent"] != nil {
		t.Errorf("base card %v", card)
	}

	resp, err := http.Get(base + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v %v", resp, err)
	}
	resp.Body.Close()

	load := map[string]any{"lora_name": "sql", "lora_path": "/adapters/sql"}
	resp, b := post(t, base+"/v1/load_lora_adapter", load, nil)
	if resp.StatusCode != 200 || string(b) != "Success: LoRA adapter 'sql' added successfully." {
		t.Fatalf("load: %d %s", resp.StatusCode, b)
	}
	if resp, b = post(t, base+"/v1/load_lora_adapter", load, nil); resp.StatusCode != 400 {
		t.Errorf("reload: %d %s", resp.StatusCode, b)
	}
	data = models()
	if len(data) != 2 {
		t.Fatalf("models after load %v", data)
	}
	card = data[1].(map[string]any)
	if card["id"] != "sql" || card["parent"] != "base-model" || card["root"] != "/adapters/sql" {
		t.Errorf("adapter card %v", card)
	}
	if got := s.Stats().LoadedAdapters; len(got) != 1 || got[0] != "sql" {
		t.Errorf("LoadedAdapters = %v", got)
	}

	resp, b = post(t, base+"/v1/chat/completions", chatBody("sql", "select", 2), nil)
	if resp.StatusCode != 200 || decode(t, b)["model"] != "sql" {
		t.Errorf("adapter request: %d %s", resp.StatusCode, b)
	}

	if resp, b = post(t, base+"/v1/unload_lora_adapter", map[string]any{"lora_name": "sql"}, nil); resp.StatusCode != 200 {
		t.Errorf("unload: %d %s", resp.StatusCode, b)
	}
	if resp, b = post(t, base+"/v1/unload_lora_adapter", map[string]any{"lora_name": "sql"}, nil); resp.StatusCode != 404 {
		t.Errorf("unload unknown: %d %s", resp.StatusCode, b)
	}
	if resp, _ = post(t, base+"/v1/chat/completions", chatBody("sql", "select", 2), nil); resp.StatusCode != 404 {
		t.Errorf("unloaded adapter served: %d", resp.StatusCode)
	}
}

func TestFaultInjection(t *testing.T) {
	s, base := startEngine(t, Config{Model: "m", TimeScale: 0.001})
	s.SetFault(Fault{Status: 503})
	resp, b := post(t, base+"/v1/chat/completions", chatBody("m", "hi", 2), nil)
	if e, _ := decode(t, b)["error"].(map[string]any); resp.StatusCode != 503 || e["code"] != 503.0 {
		t.Errorf("fault: %d %s", resp.StatusCode, b)
	}
	if r, err := http.Get(base + "/health"); err != nil || r.StatusCode != 503 {
		t.Errorf("health under fault: %v %v", r, err)
	} else {
		r.Body.Close()
	}

	s.SetFault(Fault{Delay: 2 * time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := do(ctx, base+"/v1/completions", map[string]any{"model": "m", "prompt": "x", "max_tokens": 1}, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("delayed request: err = %v", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("timeout took %v", el)
	}

	s.SetFault(Fault{Delay: 50 * time.Millisecond})
	start = time.Now()
	if resp, _ := post(t, base+"/v1/completions", map[string]any{"model": "m", "prompt": "x", "max_tokens": 1}, nil); resp.StatusCode != 200 {
		t.Errorf("delayed status %d", resp.StatusCode)
	}
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Errorf("delay not applied: %v", el)
	}

	s.SetFault(Fault{})
	if resp, _ := post(t, base+"/v1/completions", map[string]any{"model": "m", "prompt": "x", "max_tokens": 1}, nil); resp.StatusCode != 200 {
		t.Errorf("after clearing: %d", resp.StatusCode)
	}
}

func TestClientDisconnectFreesSlot(t *testing.T) {
	s, base := startEngine(t, Config{Model: "m", TimeScale: 0.01})
	for _, stream := range []bool{true, false} {
		tokens0 := s.Stats().GenerationTokens
		ctx, cancel := context.WithCancel(context.Background())
		body := chatBody("m", "a long story please", 20000)
		body["stream"] = stream
		errc := make(chan error, 1)
		go func() {
			resp, err := do(ctx, base+"/v1/chat/completions", body, nil)
			if err == nil {
				buf := make([]byte, 64)
				_, err = resp.Body.Read(buf) // first chunk, then the client hangs up
				resp.Body.Close()
			}
			errc <- err
		}()
		eventually(t, 2*time.Second, "the request to run", func() bool { return s.Stats().GenerationTokens > tokens0 })
		cancel()
		<-errc
		eventually(t, 2*time.Second, "running to drop to 0", func() bool {
			st := s.Stats()
			return st.Running == 0 && st.KVUsage == 0
		})
		if st := s.Stats(); st.GenerationTokens-tokens0 > 19000 {
			t.Errorf("stream=%v: request ran to completion (%d tokens)", stream, st.GenerationTokens)
		}
	}
}

func TestCloseCancelsRequests(t *testing.T) {
	s := New(Config{Model: "m", TimeScale: 0.01})
	if err := s.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.Addr()
	errc := make(chan error, 1)
	go func() {
		_, err := do(context.Background(), base+"/v1/completions", map[string]any{"model": "m", "prompt": "x", "max_tokens": 20000}, nil)
		errc <- err
	}()
	eventually(t, 2*time.Second, "the request to run", func() bool { return s.Stats().Running == 1 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-errc:
	case <-time.After(2 * time.Second):
		t.Fatal("in-flight request survived Close")
	}
}

// sameJSON reports whether a and b are the same JSON value (key order and spacing aside).
func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return string(ja) == string(jb)
}
