package main

// The preemption workload: a GPU pool full of low-priority gangs, then one high-priority
// gang that fits only if some of them go. It measures how long until the preemptor is
// bound, how many gangs were evicted against the fewest that would have sufficed, and
// whether any gang lost only part of its pods.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/bench/internal/fanout"
	"github.com/berth-sh/berth/internal/quantile"
	"github.com/berth-sh/berth/pkg/sim"
)

const preemptionName = "preemption"

// PriorityClasses of the workload.
const (
	lowClass, highClass = "gangbench-low", "gangbench-high"
)

type preemptionOptions struct {
	sizes   []int
	seed    uint64
	share   float64       // the preemptor's whole-node pods, as a share of the pool
	timeout time.Duration // how long a run waits for the preemptor
}

// victimSizes draws the low gangs: whole-node 8-GPU pods, 1-4 per gang, filling n nodes
// exactly.
func victimSizes(seed uint64, n int) []int {
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	var out []int
	for left := n; left > 0; {
		k := min(left, 1+rng.IntN(4))
		out = append(out, k)
		left -= k
	}
	return out
}

// fewestCovering is the fewest gangs whose nodes add up to need: with every pod a whole
// node, the largest gangs first is optimal.
func fewestCovering(sizes []int, need int) int {
	s := slices.Clone(sizes)
	sort.Sort(sort.Reverse(sort.IntSlice(s)))
	n := 0
	for _, k := range s {
		if need <= 0 {
			break
		}
		need -= k
		n++
	}
	return n
}

type preemptionResult struct {
	bound   bool
	elapsed time.Duration
	evicted int // gangs that lost a pod
	pods    int // pods evicted
	partial int // gangs that lost some pods but kept others
}

func (b *bench) preemption(ctx context.Context, o preemptionOptions, modes []mode, runs int) (string, *preemptionFigures, error) {
	for _, pc := range []schedulingv1.PriorityClass{
		{ObjectMeta: metav1.ObjectMeta{Name: lowClass}, Value: 100},
		{ObjectMeta: metav1.ObjectMeta{Name: highClass}, Value: 1000},
	} {
		if _, err := b.kube.SchedulingV1().PriorityClasses().Create(ctx, &pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", nil, err
		}
	}
	kubelet := sim.NewKubelet(b.kube, 0)
	kctx, stopKubelet := context.WithCancel(ctx)
	defer stopKubelet()
	go kubelet.Run(kctx)

	figs := &preemptionFigures{sizes: o.sizes, fewest: map[int]int{}, results: map[int]map[mode][]preemptionResult{}}
	for _, m := range modes {
		if m.gangs() {
			figs.modes = append(figs.modes, m)
		}
	}
	var rows []string
	for _, n := range o.sizes {
		if err := b.createPool(ctx, n); err != nil {
			return "", nil, err
		}
		victims := victimSizes(o.seed, n)
		need := max(1, int(o.share*float64(n)))
		fewest := fewestCovering(victims, need)
		results := map[mode][]preemptionResult{}
		for r := 0; r < runs; r++ {
			for _, m := range rotate(modes, r) {
				if !m.gangs() {
					continue
				}
				res, err := b.preempt(ctx, victims, need, m, o.timeout)
				if err != nil {
					return "", nil, err
				}
				results[m] = append(results[m], res)
				fmt.Fprintf(os.Stderr, "preemption %d nodes run %d/%d %-6s bound=%v in %s, %d gangs (%d pods) evicted, fewest %d, %d partly\n",
					n, r+1, runs, m, res.bound, res.elapsed.Round(time.Millisecond), res.evicted, res.pods, fewest, res.partial)
			}
		}
		figs.fewest[n], figs.results[n] = fewest, results
		for _, m := range modes {
			if rs := results[m]; len(rs) > 0 {
				rows = append(rows, preemptionRow(n, len(victims), need, fewest, m, rs))
			}
		}
		if err := b.deletePool(ctx); err != nil {
			return "", nil, err
		}
	}
	return fmt.Sprintf("Preemption: a pool of N 8-GPU nodes full of low-priority gangs (1-4 whole-node pods each, seed %d), then one high-priority gang of whole-node pods (%.0f%% of the pool). Medians of %s per mode.\n\n", o.seed, 100*o.share, plural(runs, "run")) +
		"| pool | mode | low gangs | preemptor pods | bound | time to bound | gangs evicted | fewest sufficient | pods evicted | partly evicted gangs |\n" +
		"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n" + strings.Join(rows, "\n") + "\n", figs, nil
}

func preemptionRow(n, gangs, need, fewest int, m mode, rs []preemptionResult) string {
	bound := 0
	var times, evicted, pods []float64
	partial := 0
	for _, r := range rs {
		if r.bound {
			bound++
			times = append(times, r.elapsed.Seconds())
		}
		evicted = append(evicted, float64(r.evicted))
		pods = append(pods, float64(r.pods))
		partial = max(partial, r.partial)
	}
	t := "–"
	if len(times) > 0 {
		t = fmt.Sprintf("%.2fs", quantile.Median(times))
	}
	return fmt.Sprintf("| %d × 8 GPUs | %s | %d | %d | %d/%d | %s | %s | %d | %s | %d |", n, m, gangs, need, bound, len(rs), t,
		trim(quantile.Median(evicted)), fewest, trim(quantile.Median(pods)), partial)
}

// preempt runs one mode once: fill the pool, wait until every low gang is bound, create
// the preemptor and wait for it.
func (b *bench) preempt(ctx context.Context, victims []int, need int, m mode, timeout time.Duration) (res preemptionResult, err error) {
	b.runs++
	ns := fmt.Sprintf("preempt-%s-%d", m, b.runs)
	if _, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return res, err
	}
	stop, schedDone, err := b.startScheduler(ctx, m)
	if err != nil {
		return res, err
	}
	defer func() {
		stop()
		if cerr := b.cleanupContention(ctx, ns); cerr != nil && err == nil {
			err = cerr
		}
	}()

	// Follow the run's pods: bound ones, and which gangs lose pods.
	var mu sync.Mutex
	boundPods := map[string]bool{}
	members := map[string]map[string]bool{} // gang -> pods bound before the preemptor came
	gone := map[string]map[string]bool{}    // gang -> pods evicted
	var preemptorCreated bool
	observe := func(obj any, deleted bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		g := p.Labels[labelGroup]
		mu.Lock()
		defer mu.Unlock()
		if p.Spec.NodeName != "" && !deleted && p.DeletionTimestamp == nil {
			boundPods[p.Name] = true
			if !preemptorCreated {
				if members[g] == nil {
					members[g] = map[string]bool{}
				}
				members[g][p.Name] = true
			}
		}
		if (deleted || p.DeletionTimestamp != nil) && members[g][p.Name] {
			if gone[g] == nil {
				gone[g] = map[string]bool{}
			}
			gone[g][p.Name] = true
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(b.kube, 0, informers.WithNamespace(ns))
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { observe(obj, false) },
		UpdateFunc: func(_, obj any) { observe(obj, false) },
		DeleteFunc: func(obj any) { observe(obj, true) },
	})
	infCtx, stopInformer := context.WithCancel(ctx)
	defer stopInformer()
	factory.Start(infCtx.Done())
	factory.WaitForCacheSync(infCtx.Done())
	countBound := func(prefix string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for name := range boundPods {
			if strings.HasPrefix(name, prefix) {
				n++
			}
		}
		return n
	}

	total := 0
	for i, k := range victims {
		if err := b.createPreemptionGang(ctx, ns, m, fmt.Sprintf("low-%d", i), lowClass, k); err != nil {
			return res, err
		}
		total += k
	}
	if err := waitFor(ctx, 3*time.Minute, schedDone, func() bool { return countBound("low-") == total }); err != nil {
		return res, fmt.Errorf("%s: the low gangs were not all bound: %d of %d pods: %w", m, countBound("low-"), total, err)
	}
	mu.Lock()
	preemptorCreated = true
	mu.Unlock()

	start := time.Now()
	if err := b.createPreemptionGang(ctx, ns, m, "high", highClass, need); err != nil {
		return res, err
	}
	if err := waitFor(ctx, timeout, schedDone, func() bool { return countBound("high-") == need }); err == nil {
		res.bound, res.elapsed = true, time.Since(start)
	}
	time.Sleep(2 * time.Second) // evictions still on their way are counted
	mu.Lock()
	defer mu.Unlock()
	for g, pods := range gone {
		res.evicted++
		res.pods += len(pods)
		if len(pods) < len(members[g]) {
			res.partial++
		}
	}
	return res, nil
}

// createPreemptionGang writes a gang of k whole-node 8-GPU pods at a priority class: a
// Volcano PodGroup for berth, a scheduling.k8s.io/v1beta1 PodGroup for native.
func (b *bench) createPreemptionGang(ctx context.Context, ns string, m mode, name, class string, k int) error {
	switch m {
	case berth:
		pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: volcanov1beta1.PodGroupSpec{MinMember: int32(k), PriorityClassName: class}}
		if _, err := b.vc.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
			return err
		}
	case native:
		pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: schedulingv1beta1.PodGroupSpec{PriorityClassName: class, SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
				Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(k)}}}}
		if _, err := b.kube.SchedulingV1beta1().PodGroups(ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	gpus := *resource.NewQuantity(gpusPerNode, resource.DecimalSI)
	return fanout.Run(k, 8, func(i int) error {
		p := poolPod(ns, fmt.Sprintf("%s-%d", name, i), map[string]string{labelGroup: name}, gpus, m, name)
		p.Spec.PriorityClassName = class
		_, err := b.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
}

// waitFor polls cond until it holds, the timeout passes or the scheduler exits.
func waitFor(ctx context.Context, timeout time.Duration, schedDone <-chan error, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		select {
		case err := <-schedDone:
			return fmt.Errorf("scheduler exited: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
