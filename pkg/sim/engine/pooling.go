package engine

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"
)

// The engine APIs beside completions, answered plausibly and at once (no batching: a
// pooling model's forward pass is short next to generation): embeddings, rerank, score,
// tokenize, detokenize, the Responses API (which does generate, through the batching loop)
// and audio. Shapes are vLLM's; values are deterministic functions of the input, so a
// test can tell which request an answer belongs to.

// embeddingDims is the length of a simulated embedding.
const embeddingDims = 8

// embed is text's unit vector: deterministic, different for different texts.
func embed(text string) []float32 {
	v := make([]float32, embeddingDims)
	var norm float64
	for i := range v {
		h := fnv.New64a()
		fmt.Fprintf(h, "%d:%s", i, text)
		x := float64(h.Sum64()%2000)/1000 - 1
		v[i] = float32(x)
		norm += x * x
	}
	if norm = math.Sqrt(norm); norm > 0 {
		for i := range v {
			v[i] = float32(float64(v[i]) / norm)
		}
	}
	return v
}

// relevance is a plausible score in [0, 1]: the share of the document's words the query has.
func relevance(query, doc string) float64 {
	words := strings.Fields(strings.ToLower(doc))
	if len(words) == 0 {
		return 0
	}
	q := strings.ToLower(query)
	hits := 0
	for _, w := range words {
		if strings.Contains(q, w) {
			hits++
		}
	}
	return float64(hits) / float64(len(words))
}

// texts reads a JSON string, an array of strings, or an array of objects with text (Cohere's
// documents) as a list of texts.
func texts(raw json.RawMessage) ([]string, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, true
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, true
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, false
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		var s string
		var obj struct {
			Text string `json:"text"`
		}
		switch {
		case json.Unmarshal(it, &s) == nil:
			out = append(out, s)
		case json.Unmarshal(it, &obj) == nil:
			out = append(out, obj.Text)
		default:
			// token ids ([1,2,3]): their JSON stands for the text
			out = append(out, string(it))
		}
	}
	return out, true
}

// pooling reads a pooling request's body after the simulated fault, checks its model and
// decodes it into v; ok false means the client has its answer.
func (s *Server) pooling(w http.ResponseWriter, r *http.Request, v any) (model string, ok bool) {
	body, ok := s.faultAndBody(w, r, writeError)
	if !ok {
		return "", false
	}
	if err := json.Unmarshal(body, v); err != nil {
		writeError(w, http.StatusBadRequest, "JSON decode error: "+err.Error(), "")
		return "", false
	}
	var m struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(body, &m)
	if _, known := s.resolveModel(m.Model); !known {
		writeError(w, http.StatusNotFound, "The model `"+m.Model+"` does not exist.", "model")
		return "", false
	}
	if m.Model == "" {
		m.Model = s.cfg.Model
	}
	return m.Model, true
}

func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Input          json.RawMessage `json:"input"`
		EncodingFormat string          `json:"encoding_format"`
	}
	model, ok := s.pooling(w, r, &req)
	if !ok {
		return
	}
	in, valid := texts(req.Input)
	if !valid || len(in) == 0 {
		writeError(w, http.StatusBadRequest, "input: must be a string, an array of strings or token ids", "input")
		return
	}
	data := make([]map[string]any, len(in))
	tokens := 0
	for i, t := range in {
		tokens += CountTokens(t)
		var e any = embed(t)
		if req.EncodingFormat == "base64" {
			b := make([]byte, 0, 4*embeddingDims)
			for _, f := range embed(t) {
				b = binary.LittleEndian.AppendUint32(b, math.Float32bits(f))
			}
			e = base64.StdEncoding.EncodeToString(b)
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": e}
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": "embd-" + randomHex(8), "object": "list", "created": time.Now().Unix(), "model": model,
		"data": data, "usage": map[string]int{"prompt_tokens": tokens, "total_tokens": tokens}})
}

func (s *Server) handleRerank(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Query     string          `json:"query"`
		Documents json.RawMessage `json:"documents"`
		TopN      int             `json:"top_n"`
	}
	model, ok := s.pooling(w, r, &req)
	if !ok {
		return
	}
	docs, valid := texts(req.Documents)
	if !valid || len(docs) == 0 {
		writeError(w, http.StatusBadRequest, "documents: Field required", "documents")
		return
	}
	type result struct {
		Index    int               `json:"index"`
		Document map[string]string `json:"document"`
		Score    float64           `json:"relevance_score"`
	}
	results := make([]result, len(docs))
	tokens := 0
	for i, d := range docs {
		tokens += CountTokens(req.Query + d)
		results[i] = result{Index: i, Document: map[string]string{"text": d}, Score: relevance(req.Query, d)}
	}
	sort.SliceStable(results, func(i, j int) bool { return results[i].Score > results[j].Score })
	if req.TopN > 0 && req.TopN < len(results) {
		results = results[:req.TopN]
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": "rerank-" + randomHex(8), "model": model, "results": results,
		"usage": map[string]int{"total_tokens": tokens}})
}

func (s *Server) handleScore(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Text1     json.RawMessage `json:"text_1"`
		Text2     json.RawMessage `json:"text_2"`
		Queries   json.RawMessage `json:"queries"`
		Documents json.RawMessage `json:"documents"`
	}
	model, ok := s.pooling(w, r, &req)
	if !ok {
		return
	}
	if len(req.Text1) == 0 {
		req.Text1, req.Text2 = req.Queries, req.Documents
	}
	left, ok1 := texts(req.Text1)
	right, ok2 := texts(req.Text2)
	if !ok1 || !ok2 || len(left) == 0 || len(right) == 0 || (len(left) > 1 && len(left) != len(right)) {
		writeError(w, http.StatusBadRequest, "text_1 and text_2 (or queries and documents) must be given: one to many, or pairwise of equal length", "")
		return
	}
	data := make([]map[string]any, len(right))
	tokens := 0
	for i, d := range right {
		q := left[0]
		if len(left) > 1 {
			q = left[i]
		}
		tokens += CountTokens(q + d)
		data[i] = map[string]any{"index": i, "object": "score", "score": relevance(q, d)}
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": "score-" + randomHex(8), "object": "list", "created": time.Now().Unix(), "model": model,
		"data": data, "usage": map[string]int{"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0}})
}

// tokenIDs is the simulated tokenizer's ids of text: each 4-byte piece hashed into a
// 32k vocabulary.
func tokenIDs(text string) []int {
	ids := make([]int, 0, CountTokens(text))
	for i := 0; i < len(text); i += bytesPerToken {
		h := fnv.New32a()
		h.Write([]byte(text[i:min(i+bytesPerToken, len(text))]))
		ids = append(ids, int(h.Sum32()%32000))
	}
	return ids
}

func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Prompt   *string       `json:"prompt"`
		Messages []chatMessage `json:"messages"`
	}
	if _, ok := s.pooling(w, r, &req); !ok {
		return
	}
	var text string
	switch {
	case req.Prompt != nil:
		text = *req.Prompt
	case len(req.Messages) > 0:
		var err error
		if text, err = chatPromptText(req.Messages); err != nil {
			writeError(w, http.StatusBadRequest, err.Error(), "messages")
			return
		}
	default:
		writeError(w, http.StatusBadRequest, "prompt or messages: Field required", "prompt")
		return
	}
	ids := tokenIDs(text)
	writeJSON(w, http.StatusOK, map[string]any{"count": len(ids), "max_model_len": s.cfg.MaxModelLen, "tokens": ids, "token_strs": nil})
}

func (s *Server) handleDetokenize(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Tokens []int `json:"tokens"`
	}
	if _, ok := s.pooling(w, r, &req); !ok {
		return
	}
	if req.Tokens == nil {
		writeError(w, http.StatusBadRequest, "tokens: Field required", "tokens")
		return
	}
	words := make([]string, len(req.Tokens))
	for i := range req.Tokens {
		words[i] = generatedWord(i)
	}
	writeJSON(w, http.StatusOK, map[string]any{"prompt": strings.Join(words, "")})
}

// Received is the last request an engine was sent, for tests of what a proxy forwards.
type Received struct {
	Method, Path string
	Header       http.Header
}

func (s *Server) record(r *http.Request) {
	if r.URL.Path == "/metrics" || r.URL.Path == "/health" || r.URL.Path == "/v1/models" {
		return // the router's scrapes and probes, not requests
	}
	rec := Received{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone()}
	s.mu.Lock()
	s.last = rec
	if len(s.received) == maxReceived {
		s.received = append(s.received[:0], s.received[1:]...)
	}
	s.received = append(s.received, rec)
	s.mu.Unlock()
}

// maxReceived bounds the requests an engine remembers (Requests).
const maxReceived = 64

// Requests are the last API requests the engine was sent (at most 64), oldest first, in the
// order they arrived: what a test of the order a router sends in reads.
func (s *Server) Requests() []Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Received(nil), s.received...)
}

// LastRequest is the last API request the engine was sent (scrapes and health probes
// aside): its method, path and headers as they arrived.
func (s *Server) LastRequest() Received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}
