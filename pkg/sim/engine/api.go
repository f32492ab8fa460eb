package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// completionRequest is the subset of the OpenAI chat and completion requests the
// simulator honours, plus the PD disaggregation fields vLLM and SGLang accept.
type completionRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	KVTransferParams *KVTransferParams `json:"kv_transfer_params"`
	// SGLang/Mooncake bootstrap: both halves of a PD request carry the same room.
	BootstrapHost string          `json:"bootstrap_host"`
	BootstrapPort json.RawMessage `json:"bootstrap_port"`
	BootstrapRoom *int64          `json:"bootstrap_room"`
}

// KVTransferParams is vLLM's kv_transfer_params object as the NixlConnector uses it.
// A prefill request carries {do_remote_decode: true}; the prefill response carries the
// filled-in object, which the router passes verbatim to the decode request.
type KVTransferParams struct {
	DoRemoteDecode  bool   `json:"do_remote_decode"`
	DoRemotePrefill bool   `json:"do_remote_prefill"`
	RemoteEngineID  string `json:"remote_engine_id,omitempty"`
	RemoteRequestID string `json:"remote_request_id,omitempty"`
	RemoteBlockIDs  []int  `json:"remote_block_ids,omitempty"`
	RemoteHost      string `json:"remote_host,omitempty"`
	RemotePort      int    `json:"remote_port,omitempty"`
	TPSize          int    `json:"tp_size,omitempty"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	TotalTokens      int `json:"total_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

// maxBody bounds request bodies; a 32k-token prompt is ~128 KiB of text.
const maxBody = 32 << 20

// faultAndBody reads the request body, then applies the simulated fault (delay, then error
// status), answering failures in the API's own error shape; ok is false when it answered.
// The body is read first, as a real server reads a request before working on it: an
// HTTP/1.1 server notices its client going away (and cancels the request's context) only
// once the body is read, so a delay begun before it would outlive a client that gave up.
func (s *Server) faultAndBody(w http.ResponseWriter, r *http.Request, fail func(http.ResponseWriter, int, string, string)) (body []byte, ok bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		fail(w, http.StatusBadRequest, "could not read body: "+err.Error(), "")
		return nil, false
	}
	if f := s.currentFault(); f.Delay > 0 || f.Status != 0 {
		if f.Delay > 0 && !sleepCtx(r.Context(), s.done, f.Delay) {
			return nil, false
		}
		if f.Status != 0 {
			fail(w, f.Status, fmt.Sprintf("simulated fault: %d %s", f.Status, http.StatusText(f.Status)), "")
			return nil, false
		}
	}
	return body, true
}

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request, chat bool) {
	ctx := r.Context()
	body, ok := s.faultAndBody(w, r, writeError)
	if !ok {
		return
	}
	var req completionRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "JSON decode error: "+err.Error(), "")
		return
	}
	var text string
	var err error
	if chat {
		if len(req.Messages) == 0 {
			writeError(w, http.StatusBadRequest, "messages: Field required", "messages")
			return
		}
		text, err = chatPromptText(req.Messages)
	} else {
		text, err = completionPromptText(req.Prompt)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "")
		return
	}
	prefix := "cmpl-"
	if chat {
		prefix = "chatcmpl-"
	}
	q, model, ok := s.admit(w, r, &req, text, prefix, writeError)
	if !ok {
		return
	}
	created := time.Now().Unix()
	if req.Stream {
		s.stream(w, r, q, chat, model, created, req.StreamOptions != nil && req.StreamOptions.IncludeUsage)
		return
	}
	if !s.await(ctx, q) {
		if ctx.Err() == nil {
			writeError(w, http.StatusServiceUnavailable, "The engine is shutting down.", "")
		}
		return
	}

	text = generatedText(q.generated)
	u := usage{PromptTokens: q.promptTokens, CompletionTokens: q.generated, TotalTokens: q.promptTokens + q.generated}
	var kvParams *KVTransferParams
	if q.publish.nixl {
		kvParams = s.nixlResponseParams(r, q)
	}
	resp := map[string]any{"id": q.id, "created": created, "model": model, "usage": u, "kv_transfer_params": kvParams}
	if chat {
		resp["object"] = "chat.completion"
		resp["choices"] = []map[string]any{{
			"index":         0,
			"message":       map[string]any{"role": "assistant", "content": text, "tool_calls": []any{}},
			"logprobs":      nil,
			"finish_reason": q.finishReason,
			"stop_reason":   nil,
		}}
		resp["prompt_logprobs"] = nil
	} else {
		resp["object"] = "text_completion"
		resp["choices"] = []map[string]any{{
			"index":         0,
			"text":          text,
			"logprobs":      nil,
			"finish_reason": q.finishReason,
			"stop_reason":   nil,
		}}
	}
	writeJSON(w, http.StatusOK, resp)
}

// admit checks a request (req, its prompt text) against the model, context length and KV
// capacity, decides where its KV comes from on the decode side of a PD pair, and submits it
// to the batching loop. On false the client has its answer (through fail) or is gone.
func (s *Server) admit(w http.ResponseWriter, r *http.Request, req *completionRequest, text, prefix string,
	fail func(w http.ResponseWriter, status int, message, param string)) (q *seq, model string, ok bool) {
	ctx := r.Context()
	lora, ok := s.resolveModel(req.Model)
	if !ok {
		fail(w, http.StatusNotFound, "The model `"+req.Model+"` does not exist.", "model")
		return nil, "", false
	}
	model = req.Model
	if model == "" {
		model = s.cfg.Model
	}

	promptTokens := CountTokens(text)
	maxTokens := s.cfg.DefaultMaxTokens
	if req.MaxCompletionTokens != nil {
		maxTokens = *req.MaxCompletionTokens
	} else if req.MaxTokens != nil {
		maxTokens = *req.MaxTokens
	}
	if maxTokens < 1 {
		fail(w, http.StatusBadRequest, fmt.Sprintf("max_tokens must be at least 1, got %d.", maxTokens), "max_tokens")
		return nil, "", false
	}
	if limit := s.cfg.MaxModelLen; promptTokens >= limit {
		fail(w, http.StatusBadRequest, fmt.Sprintf("This model's maximum context length is %d tokens. However, your request has %d input tokens. Please reduce the length of the input messages.", limit, promptTokens), "")
		return nil, "", false
	} else if promptTokens+maxTokens > limit {
		fail(w, http.StatusBadRequest, fmt.Sprintf("'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is %d tokens and your request has %d input tokens (%d > %d - %d).", maxTokens, limit, promptTokens, maxTokens, limit, promptTokens), "")
		return nil, "", false
	}
	if s.cfg.Role == RolePrefill {
		maxTokens = 1 // a PD prefill instance only computes the prompt's KV
	}

	q = &seq{
		lora:         lora,
		promptTokens: promptTokens,
		maxTokens:    maxTokens,
		events:       make(chan int, maxTokens),
	}
	q.kvBlocks = (promptTokens + maxTokens + s.cfg.BlockSize - 1) / s.cfg.BlockSize
	if q.kvBlocks > s.totalBlocks {
		fail(w, http.StatusBadRequest, fmt.Sprintf("The request needs %d KV cache tokens but the engine only has %d.", q.kvBlocks*s.cfg.BlockSize, s.totalBlocks*s.cfg.BlockSize), "")
		return nil, "", false
	}
	q.hashes, q.whole = promptHashes(model, text, s.cfg.BlockSize)
	// vLLM derives its request id from X-Request-Id when present.
	reqHeader := r.Header.Get("X-Request-Id")
	if reqHeader != "" {
		q.id = prefix + reqHeader
	} else {
		q.id = prefix + randomHex(16)
	}

	if req.KVTransferParams != nil && req.KVTransferParams.DoRemoteDecode {
		q.publish.nixl = true
	}
	if s.cfg.Role == RolePrefill {
		q.publish.content = true
		if reqHeader != "" {
			q.publish.reqKey = "req/" + reqHeader
		}
		if req.BootstrapRoom != nil {
			q.publish.room = roomKey(*req.BootstrapRoom)
		}
	}
	if !s.findRemoteKV(ctx, q, req, reqHeader) {
		return nil, "", false // client gone while waiting for the bootstrap room
	}

	s.submit(q)
	return q, model, true
}

// await waits for q to finish. It cancels q and reports false if the client goes away
// or the server closes first.
func (s *Server) await(ctx context.Context, q *seq) bool {
	for {
		select {
		case _, ok := <-q.events:
			if !ok {
				return q.finishReason != "abort"
			}
		case <-ctx.Done():
			s.cancel(q)
			return false
		case <-s.done:
			return false
		}
	}
}

type chatDelta struct {
	Role    string `json:"role,omitempty"`
	Content string `json:"content"`
}

type streamChoice struct {
	Index        int        `json:"index"`
	Delta        *chatDelta `json:"delta,omitempty"`
	Text         *string    `json:"text,omitempty"`
	Logprobs     any        `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
	StopReason   any        `json:"stop_reason,omitempty"`
}

type streamChunk struct {
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	Model   string         `json:"model"`
	Choices []streamChoice `json:"choices"`
	Usage   *usage         `json:"usage,omitempty"`
}

// stream writes q's tokens as server-sent events as the loop produces them, so the gaps
// between chunks are the simulated inter-token latencies.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, q *seq, chat bool, model string, created int64, includeUsage bool) {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	_ = rc.Flush()

	object := "text_completion"
	if chat {
		object = "chat.completion.chunk"
	}
	send := func(c *streamChunk) bool {
		b, err := json.Marshal(c)
		if err == nil {
			_, err = fmt.Fprintf(w, "data: %s\n\n", b)
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
		c := &streamChunk{ID: q.id, Object: object, Created: created, Model: model}
		choice := streamChoice{Index: 0}
		if i == q.maxTokens-1 {
			reason := "length"
			choice.FinishReason = &reason
		}
		word := generatedWord(i)
		if chat {
			choice.Delta = &chatDelta{Content: word}
			if i == 0 {
				choice.Delta.Role = "assistant"
			}
		} else {
			choice.Text = &word
		}
		c.Choices = []streamChoice{choice}
		if !send(c) {
			return
		}
	}
	if q.finishReason == "abort" {
		return
	}
	if includeUsage {
		u := usage{PromptTokens: q.promptTokens, CompletionTokens: q.generated, TotalTokens: q.promptTokens + q.generated}
		if !send(&streamChunk{ID: q.id, Object: object, Created: created, Model: model, Choices: []streamChoice{}, Usage: &u}) {
			return
		}
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
	_ = rc.Flush()
}

// findRemoteKV decides, before scheduling, where q's prompt KV comes from on the decode
// side of a PD pair, and counts a transfer or a miss. In order:
//   - nixl: kv_transfer_params with do_remote_prefill (honoured in any role, as vLLM's
//     kv_both instances do): pull (engine id, request id) from the hub;
//   - decode role, mooncake: wait for the bootstrap room's prefill;
//   - decode role, http connector: the prefill published under the X-Request-Id;
//   - decode role, lmcache: the longest prefix of the prompt's blocks in the hub's
//     content store.
//
// It reports false if the client went away while waiting.
func (s *Server) findRemoteKV(ctx context.Context, q *seq, req *completionRequest, reqHeader string) bool {
	covered, decideSide := 0, false
	var from *kvEntry // the keyed transfer's entry (the content store knows no sender)
	cover := func(e *kvEntry) int {
		n := e.covers(q.promptTokens, q.hashes, q.whole, s.cfg.BlockSize)
		if n > 0 {
			q.handoff = s.cfg.handoffCost(e.location)
			from = e
		}
		return n
	}

	switch p := req.KVTransferParams; {
	case p != nil && p.DoRemotePrefill:
		decideSide = true
		if e, ok := s.hub.take(nixlKey(p.RemoteEngineID, p.RemoteRequestID)); ok {
			covered = cover(e)
		}
	case s.cfg.Role != RoleDecode:
	case req.BootstrapRoom != nil:
		decideSide = true
		s.mu.Lock()
		s.pendingBootstrap++
		s.mu.Unlock()
		start := time.Now()
		e, ok := s.hub.wait(ctx, roomKey(*req.BootstrapRoom), s.cfg.BootstrapTimeout)
		q.extraQueue = s.cfg.sim(time.Since(start))
		s.mu.Lock()
		s.pendingBootstrap--
		s.mu.Unlock()
		if ctx.Err() != nil {
			return false
		}
		if ok {
			covered = cover(e)
		}
	default:
		decideSide = true
		if reqHeader != "" {
			if e, ok := s.hub.take("req/" + reqHeader); ok {
				covered = cover(e)
			}
		}
		if covered == 0 {
			covered = s.hub.matchBlocks(q.hashes) * s.cfg.BlockSize
		}
	}
	if !decideSide {
		return true
	}
	q.remoteTokens = covered
	cross := false
	if from != nil && covered > 0 && from.version != "" && s.cfg.Version != "" {
		cross = from.version != s.cfg.Version
		if cross {
			s.hub.crossVersion.Add(1)
		} else {
			s.hub.sameVersion.Add(1)
		}
	}
	s.mu.Lock()
	if cross {
		s.stats.KVCrossVersion++
	}
	if covered > 0 {
		s.stats.KVTransfersReceived++
	} else {
		s.stats.KVTransferMisses++
	}
	s.mu.Unlock()
	return true
}

// nixlResponseParams builds the kv_transfer_params a NIXL prefill returns, telling the
// decode engine where to pull the KV from.
func (s *Server) nixlResponseParams(r *http.Request, q *seq) *KVTransferParams {
	host, port := "", 0
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		h, p, err := net.SplitHostPort(a.String())
		if err == nil {
			host = h
			port, _ = strconv.Atoi(p)
		}
	}
	return &KVTransferParams{
		DoRemotePrefill: true,
		DoRemoteDecode:  false,
		RemoteEngineID:  s.cfg.ID,
		RemoteRequestID: q.id,
		RemoteBlockIDs:  q.blockIDs,
		RemoteHost:      host,
		RemotePort:      port,
		TPSize:          1,
	}
}

func roomKey(room int64) string { return "room/" + strconv.FormatInt(room, 10) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// sleepCtx sleeps for d unless ctx ends or done closes first; it reports whether the
// full delay elapsed.
func sleepCtx(ctx context.Context, done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-done:
		return false
	}
}
