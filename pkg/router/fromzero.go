package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/router/hold"
	"github.com/berth-sh/berth/pkg/router/match"
	"github.com/berth-sh/berth/pkg/router/request"
	"github.com/berth-sh/berth/pkg/router/view"
)

// Scale from zero (docs/router.md, "Scale from zero"): a request whose route rule has no
// target that can serve, and a ModelServer target whose ModelServing is at zero replicas
// (or came up from zero within the hold timeout and has no Ready endpoint yet), is held in
// the rule's hold queue while the router tells the autoscaler through the demand annotation
// of every such ModelServing; it goes on, in arrival order, once any target of the rule can
// serve. The queue is the rule's, not one ModelServer's: an optimizer binding over several
// backends brings up the one it chooses (the cheapest), which need not be the one a weighted
// draw named.

// demandRefresh is how old the demand annotation may be before a replica holding requests
// writes it again: the autoscaler decides every few seconds, and a burst of requests across
// many replicas writes the annotation once or twice, not once per request.
const demandRefresh = 5 * time.Second

// holdRetryAfter is the Retry-After (seconds) of a request refused for a model at zero: about
// what a simulated model needs to come up, a small fraction of a real one's.
const holdRetryAfter = 10

// heldPace is the longest a released held request keeps the next one waiting after it was
// written to its engine, when the engine has not answered a byte yet (a request that does
// not stream answers its first byte with the whole answer): enough for the engine to take
// it in before the next one, little against a cold start (100 held requests go within 1 s).
const heldPace = 10 * time.Millisecond

// releaseEvery is how often the held queues are looked at besides every view change: a
// request may be queued just after the change that made its server Ready.
const releaseEvery = 250 * time.Millisecond

// fromZero is the router's scale-from-zero state.
type fromZero struct {
	queues *hold.Queues
	client client.Client // patches the demand annotation
	mu     sync.Mutex
	// signalled is when this replica last wrote each ModelServing's demand annotation.
	signalled map[types.NamespacedName]time.Time
	// rules are the targets each hold queue (by namespace/route#rule) waits for.
	rules map[string]heldRule
	held  *prometheus.CounterVec
}

func (r *Router) enableFromZero() error {
	c, err := client.New(r.cfg, client.Options{Scheme: view.Scheme()})
	if err != nil {
		return err
	}
	size := r.opts.HoldQueueSize
	if r.opts.DisableHold {
		size = 0
	}
	f := &fromZero{queues: hold.New(size, r.opts.HoldTimeout), client: c, signalled: map[types.NamespacedName]time.Time{},
		rules: map[string]heldRule{}}
	f.held = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_router_held_requests_total",
		Help: "Requests for a model at zero replicas, by ModelRoute (namespace/name) and outcome: released (it came up and the request went on), timeout, full (the hold queue was full), disabled (holding is off: --hold-queue-size 0), cancelled (the client went away).",
	}, []string{"route", "outcome"})
	waiting := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "berth_router_held_requests",
		Help: "Requests held now for models at zero replicas, waiting for them to come up."}, func() float64 { return float64(f.queues.Waiting()) })
	r.metrics.registry.MustRegister(f.held, waiting)
	r.fromZero = f
	r.view.EnableWorkloads()
	return nil
}

// heldRule is what a hold queue waits for: a rule's targets in the route's namespace.
type heldRule struct {
	ns      string
	targets []match.Target
}

// coldWorkloads are the ModelServings of res's targets that requests wait for: none when a
// target of the rule can serve now; else those at zero replicas, or told of demand within
// the hold timeout (coming up from zero) and not Ready yet.
func (r *Router) coldWorkloads(snap *view.Snapshot, ns string, targets []match.Target, now time.Time) []*view.Workload {
	if r.fromZero == nil {
		return nil
	}
	var out []*view.Workload
	for _, t := range targets {
		if t.Weight == 0 {
			continue
		}
		if snap.Serving(ns, t) {
			return nil
		}
		if t.Kind == match.Provider {
			continue
		}
		srv := snap.Server(ns, t.Name)
		if srv == nil || srv.Workload == nil {
			continue
		}
		w := srv.Workload
		if w.Replicas == 0 || (!w.Demand.IsZero() && now.Sub(w.Demand) < r.opts.HoldTimeout) {
			out = append(out, w)
		}
	}
	return out
}

// holdCold holds a request for a rule whose targets are cold until one can serve. It
// returns the context to forward with (its first written request lets the next held one
// go), the snapshot and target to forward to, and release, to call when the request is
// done (it lets the next held request go if this one never reached an engine); or a
// failure (503 with Retry-After) when holding is off, the queue is full, or the timeout
// passed.
func (r *Router) holdCold(ctx context.Context, res match.Result, cold []*view.Workload, kind request.Kind, x *exchange) (_ context.Context, release func(), _ *view.Snapshot, _ backend, _ *failure) {
	f := r.fromZero
	ns := res.Route.Namespace
	key := ns + "/" + res.Route.Name + "#" + res.RuleName
	route := ns + "/" + res.Route.Name
	// Demand is signalled whether or not the request is held: with holding off, a client
	// told to retry finds the model coming up.
	names := make([]string, len(cold))
	for i, w := range cold {
		r.signalDemand(ctx, w)
		names[i] = w.String()
		if w.Replicas > 0 {
			names[i] += fmt.Sprintf(" (coming up: %d replicas)", w.Replicas)
		}
	}
	state := fmt.Sprintf("ModelRoute %s rule %s has no target with a Ready endpoint: %s at zero replicas", route, res.RuleName, strings.Join(names, ", "))
	refuse := func(outcome, why string) (context.Context, func(), *view.Snapshot, backend, *failure) {
		f.held.WithLabelValues(route, outcome).Inc()
		return nil, nil, nil, backend{}, &failure{http.StatusServiceUnavailable, "model_scaled_to_zero", "", state + "; the autoscaler has been told; " + why, holdRetryAfter}
	}
	if !f.queues.Enabled() {
		return refuse("disabled", "holding requests is disabled (--hold-queue-size 0); retry later")
	}
	f.mu.Lock()
	f.rules[key] = heldRule{ns: ns, targets: res.Targets}
	f.mu.Unlock()
	start := time.Now()
	r.log.V(1).Info("holding a request for a model at zero", "route", route, "rule", res.RuleName, "waiting", f.queues.Len(key)+1)
	next, err := f.queues.Wait(ctx, key)
	x.held = time.Since(start)
	switch {
	case errors.Is(err, hold.ErrFull):
		return refuse("full", fmt.Sprintf("%d requests already wait for it (--hold-queue-size); retry later", f.queues.Size()))
	case errors.Is(err, hold.ErrTimeout):
		return refuse("timeout", fmt.Sprintf("the request was held %s (--hold-timeout) and it did not come up", f.queues.Timeout()))
	case err != nil:
		f.held.WithLabelValues(route, "cancelled").Inc()
		return nil, nil, nil, backend{}, &failure{499, "client_closed", "", "the client went away while the request was held for " + route, 0}
	}
	// A target can serve now: draw among those that can, as admit would have.
	snap := r.view.Snapshot()
	t, ok := match.Draw(res.Targets, nil, func(t match.Target) bool { return snap.Serving(ns, t) }, r.uniform)
	b, fl := backend{}, (*failure)(nil)
	if ok {
		b, fl = resolve(snap, ns, t, kind)
	}
	if !ok || fl != nil {
		next()
		return refuse("timeout", "it came up and went away again before the request could go; retry later")
	}
	f.held.WithLabelValues(route, "released").Inc()
	r.log.Info("released a held request: the model came up from zero", "route", route, "target", t.String(), "held", x.held.Round(time.Millisecond).String())
	x.server, x.targetKind = ns+"/"+t.Name, t.Kind
	// The next held request goes once this one is written to an engine and the engine has
	// answered its first byte, or heldPace after the write, whichever comes first: written
	// alone, two requests a moment apart on two connections reached the engine's handlers
	// in either order (seen under -race); none waits for another's whole answer.
	// next lets the next request go once, whichever calls it first.
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest:         func(httptrace.WroteRequestInfo) { time.AfterFunc(heldPace, next) },
		GotFirstResponseByte: next,
	})
	return ctx, next, snap, b, nil
}

// signalDemand writes w's demand annotation unless it (or this replica's last write) is
// newer than demandRefresh; only while w is at zero replicas.
func (r *Router) signalDemand(ctx context.Context, w *view.Workload) {
	f := r.fromZero
	if w.Replicas > 0 {
		return
	}
	now := time.Now()
	key := types.NamespacedName{Namespace: w.Namespace, Name: w.Name}
	f.mu.Lock()
	last := f.signalled[key]
	if w.Demand.After(last) {
		last = w.Demand
	}
	if now.Sub(last) < demandRefresh {
		f.mu.Unlock()
		return
	}
	f.signalled[key] = now
	f.mu.Unlock()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		workloadv1alpha1.DemandAnnotation: now.UTC().Format(time.RFC3339Nano)}}})
	ms := &workloadv1alpha1.ModelServing{}
	ms.Namespace, ms.Name = w.Namespace, w.Name
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := f.client.Patch(pctx, ms, client.RawPatch(types.MergePatchType, patch)); err != nil {
		// Tried again after demandRefresh, as a write that worked would be.
		r.log.Error(err, "telling the autoscaler of demand for a model at zero failed", "workload", w.String())
		return
	}
	r.log.Info("model at zero replicas asked for: told the autoscaler", "workload", w.String(), "annotation", workloadv1alpha1.DemandAnnotation)
}

// releaseHeld lets the requests held for rules that now have a target that can serve go,
// and keeps telling the autoscaler of those still at zero.
func (r *Router) releaseHeld(ctx context.Context, snap *view.Snapshot) {
	f := r.fromZero
	now := time.Now()
	keys := f.queues.Keys()
	f.mu.Lock()
	rules := make(map[string]heldRule, len(keys))
	for _, k := range keys {
		rules[k] = f.rules[k]
	}
	// Rules whose queues are gone are forgotten.
	maps.DeleteFunc(f.rules, func(k string, _ heldRule) bool { _, ok := rules[k]; return !ok })
	f.mu.Unlock()
	for key, rule := range rules {
		serving := slices.ContainsFunc(rule.targets, func(t match.Target) bool { return t.Weight > 0 && snap.Serving(rule.ns, t) })
		if serving {
			f.queues.Release(key)
			continue
		}
		f.queues.Close(key)
		if f.queues.Len(key) > 0 {
			for _, w := range r.coldWorkloads(snap, rule.ns, rule.targets, now) {
				r.signalDemand(ctx, w)
			}
		}
	}
}

// runFromZero releases held requests on every view change and every releaseEvery.
func (r *Router) runFromZero(ctx context.Context) {
	changed := make(chan struct{}, 1)
	r.view.OnChange(func(*view.Snapshot) {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	t := time.NewTicker(releaseEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-t.C:
		}
		r.releaseHeld(ctx, r.view.Snapshot())
	}
}
