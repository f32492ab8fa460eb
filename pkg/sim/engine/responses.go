package engine

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// handleResponses answers the Responses API (non-streaming): the input is generated from
// through the batching loop like a chat completion, and answered as one output message.
func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	body, ok := s.faultAndBody(w, r, writeError)
	if !ok {
		return
	}
	var in struct {
		Model           string          `json:"model"`
		Input           json.RawMessage `json:"input"`
		Instructions    string          `json:"instructions"`
		MaxOutputTokens *int            `json:"max_output_tokens"`
		Stream          bool            `json:"stream"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		writeError(w, http.StatusBadRequest, "JSON decode error: "+err.Error(), "")
		return
	}
	if in.Stream {
		writeError(w, http.StatusBadRequest, "the simulator answers the Responses API without streaming", "stream")
		return
	}
	var text strings.Builder
	text.WriteString(in.Instructions)
	var items []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	var plain string
	switch {
	case json.Unmarshal(in.Input, &plain) == nil:
		text.WriteString(plain)
	case json.Unmarshal(in.Input, &items) == nil:
		for _, it := range items {
			parts, _ := texts(it.Content)
			text.WriteString(it.Role + ": " + strings.Join(parts, "") + "\n")
		}
	default:
		writeError(w, http.StatusBadRequest, "input: must be a string or a list of input items", "input")
		return
	}
	req := completionRequest{Model: in.Model, MaxTokens: in.MaxOutputTokens}
	q, model, ok := s.admit(w, r, &req, text.String(), "resp_", writeError)
	if !ok {
		return
	}
	if !s.await(ctx, q) {
		if ctx.Err() == nil {
			writeError(w, http.StatusServiceUnavailable, "The engine is shutting down.", "")
		}
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": q.id, "object": "response", "created_at": time.Now().Unix(), "status": "completed", "model": model,
		"output": []map[string]any{{
			"type": "message", "id": "msg_" + randomHex(8), "status": "completed", "role": "assistant",
			"content": []map[string]any{{"type": "output_text", "text": generatedText(q.generated), "annotations": []any{}}},
		}},
		"usage": map[string]any{"input_tokens": q.promptTokens, "output_tokens": q.generated, "total_tokens": q.promptTokens + q.generated,
			"input_tokens_details": map[string]int{"cached_tokens": 0}, "output_tokens_details": map[string]int{"reasoning_tokens": 0}},
	})
}

// handleAudio answers a transcription or translation upload (multipart/form-data) with the
// text of the audio: here a sentence naming its size, so a test can see the file arrived.
func (s *Server) handleAudio(w http.ResponseWriter, r *http.Request) {
	if f := s.currentFault(); f.Status != 0 {
		writeError(w, f.Status, fmt.Sprintf("simulated fault: %d %s", f.Status, http.StatusText(f.Status)), "")
		return
	}
	if err := r.ParseMultipartForm(maxBody); err != nil {
		writeError(w, http.StatusBadRequest, "multipart/form-data expected: "+err.Error(), "")
		return
	}
	model := r.FormValue("model")
	if _, known := s.resolveModel(model); !known {
		writeError(w, http.StatusNotFound, "The model `"+model+"` does not exist.", "model")
		return
	}
	file, hdr, err := r.FormFile("file")
	if err != nil {
		writeError(w, http.StatusBadRequest, "file: Field required", "file")
		return
	}
	n, _ := io.Copy(io.Discard, file)
	_ = file.Close()
	text := fmt.Sprintf("simulated transcript of %s (%d bytes)", hdr.Filename, n)
	if r.FormValue("response_format") == "text" {
		writeText(w, http.StatusOK, text)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"text": text, "usage": map[string]any{"type": "duration", "seconds": max(1, n/32000)}})
}

// handleSpeech answers text-to-speech with a short silent WAV whose length follows the input.
func (s *Server) handleSpeech(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Input string `json:"input"`
	}
	if _, ok := s.pooling(w, r, &req); !ok {
		return
	}
	if req.Input == "" {
		writeError(w, http.StatusBadRequest, "input: Field required", "input")
		return
	}
	samples := 1600 * CountTokens(req.Input) // 0.1 s of 16 kHz mono per token
	wav := make([]byte, 44+2*samples)
	copy(wav, "RIFF")
	le := func(off int, v uint32) {
		wav[off], wav[off+1], wav[off+2], wav[off+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	le(4, uint32(36+2*samples))
	copy(wav[8:], "WAVEfmt ")
	le(16, 16)
	wav[20], wav[22] = 1, 1 // PCM, mono
	le(24, 16000)
	le(28, 32000)
	wav[32], wav[34] = 2, 16
	copy(wav[36:], "data")
	le(40, uint32(2*samples))
	w.Header().Set("Content-Type", "audio/wav")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(wav)
}
