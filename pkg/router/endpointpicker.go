package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/berth-sh/berth/pkg/router/epp"
	"github.com/berth-sh/berth/pkg/router/gateway"
	"github.com/berth-sh/berth/pkg/router/match"
	"github.com/berth-sh/berth/pkg/router/pick"
	"github.com/berth-sh/berth/pkg/router/ratelimit"
	"github.com/berth-sh/berth/pkg/router/request"
	"github.com/berth-sh/berth/pkg/router/view"
)

// routeChooser is the endpoint picker's Chooser. Over ModelRoutes (pool nil) a request is
// parsed, matched and rate-limited exactly as the proxy does it (admit), and its endpoints
// are ranked by the same scorers over the ModelServer's Ready pods. With a pool, as the
// Inference Extension deploys a picker per InferencePool, the candidates are the pool's
// Ready pods on its target ports (the view resolves every pool, view.ResolvePool), no
// route is matched and the body goes on unchanged.
type routeChooser struct {
	r *Router
	// fallbacks is how many endpoints after the primary are named.
	fallbacks int
	pool      *types.NamespacedName
}

func refusal(f *failure) *epp.Refusal {
	ref := &epp.Refusal{Status: f.status, Code: f.code, Param: f.param, Message: f.msg}
	if f.retryAfter > 0 {
		ref.Header = map[string]string{"retry-after": fmt.Sprint(f.retryAfter)}
	}
	return ref
}

// Choose implements epp.Chooser, under a span of its own when tracing is on.
func (c *routeChooser) Choose(ctx context.Context, q *epp.Query) (*epp.Choice, *epp.Refusal) {
	span := c.r.eppPickSpan(ctx, q)
	choice, ref := c.choose(ctx, q)
	endEPPPick(span, choice, ref)
	return choice, ref
}

func (c *routeChooser) choose(ctx context.Context, q *epp.Query) (*epp.Choice, *epp.Refusal) {
	r := c.r
	kind := request.KindOf(q.Path)
	if kind == "" {
		if q.Method == http.MethodGet && strings.TrimSuffix(q.Path, "/") == "/v1/models" {
			return nil, &epp.Refusal{Status: http.StatusOK, Body: r.modelList(), ContentType: "application/json"}
		}
		return nil, &epp.Refusal{Status: http.StatusNotFound, Code: "not_found",
			Message: fmt.Sprintf("berth-router picks endpoints for POST %s (and answers GET /v1/models), not %s %s", strings.Join(request.Paths(), ", "), q.Method, q.Path)}
	}
	if q.Method != http.MethodPost {
		return nil, &epp.Refusal{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed", Header: map[string]string{"allow": http.MethodPost},
			Message: q.Method + " is not allowed; send POST"}
	}
	if kind == request.Messages {
		return nil, &epp.Refusal{Status: http.StatusBadRequest, Code: "unsupported_api",
			Message: "an Anthropic Messages request (POST /v1/messages) needs translating for the engines, which berth-router does in proxy mode, not as an endpoint picker"}
	}
	if q.Body == nil {
		return nil, &epp.Refusal{Status: http.StatusBadRequest, Code: "invalid_request",
			Message: "the endpoint picker got no request body: a completion request is a JSON body naming its model (if it had one, set the gateway's ext_proc request_body_mode to FULL_DUPLEX_STREAMED or BUFFERED)"}
	}
	in, err := request.ParseContent(kind, q.Header.Get("Content-Type"), q.Body)
	if err != nil {
		var perr *request.Error
		errors.As(err, &perr)
		return nil, &epp.Refusal{Status: http.StatusBadRequest, Code: "invalid_request", Param: perr.Param, Message: perr.Message}
	}
	x := &exchange{start: time.Now(), kind: kind}
	if c.pool != nil {
		return c.choosePool(in, q, x)
	}
	adm, f := r.admit(ctx, r.view.Snapshot(), nil, in, q.Path, q.Header, x)
	if f != nil {
		return nil, refusal(f)
	}
	b := adm.first
	switch {
	case b.provider != nil:
		return nil, &epp.Refusal{Status: http.StatusServiceUnavailable, Code: "target_not_pickable",
			Message: fmt.Sprintf("ModelRoute %s sends this request to %s, which is no pod an endpoint picker can name; serve the route with berth-router in proxy mode", x.route, b)}
	case b.server.Disaggregated():
		return nil, &epp.Refusal{Status: http.StatusServiceUnavailable, Code: "target_not_pickable",
			Message: fmt.Sprintf("ModelRoute %s sends this request to %s, which is disaggregated (prefill and decode pods): the Endpoint Picker Protocol names one endpoint per request, not a pair; serve the route with berth-router in proxy mode", x.route, b)}
	}
	preq := &pick.Request{Model: in.Model, Adapter: adm.res.Adapter, Prefix: pick.HashPrompt(in.Prompt)}
	eps := r.rankEndpoints(b.server, preq, 1+c.fallbacks, q.Subset)
	if len(eps) == 0 {
		msg := fmt.Sprintf("%s has no Ready endpoint", b.server)
		if q.Subset != nil {
			msg = fmt.Sprintf("none of the %d endpoints of the data plane's subset hint is a Ready endpoint of %s (%d Ready)", len(q.Subset), b.server, len(b.server.Endpoints))
		}
		return nil, &epp.Refusal{Status: http.StatusServiceUnavailable, Code: "no_endpoint", Message: msg}
	}
	// The body names the model the engines serve, as the proxy sends it (a LoRA adapter
	// keeps the name the client asked for).
	var body []byte
	if model := b.server.Model; !adm.res.Adapter && model != "" && model != in.Model {
		if in.ContentType != "" {
			body, err = request.RewriteFormModel(in.Body, in.ContentType, model)
		} else {
			body, err = request.Rewrite(in.Body, map[string]any{"model": model})
		}
		if err != nil {
			return nil, &epp.Refusal{Status: http.StatusBadRequest, Code: "invalid_request", Message: err.Error()}
		}
	}
	return c.choice(b.server, eps, preq, in, x, body, adm.limiter, adm.limits), nil
}

// choosePool ranks the pool's Ready endpoints for the request.
func (c *routeChooser) choosePool(in *request.Request, q *epp.Query, x *exchange) (*epp.Choice, *epp.Refusal) {
	r := c.r
	x.asked, x.model = in.Model, in.Model
	x.server, x.targetKind = c.pool.String(), match.Kind(gateway.InferenceKind)
	server := r.view.Snapshot().Backend(gateway.Backend{Kind: gateway.PoolBackend, NamespacedName: *c.pool})
	if server == nil {
		return nil, &epp.Refusal{Status: http.StatusServiceUnavailable, Code: "pool_not_found",
			Message: fmt.Sprintf("InferencePool %s, whose endpoints this picker chooses from, does not exist", c.pool)}
	}
	preq := &pick.Request{Model: in.Model, Prefix: pick.HashPrompt(in.Prompt)}
	eps := r.rankEndpoints(server, preq, 1+c.fallbacks, q.Subset)
	if len(eps) == 0 {
		msg := fmt.Sprintf("InferencePool %s has no Ready endpoint (no Ready pod matches its selector)", c.pool)
		if q.Subset != nil {
			msg = fmt.Sprintf("none of the %d endpoints of the data plane's subset hint is a Ready endpoint of InferencePool %s (%d Ready)", len(q.Subset), c.pool, len(server.Endpoints))
		}
		return nil, &epp.Refusal{Status: http.StatusServiceUnavailable, Code: "no_endpoint", Message: msg}
	}
	return c.choice(server, eps, preq, in, x, nil, nil, ratelimit.Limits{}), nil
}

// choice names eps (best first) and starts the request's load accounting on the primary.
func (c *routeChooser) choice(server *view.Server, eps []*view.Endpoint, preq *pick.Request, in *request.Request, x *exchange, body []byte,
	limiter ratelimit.Limiter, limits ratelimit.Limits) *epp.Choice {
	r := c.r
	addrs := make([]string, len(eps))
	named := make(map[string]bool, len(eps))
	for i, e := range eps {
		addrs[i], named[e.Address] = e.Address, true
	}
	primary := eps[0]
	r.metrics.picks.WithLabelValues(server.Namespace+"/"+server.Name, primary.Pod, string(primary.Role)).Inc()
	r.metrics.inflight.Inc()
	x.endpoint = primary.Address
	l := &eppLease{r: r, x: x, preq: preq, in: in, named: named, current: primary.Address,
		done: r.picker.Begin(preq, primary.Address), limiter: limiter, limits: limits}
	return &epp.Choice{Endpoints: addrs, Body: body, Route: x.route, Model: x.model, Lease: l}
}

// rankEndpoints returns up to n of server's Ready endpoints, best first, by the picker's
// policy; with a subset (the data plane's hint) only endpoints in it ("ip:port", or an
// "ip" for any port of it) are candidates.
func (r *Router) rankEndpoints(server *view.Server, preq *pick.Request, n int, subset []string) []*view.Endpoint {
	eps := server.Endpoints
	if subset != nil {
		in := make(map[string]bool, len(subset))
		for _, s := range subset {
			in[s] = true
		}
		eps = slices.DeleteFunc(slices.Clone(eps), func(e *view.Endpoint) bool {
			host, _, _ := net.SplitHostPort(e.Address)
			return !in[e.Address] && !in[host]
		})
	}
	if len(eps) == 0 {
		return nil
	}
	cands := r.picker.Candidates(eps, r.scraper.Stats, nil)
	first := r.picker.Pick(preq, cands)
	out := []*view.Endpoint{cands[first].Endpoint}
	if r.opts.Policy == pick.RoundRobin {
		// Round robin advances once per request; the fallbacks are the endpoints after
		// the primary in turn.
		for i := 1; i < min(n, len(cands)); i++ {
			out = append(out, cands[(first+i)%len(cands)].Endpoint)
		}
		return out
	}
	// Scored: each fallback is the best of those not named yet.
	excluded := map[string]bool{out[0].Address: true}
	for len(out) < n {
		rest := r.picker.Candidates(eps, r.scraper.Stats, excluded)
		i := r.picker.Pick(preq, rest)
		if i < 0 {
			break
		}
		out = append(out, rest[i].Endpoint)
		excluded[rest[i].Endpoint.Address] = true
	}
	return out
}

// modelList is GET /v1/models's answer, as the proxy serves it.
func (r *Router) modelList() []byte {
	type model struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		OwnedBy string `json:"owned_by"`
	}
	out := struct {
		Object string  `json:"object"`
		Data   []model `json:"data"`
	}{Object: "list", Data: []model{}}
	for _, m := range r.view.Snapshot().Routes.Models() {
		out.Data = append(out.Data, model{ID: m, Object: "model", OwnedBy: "berth"})
	}
	b, _ := json.Marshal(out)
	return append(b, '\n')
}

// eppLease is a picked request's load accounting: in flight on the endpoint serving it
// (least-requests, prefix affinity, observed latency), its tokens charged to the route's
// output limit, and its line in the request metrics and log, as for a proxied request.
type eppLease struct {
	r       *Router
	x       *exchange
	preq    *pick.Request
	in      *request.Request
	named   map[string]bool
	limiter ratelimit.Limiter
	limits  ratelimit.Limits

	mu      sync.Mutex
	current string
	done    func(ttft float64)
	ended   bool
}

func (l *eppLease) Served(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || addr == l.current {
		return
	}
	if !l.named[addr] {
		l.r.log.Info("the data plane reports an endpoint the picker did not name served the request", "route", l.x.route, "served", addr, "named", slices.Sorted(func(yield func(string) bool) {
			for a := range l.named {
				if !yield(a) {
					return
				}
			}
		}))
	}
	// The primary did not serve: the data plane went on down the list because it failed.
	l.done(pick.Failed)
	l.done = l.r.picker.Begin(l.preq, addr)
	l.current, l.x.endpoint = addr, addr
	l.x.attempts++
}

func (l *eppLease) End(o epp.Outcome) {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	l.ended = true
	l.mu.Unlock()
	r, x := l.r, l.x
	defer r.metrics.inflight.Dec()
	ttft := math.NaN()
	switch {
	case o.Status >= 500 || o.Status == http.StatusTooManyRequests:
		ttft = pick.Failed
	case o.Status/100 == 2 && !math.IsNaN(o.TTFT):
		ttft = o.TTFT
		r.metrics.ttft.WithLabelValues(x.route, x.model).Observe(o.TTFT)
	}
	l.done(ttft)
	x.attempts++
	x.status = o.Status
	if !o.Complete {
		x.reason = "the ext_proc stream ended before the answer did (the client went away, or the data plane gave up)"
		if x.status == 0 {
			x.status = 499
		}
	}
	if x.status/100 == 2 {
		input := o.InputTokens
		if input == 0 {
			input = l.in.EstimatedInputTokens()
		}
		r.metrics.tokens.WithLabelValues(x.route, x.model, string(x.targetKind), x.server, "input").Add(float64(input))
		r.metrics.tokens.WithLabelValues(x.route, x.model, string(x.targetKind), x.server, "output").Add(float64(o.OutputTokens))
		if l.limiter != nil && l.limits.OutputPerUnit > 0 && o.OutputTokens > 0 {
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			if err := l.limiter.ChargeOutput(cctx, x.route, l.limits, o.OutputTokens); err != nil {
				r.metrics.limiterErrs.Inc()
				r.log.Error(err, "charging output tokens failed", "route", x.route)
			}
			cancel()
		}
	}
	r.finish(x)
}
