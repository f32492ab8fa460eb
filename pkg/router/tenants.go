package router

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/berth-sh/berth/pkg/openaierror"
	"github.com/berth-sh/berth/pkg/router/anthropic"
	"github.com/berth-sh/berth/pkg/router/fairqueue"
	"github.com/berth-sh/berth/pkg/router/proxy"
	"github.com/berth-sh/berth/pkg/router/ratelimit"
	"github.com/berth-sh/berth/pkg/router/request"
	"github.com/berth-sh/berth/pkg/router/tenant"
)

// Authentication modes (Options.Auth).
const (
	// AuthNone serves every caller, as one tenant with no name: the default, for the sandbox.
	AuthNone = "none"
	// AuthAPIKey serves callers presenting an API key from a key Secret (package tenant).
	AuthAPIKey = "api-key"
)

// tenantServing is what the router holds for tenants: their keys when authenticating,
// the fair queues when holding requests for saturated engines, and the series of both.
type tenantServing struct {
	keys    *tenant.Keys // nil without authentication
	watcher *tenant.Watcher

	mu     sync.Mutex
	queues map[string]*fairqueue.Queue // by ModelServer namespace/name

	requests   *prometheus.CounterVec
	tokens     *prometheus.CounterVec
	wait       *prometheus.HistogramVec
	rejections *prometheus.CounterVec
	keysLoaded prometheus.Gauge
	badSecrets prometheus.Gauge
}

// enableTenants sets up authentication and fair queueing as o asks; nothing when it asks
// for neither.
func (r *Router) enableTenants() error {
	o := r.opts
	switch o.Auth {
	case "", AuthNone, AuthAPIKey:
	default:
		return fmt.Errorf("auth %q: use %q or %q", o.Auth, AuthNone, AuthAPIKey)
	}
	if o.QueuePolicy != "" && o.QueuePolicy != fairqueue.Fair && o.QueuePolicy != fairqueue.FIFO {
		return fmt.Errorf("queue policy %q: use %q or %q", o.QueuePolicy, fairqueue.Fair, fairqueue.FIFO)
	}
	if o.QueueConcurrency < 0 {
		return fmt.Errorf("queue concurrency %d: must be 0 (no queue) or more", o.QueueConcurrency)
	}
	auth := o.Auth == AuthAPIKey
	if !auth && o.QueueConcurrency == 0 {
		return nil
	}
	if o.Mode != ModeProxy {
		return errors.New("API keys and the fair queue serve the proxy mode only; in epp mode the gateway authenticates")
	}
	t := &tenantServing{queues: map[string]*fairqueue.Queue{}}
	t.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_router_tenant_requests_total",
		Help: "Inference requests by tenant (the berth.sh/tenant label of the caller's API key Secret; empty without authentication) and HTTP status.",
	}, []string{"tenant", "status"})
	t.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_router_tenant_tokens_total",
		Help: "Tokens of answered requests by tenant and type (input or output).",
	}, []string{"tenant", "type"})
	t.wait = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "berth_router_tenant_queue_wait_seconds", Buckets: latencyBuckets,
		Help: "Time requests waited in the fair queue for a saturated ModelServer, by tenant (0 for those that did not wait).",
	}, []string{"tenant"})
	t.rejections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_router_tenant_rejections_total",
		Help: "Requests refused before reaching an engine, by tenant and reason: missing_api_key, invalid_api_key (tenant empty), rate_limit (the tenant's token limit), queue_full, queue_timeout.",
	}, []string{"tenant", "reason"})
	t.keysLoaded = prometheus.NewGauge(prometheus.GaugeOpts{Name: "berth_router_api_keys", Help: "API keys loaded from key Secrets."})
	t.badSecrets = prometheus.NewGauge(prometheus.GaugeOpts{Name: "berth_router_api_key_secrets_invalid",
		Help: "Key Secrets not loaded (no key, no tenant label, a bad limit annotation, a key shared by two tenants); the log names each."})
	waiting := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "berth_router_fair_queue_waiting",
		Help: "Requests waiting in the fair queues for saturated ModelServers."}, func() float64 { return float64(t.waiting()) })
	r.metrics.registry.MustRegister(t.requests, t.tokens, t.wait, t.rejections, waiting)
	if auth {
		kube, err := kubernetes.NewForConfig(r.cfg)
		if err != nil {
			return err
		}
		t.keys = &tenant.Keys{}
		if t.watcher, err = tenant.NewWatcher(kube, o.APIKeyNamespaces, t.keys, r.log.WithName("apikeys")); err != nil {
			return err
		}
		t.watcher.OnChange = func(keys int, problems []tenant.Problem) {
			t.keysLoaded.Set(float64(keys))
			t.badSecrets.Set(float64(len(problems)))
		}
		r.metrics.registry.MustRegister(t.keysLoaded, t.badSecrets)
	}
	r.tenants = t
	return nil
}

// startTenants loads the API keys before the router takes requests.
func (r *Router) startTenants(ctx context.Context) error {
	if r.tenants == nil || r.tenants.watcher == nil {
		return nil
	}
	if err := r.tenants.watcher.Start(ctx, time.Minute); err != nil {
		return err
	}
	r.log.Info("authenticating callers by API key", "keys", r.tenants.keys.Len(), "selector", tenant.Selector, "namespaces", r.opts.APIKeyNamespaces)
	return nil
}

func (t *tenantServing) waiting() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, q := range t.queues {
		n += q.Waiting()
	}
	return n
}

// authenticate finds the caller's tenant; without authentication every caller is the
// tenant with no name. ok is false when it answered 401.
func (r *Router) authenticate(w http.ResponseWriter, req *http.Request, kind request.Kind, x *exchange) (tenant.Tenant, bool) {
	if r.tenants == nil || r.tenants.keys == nil {
		return tenant.Tenant{}, true
	}
	key, found := tenant.Presented(req.Header, kind == request.Messages)
	if !found {
		r.tenants.rejections.WithLabelValues("", "missing_api_key").Inc()
		r.unauthorized(w, kind, x, nil, "You didn't provide an API key. Send it in the Authorization header as \"Bearer <key>\" (or x-api-key on /v1/messages).")
		return tenant.Tenant{}, false
	}
	t, ok := r.tenants.keys.Lookup(key)
	if !ok {
		r.tenants.rejections.WithLabelValues("", "invalid_api_key").Inc()
		r.unauthorized(w, kind, x, "invalid_api_key", "Incorrect API key provided: "+redact(key)+".")
		return tenant.Tenant{}, false
	}
	x.tenant = t.Name
	return t, true
}

// unauthorized answers 401 as OpenAI does: type invalid_request_error, code invalid_api_key
// for a wrong key and null for none (Anthropic's authentication_error on /v1/messages).
func (r *Router) unauthorized(w http.ResponseWriter, kind request.Kind, x *exchange, code any, msg string) {
	x.status, x.reason = http.StatusUnauthorized, msg
	w.Header().Set("WWW-Authenticate", `Bearer realm="berth-router"`)
	writeTyped(w, kind, http.StatusUnauthorized, "invalid_request_error", code, msg)
}

// redact shows the end of a key, as OpenAI does, so a caller can tell which key it sent;
// the log gets the same, never the key.
func redact(key string) string {
	if len(key) <= 8 {
		return "****"
	}
	return "****" + key[len(key)-4:]
}

// writeTyped answers with an error of the given OpenAI type and code (Anthropic's body on
// /v1/messages, whose type follows the status).
func writeTyped(w http.ResponseWriter, kind request.Kind, status int, typ string, code any, msg string) {
	if kind == request.Messages {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(anthropic.Error(status, msg))
		return
	}
	openaierror.Write(w, status, openaierror.Error{Message: msg, Type: typ, Code: code})
}

// tenantKey is the key of a tenant's buckets, apart from the routes'.
func tenantKey(name string) string { return "tenant/" + name }

// tenantLimiter is where tenants' buckets live: the installation's Redis when there is one
// (every replica draws from one budget), else this replica's memory.
func (r *Router) tenantLimiter() ratelimit.Limiter {
	if r.opts.RedisAddr != "" {
		if l, err := r.redis.Limiter(r.opts.RedisAddr); err == nil {
			return l
		} else {
			r.log.Error(err, "global tenant rate limit unavailable; using this replica's local limit", "redis", r.opts.RedisAddr)
		}
	}
	return r.local
}

// gate lets a request of tenant t to a ModelServer (server "" for a provider) go: through
// the tenant's token limit, then the server's fair queue when one is configured. ok is
// false when it answered. done, called with what was relayed, releases the queue and
// charges and counts the tokens.
func (r *Router) gate(ctx context.Context, w http.ResponseWriter, kind request.Kind, t tenant.Tenant, server string, in *request.Request, x *exchange) (done func(proxy.Relayed), ok bool) {
	ts := r.tenants
	if ts == nil {
		return func(proxy.Relayed) {}, true
	}
	var limiter ratelimit.Limiter
	if !t.Limits.Unlimited() {
		limiter = r.tenantLimiter()
		d, err := limiter.Admit(ctx, tenantKey(t.Name), t.Limits, in.EstimatedInputTokens())
		if err != nil {
			r.metrics.limiterErrs.Inc()
			r.log.Error(err, "tenant rate limiter failed; letting the request through", "tenant", t.Name)
		}
		if !d.Allowed {
			ts.rejections.WithLabelValues(t.Name, "rate_limit").Inc()
			msg := fmt.Sprintf("Rate limit reached for tenant %s: %s.", t.Name, d.Reason)
			x.status, x.reason = http.StatusTooManyRequests, msg
			w.Header().Set("Retry-After", strconv.FormatInt(d.RetryAfterSeconds(), 10))
			writeTyped(w, kind, http.StatusTooManyRequests, "tokens", "rate_limit_exceeded", msg)
			return nil, false
		}
	}
	release := func() {}
	if q := r.queueFor(server); q != nil {
		rel, waited, err := q.Acquire(ctx, t.Name, in.EstimatedInputTokens()+max(in.MaxTokens, 0))
		ts.wait.WithLabelValues(t.Name).Observe(waited.Seconds())
		if err != nil {
			reason, msg := "queue_timeout", fmt.Sprintf("ModelServer %s is saturated and the request waited %s without an engine free", server, waited.Round(time.Millisecond))
			switch {
			case errors.Is(err, fairqueue.ErrFull):
				reason, msg = "queue_full", fmt.Sprintf("ModelServer %s is saturated and %d requests already wait for it", server, r.opts.QueueSize)
			case ctx.Err() != nil:
				reason, msg = "client_gone", "the client went away while waiting for a saturated ModelServer"
			}
			ts.rejections.WithLabelValues(t.Name, reason).Inc()
			x.status, x.reason = http.StatusServiceUnavailable, msg
			if reason == "client_gone" {
				x.status = 499
				return nil, false
			}
			w.Header().Set("Retry-After", "1")
			writeTyped(w, kind, http.StatusServiceUnavailable, "server_error", reason, msg)
			return nil, false
		}
		release = rel
	}
	return func(relayed proxy.Relayed) {
		release()
		if relayed.Status/100 != 2 {
			return
		}
		input := relayed.InputTokens
		if input == 0 {
			input = in.EstimatedInputTokens()
		}
		ts.tokens.WithLabelValues(t.Name, "input").Add(float64(input))
		ts.tokens.WithLabelValues(t.Name, "output").Add(float64(relayed.OutputTokens))
		if limiter != nil && t.Limits.OutputPerUnit > 0 && relayed.OutputTokens > 0 {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			if err := limiter.ChargeOutput(cctx, tenantKey(t.Name), t.Limits, relayed.OutputTokens); err != nil {
				r.metrics.limiterErrs.Inc()
				r.log.Error(err, "charging a tenant's output tokens failed", "tenant", t.Name)
			}
		}
	}, true
}

// queueFor is the fair queue of a ModelServer (namespace/name), nil when requests are not
// queued (no QueueConcurrency, or an ExternalModelProvider).
func (r *Router) queueFor(server string) *fairqueue.Queue {
	if r.opts.QueueConcurrency == 0 || server == "" {
		return nil
	}
	ts := r.tenants
	ts.mu.Lock()
	defer ts.mu.Unlock()
	q := ts.queues[server]
	if q == nil {
		q = fairqueue.New(r.opts.QueuePolicy, func() int { return r.capacity(server) }, r.opts.QueueSize, r.opts.QueueTimeout, r.opts.QueueReserve)
		ts.queues[server] = q
	}
	return q
}

// capacity is how many requests this router may have in flight to a ModelServer before
// the rest wait: QueueConcurrency per Ready endpoint (decode endpoint of a PD server),
// less the load other router replicas put there as the last scrape saw it (the scorers'
// estimate: running plus waiting, minus this router's own at the time). A server with no
// endpoint lets requests through, so they get their 503 at once rather than after waiting.
func (r *Router) capacity(server string) int {
	ns, name, _ := strings.Cut(server, "/")
	s := r.view.Snapshot().Server(ns, name)
	if s == nil {
		return math.MaxInt
	}
	eps := s.Endpoints
	if s.Disaggregated() {
		eps = s.Decode
	}
	if len(eps) == 0 {
		return math.MaxInt
	}
	n := 0
	for _, e := range eps {
		others := 0.0
		if st, ok := r.scraper.Stats(e.Address); ok && st.Err == nil {
			others = math.Max(0, st.Running+st.Waiting-st.OwnAtScrape)
		}
		n += max(0, r.opts.QueueConcurrency-int(others))
	}
	return n
}

// countTenant counts a finished request under its tenant.
func (r *Router) countTenant(x *exchange) {
	if r.tenants != nil {
		r.tenants.requests.WithLabelValues(x.tenant, strconv.Itoa(x.status)).Inc()
	}
}
