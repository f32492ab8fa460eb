package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/router/hold"
	"github.com/berth-sh/berth/pkg/router/match"
	"github.com/berth-sh/berth/pkg/router/view"
)

// Scale from zero (docs/router.md, "Scale from zero"): a request for a ModelServer without
// a Ready endpoint whose ModelServing is at zero replicas (or came up from zero within the
// hold timeout and is not Ready yet) is held in the server's hold queue while the router
// tells the autoscaler through the ModelServing's demand annotation; it goes on, in arrival
// order, once the server has a Ready endpoint.

// demandRefresh is how old the demand annotation may be before a replica holding requests
// writes it again: the autoscaler decides every few seconds, and a burst of requests across
// many replicas writes the annotation once or twice, not once per request.
const demandRefresh = 5 * time.Second

// holdRetryAfter is the Retry-After (seconds) of a request refused for a model at zero: about
// what a simulated model needs to come up, a small fraction of a real one's.
const holdRetryAfter = 10

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
	held      *prometheus.CounterVec
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
	f := &fromZero{queues: hold.New(size, r.opts.HoldTimeout), client: c, signalled: map[types.NamespacedName]time.Time{}}
	f.held = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_router_held_requests_total",
		Help: "Requests for a model at zero replicas, by ModelServer (namespace/name) and outcome: released (it came up and the request went on), timeout, full (the hold queue was full), disabled (holding is off: --hold-queue-size 0), cancelled (the client went away).",
	}, []string{"server", "outcome"})
	waiting := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "berth_router_held_requests",
		Help: "Requests held now for models at zero replicas, waiting for them to come up."}, func() float64 { return float64(f.queues.Waiting()) })
	r.metrics.registry.MustRegister(f.held, waiting)
	r.fromZero = f
	r.view.EnableWorkloads()
	return nil
}

// cold says whether requests for srv wait for it to come up: it has no Ready endpoint and
// its ModelServing is at zero replicas, or was told of demand within the hold timeout (it
// is coming up from zero).
func (r *Router) cold(srv *view.Server, now time.Time) bool {
	if r.fromZero == nil || srv == nil || srv.Workload == nil {
		return false
	}
	if len(srv.Endpoints) > 0 || (len(srv.Prefill) > 0 && len(srv.Decode) > 0) {
		return false
	}
	w := srv.Workload
	return w.Replicas == 0 || (!w.Demand.IsZero() && now.Sub(w.Demand) < r.opts.HoldTimeout)
}

// holdCold holds a request for a cold server until it has a Ready endpoint. It returns the
// snapshot to forward with and a context whose first written request lets the next held
// one go, or a failure (503 with Retry-After) when holding is off, the queue is full, or
// the timeout passed. release must be called when the request is done (it lets the next
// held request go if this one never reached an engine).
func (r *Router) holdCold(ctx context.Context, b backend, x *exchange) (_ context.Context, release func(), _ *view.Snapshot, _ *failure) {
	f := r.fromZero
	srv := b.server
	key := srv.Namespace + "/" + srv.Name
	w := srv.Workload
	// Demand is signalled whether or not the request is held: with holding off, a client
	// told to retry finds the model coming up.
	r.signalDemand(ctx, w)
	state := fmt.Sprintf("%s has no Ready endpoint: %s is at zero replicas", srv, w)
	if w.Replicas > 0 {
		state = fmt.Sprintf("%s has no Ready endpoint yet: %s is coming up from zero (%d replicas)", srv, w, w.Replicas)
	}
	refuse := func(outcome, why string) (context.Context, func(), *view.Snapshot, *failure) {
		f.held.WithLabelValues(key, outcome).Inc()
		return nil, nil, nil, &failure{http.StatusServiceUnavailable, "model_scaled_to_zero", "", state + "; the autoscaler has been told; " + why, holdRetryAfter}
	}
	if !f.queues.Enabled() {
		return refuse("disabled", "holding requests is disabled (--hold-queue-size 0); retry later")
	}
	start := time.Now()
	r.log.V(1).Info("holding a request for a model at zero", "server", key, "workload", w.String(), "waiting", f.queues.Len(key)+1)
	next, err := f.queues.Wait(ctx, key)
	x.held = time.Since(start)
	switch {
	case errors.Is(err, hold.ErrFull):
		return refuse("full", fmt.Sprintf("%d requests already wait for it (--hold-queue-size); retry later", f.queues.Size()))
	case errors.Is(err, hold.ErrTimeout):
		return refuse("timeout", fmt.Sprintf("the request was held %s (--hold-timeout) and it did not come up", f.queues.Timeout()))
	case err != nil:
		f.held.WithLabelValues(key, "cancelled").Inc()
		return nil, nil, nil, &failure{499, "client_closed", "", "the client went away while the request was held for " + key, 0}
	}
	f.held.WithLabelValues(key, "released").Inc()
	r.log.Info("released a held request: the model came up from zero", "server", key, "held", x.held.Round(time.Millisecond).String())
	// The next held request goes once this one is written to an engine: the engines see
	// them in arrival order, and none waits for another's answer.
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { next() }})
	return ctx, next, r.view.Snapshot(), nil
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

// releaseHeld lets the requests held for servers that now have a Ready endpoint go, and
// keeps telling the autoscaler of those still at zero.
func (r *Router) releaseHeld(ctx context.Context, snap *view.Snapshot) {
	f := r.fromZero
	now := time.Now()
	for _, key := range f.queues.Keys() {
		ns, name, _ := strings.Cut(key, "/")
		srv := snap.Server(ns, name)
		switch {
		case srv == nil:
			f.queues.Close(key)
		case snap.Serving(ns, match.Target{Name: name}):
			f.queues.Release(key)
		default:
			f.queues.Close(key)
			if r.cold(srv, now) && f.queues.Len(key) > 0 {
				r.signalDemand(ctx, srv.Workload)
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
