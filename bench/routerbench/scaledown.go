package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-sh/berth/internal/quantile"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/router/pick"
	"github.com/berth-sh/berth/pkg/sim/engine"
	"github.com/berth-sh/berth/pkg/workload"
)

// The scale-down experiment (-scaledown): the quality workload through berth-router (its
// default scorers, publishing deletion costs) on engines that stand for the groups of one
// ModelServing, scaled from all of them to one fewer halfway through. The group removed is
// chosen by berth-controller's rule (workload.ScaleDownOrder) over the pods as they are in
// the apiserver then, once with their pod-deletion-cost annotations (router-informed) and
// once without (the highest ordinal, the rule before issue 31); the pod is deleted and the
// router stops sending to it, as in a cluster. Measured: TTFT of the requests due in the
// window (a simulated minute) after the scale-down.

const scaledownServing = "sd"

type scaledownPolicy struct {
	name  string
	costs bool // read the routers' deletion costs
}

var scaledownPolicies = []scaledownPolicy{
	{"highest ordinal (blind)", false},
	{"lowest deletion cost (router-informed)", true},
}

type scaledownConfig struct {
	quality qualityConfig
	window  time.Duration // simulated, after the scale-down
	csv     string        // every TTFT of the window, one line per request ("": none)
	rec     *recorder
}

type scaledownOutcome struct {
	victim         string
	costs          string // every group's summed cost at the decision
	served         string // every group's engine at the decision: requests so far, and in its batch
	p50, p90, p99  float64
	hitRate        float64 // engines' prefix-cache hits from the scale-down to the end
	errs, inWindow int
	firstErr       error
	ttft           []float64
}

// servingPods replaces the engine pods by one Ready pod per IP, each the only pod of group
// i of ModelServing "sd" (its labels as berth-controller writes them), still selected by
// the bench's ModelServer.
func (c *cluster) servingPods(ctx context.Context, ips []string) error {
	return c.setPodsNamed(ctx, ips, func(i int) (string, map[string]string) {
		group := workloadv1alpha1.ServingGroupName(scaledownServing, i)
		return workload.PodName(scaledownServing, i, "server", 0, 0), map[string]string{"app": engineLabel,
			workloadv1alpha1.ModelServingNameLabel: scaledownServing, workloadv1alpha1.GroupNameLabel: group}
	})
}

// scaledownSpec is the ModelServing the pods belong to (one pod per group), for the rule.
func scaledownSpec() *workloadv1alpha1.ModelServing {
	return &workloadv1alpha1.ModelServing{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: scaledownServing},
		Spec: workloadv1alpha1.ModelServingSpec{Template: workloadv1alpha1.ServingGroup{Roles: []workloadv1alpha1.Role{{Name: "server", Replicas: ptr.To[int32](1)}}}}}
}

func runScaledown(ctx context.Context, c *cluster, cfg scaledownConfig) (string, error) {
	q := cfg.quality
	ips := engineIPs(40, q.engines)
	ecfg, perSec := q.engineConfig()
	runs := max(1, q.runs)
	progress("scaledown: %.1f requests/s (simulated), %d groups to %d halfway, window %.0fs, TimeScale %.3f, %d runs, prompt skew %.2f",
		perSec, q.engines, q.engines-1, cfg.window.Seconds(), ecfg.TimeScale, runs, q.skew)
	// out[run][policy]
	out := make([]map[string]scaledownOutcome, runs)
	var csv strings.Builder
	csv.WriteString("run,policy,ttft_ms\n")
	var at, window time.Duration
	for run := range runs {
		load := q.workload(run)
		at = load[len(load)/2].at
		window = min(cfg.window, load[len(load)-1].at-at)
		out[run] = map[string]scaledownOutcome{}
		for _, p := range scaledownPolicies {
			if err := c.servingPods(ctx, ips); err != nil {
				return "", err
			}
			o, err := scaledownOnce(ctx, c, ecfg, ips, load, at, window, p)
			if err != nil {
				return "", err
			}
			progress("  run %d, %s: removed %s (costs %s; requests so far %s); TTFT p50 %.0f p90 %.0f p99 %.0f ms over %d requests, hit rate %.0f%%, %d errors",
				run, p.name, o.victim, o.costs, o.served, o.p50, o.p90, o.p99, o.inWindow, 100*o.hitRate, o.errs)
			out[run][p.name] = o
			cfg.rec.scaledownRun(run, p.name, o)
			for _, t := range o.ttft {
				fmt.Fprintf(&csv, "%d,%q,%.1f\n", run, p.name, t)
			}
		}
	}
	if cfg.csv != "" {
		if err := os.WriteFile(cfg.csv, []byte(csv.String()), 0o644); err != nil {
			return "", err
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### Scale-down: %d groups to %d under the quality workload\n\n", q.engines, q.engines-1)
	popularity := "each user's system prompt fixed, users uniform"
	if q.skew > 1 {
		popularity = fmt.Sprintf("system prompts drawn by popularity, Zipf exponent %.2f", q.skew)
	}
	fmt.Fprintf(&b, "%d system prompts of %d tokens (%s), %d requests at %.1f requests/s (simulated, %.0f%% of what the %d engines serve at round robin's hit rate); "+
		"berth-router with its default scorers, publishing deletion costs; halfway (simulated %.0f s) one group is removed by berth-controller's rule, "+
		"TTFT (simulated ms) of the requests due in the %.0f s after it. Prefix cache %d blocks per engine; TimeScale %.3f. %d runs (seed %d, run r draws workload r); "+
		"both rules see the same workload in a run.\n\n",
		q.prompts, q.systemTokens, popularity, q.requests, perSec, 100*q.load, q.engines, at.Seconds(), window.Seconds(), ecfg.PrefixCacheBlocks, ecfg.TimeScale, runs, q.seed)
	b.WriteString("| run | group removed by | removed | group costs then | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | prefix-cache hit rate after | requests | errors |\n")
	b.WriteString("|---:|---|---|---|---:|---:|---:|---:|---:|---:|\n")
	for run := range runs {
		for _, p := range scaledownPolicies {
			o := out[run][p.name]
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %.0f | %.0f | %.0f | %.0f%% | %d | %d |\n", run, p.name, o.victim, o.costs, o.p50, o.p90, o.p99, 100*o.hitRate, o.inWindow, o.errs)
		}
	}
	// The summary: medians over the runs, and over the runs where the rules removed different
	// groups (where they removed the same one, the difference is the run's noise).
	b.WriteString("\n| group removed by | median TTFT p90 ms, all runs | median TTFT p90 ms, runs with different victims | median hit rate after |\n|---|---:|---:|---:|\n")
	differ := 0
	for run := range runs {
		if out[run][scaledownPolicies[0].name].victim != out[run][scaledownPolicies[1].name].victim {
			differ++
		}
	}
	for _, p := range scaledownPolicies {
		var all, diff, hits []float64
		for run := range runs {
			o := out[run][p.name]
			all, hits = append(all, o.p90), append(hits, o.hitRate)
			if out[run][scaledownPolicies[0].name].victim != out[run][scaledownPolicies[1].name].victim {
				diff = append(diff, o.p90)
			}
		}
		d := "-"
		if len(diff) > 0 {
			d = fmt.Sprintf("%.0f", median(diff))
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %.0f%% |\n", p.name, median(all), d, 100*median(hits))
	}
	fmt.Fprintf(&b, "\nThe rules removed different groups in %d of %d runs.\n", differ, runs)
	for run := range runs {
		for _, p := range scaledownPolicies {
			if o := out[run][p.name]; o.firstErr != nil {
				fmt.Fprintf(&b, "\nFirst error in run %d with %s: %v\n", run, p.name, o.firstErr)
			}
		}
	}
	return b.String(), nil
}

// median of vals (the mean of the middle two for an even count).
func median(vals []float64) float64 {
	if len(vals) == 0 {
		return 0
	}
	v := slices.Clone(vals)
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// scaledownOnce starts fresh engines and a router, replays load, removes a group at
// simulated time at, and measures the window after it.
func scaledownOnce(ctx context.Context, c *cluster, ecfg engine.Config, ips []string, load []arrival, at, window time.Duration, p scaledownPolicy) (scaledownOutcome, error) {
	engines, err := startEngines(ecfg, ips)
	if err != nil {
		return scaledownOutcome{}, err
	}
	defer closeEngines(engines)
	scale := ecfg.TimeScale
	ro := router.Options{Policy: pick.Scored, Scorers: pick.DefaultScorers,
		ScrapeInterval:       time.Duration(float64(time.Second) * scale),
		DeletionCostInterval: time.Duration(float64(5*time.Second) * scale)}
	rt, err := c.startRouterWith(ctx, ro, overheadBody)
	if err != nil {
		return scaledownOutcome{}, err
	}
	defer rt.stop()

	cl := newHTTPClient(0)
	defer cl.CloseIdleConnections()
	ttft := make([]time.Duration, len(load))
	failed := make([]error, len(load))
	var o scaledownOutcome
	var hitAt, queryAt int64
	var decided sync.WaitGroup
	var decideErr error
	var wg sync.WaitGroup
	start := time.Now()
	removed := false
	for i, a := range load {
		due := start.Add(time.Duration(float64(a.at) * scale))
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		if !removed && a.at >= at {
			removed = true
			// What each group's engine served until now, beside the cost its pod carries:
			// a cost of 0 on an engine that serves is a publication behind the traffic.
			var served []string
			for gi, e := range engines {
				st := e.Stats()
				hitAt, queryAt = hitAt+st.PrefixHitTokens, queryAt+st.PrefixQueryTokens
				served = append(served, fmt.Sprintf("%s %d (%d running)", workloadv1alpha1.ServingGroupName(scaledownServing, gi), st.Requests, st.Running))
			}
			o.served = strings.Join(served, ", ")
			decided.Add(1)
			go func() {
				defer decided.Done()
				o.victim, o.costs, decideErr = c.removeGroup(ctx, p.costs)
			}()
		}
		wg.Go(func() { ttft[i], failed[i] = streamOne(cl, rt.url, a.body, due) })
	}
	wg.Wait()
	decided.Wait()
	if decideErr != nil {
		return o, decideErr
	}
	var hit, query int64
	for _, e := range engines {
		st := e.Stats()
		hit, query = hit+st.PrefixHitTokens, query+st.PrefixQueryTokens
	}
	if query > queryAt {
		o.hitRate = float64(hit-hitAt) / float64(query-queryAt)
	}
	var good []float64
	for i, a := range load {
		if a.at < at || a.at > at+window {
			continue
		}
		o.inWindow++
		if failed[i] != nil {
			o.errs++
			if o.firstErr == nil {
				o.firstErr = failed[i]
			}
			continue
		}
		good = append(good, float64(ttft[i])/scale/float64(time.Millisecond))
	}
	slices.Sort(good)
	o.p50, o.p90, o.p99 = quantile.NearestRank(good, 0.5), quantile.NearestRank(good, 0.9), quantile.NearestRank(good, 0.99)
	o.ttft = good
	return o, nil
}

// removeGroup deletes the group berth-controller's rule removes first, reading the pods'
// deletion costs or (costs false) not, and says which and what every group cost.
func (c *cluster) removeGroup(ctx context.Context, costs bool) (victim, summary string, _ error) {
	var pods corev1.PodList
	if err := c.cl.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: scaledownServing}); err != nil {
		return "", "", err
	}
	var parts []string
	for i := range pods.Items {
		p := &pods.Items[i]
		cost := p.Annotations[corev1.PodDeletionCost]
		if cost == "" {
			cost = "0"
		}
		parts = append(parts, p.Labels[workloadv1alpha1.GroupNameLabel]+" "+cost)
		if !costs {
			delete(p.Annotations, corev1.PodDeletionCost)
		}
	}
	slices.Sort(parts)
	order := workload.ScaleDownOrder(scaledownSpec(), pods.Items)
	if len(order) == 0 {
		return "", "", fmt.Errorf("no group of %s to remove", scaledownServing)
	}
	victim = workloadv1alpha1.ServingGroupName(scaledownServing, order[0])
	err := c.cl.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(namespace), client.GracePeriodSeconds(0),
		client.MatchingLabels{workloadv1alpha1.GroupNameLabel: victim})
	return victim, strings.Join(parts, ", "), err
}
