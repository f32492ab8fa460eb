package router

import (
	"context"
	"fmt"
	"math/bits"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-sh/berth/pkg/router/view"
)

// Router-informed scale-down (docs/router.md, "Deletion cost"): the router knows what losing
// each engine pod would cost the requests it routes — the requests open to it (every
// replica's, through package shared) and how much of the prompts' shared prefixes the pick
// index expects in its cache (PrefixIndex.Held) — and writes it on the pod as ReplicaSet's pod-deletion-cost
// annotation. berth-controller, scaling a ModelServing down, removes the Ready group whose
// pods cost least in sum (pkg/workload scaleDownOrder), so the warm group a prompt family
// lives on survives and a cold one goes.
//
// Writes stay few at any scale: the cost is published as a log2 bucket, a pod is patched
// only when its bucket differs from the annotation it carries now (so replicas that agree
// write nothing), and at most once per DeletionCostInterval by each replica.

// inflightBlocks is what one open request weighs against prefix blocks: about a prompt's
// worth (16 blocks of 64 bytes is 1 KiB), since losing its engine costs it that prefill
// again, and more (it is cut, or drains on a pod that takes nothing new).
const inflightBlocks = 16

// deletionCostTick is how often the costs are looked at; each pod is written at most every
// DeletionCostInterval.
const deletionCostTick = 500 * time.Millisecond

// deletionCostBucket is the published cost of an endpoint with inflight requests open and
// blocks prefix blocks held: floor(log2(blocks + 16·inflight)) + 1, 0 when it holds nothing.
// Logarithmic, so it moves rarely under steady traffic and replicas that know slightly
// different numbers agree; it stays far inside the annotation's int32.
func deletionCostBucket(inflight int64, blocks int) int {
	return bits.Len64(uint64(max(inflight, 0))*inflightBlocks + uint64(max(blocks, 0)))
}

// deletionCosts is the router's deletion-cost publisher.
type deletionCosts struct {
	client   client.Client
	interval time.Duration
	// cost is what an endpoint costs now: its bucket.
	cost func(addr string) int
	// written is when this replica last patched each pod.
	written map[types.NamespacedName]time.Time
	writes  *prometheus.CounterVec
	log     logr.Logger
}

func (r *Router) enableDeletionCosts() error {
	c, err := client.New(r.cfg, client.Options{Scheme: view.Scheme()})
	if err != nil {
		return err
	}
	d := &deletionCosts{client: c, interval: r.opts.DeletionCostInterval, written: map[types.NamespacedName]time.Time{}, log: r.log.WithName("deletion-cost"),
		cost: func(addr string) int { return deletionCostBucket(r.picker.Load(addr), r.picker.PrefixHeld(addr)) }}
	d.writes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "berth_router_deletion_cost_writes_total",
		Help: "Patches of a ModelServing pod's controller.kubernetes.io/pod-deletion-cost annotation (the cost of losing it, which berth-controller's scale-down reads), by outcome: written, failed.",
	}, []string{"outcome"})
	r.metrics.registry.MustRegister(d.writes)
	r.deletionCosts = d
	return nil
}

// run publishes the costs until ctx ends.
func (d *deletionCosts) run(ctx context.Context, snapshot func() *view.Snapshot) {
	t := time.NewTicker(deletionCostTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.publish(ctx, snapshot(), time.Now())
		}
	}
}

// publish patches every ModelServing endpoint whose cost bucket is not the one on its pod
// (absent counts as 0, as the controller reads it), unless this replica wrote that pod
// within the interval.
func (d *deletionCosts) publish(ctx context.Context, snap *view.Snapshot, now time.Time) {
	seen := make(map[types.NamespacedName]bool, len(snap.Endpoints))
	for addr, e := range snap.Endpoints {
		if e.ModelServing == "" {
			continue // not a ModelServing's pod: its owner's to set
		}
		key := types.NamespacedName{Namespace: e.Namespace, Name: e.Pod}
		seen[key] = true
		want := strconv.Itoa(d.cost(addr))
		if e.DeletionCost == want || (e.DeletionCost == "" && want == "0") || now.Sub(d.written[key]) < d.interval {
			continue
		}
		d.written[key] = now
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, corev1.PodDeletionCost, want)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Pod}}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := d.client.Patch(wctx, pod, client.RawPatch(types.MergePatchType, []byte(patch)))
		cancel()
		if err != nil {
			// A pod deleted meanwhile is no loss; anything else (RBAC) is worth a line.
			if !apierrors.IsNotFound(err) {
				d.log.Error(err, "publishing a pod's deletion cost failed", "pod", key.String(), "cost", want)
			}
			d.writes.WithLabelValues("failed").Inc()
			continue
		}
		d.log.V(4).Info("published a pod's deletion cost", "pod", key.String(), "cost", want, "was", e.DeletionCost)
		d.writes.WithLabelValues("written").Inc()
	}
	for key := range d.written {
		if !seen[key] {
			delete(d.written, key)
		}
	}
}
