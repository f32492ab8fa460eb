package engine

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/berth-sh/berth/pkg/openaierror"
)

// Server is one simulated engine: an OpenAI-compatible HTTP API in front of a
// continuous-batching loop on a simulated clock.
type Server struct {
	cfg     Config
	hub     *KVHub
	metrics *metrics
	handler http.Handler
	created int64 // unix time, "created" of /v1/models

	wake     chan struct{} // pokes the loop; capacity 1
	done     chan struct{} // closed by Close
	loopDone chan struct{}

	closeOnce sync.Once
	httpMu    sync.Mutex
	httpSrv   *http.Server
	ln        net.Listener
	// onRequest, when set, sees every request before it is served (SetRequestHook).
	onRequest atomic.Pointer[func(*http.Request)]

	mu sync.Mutex // guards everything below
	// Scheduler state (scheduler.go).
	incoming         []*seq
	waiting          []*seq
	running          []*seq
	usedBlocks       int
	totalBlocks      int
	nextBlockID      int
	prefix           *prefixCache
	pendingBootstrap int
	genThroughput    float64 // tokens/s (simulated) of the last step
	stats            Stats
	// API state.
	last     Received
	received []Received // the last maxReceived, oldest first
	fault    Fault
	adapters []loraAdapter // in load order
}

type loraAdapter struct{ name, path string }

// Fault is injected with SetFault to test a router's error handling.
type Fault struct {
	// Status, when non-zero, makes the completions endpoints answer this HTTP status at
	// once (with an OpenAI-style JSON error) and /health answer 503.
	Status int
	// Delay is real time added before the response headers of completions (timeouts).
	Delay time.Duration
}

// Stats is a snapshot of an engine's counters, for tests.
type Stats struct {
	Requests            int64 // completion requests accepted for scheduling
	Running             int   // sequences in the batch
	Waiting             int   // accepted, not yet admitted
	PromptTokens        int64 // prompt tokens prefilled (or received)
	GenerationTokens    int64
	PrefixQueryTokens   int64 // prompt tokens looked up in the prefix cache
	PrefixHitTokens     int64 // of which found
	KVTransfersReceived int64 // requests whose KV came (at least partly) from the hub
	KVTransferMisses    int64 // decode-side requests that found no KV and prefilled locally
	KVCrossVersion      int64 // of KVTransfersReceived, those from an engine of another Version
	KVUsage             float64
	LoadedAdapters      []string
}

// New returns an engine with cfg's defaults applied and starts its scheduling loop.
// Serve it with Start or mount Handler; Close stops it.
func New(cfg Config) *Server {
	cfg = cfg.withDefaults()
	s := &Server{
		cfg:         cfg,
		hub:         cfg.Hub,
		created:     time.Now().Unix(),
		wake:        make(chan struct{}, 1),
		done:        make(chan struct{}),
		loopDone:    make(chan struct{}),
		totalBlocks: max(1, cfg.KVCacheTokens/cfg.BlockSize),
		prefix:      newPrefixCache(cfg.PrefixCacheBlocks),
	}
	if s.hub == nil {
		s.hub = NewKVHub()
	}
	s.metrics = newMetrics(s)
	s.handler = s.routes()
	go s.loop()
	return s
}

// Config returns the engine's configuration with defaults applied.
func (s *Server) Config() Config { return s.cfg }

// Handler returns the engine's HTTP API.
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) { s.handleCompletion(w, r, true) })
	mux.HandleFunc("POST /v1/completions", func(w http.ResponseWriter, r *http.Request) { s.handleCompletion(w, r, false) })
	mux.HandleFunc("POST /v1/messages", s.handleMessages)
	mux.HandleFunc("POST /v1/responses", s.handleResponses)
	mux.HandleFunc("POST /v1/embeddings", s.handleEmbeddings)
	for _, p := range []string{"/v1/rerank", "/rerank", "/v2/rerank"} {
		mux.HandleFunc("POST "+p, s.handleRerank)
	}
	mux.HandleFunc("POST /v1/score", s.handleScore)
	mux.HandleFunc("POST /score", s.handleScore)
	mux.HandleFunc("POST /tokenize", s.handleTokenize)
	mux.HandleFunc("POST /detokenize", s.handleDetokenize)
	mux.HandleFunc("POST /v1/audio/transcriptions", s.handleAudio)
	mux.HandleFunc("POST /v1/audio/translations", s.handleAudio)
	mux.HandleFunc("POST /v1/audio/speech", s.handleSpeech)
	mux.HandleFunc("GET /v1/models", s.handleModels)
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.HandleFunc("POST /v1/load_lora_adapter", s.handleLoadLoRA)
	mux.HandleFunc("POST /v1/unload_lora_adapter", s.handleUnloadLoRA)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// FastAPI's answer to unknown routes.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"detail":"Not Found"}`))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Sim-Engine", s.cfg.ID)
		if f := s.onRequest.Load(); f != nil {
			(*f)(r)
		}
		s.record(r)
		if id := r.Header.Get("X-Request-Id"); id != "" {
			w.Header().Set("X-Request-Id", id)
		}
		mux.ServeHTTP(w, r)
	})
}

// SetRequestHook has f called with every request the engine receives, before it is
// served (f must not read the body): a test sees the headers a router sent, such as the
// traceparent. nil removes it.
func (s *Server) SetRequestHook(f func(*http.Request)) {
	if f == nil {
		s.onRequest.Store(nil)
		return
	}
	s.onRequest.Store(&f)
}

// Start listens on addr (e.g. "127.0.0.1:0") and serves in the background.
func (s *Server) Start(addr string) error {
	s.httpMu.Lock()
	defer s.httpMu.Unlock()
	if s.httpSrv != nil {
		return errors.New("engine: already started")
	}
	select {
	case <-s.done:
		return errors.New("engine: closed")
	default:
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	s.ln = ln
	s.httpSrv = &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.httpSrv.Serve(ln) }()
	return nil
}

// Addr returns the address Start listens on, "" before Start.
func (s *Server) Addr() string {
	s.httpMu.Lock()
	defer s.httpMu.Unlock()
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// Close stops listening, cancels in-flight requests and stops the loop.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.httpMu.Lock()
		if s.httpSrv != nil {
			err = s.httpSrv.Close()
		}
		s.httpMu.Unlock()
		close(s.done)
		<-s.loopDone
	})
	return err
}

// Shutdown stops listening at once and lets in-flight requests (streams included) finish,
// as vLLM's HTTP server does on SIGTERM, until ctx ends; then it closes the engine.
func (s *Server) Shutdown(ctx context.Context) error {
	s.httpMu.Lock()
	srv := s.httpSrv
	s.httpMu.Unlock()
	var err error
	if srv != nil {
		err = srv.Shutdown(ctx)
	}
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	return err
}

// SetFault injects (or, with the zero Fault, clears) a fault.
func (s *Server) SetFault(f Fault) {
	s.mu.Lock()
	s.fault = f
	s.mu.Unlock()
}

func (s *Server) currentFault() Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fault
}

// Stats returns a snapshot of the engine's counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Running = len(s.running)
	st.Waiting = s.waitingLocked()
	st.KVUsage = float64(s.usedBlocks) / float64(s.totalBlocks)
	st.LoadedAdapters = nil
	for _, a := range s.adapters {
		st.LoadedAdapters = append(st.LoadedAdapters, a.name)
	}
	return st
}

// handleHealth answers like vLLM's and SGLang's /health: 200 with an empty body, 503
// when a fault is injected.
func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	if s.currentFault().Status != 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

type modelCard struct {
	ID          string  `json:"id"`
	Object      string  `json:"object"`
	Created     int64   `json:"created"`
	OwnedBy     string  `json:"owned_by"`
	Root        string  `json:"root"`
	Parent      *string `json:"parent"`
	MaxModelLen *int    `json:"max_model_len"`
}

func (s *Server) handleModels(w http.ResponseWriter, _ *http.Request) {
	owner := "vllm"
	if s.cfg.Flavor == SGLang {
		owner = "sglang"
	}
	base := s.cfg.Model
	maxLen := s.cfg.MaxModelLen
	cards := []modelCard{{ID: base, Object: "model", Created: s.created, OwnedBy: owner, Root: base, MaxModelLen: &maxLen}}
	s.mu.Lock()
	for _, a := range s.adapters {
		// As vLLM: an adapter's root is its path and its parent the base model.
		cards = append(cards, modelCard{ID: a.name, Object: "model", Created: s.created, OwnedBy: owner, Root: a.path, Parent: &base})
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": cards})
}

func (s *Server) handleLoadLoRA(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"lora_name"`
		Path string `json:"lora_path"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "Invalid JSON body: "+err.Error(), "")
		return
	}
	if req.Name == "" || req.Path == "" {
		writeError(w, http.StatusBadRequest, "Both 'lora_name' and 'lora_path' must be provided.", "")
		return
	}
	s.mu.Lock()
	exists := req.Name == s.cfg.Model || slices.ContainsFunc(s.adapters, func(a loraAdapter) bool { return a.name == req.Name })
	if !exists {
		s.adapters = append(s.adapters, loraAdapter{name: req.Name, path: req.Path})
	}
	s.mu.Unlock()
	if exists {
		writeError(w, http.StatusBadRequest, "The lora adapter '"+req.Name+"' has already been loaded.", "")
		return
	}
	writeText(w, http.StatusOK, "Success: LoRA adapter '"+req.Name+"' added successfully.")
}

func (s *Server) handleUnloadLoRA(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"lora_name"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "Invalid JSON body: "+err.Error(), "")
		return
	}
	s.mu.Lock()
	n := len(s.adapters)
	s.adapters = slices.DeleteFunc(s.adapters, func(a loraAdapter) bool { return a.name == req.Name })
	found := len(s.adapters) < n
	s.mu.Unlock()
	if !found {
		writeError(w, http.StatusNotFound, "The lora adapter '"+req.Name+"' cannot be found.", "")
		return
	}
	writeText(w, http.StatusOK, "Success: LoRA adapter '"+req.Name+"' removed successfully.")
}

// resolveModel maps a request's model to the adapter serving it ("" for the base model).
// An empty model means the base model, as vLLM allows.
func (s *Server) resolveModel(model string) (lora string, ok bool) {
	if model == "" || model == s.cfg.Model {
		return "", true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range s.adapters {
		if a.name == model {
			return a.name, true
		}
	}
	return "", false
}

// errorTypes maps statuses to the error types vLLM's OpenAI server reports.
var errorTypes = map[int]string{
	400: "BadRequestError",
	401: "AuthenticationError",
	403: "PermissionDeniedError",
	404: "NotFoundError",
	408: "TimeoutError",
	422: "UnprocessableEntityError",
	429: "RateLimitError",
	500: "InternalServerError",
	501: "NotImplementedError",
	502: "BadGatewayError",
	503: "ServiceUnavailableError",
	504: "GatewayTimeoutError",
}

// writeError writes vLLM's OpenAI-style error body. param is null when empty.
func writeError(w http.ResponseWriter, status int, message, param string) {
	typ, ok := errorTypes[status]
	if !ok {
		typ = "APIError"
	}
	openaierror.Write(w, status, openaierror.Error{Message: message, Type: typ, Param: param, Code: status})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

func writeText(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(text))
}
