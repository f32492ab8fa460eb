package router

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"

	"github.com/berth-sh/berth/pkg/router/anthropic"
	"github.com/berth-sh/berth/pkg/router/forwarded"
	"github.com/berth-sh/berth/pkg/router/match"
	"github.com/berth-sh/berth/pkg/router/pick"
	"github.com/berth-sh/berth/pkg/router/provider"
	"github.com/berth-sh/berth/pkg/router/proxy"
	"github.com/berth-sh/berth/pkg/router/ratelimit"
	"github.com/berth-sh/berth/pkg/router/request"
	"github.com/berth-sh/berth/pkg/router/view"
)

// freeRetries is how many extra attempts a request gets, whatever the retry policy, when an
// endpoint refuses the connection or closes it before answering: the engine did not start
// on it (or, at worst, started work that has no effect but compute), and it is what a pod
// that just went away looks like.
const freeRetries = 2

// exchange is one request's journey, for the log line and metrics at its end.
type exchange struct {
	start      time.Time
	kind       request.Kind
	route      string
	model      string // the metric label: a model the route declares (metricModel)
	asked      string // the model the request named, for the log
	tenant     string // the caller's tenant (empty without authentication)
	server     string // the target (ModelServer or ExternalModelProvider) as namespace/name
	targetKind match.Kind
	endpoint   string
	status     int
	attempts   int
	reason     string
	held       time.Duration // how long the request was held for a model at zero (fromzero.go)
	span       trace.Span    // the request's server span (spans.go); nil in epp mode
}

// backend is a target resolved in a snapshot: a ModelServer or an ExternalModelProvider.
type backend struct {
	target   match.Target
	server   *view.Server
	provider *view.Provider
}

func (b backend) policy() view.Policy {
	if b.provider != nil {
		return b.provider.Policy
	}
	return b.server.Policy
}

func (b backend) String() string {
	if b.provider != nil {
		return b.provider.String()
	}
	return b.server.String()
}

// failure is a request the router answers itself.
type failure struct {
	status      int
	code, param string
	msg         string
	retryAfter  int64 // seconds, for a 429
}

// resolve finds target t of a route in namespace ns in snap, ready to take a request of
// kind k.
func resolve(snap *view.Snapshot, ns string, t match.Target, k request.Kind) (backend, *failure) {
	b := backend{target: t}
	if t.Kind == match.Provider {
		b.provider = snap.Provider(ns, t.Name)
		switch {
		case b.provider == nil:
			return b, &failure{http.StatusServiceUnavailable, "provider_not_found", "", fmt.Sprintf("ExternalModelProvider %s/%s, which does not exist", ns, t.Name), 0}
		case b.provider.Err != nil:
			return b, &failure{http.StatusServiceUnavailable, "provider_not_ready", "", b.provider.Err.Error(), 0}
		case !provider.Speaks(b.provider.Type, k) && b.provider.Type == networkingv1alpha1.Anthropic:
			return b, &failure{http.StatusBadRequest, "unsupported_api", "", fmt.Sprintf("%s, which speaks the Anthropic Messages API (POST %s) only, not %s",
				b.provider, request.MessagesPath, k.Path()), 0}
		case !provider.Speaks(b.provider.Type, k):
			return b, &failure{http.StatusBadRequest, "unsupported_api", "", fmt.Sprintf("%s, an OpenAI API provider, which has no %s (an engine's own API)",
				b.provider, k.Path()), 0}
		}
		return b, nil
	}
	b.server = snap.Server(ns, t.Name)
	if b.server == nil {
		return b, &failure{http.StatusServiceUnavailable, "model_server_not_found", "", fmt.Sprintf("ModelServer %s/%s, which does not exist", ns, t.Name), 0}
	}
	return b, nil
}

func (r *Router) serveInference(w http.ResponseWriter, req *http.Request) {
	r.serveModelRoutes(w, req, nil, nil)
}

// serveModelRoutes answers an OpenAI or Anthropic request by the ModelRoutes of table: those
// a Gateway listener serves (their parentRefs name its Gateway), or with table nil the
// router's own (those without parentRefs). in is the request's body already parsed (a
// Gateway listener parses it to see whether a ModelRoute serves its model); nil: read and
// parse it here.
func (r *Router) serveModelRoutes(w http.ResponseWriter, req *http.Request, table *match.Table, in *request.Request) {
	r.metrics.inflight.Inc()
	defer r.metrics.inflight.Dec()
	kind := request.KindOf(req.URL.Path)
	x := &exchange{start: time.Now(), kind: kind}
	defer r.finish(x)
	req = r.startRequest(req, x)
	fail := func(status int, code, param, msg string) {
		x.status, x.reason = status, msg
		writeErrorFor(kind, w, status, code, param, msg)
	}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		fail(http.StatusMethodNotAllowed, "method_not_allowed", "", req.Method+" is not allowed; send POST")
		return
	}
	tn, ok := r.authenticate(w, req, kind, x)
	if !ok {
		return
	}
	if in == nil {
		body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.opts.MaxBodyBytes))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				fail(http.StatusRequestEntityTooLarge, "request_too_large", "", fmt.Sprintf("request body exceeds %d bytes", tooBig.Limit))
				return
			}
			fail(http.StatusBadRequest, "invalid_request", "", "reading the request body: "+err.Error())
			return
		}
		if in, err = request.ParseContent(kind, req.Header.Get("Content-Type"), body); err != nil {
			var perr *request.Error
			errors.As(err, &perr)
			fail(http.StatusBadRequest, "invalid_request", perr.Param, perr.Message)
			return
		}
	}
	snap := r.view.Snapshot()
	adm, f := r.admit(req.Context(), snap, table, in, req.URL.Path, req.Header, x)
	if f != nil {
		if f.retryAfter > 0 {
			w.Header().Set("Retry-After", strconv.FormatInt(f.retryAfter, 10))
		}
		fail(f.status, f.code, f.param, f.msg)
		return
	}
	res, first, limiter, limits := adm.res, adm.first, adm.limiter, adm.limits
	ctx := req.Context()
	if cold := r.coldWorkloads(snap, res.Route.Namespace, res.Targets, time.Now()); len(cold) > 0 {
		hctx, release, now, b, f := r.holdCold(ctx, res, cold, kind, x)
		if f != nil {
			if f.retryAfter > 0 {
				w.Header().Set("Retry-After", strconv.FormatInt(f.retryAfter, 10))
			}
			if f.status == 499 {
				x.status, x.reason = f.status, f.msg
				return
			}
			fail(f.status, f.code, f.param, f.msg)
			return
		}
		defer release()
		// It came up: forward to a target that can serve, with the picture that shows it.
		ctx, snap, first = hctx, now, b
	}
	server := ""
	if first.server != nil {
		server = x.server
	}
	done, ok := r.gate(req.Context(), w, kind, tn, server, in, x)
	if !ok {
		return
	}

	if t := first.policy().Timeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	relayed, ok := r.forward(ctx, w, req, x, snap, res, first, in)
	done(relayed)
	if relayed.Status/100 == 2 {
		input := relayed.InputTokens
		if input == 0 {
			input = in.EstimatedInputTokens()
		}
		r.metrics.tokens.WithLabelValues(x.route, x.model, string(x.targetKind), x.server, "input").Add(float64(input))
		r.metrics.tokens.WithLabelValues(x.route, x.model, string(x.targetKind), x.server, "output").Add(float64(relayed.OutputTokens))
	}
	if !ok {
		return
	}
	if limiter != nil && limits.OutputPerUnit > 0 && relayed.OutputTokens > 0 {
		// The client's request is over; charging must not depend on its context.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(req.Context()), 2*time.Second)
		if err := limiter.ChargeOutput(cctx, x.route, limits, relayed.OutputTokens); err != nil {
			r.metrics.limiterErrs.Inc()
			r.log.Error(err, "charging output tokens failed", "route", x.route)
		}
		cancel()
	}
}

// admission is a parsed request matched to a ModelRoute and a target that can take it,
// let through by the route's rate limit: what the proxy and the endpoint picker both do
// before they choose an endpoint.
type admission struct {
	res     match.Result
	first   backend
	limiter ratelimit.Limiter // nil when the route has no limit
	limits  ratelimit.Limits
}

// admit matches in (sent to path with header) to a route of table (nil: the router's own
// ModelRoutes, those without parentRefs) and a target in snap, and asks the
// route's rate limit; it fills x's route, model and server as it learns them.
func (r *Router) admit(ctx context.Context, snap *view.Snapshot, table *match.Table, in *request.Request, path string, header http.Header, x *exchange) (admission, *failure) {
	kind := in.Kind
	serving := func(ns string, t match.Target) bool {
		_, f := resolve(snap, ns, t, kind)
		return f == nil && snap.Serving(ns, t)
	}
	routes := snap.Routes
	if table != nil { // a Gateway listener's ModelRoutes
		routes = table
	}
	res, err := routes.Match(match.Input{Model: in.Model, Path: path, Header: header, Serving: serving}, r.uniform)
	if res.Route != nil {
		x.route = res.Route.Namespace + "/" + res.Route.Name
	}
	x.asked, x.model = in.Model, metricModel(res.Route, in.Model)
	switch {
	case errors.Is(err, match.ErrNoRoute):
		return admission{}, &failure{http.StatusNotFound, "model_not_found", "model", fmt.Sprintf("The model `%s` does not exist: no ModelRoute serves it.", in.Model), 0}
	case errors.Is(err, match.ErrNoRule):
		return admission{}, &failure{http.StatusNotFound, "route_not_found", "", err.Error(), 0}
	case err != nil:
		return admission{}, &failure{http.StatusServiceUnavailable, "no_target", "", err.Error(), 0}
	}
	// The target is checked before the rate limit: a request nothing can serve spends no budget.
	first, f := resolve(snap, res.Route.Namespace, res.Target, kind)
	x.server, x.targetKind = res.Route.Namespace+"/"+res.Target.Name, res.Target.Kind
	if f != nil {
		f.msg = fmt.Sprintf("ModelRoute %s rule %s sends to %s", x.route, res.RuleName, f.msg)
		return admission{}, f
	}
	a := admission{res: res, first: first}
	rl := res.Route.Spec.RateLimit
	if a.limits, err = ratelimit.LimitsFrom(rl); err != nil {
		return admission{}, &failure{http.StatusInternalServerError, "invalid_route", "", fmt.Sprintf("ModelRoute %s: rateLimit: %v", x.route, err), 0}
	}
	if !a.limits.Unlimited() {
		a.limiter = r.limiterFor(rl)
		d, err := a.limiter.Admit(ctx, x.route, a.limits, in.EstimatedInputTokens())
		if err != nil {
			r.metrics.limiterErrs.Inc()
			r.log.Error(err, "rate limiter failed; letting the request through", "route", x.route)
		}
		if !d.Allowed {
			r.metrics.rateLimited.WithLabelValues(x.route).Inc()
			return admission{}, &failure{http.StatusTooManyRequests, "rate_limit_exceeded", "", fmt.Sprintf("ModelRoute %s rate limit: %s", x.route, d.Reason), d.RetryAfterSeconds()}
		}
	}
	return a, nil
}

func (r *Router) limiterFor(rl *networkingv1alpha1.RateLimit) ratelimit.Limiter {
	if addr := ratelimit.RedisAddress(rl, r.opts.RedisAddr); addr != "" {
		if l, err := r.redis.Limiter(addr); err == nil {
			return l
		} else {
			r.log.Error(err, "global rate limit unavailable; using this replica's local limit", "redis", addr)
		}
	}
	return r.local
}

// forward sends the request to an endpoint of cur, retrying while nothing has reached the
// client, and relays the answer. ok is false when the client got an error.
//
// The first target's trafficPolicy governs the whole request (its timeout already bounds
// ctx). A retry goes to an endpoint not tried yet: another Ready pod of the same
// ModelServer, else another target of the rule, drawn by weight among those that can serve
// and were not tried. A provider is one endpoint, but a service rather than a pod: when no
// other target is left, it is tried again.
func (r *Router) forward(ctx context.Context, w http.ResponseWriter, req *http.Request, x *exchange, snap *view.Snapshot,
	res match.Result, cur backend, in *request.Request) (relayed proxy.Relayed, ok bool) {
	ns := res.Route.Namespace
	tried := map[string]bool{}
	triedTargets := map[match.Target]bool{cur.target: true}
	fallover := func() (backend, bool) {
		for {
			t, found := match.Draw(res.Targets, func(t match.Target) bool {
				return triedTargets[t] || !snap.Serving(ns, t)
			}, nil, r.uniform)
			if !found {
				return backend{}, false
			}
			triedTargets[t] = true
			if b, f := resolve(snap, ns, t, in.Kind); f == nil {
				return b, true
			}
		}
	}
	pol := cur.policy()
	policyAttempts, free := 1+pol.RetryAttempts, freeRetries
	preq := &pick.Request{Model: in.Model, Adapter: res.Adapter, Prefix: pick.HashPrompt(in.Prompt)}
	var lastErr error
	for attempt := 1; ; attempt++ {
		x.attempts = attempt
		if attempt > 1 && cur.provider != nil {
			if next, found := fallover(); found {
				cur = next
			}
		}
		pickSpan := r.startPick(ctx, attempt)
		dst, ends, err := r.destination(cur, preq, tried)
		for err != nil && attempt > 1 {
			next, found := fallover()
			if !found {
				break
			}
			cur = next
			dst, ends, err = r.destination(cur, preq, tried)
		}
		endPick(pickSpan, x, cur, dst, err)
		x.server, x.targetKind = ns+"/"+cur.target.Name, cur.target.Kind
		if err != nil {
			msg := err.Error()
			if lastErr != nil {
				msg = fmt.Sprintf("%s; last attempt: %v", msg, lastErr)
			}
			x.status, x.reason = http.StatusServiceUnavailable, msg
			writeErrorFor(in.Kind, w, x.status, "no_endpoint", "", msg)
			return relayed, false
		}
		x.endpoint = dst.name
		sent := time.Now()
		actx, attemptSpan := r.startAttempt(ctx, attempt, cur, dst)
		resp, translate, err := r.send(actx, req, cur, dst, in, res.Adapter)
		var reqErr *anthropic.RequestError
		if errors.As(err, &reqErr) {
			endAttempt(attemptSpan, 0, err, "")
			ends(math.NaN())
			x.status, x.reason = http.StatusBadRequest, reqErr.Message
			writeErrorFor(in.Kind, w, x.status, "invalid_request", reqErr.Param, reqErr.Message)
			return relayed, false
		}
		goneAway := err != nil && ctx.Err() == nil && (proxy.DialFailed(err) || proxy.ClosedBeforeAnswer(err))
		canRetry := attempt < policyAttempts || (goneAway && free > 0)
		if (err == nil && !proxy.Retryable(ctx, resp, nil)) || !canRetry || !proxy.Retryable(ctx, resp, err) {
			if err != nil {
				endAttempt(attemptSpan, 0, err, "")
				ends(pick.Failed)
				status, code := http.StatusBadGateway, "upstream_error"
				if errors.Is(ctx.Err(), context.DeadlineExceeded) {
					status, code = http.StatusGatewayTimeout, "timeout"
					err = fmt.Errorf("%s did not answer within its timeout %s", cur, pol.Timeout)
				} else if req.Context().Err() != nil {
					status, err = 499, errors.New("the client went away")
				}
				where := fmt.Sprintf("%s endpoint %s", cur, dst.name)
				if cur.provider != nil {
					where = cur.String()
				}
				x.status, x.reason = status, fmt.Sprintf("%s: %v", where, err)
				if status != 499 {
					writeErrorFor(in.Kind, w, status, code, "", x.reason)
				}
				return relayed, false
			}
			if r.opts.EndpointHeader {
				w.Header().Set("X-Berth-Endpoint", dst.name)
			}
			if translate {
				relayed = proxy.RelayTranslated(w, resp, &messagesTranslator{stream: anthropic.Stream{InputEstimate: in.EstimatedInputTokens()}})
			} else {
				// Speech answers are audio: there is no usage to read in them.
				relayed = proxy.Relay(w, resp, in.Kind != request.Speech)
			}
			ttft := math.NaN()
			switch {
			case relayed.Status >= 500 || relayed.Status == http.StatusTooManyRequests:
				ttft = pick.Failed
			case relayed.Status/100 == 2 && !relayed.FirstByte.IsZero():
				ttft = relayed.FirstByte.Sub(sent).Seconds()
				r.metrics.ttft.WithLabelValues(x.route, x.model).Observe(relayed.FirstByte.Sub(x.start).Seconds())
			}
			ends(ttft)
			endAttempt(attemptSpan, relayed.Status, relayed.Err, "")
			x.status = relayed.Status
			switch {
			case relayed.Err != nil:
				x.reason = relayed.Err.Error()
			case relayed.Status >= 500:
				// The engine's own error, passed on: the log line says who answered it.
				x.reason = fmt.Sprintf("%s answered %d", dst.name, relayed.Status)
			}
			return relayed, relayed.Status/100 == 2
		}
		// Retry: nothing reached the client yet.
		ends(pick.Failed)
		reason, status := "transport", 0
		if err == nil {
			status = resp.StatusCode
			reason = strconv.Itoa(resp.StatusCode)
			lastErr = fmt.Errorf("%s answered %s", dst.name, resp.Status)
			proxy.Discard(resp)
		} else {
			lastErr = fmt.Errorf("%s: %w", dst.name, err)
		}
		if attempt >= policyAttempts {
			free--
		}
		endAttempt(attemptSpan, status, err, reason)
		r.metrics.retries.WithLabelValues(x.server, reason).Inc()
		r.log.V(1).Info("retrying", "target", cur.String(), "failed", dst.name, "reason", lastErr.Error(), "attempt", attempt)
		for _, a := range dst.failed(err) {
			tried[a] = true
		}
		if attempt < policyAttempts && pol.RetryInterval > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(pol.RetryInterval):
			}
		}
	}
}

// destination is where an attempt on b goes: an endpoint (or PD pair) of a ModelServer not
// tried yet, or the provider.
func (r *Router) destination(b backend, preq *pick.Request, tried map[string]bool) (target, func(float64), error) {
	if b.provider != nil {
		return target{name: b.provider.String()}, func(float64) {}, nil
	}
	return r.choose(b.server, preq, tried)
}

// send makes one attempt: the body as b needs it (its model name; a Messages request
// translated into a chat completion unless b is an Anthropic provider), to dst. translate
// says the answer must be translated back into a Messages answer.
func (r *Router) send(ctx context.Context, req *http.Request, b backend, dst target, in *request.Request, adapter bool) (resp *http.Response, translate bool, err error) {
	body, path := in.Body, in.Kind.Path()
	model := ""
	if b.provider != nil {
		model = b.provider.Model
	} else if !adapter {
		model = b.server.Model
	}
	if model != "" && model != in.Model {
		if in.ContentType != "" {
			body, err = request.RewriteFormModel(body, in.ContentType, model)
		} else {
			body, err = request.Rewrite(body, map[string]any{"model": model})
		}
		if err != nil {
			return nil, false, &anthropic.RequestError{Message: err.Error()}
		}
	}
	if in.Kind == request.Messages && (b.provider == nil || b.provider.Type != networkingv1alpha1.Anthropic) {
		if body, err = anthropic.ToChat(body); err != nil {
			return nil, false, err
		}
		path, translate = request.ChatPath, true
	}
	if b.provider != nil {
		hdr := provider.Header(b.provider, req.Header)
		if in.ContentType != "" {
			hdr.Set("Content-Type", in.ContentType)
		}
		resp, err = r.proxy.SendProvider(ctx, provider.URL(b.provider, path), hdr, body, b.provider.InsecureSkipVerify)
		return resp, translate, err
	}
	// An engine learns who called through the forwarding headers (never a provider: the
	// client's address is not the provider's business, so they are built only here).
	extra := forwarded.Headers(req)
	if in.ContentType != "" {
		extra["Content-Type"] = in.ContentType
	}
	switch {
	case b.server.Disaggregated() && (path == request.ChatPath || path == request.CompletionPath):
		h := req.Header.Clone()
		for k, v := range extra {
			h.Set(k, v)
		}
		resp, err = r.proxy.Disaggregated(ctx, b.server.Connector, path, h, body, dst.pd)
	case b.server.Disaggregated():
		// Embeddings, scores, tokenizing, audio: nothing to split into prefill and decode; the
		// decode engine of the pair answers the whole request.
		resp, err = r.proxy.Send(ctx, dst.pd.DecodeURL, path, req.Header, extra, body)
	default:
		resp, err = r.proxy.Send(ctx, dst.url, path, req.Header, extra, body)
	}
	return resp, translate, err
}

// messagesTranslator turns chat completion answers into Messages answers (package
// anthropic) for proxy.RelayTranslated.
type messagesTranslator struct{ stream anthropic.Stream }

func (t *messagesTranslator) Body(status int, body []byte) ([]byte, int64, int64) {
	out, u := anthropic.Response(status, body)
	return out, u.Input, u.Output
}
func (t *messagesTranslator) Stream(p []byte) []byte { return t.stream.Feed(p) }
func (t *messagesTranslator) End() []byte            { return t.stream.End() }
func (t *messagesTranslator) Usage() (int64, int64) {
	u := t.stream.Usage()
	return u.Input, u.Output
}
func (t *messagesTranslator) ContentType(stream bool) string {
	if stream {
		return "text/event-stream; charset=utf-8"
	}
	return "application/json"
}

// target is where one attempt goes.
type target struct {
	name  string // for logs and the X-Berth-Endpoint header
	url   string // whole-request endpoint
	pd    proxy.PDTarget
	addrs []string // every address used (excluded on retry)
}

// failed is what an attempt's failure rules out for the retries: of a prefill/decode pair
// the leg that failed (a failed prefill says nothing about its decode, nor a failed decode
// about its prefill: seen in a role rollout, where a decode going away also ruled out the one
// prefill left and the request failed with "no pair left"), else every address used.
func (t target) failed(err error) []string {
	if t.pd.PrefillURL != "" && len(t.addrs) == 2 {
		if errors.As(err, new(*proxy.PrefillError)) {
			return t.addrs[:1]
		}
		return t.addrs[1:]
	}
	return t.addrs
}

// choose picks an endpoint (or a prefill/decode pair in one PD group) not yet tried.
func (r *Router) choose(server *view.Server, preq *pick.Request, tried map[string]bool) (target, func(float64), error) {
	stats := r.scraper.Stats
	if !server.Disaggregated() {
		cands := r.picker.Candidates(server.Endpoints, stats, tried)
		i := r.picker.Pick(preq, cands)
		if i < 0 {
			return target{}, nil, fmt.Errorf("%s has no Ready endpoint left to try (%d Ready, %d tried)", server, len(server.Endpoints), len(tried))
		}
		e := cands[i].Endpoint
		r.metrics.picks.WithLabelValues(server.Namespace+"/"+server.Name, e.Pod, string(e.Role)).Inc()
		return target{name: e.Name(), url: e.URL(), addrs: []string{e.Address}}, r.picker.Begin(preq, e.Address), nil
	}
	// Prefill first: its prefix cache is what a shared prompt reuses. Then a decode
	// endpoint it may pair with (same PD group, same revision: Server.Pairable); a prefill
	// with no such decode left is skipped.
	excluded := maps.Clone(tried)
	for {
		pc := r.picker.Candidates(server.Prefill, stats, excluded)
		i := r.picker.Pick(preq, pc)
		if i < 0 {
			return target{}, nil, fmt.Errorf("%s has no prefill/decode pair left to try (%d prefill, %d decode Ready)", server, len(server.Prefill), len(server.Decode))
		}
		p := pc[i].Endpoint
		var group []*view.Endpoint
		for _, d := range server.Decode {
			if server.Pairable(p, d) {
				group = append(group, d)
			}
		}
		dc := r.picker.Candidates(group, stats, tried)
		// The nearest decodes with room to take the KV (pdtopology.go); all without a fabric.
		dc, _ = nearDecodes(server.Fabric, p, dc)
		j := r.picker.Pick(&pick.Request{Model: preq.Model, Adapter: preq.Adapter}, dc)
		if j < 0 {
			excluded[p.Address] = true
			continue
		}
		d := dc[j].Endpoint
		srv := server.Namespace + "/" + server.Name
		r.metrics.picks.WithLabelValues(srv, p.Pod, string(p.Role)).Inc()
		r.metrics.picks.WithLabelValues(srv, d.Pod, string(d.Role)).Inc()
		pairing, _ := server.Pairing(p, d)
		r.metrics.pdPairs.WithLabelValues(srv, string(pairing), tierLabel(server.Fabric, p, d)).Inc()
		endP, endD := r.picker.Begin(preq, p.Address), r.picker.Begin(&pick.Request{}, d.Address)
		return target{
				name:  p.Name() + "+" + d.Name(),
				pd:    proxy.PDTarget{PrefillURL: p.URL(), DecodeURL: d.URL(), PrefillAddress: p.Address},
				addrs: []string{p.Address, d.Address},
			}, func(ttft float64) {
				endP(math.NaN())
				endD(ttft)
			}, nil
	}
}

// metricModel is the model label of a request's series: a name its ModelRoute declares (the
// route's model or one of its LoRA adapters), never a string only the client chose, so that
// requests for models nothing serves (404) cannot create series without limit.
func metricModel(route *networkingv1alpha1.ModelRoute, requested string) string {
	if route == nil {
		return ""
	}
	if requested == route.Spec.ModelName || slices.Contains(route.Spec.LoraAdapters, requested) {
		return requested
	}
	return route.Spec.ModelName
}

// finish logs and counts a finished request.
func (r *Router) finish(x *exchange) {
	endRequest(x)
	status := strconv.Itoa(x.status)
	r.metrics.requests.WithLabelValues(x.route, x.model, status).Inc()
	r.countTenant(x)
	if x.status/100 == 2 {
		r.metrics.duration.WithLabelValues(x.route, x.model).Observe(time.Since(x.start).Seconds())
	}
	log := r.log.V(1)
	if x.status >= 500 || x.reason != "" {
		log = r.log
	}
	if log.Enabled() {
		logRequest(log, x)
	}
}

func logRequest(log logr.Logger, x *exchange) {
	kv := []any{"status", x.status, "model", x.asked, "route", x.route, "server", x.server, "endpoint", x.endpoint,
		"attempts", x.attempts, "duration", time.Since(x.start).Round(time.Microsecond).String()}
	if x.reason != "" {
		kv = append(kv, "reason", x.reason)
	}
	if x.tenant != "" {
		kv = append(kv, "tenant", x.tenant)
	}
	if x.held > 0 {
		kv = append(kv, "held", x.held.Round(time.Millisecond).String())
	}
	log.Info("request", kv...)
}

// serveModels lists the models the routes serve, in OpenAI's format (to callers with a
// key when the router authenticates, as OpenAI's /v1/models).
func (r *Router) serveModels(w http.ResponseWriter, req *http.Request) {
	if _, ok := r.authenticate(w, req, request.Chat, &exchange{}); !ok {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(r.modelList())
}
