package main

// The contention workload: a stream of random multi-role gangs asking for about twice the
// GPUs of a tainted GPU pool, arriving over a few seconds. It measures what a gang
// scheduler does when not everything fits: how much of the pool it fills, how many gangs
// get their minimum, whether any group is left partly bound, and whether groups that would
// fit are left waiting. See bench/README.md, "GPU contention".

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	volcanobatchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/bench/internal/fanout"
	"github.com/berth-sh/berth/internal/quantile"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/sim"
)

const contentionName = "contention"

// What berth-controller writes on a ServingGroup's pods (docs/controller.md). The keys come
// from the APIs that own them (Volcano's and the ModelServing's), never from pkg/plugins, so
// the bench measures any version of the scheduler that honours the same contract.
const (
	groupNameKey = volcanov1beta1.KubeGroupNameAnnotationKey // scheduling.k8s.io/group-name
	taskSpecKey  = volcanobatchv1alpha1.TaskSpecKey          // volcano.sh/task-spec
	labelName    = workloadv1alpha1.ModelServingNameLabel
	labelGroup   = workloadv1alpha1.GroupNameLabel
	labelRole    = workloadv1alpha1.RoleLabel
	labelRoleID  = workloadv1alpha1.RoleIDLabel
	labelEntry   = workloadv1alpha1.EntryLabel
)

const (
	poolKey, poolValue = "pool", "gpu"
	gpusPerNode        = 8
	// reservationKey is the PodGroup annotation in which berth-scheduler records capacity it
	// keeps free for its oldest blocked group: JSON, node name → {resource: quantity}.
	reservationKey = "gang.berth.sh/reservation"
	// A gang may ask for at most this share of the pool (all its pods), so every gang could
	// be placed on an empty pool.
	maxGangShare = 0.5
	podCPU       = "500m"
	podMemory    = "1Gi"
	warmupName   = "warmup"
)

var roleNames = []string{"prefill", "decode", "encode"}

type contentionOptions struct {
	sizes         []int
	otherNodes    int
	seed          uint64
	demand        float64
	perNode       time.Duration
	quiet         time.Duration
	settleCap     time.Duration
	partialWindow time.Duration
}

// roleSpec is one role of a gang: replicas role replicas of 1 entry + workers pods, each pod
// asking gpus GPUs; the first min replicas are the gang's minimum.
type roleSpec struct {
	name                   string
	replicas, workers, min int
	gpus                   int64
}

func (r roleSpec) task(j int) string { return fmt.Sprintf("%s-%d", r.name, j) }
func (r roleSpec) size() int         { return 1 + r.workers }

// gangSpec is one ServingGroup of the stream, created at offset at from the stream's start.
type gangSpec struct {
	name  string
	at    time.Duration
	roles []roleSpec
}

func (g gangSpec) pods() (n int) {
	for _, r := range g.roles {
		n += r.replicas * r.size()
	}
	return n
}

func (g gangSpec) minPods() (n int) {
	for _, r := range g.roles {
		n += r.min * r.size()
	}
	return n
}

func (g gangSpec) gpus() (n int64) {
	for _, r := range g.roles {
		n += int64(r.replicas*r.size()) * r.gpus
	}
	return n
}

func (g gangSpec) minGPUs() (n int64) {
	for _, r := range g.roles {
		n += int64(r.min*r.size()) * r.gpus
	}
	return n
}

// minTask is the group's minimum per role replica, as minTaskMember.
func (g gangSpec) minTask() map[string]int {
	m := map[string]int{}
	for _, r := range g.roles {
		for j := 0; j < r.min; j++ {
			m[r.task(j)] = r.size()
		}
	}
	return m
}

// newStream draws the gangs for a pool of poolGPUs: 1–3 roles, 1–3 replicas per role,
// 0–3 workers per replica, 1/2/4/8 GPUs per pod (per role), a minimum of 1..replicas
// replicas per role, no gang larger than maxGangShare of the pool, until the gangs ask for
// demand × poolGPUs. Arrival offsets are uniform over duration, in order.
func newStream(seed uint64, poolGPUs int64, demand float64, duration time.Duration) []gangSpec {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	limit := int64(maxGangShare * float64(poolGPUs))
	want := int64(demand * float64(poolGPUs))
	var out []gangSpec
	var total int64
	for total < want {
		var g gangSpec
		for _, name := range roleNames[:1+rng.IntN(3)] {
			replicas := 1 + rng.IntN(3)
			g.roles = append(g.roles, roleSpec{
				name: name, replicas: replicas, workers: rng.IntN(4), min: 1 + rng.IntN(replicas),
				gpus: []int64{1, 2, 4, 8}[rng.IntN(4)],
			})
		}
		if g.gpus() > limit {
			continue
		}
		g.name = fmt.Sprintf("gang-%03d", len(out))
		out = append(out, g)
		total += g.gpus()
	}
	at := make([]time.Duration, len(out))
	for i := range at {
		at[i] = time.Duration(rng.Int64N(int64(duration) + 1))
	}
	slices.Sort(at)
	for i := range out {
		out[i].at = at[i]
	}
	return out
}

// volcanoPodGroup is the PodGroup berth-controller writes for the gang (docs/controller.md,
// test/integration/gang createGang).
func (g gangSpec) volcanoPodGroup(ns string) *volcanov1beta1.PodGroup {
	pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: g.name}}
	pg.Spec.MinTaskMember = map[string]int32{}
	minResources := corev1.ResourceList{}
	for _, r := range g.roles {
		for j := 0; j < r.min; j++ {
			pg.Spec.MinTaskMember[r.task(j)] = int32(r.size())
			pg.Spec.MinMember += int32(r.size())
			for _, q := range []struct {
				name corev1.ResourceName
				q    resource.Quantity
			}{
				{corev1.ResourceCPU, resource.MustParse(podCPU)},
				{corev1.ResourceMemory, resource.MustParse(podMemory)},
				{sim.GPUResource, *resource.NewQuantity(r.gpus, resource.DecimalSI)},
			} {
				for k := 0; k < r.size(); k++ {
					sum := minResources[q.name]
					sum.Add(q.q)
					minResources[q.name] = sum
				}
			}
		}
		if r.workers > 0 {
			pg.Spec.SubGroupPolicy = append(pg.Spec.SubGroupPolicy, volcanov1beta1.SubGroupPolicySpec{
				Name: r.name, SubGroupSize: ptr.To(int32(r.size())), MinSubGroups: ptr.To[int32](0),
				LabelSelector:  &metav1.LabelSelector{MatchLabels: map[string]string{labelGroup: g.name, labelRole: r.name}},
				MatchLabelKeys: []string{labelRoleID},
			})
		}
	}
	pg.Spec.MinResources = &minResources
	return pg
}

// nativePodGroup is the closest kube-scheduler 1.37 gang: one minCount for the whole group,
// the number of pods in the gang's minimum. It cannot say which pods those are.
func (g gangSpec) nativePodGroup(ns string) *schedulingv1beta1.PodGroup {
	return &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: g.name},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(g.minPods())}}},
	}
}

// podsFor returns the gang's pods for a mode: every pod selects the GPU pool and tolerates
// its taint and carries berth-controller's labels; berth's also the gang annotations,
// native's the schedulingGroup.
func (g gangSpec) podsFor(ns string, m mode) []*corev1.Pod {
	var pods []*corev1.Pod
	for _, r := range g.roles {
		gpus := *resource.NewQuantity(r.gpus, resource.DecimalSI)
		for j := 0; j < r.replicas; j++ {
			task := r.task(j)
			for k := 0; k < r.size(); k++ {
				labels := map[string]string{labelName: contentionName, labelGroup: g.name, labelRole: r.name, labelRoleID: task}
				if k == 0 {
					labels[labelEntry] = "true"
				}
				p := poolPod(ns, fmt.Sprintf("%s-%s-%d", g.name, task, k), labels, gpus, m, g.name)
				if m == berth {
					p.Annotations[taskSpecKey] = task
				}
				pods = append(pods, p)
			}
		}
	}
	return pods
}

// poolPod is a pod of a gang on the GPU pool: it selects the pool and tolerates its taint,
// asks for gpus, and joins its group the mode's way (berth: Volcano's annotation; native:
// schedulingGroup).
func poolPod(ns, name string, labels map[string]string, gpus resource.Quantity, m mode, group string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{poolKey: poolValue},
			Tolerations:  []corev1.Toleration{{Key: poolKey, Operator: corev1.TolerationOpEqual, Value: poolValue, Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{Name: "engine", Image: "vllm/vllm-openai:v0.11.0",
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(podCPU),
						corev1.ResourceMemory: resource.MustParse(podMemory), sim.GPUResource: gpus},
					Limits: corev1.ResourceList{sim.GPUResource: gpus},
				}}},
		},
	}
	switch m {
	case berth:
		p.Spec.SchedulerName = workloadv1alpha1.BerthSchedulerName
		p.Annotations = map[string]string{groupNameKey: group}
	case native:
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
	}
	return p
}

func poolNodeName(i int) string { return fmt.Sprintf("gpu-%03d", i) }

// outsideValue labels GPU nodes beside the pool that the gangs may not use: a scheduler
// that counts capacity without node eligibility sees twice the GPUs there are.
const outsideValue = "outside"

// createPool makes n GPU nodes: 8 H100s, 64 CPU, 512Gi, labelled pool=gpu and tainted
// pool=gpu:NoSchedule; and as many A100 nodes labelled pool=outside, untainted, which the
// gangs do not select (the shape of the sandbox run in which berth-scheduler livelocked).
func (b *bench) createPool(ctx context.Context, n int) error {
	h100, a100 := sim.GPUProducts["h100"], sim.GPUProducts["a100"]
	shape := sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: gpusPerNode,
		GPUProduct: h100.Product, GPUMemoryMiB: h100.MemoryMiB, GPUFamily: h100.Family}
	outside := sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: gpusPerNode,
		GPUProduct: a100.Product, GPUMemoryMiB: a100.MemoryMiB, GPUFamily: a100.Family}
	return fanout.Run(2*n, 16, func(i int) error {
		node := sim.NewNode(poolNodeName(i), shape, map[string]string{poolKey: poolValue})
		node.Spec.Taints = []corev1.Taint{{Key: poolKey, Value: poolValue, Effect: corev1.TaintEffectNoSchedule}}
		if i >= n {
			node = sim.NewNode(fmt.Sprintf("gpux-%03d", i-n), outside, map[string]string{poolKey: outsideValue})
		}
		_, err := b.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		return err
	})
}

func (b *bench) deletePool(ctx context.Context) error {
	sel := metav1.ListOptions{LabelSelector: poolKey + " in (" + poolValue + "," + outsideValue + ")"}
	if err := b.kube.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil {
		return err
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		nodes, err := b.kube.CoreV1().Nodes().List(ctx, sel)
		if err == nil && len(nodes.Items) == 0 {
			return nil
		}
	}
	return fmt.Errorf("GPU pool nodes still there a minute after deletion")
}

// contentionResult is what one run of one mode measured.
type contentionResult struct {
	utilStop, utilSettled float64
	minPlaced, created    int
	partial               int // groups seen with bound pods that missed the per-role-replica minimum
	partialByCount        int // of those, groups with fewer bound pods than the minimum's pod count
	everPartial           int // groups seen partly bound for any moment, however short
	longestPartial        time.Duration
	settle                time.Duration
	capped                bool
	starved               int
	reservedGPUs          int64
	reservers             int
	boundPods, pods       int
	took                  time.Duration
}

// contention runs the contention workload for every pool size, runs times per mode, and
// returns its markdown table and every run's figures.
func (b *bench) contention(ctx context.Context, c contentionOptions, modes []mode, runs int) (string, *contentionFigures, error) {
	var cm []mode
	for _, m := range modes {
		if m.gangs() {
			cm = append(cm, m)
		}
	}
	if len(cm) == 0 {
		return "", nil, fmt.Errorf("contention: needs mode native or berth (%s and %s have no gangs)", berthNoGang, defaultNoGang)
	}
	figs := &contentionFigures{sizes: c.sizes, modes: cm, results: map[int]map[mode][]contentionResult{}}
	var rows []string
	for _, n := range c.sizes {
		poolGPUs := int64(n * gpusPerNode)
		duration := time.Duration(n) * c.perNode
		stream := newStream(c.seed, poolGPUs, c.demand, duration)
		var pods int
		var gpus, minGPUs int64
		for _, g := range stream {
			pods += g.pods()
			gpus += g.gpus()
			minGPUs += g.minGPUs()
		}
		fmt.Fprintf(os.Stderr, "contention: pool of %d nodes (%d GPUs); seed %d: %d gangs, %d pods asking %d GPUs (their minimums %d) over %s\n",
			n, poolGPUs, c.seed, len(stream), pods, gpus, minGPUs, duration)
		if err := b.createPool(ctx, n); err != nil {
			return "", nil, err
		}
		results := map[mode][]contentionResult{}
		for r := 0; r < runs; r++ {
			for _, m := range rotate(cm, r) {
				res, err := b.contend(ctx, c, n, stream, m)
				if err != nil {
					return "", nil, err
				}
				results[m] = append(results[m], res)
				fmt.Fprintf(os.Stderr, "contention %d nodes run %d/%d %-6s util stop %5.1f%% settled %5.1f%%, minimum placed %d/%d, partial %d (by pod count %d; %d groups partly bound for a moment, longest %s before the minimum completed), settle %s%s, starved %d, reserved %d GPUs for %d groups, %d/%d pods bound, took %s\n",
					n, r+1, runs, m, 100*res.utilStop, 100*res.utilSettled, res.minPlaced, res.created, res.partial, res.partialByCount, res.everPartial, res.longestPartial.Round(time.Millisecond),
					res.settle.Round(100*time.Millisecond), map[bool]string{true: " (capped)"}[res.capped], res.starved,
					res.reservedGPUs, res.reservers, res.boundPods, res.pods, res.took.Round(time.Second))
			}
		}
		if err := b.deletePool(ctx); err != nil {
			return "", nil, err
		}
		figs.results[n] = results
		nativeUtil := quantile.Median(field(results[native], func(r contentionResult) float64 { return r.utilSettled }))
		for _, m := range cm {
			rows = append(rows, contentionRow(n, m, len(stream), pods, gpus, results[m], nativeUtil))
		}
	}
	var sizes []string
	for _, n := range c.sizes {
		sizes = append(sizes, fmt.Sprint(n))
	}
	header := fmt.Sprintf("GPU contention, pools of %s nodes × %d `nvidia.com/gpu` (tainted `pool=gpu:NoSchedule`) beside as many GPU nodes the gangs do not select and %d CPU nodes; "+
		"stream seed %d, asking %.1f× the pool's GPUs over %s per pool node; median of %s per mode "+
		"(utilisation settled: median and range; partial groups: the most in any run).\n\n",
		strings.Join(sizes, ", "), gpusPerNode, c.otherNodes, c.seed, c.demand, c.perNode, plural(runs, "run"))
	table := "| pool | mode | gangs (pods, GPUs asked) | GPU util at stream stop | GPU util settled | gangs with minimum / created | partial groups seen | time to settle | starved | util berth/native |\n" +
		"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n" + strings.Join(rows, "\n") + "\n"
	notes := "\n" +
		"- native has one `minCount` per PodGroup (here the number of pods in the gang's minimum) and cannot express per-role-replica minimums: " +
		"it may bind that many pods from any role replicas. \"Gangs with minimum\" and \"partial\" use the per-role-replica minimum " +
		"(every pod of each of the first min replicas of each role bound) for both modes; \"by pod count\" counts groups with fewer bound pods than minCount.\n" +
		fmt.Sprintf("- partial: a group with pods bound but its minimum not met, unchanged for %s (binding settled), seen by a pod watch over the whole run.\n", c.partialWindow) +
		fmt.Sprintf("- settle: from the last pod created until bound pods stop changing for %s, at most %s.\n", c.quiet, c.settleCap) +
		"- starved: groups without their minimum whose missing minimum pods would fit the pool's free GPUs at the end (first-fit-decreasing over role replicas), " +
		"after subtracting capacity berth reserves (`" + reservationKey + "`) and not counting the group it is reserved for; " +
		"the reservation is trusted only when one group holds it and it keeps no more GPUs than that group's minimum misses.\n"
	return header + table + notes, figs, nil
}

func field(rs []contentionResult, f func(contentionResult) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

func contentionRow(n int, m mode, gangs, pods int, gpus int64, rs []contentionResult, nativeUtil float64) string {
	utilStop := quantile.Median(field(rs, func(r contentionResult) float64 { return r.utilStop }))
	settledAll := field(rs, func(r contentionResult) float64 { return r.utilSettled })
	utilSettled := quantile.Median(settledAll)
	settledCell := fmt.Sprintf("%.1f%%", 100*utilSettled)
	if len(rs) > 1 {
		settledCell += fmt.Sprintf(" (%.1f–%.1f%%)", 100*slices.Min(settledAll), 100*slices.Max(settledAll))
	}
	minPlaced := quantile.Median(field(rs, func(r contentionResult) float64 { return float64(r.minPlaced) }))
	partial, byCount, capped := 0, 0, 0
	for _, r := range rs {
		partial = max(partial, r.partial)
		byCount = max(byCount, r.partialByCount)
		if r.capped {
			capped++
		}
	}
	partialCell := fmt.Sprint(partial)
	if m == native {
		partialCell += fmt.Sprintf(" (by pod count %d)", byCount)
	}
	settle := time.Duration(quantile.Median(field(rs, func(r contentionResult) float64 { return float64(r.settle) })))
	settleCell := fmt.Sprintf("%.1fs", settle.Seconds())
	if capped > 0 {
		settleCell += fmt.Sprintf(" (capped in %d/%d)", capped, len(rs))
	}
	starved := quantile.Median(field(rs, func(r contentionResult) float64 { return float64(r.starved) }))
	ratioCell := "–"
	if m == berth && nativeUtil > 0 {
		ratioCell = fmt.Sprintf("%.2f", utilSettled/nativeUtil)
	}
	return fmt.Sprintf("| %d × %d GPUs | %s | %d (%d, %d) | %.1f%% | %s | %s / %d | %s | %s | %s | %s |",
		n, gpusPerNode, m, gangs, pods, gpus, 100*utilStop, settledCell, trim(minPlaced), gangs, partialCell, settleCell, trim(starved), ratioCell)
}

// trim formats a median of counts: whole unless it fell between two runs.
func trim(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprint(int64(v))
	}
	return fmt.Sprintf("%.1f", v)
}

// contend runs the stream once under one mode.
func (b *bench) contend(ctx context.Context, c contentionOptions, n int, stream []gangSpec, m mode) (res contentionResult, err error) {
	began := time.Now()
	b.runs++
	ns := fmt.Sprintf("contention-%s-%d", m, b.runs)
	if _, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return res, err
	}
	stopScheduler, schedDone, err := b.startScheduler(ctx, m)
	if err != nil {
		return res, err
	}
	tr := newTracker(stream, c.partialWindow)
	factory := informers.NewSharedInformerFactoryWithOptions(b.kube, 0, informers.WithNamespace(ns))
	observe := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			tr.observe(p, time.Now())
		}
	}
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: observe, UpdateFunc: func(_, n any) { observe(n) },
	})
	infCtx, stopInformer := context.WithCancel(ctx)
	defer func() {
		stopInformer()
		stopScheduler()
		cleanup := time.Now()
		if cerr := b.cleanupContention(ctx, ns); cerr != nil && err == nil {
			err = cerr
		}
		fmt.Fprintf(os.Stderr, "  cleanup %s\n", time.Since(cleanup).Round(time.Second))
	}()
	factory.Start(infCtx.Done())
	factory.WaitForCacheSync(infCtx.Done())
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-infCtx.Done():
				return
			case now := <-t.C:
				tr.checkPartial(now)
			}
		}
	}()

	// Warm up on a CPU node: the scheduler has synced its informers once it binds a pod.
	if _, err := b.kube.CoreV1().Pods(ns).Create(ctx, b.pod(ns, m, warmupName, ""), metav1.CreateOptions{}); err != nil {
		return res, err
	}
	select {
	case <-tr.warm:
	case <-time.After(2 * time.Minute):
		return res, fmt.Errorf("contention/%s: warm-up pod not bound after 2m", m)
	case err := <-schedDone:
		return res, fmt.Errorf("contention/%s: scheduler exited: %v", m, err)
	}

	fmt.Fprintf(os.Stderr, "  contention %d nodes/%s: scheduler ready, streaming %d gangs\n", n, m, len(stream))
	start := time.Now()
	for _, g := range stream {
		if d := time.Until(start.Add(g.at)); d > 0 {
			time.Sleep(d)
		}
		switch m {
		case berth:
			_, err = b.vc.SchedulingV1beta1().PodGroups(ns).Create(ctx, g.volcanoPodGroup(ns), metav1.CreateOptions{})
		case native:
			_, err = b.kube.SchedulingV1beta1().PodGroups(ns).Create(ctx, g.nativePodGroup(ns), metav1.CreateOptions{})
		}
		if err != nil {
			return res, err
		}
		tr.created(g.name)
		pods := g.podsFor(ns, m)
		if err := fanout.Run(len(pods), 8, func(i int) error {
			_, err := b.kube.CoreV1().Pods(ns).Create(ctx, pods[i], metav1.CreateOptions{})
			return err
		}); err != nil {
			return res, err
		}
	}
	stop := time.Now()
	if late := stop.Sub(start) - stream[len(stream)-1].at; late > time.Second {
		fmt.Fprintf(os.Stderr, "  the stream ran %s behind its schedule (apiserver too slow)\n", late.Round(100*time.Millisecond))
	}
	poolGPUs := int64(n * gpusPerNode)
	res.utilStop = float64(tr.snapshot().usedGPUs) / float64(poolGPUs)

	// Settle: until bound pods have not changed for c.quiet, at most c.settleCap.
	for {
		select {
		case err := <-schedDone:
			return res, fmt.Errorf("contention/%s: scheduler exited: %v", m, err)
		case <-time.After(100 * time.Millisecond):
		}
		now := time.Now()
		last := tr.snapshot().lastBind
		res.settle = max(0, last.Sub(stop))
		if now.Sub(maxTime(last, stop)) >= c.quiet {
			break
		}
		if now.Sub(stop) >= c.settleCap {
			res.capped = true
			res.settle = c.settleCap
			break
		}
	}
	tr.checkPartial(time.Now())
	s := tr.snapshot()
	res.utilSettled = float64(s.usedGPUs) / float64(poolGPUs)
	res.minPlaced, res.created = s.minPlaced, s.created
	res.partial, res.partialByCount = s.partial, s.partialByCount
	res.everPartial, res.longestPartial = s.everPartial, s.longestPartial
	res.boundPods, res.pods = s.boundPods, s.pods
	if err := b.crossCheck(ctx, ns, s); err != nil {
		fmt.Fprintf(os.Stderr, "  contention %d nodes/%s: the watch and the apiserver disagree: %v\n", n, m, err)
	}

	// What berth keeps free for its oldest blocked group.
	reserved := map[string]int64{}
	holders := map[string]bool{}
	why := map[string]string{}
	if m == berth {
		pgs, err := b.vc.SchedulingV1beta1().PodGroups(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return res, err
		}
		for _, pg := range pgs.Items {
			for _, c := range pg.Status.Conditions {
				if c.Type == volcanov1beta1.PodGroupUnschedulableType && c.Status == corev1.ConditionTrue {
					why[pg.Name] = c.Message
				}
			}
			raw := pg.Annotations[reservationKey]
			if raw == "" {
				continue
			}
			perNode, err := parseReservation(raw)
			if err != nil {
				return res, fmt.Errorf("PodGroup %s: %s: %w", pg.Name, reservationKey, err)
			}
			holders[pg.Name] = true
			res.reservers++
			for node, q := range perNode {
				reserved[node] += q
				res.reservedGPUs += q
			}
		}
	}
	var pool []string
	for i := 0; i < n; i++ {
		pool = append(pool, poolNodeName(i))
	}
	var starved []string
	res.starved, starved = tr.starved(pool, reserved, holders)
	if len(starved) > 0 {
		fmt.Fprintf(os.Stderr, "  contention %d nodes/%s: waiting though their minimum fits (%d GPUs free): %s\n",
			n, m, poolGPUs-s.usedGPUs, strings.Join(starved, "; "))
		for _, g := range starved {
			name, _, _ := strings.Cut(g, " ")
			if why[name] != "" {
				fmt.Fprintf(os.Stderr, "    %s: %s\n", name, why[name])
			}
		}
	}
	res.took = time.Since(began)
	return res, nil
}

// crossCheck compares what the watch saw with a list of the pods, and checks that no node
// holds more GPUs than it has.
func (b *bench) crossCheck(ctx context.Context, ns string, s snapshot) error {
	pods, err := b.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	perNode := map[string]int64{}
	var gpus int64
	bound := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.Name == warmupName {
			continue
		}
		bound++
		for _, c := range p.Spec.Containers {
			q := c.Resources.Requests[sim.GPUResource]
			gpus += q.Value()
			perNode[p.Spec.NodeName] += q.Value()
		}
	}
	if bound != s.boundPods || gpus != s.usedGPUs {
		return fmt.Errorf("listed %d bound pods with %d GPUs, watched %d with %d", bound, gpus, s.boundPods, s.usedGPUs)
	}
	for node, n := range perNode {
		if n > gpusPerNode {
			return fmt.Errorf("node %s holds %d GPUs", node, n)
		}
	}
	return nil
}

// parseReservation reads the reservation annotation and returns GPUs per node.
func parseReservation(raw string) (map[string]int64, error) {
	var perNode map[string]corev1.ResourceList
	if err := json.Unmarshal([]byte(raw), &perNode); err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for node, rl := range perNode {
		if q, ok := rl[sim.GPUResource]; ok {
			out[node] += q.Value()
		}
	}
	return out, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// cleanupContention deletes a run's pods and PodGroups and waits until no pod is left, so
// the next run starts on an empty pool.
func (b *bench) cleanupContention(ctx context.Context, ns string) error {
	zero := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	if err := b.kube.CoreV1().Pods(ns).DeleteCollection(ctx, zero, metav1.ListOptions{}); err != nil {
		return err
	}
	_ = b.vc.SchedulingV1beta1().PodGroups(ns).DeleteCollection(ctx, zero, metav1.ListOptions{})
	_ = b.kube.SchedulingV1beta1().PodGroups(ns).DeleteCollection(ctx, zero, metav1.ListOptions{})
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		pods, err := b.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err == nil && len(pods.Items) == 0 {
			return nil
		}
	}
	return fmt.Errorf("%s: pods still there a minute after deletion", ns)
}

// tracker follows a run's pods from a watch: which are bound, where, and what that means
// for each group.
type tracker struct {
	mu       sync.Mutex
	window   time.Duration
	groups   map[string]*groupTrack
	order    []string
	bound    map[string]bool
	nodeGPUs map[string]int64
	lastBind time.Time
	warm     chan struct{}
	warmOnce sync.Once
}

type groupTrack struct {
	spec       *gangSpec
	minTask    map[string]int
	minMember  int
	created    bool
	boundTask  map[string]int
	bound      int
	lastChange time.Time
	// partial and partialByCount latch once the group has stayed partly bound for the window.
	partial, partialByCount bool
	// Any moment at all with pods bound and the minimum not: since when, whether ever, and
	// the longest such stretch that ended (a gang's pods bind one API call at a time).
	partialFrom    time.Time
	everPartial    bool
	longestPartial time.Duration
}

func newTracker(stream []gangSpec, window time.Duration) *tracker {
	t := &tracker{window: window, groups: map[string]*groupTrack{}, bound: map[string]bool{},
		nodeGPUs: map[string]int64{}, warm: make(chan struct{})}
	for i := range stream {
		g := &stream[i]
		t.groups[g.name] = &groupTrack{spec: g, minTask: g.minTask(), minMember: g.minPods(), boundTask: map[string]int{}}
		t.order = append(t.order, g.name)
	}
	return t
}

func (t *tracker) created(group string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.groups[group].created = true
}

// observe records a pod the first time it is seen bound. Bound pods stay bound for the run
// (nothing deletes or preempts them), so a pod is counted once.
func (t *tracker) observe(p *corev1.Pod, now time.Time) {
	if p.Spec.NodeName == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.bound[p.Name] {
		return
	}
	t.bound[p.Name] = true
	if p.Name == warmupName {
		t.warmOnce.Do(func() { close(t.warm) })
		return
	}
	t.lastBind = now
	for _, c := range p.Spec.Containers {
		if q, ok := c.Resources.Requests[sim.GPUResource]; ok {
			t.nodeGPUs[p.Spec.NodeName] += q.Value()
		}
	}
	if g := t.groups[p.Labels[labelGroup]]; g != nil {
		g.bound++
		g.boundTask[p.Labels[labelRoleID]]++
		g.lastChange = now
		switch {
		case !g.minMet() && g.partialFrom.IsZero():
			g.partialFrom, g.everPartial = now, true
		case g.minMet() && !g.partialFrom.IsZero():
			g.longestPartial = max(g.longestPartial, now.Sub(g.partialFrom))
			g.partialFrom = time.Time{}
		}
	}
}

// minMet says whether every role replica of the group's minimum is bound whole.
func (g *groupTrack) minMet() bool {
	if g.bound < g.minMember {
		return false
	}
	for task, n := range g.minTask {
		if g.boundTask[task] < n {
			return false
		}
	}
	return true
}

// checkPartial latches groups that have had pods bound without their minimum, unchanged
// for the window.
func (t *tracker) checkPartial(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, g := range t.groups {
		if g.bound == 0 || now.Sub(g.lastChange) < t.window {
			continue
		}
		if !g.minMet() {
			g.partial = true
		}
		if g.bound < g.minMember {
			g.partialByCount = true
		}
	}
}

type snapshot struct {
	// everPartial counts groups seen for any moment with pods bound and the minimum not;
	// longestPartial is the longest such moment that ended with the minimum bound.
	everPartial             int
	longestPartial          time.Duration
	usedGPUs                int64
	lastBind                time.Time
	minPlaced, created      int
	partial, partialByCount int
	boundPods, pods         int
}

func (t *tracker) snapshot() snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := snapshot{lastBind: t.lastBind}
	for _, v := range t.nodeGPUs {
		s.usedGPUs += v
	}
	for _, g := range t.groups {
		if g.created {
			s.created++
		}
		if g.minMet() {
			s.minPlaced++
		}
		if g.partial {
			s.partial++
		}
		if g.partialByCount {
			s.partialByCount++
		}
		if g.everPartial {
			s.everPartial++
		}
		s.longestPartial = max(s.longestPartial, g.longestPartial)
		s.boundPods += g.bound
		s.pods += g.spec.pods()
	}
	return s
}

// starved counts groups without their minimum whose missing minimum pods would fit the
// pool's free GPUs (less what is reserved), first-fit-decreasing over role replicas, each
// group on its own. Groups holding a reservation are not counted. It also describes each
// starved group's missing minimum. The scheduler's reservation is trusted only as far as
// it is bounded: one reserving group, keeping no more GPUs than its minimum misses.
// Otherwise nothing is subtracted and no group is exempt, so a scheduler cannot hide idle
// GPUs by reserving them.
func (t *tracker) starved(pool []string, reserved map[string]int64, holders map[string]bool) (int, []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var desc []string
	var kept int64
	for _, q := range reserved {
		kept += q
	}
	var missing int64
	for name := range holders {
		if g := t.groups[name]; g != nil {
			for _, u := range g.missingUnits() {
				missing += int64(u.pods) * u.gpus
			}
		}
	}
	if len(holders) > 1 || kept > missing {
		desc = append(desc, fmt.Sprintf("reservation not trusted (%d groups reserve %d GPUs, their minimum misses %d): not subtracted", len(holders), kept, missing))
		reserved, holders = nil, nil
	}
	free := make([]int64, len(pool))
	for i, node := range pool {
		free[i] = max(0, gpusPerNode-t.nodeGPUs[node]-reserved[node])
	}
	n := 0
	for _, name := range t.order {
		g := t.groups[name]
		if !g.created || g.minMet() || holders[name] {
			continue
		}
		units := g.missingUnits()
		if fits(slices.Clone(free), units) {
			n++
			var parts []string
			for _, u := range units {
				parts = append(parts, fmt.Sprintf("%d×%d", u.pods, u.gpus))
			}
			desc = append(desc, fmt.Sprintf("%s needs %s GPUs", name, strings.Join(parts, "+")))
		}
	}
	return n, desc
}

// unit is a role replica's pods still to place, each asking gpus.
type unit struct {
	pods int
	gpus int64
}

// missingUnits returns the group's minimum role replicas that are not yet bound whole, as
// the pods each still needs.
func (g *groupTrack) missingUnits() []unit {
	var out []unit
	for _, r := range g.spec.roles {
		for j := 0; j < r.min; j++ {
			if missing := r.size() - g.boundTask[r.task(j)]; missing > 0 {
				out = append(out, unit{pods: missing, gpus: r.gpus})
			}
		}
	}
	return out
}

// fits places the units first-fit-decreasing (largest unit first, each pod on the first
// node with room) on free, which it consumes.
func fits(free []int64, units []unit) bool {
	sort.SliceStable(units, func(i, j int) bool {
		a, b := int64(units[i].pods)*units[i].gpus, int64(units[j].pods)*units[j].gpus
		if a != b {
			return a > b
		}
		return units[i].gpus > units[j].gpus
	})
	for _, u := range units {
		for k := 0; k < u.pods; k++ {
			placed := false
			for i := range free {
				if free[i] >= u.gpus {
					free[i] -= u.gpus
					placed = true
					break
				}
			}
			if !placed {
				return false
			}
		}
	}
	return true
}
