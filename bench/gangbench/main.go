// Command gangbench measures gang scheduling throughput on the in-process control plane,
// reproducing the upstream scheduler_perf workloads in
// k8s.io/kubernetes v1.37.1 test/integration/scheduler_perf/podgroup/gangscheduling
// (5000 nodes; 1000, 2000 and 3000 gangs of 3 pods; 3 gangs of 1000 pods).
//
// Each workload runs in four modes on the same nodes with the same pods:
//   - native:         kube-scheduler 1.37's GangScheduling plugin (GenericWorkload gate) on
//     scheduling.k8s.io/v1beta1 PodGroups;
//   - berth:          berth-scheduler (manifests/scheduler/config.yaml) on Volcano PodGroups;
//   - berth-nogang:   berth-scheduler's same profile, the same pods without PodGroups: the
//     ceiling, what Berth's own scheduler does when it has no gang to hold together;
//   - default-nogang: kube-scheduler's default profile, the same pods without any gang.
//
// Throughput is pods bound per second, from the first pod created to the last pod bound,
// with the scheduler already running and synced. Every mode shares the machine, the
// apiserver and the node set, and every scheduler runs at the same client QPS and burst
// (inprocess.BenchRate), so their ratios are what to read. Each workload runs -runs
// times per mode (modes interleaved, the first mode rotating from run to run); the table
// shows the median per mode, the ratios of the medians and the range of the per-run
// berth/native ratio.
//
// -workloads contention (or -contention) adds a second workload, GPU contention: a stream
// of random multi-role gangs asking for about twice a GPU pool, with berth's Volcano
// PodGroups against native gangs (contention.go; bench/README.md, "GPU contention").
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/berth-sh/berth/bench/internal/fanout"
	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/inprocess"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/scheduler"
	"github.com/berth-sh/berth/pkg/sim"
)

type workload struct {
	name         string
	gangs        int
	podsPerGroup int
}

var workloads = []workload{
	{"5000Nodes_1000Gangs_3000Pods", 1000, 3},
	{"5000Nodes_2000Gangs_6000Pods", 2000, 3},
	{"5000Nodes_3000Gangs_9000Pods", 3000, 3},
	{"5000Nodes_3Gangs_3000Pods_1000PerGroup", 3, 1000},
}

type mode string

const (
	native mode = "native"
	berth  mode = "berth"
	// berthNoGang is the ceiling for berth: its own profile on the same pods with no
	// PodGroup, so nothing is held in Permit and no group is planned.
	berthNoGang mode = "berth-nogang"
	// defaultNoGang is kube-scheduler's default profile on the same pods with no gang.
	// Earlier tables called it "ceiling"; it is not one for berth, whose shipped profile
	// differs from the default (bench/README.md).
	defaultNoGang mode = "default-nogang"
)

// allModes are the modes in the order tables show them.
var allModes = []mode{native, berth, berthNoGang, defaultNoGang}

// gangs is whether a mode's pods belong to gangs.
func (m mode) gangs() bool { return m == native || m == berth }

// berthScheduler is whether a mode runs berth-scheduler's shipped profile.
func (m mode) berthScheduler() bool { return m == berth || m == berthNoGang }

// parseModes reads -modes. "ceiling", the old name, is refused with what replaced it.
func parseModes(list string) ([]mode, error) {
	var out []mode
	for _, s := range strings.Split(list, ",") {
		m := mode(strings.TrimSpace(s))
		switch {
		case slices.Contains(allModes, m):
			out = append(out, m)
		case m == "ceiling":
			return nil, fmt.Errorf("-modes: \"ceiling\" is now %q (kube-scheduler's default profile, no gangs); the ceiling for berth is %q (berth's own profile, no gangs)", defaultNoGang, berthNoGang)
		default:
			return nil, fmt.Errorf("-modes: unknown mode %q (want %s)", s, joinModes(allModes))
		}
	}
	return out, nil
}

func joinModes(ms []mode) string {
	var s []string
	for _, m := range ms {
		s = append(s, string(m))
	}
	return strings.Join(s, ", ")
}

func main() {
	nodes := flag.Int("nodes", 5000, "simulated CPU nodes for the upstream workloads (upstream: 5000)")
	only := flag.String("workloads", "", "comma-separated workload names to run, \"contention\" among them (default: the upstream ones)")
	scale := flag.Float64("scale", 1, "multiply gang counts by this (for a quick look; 1 = upstream)")
	out := flag.String("out", "", "also write the markdown tables to this file")
	modes := flag.String("modes", joinModes(allModes), "which schedulers to run (contention and preemption run only the gang modes, native and berth)")
	runs := flag.Int("runs", 3, "run each workload this many times per mode (modes interleaved); tables show medians")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the first berth run of each workload to this file (the last workload's wins)")
	figures := flag.String("figures", "", "write the figures (SVG) and the raw numbers (CSV) into this directory")
	var c contentionOptions
	contention := flag.Bool("contention", false, "also run the GPU contention workload (see bench/README.md, \"GPU contention\")")
	sizes := flag.String("contention-sizes", "16,64", "contention: GPU pool sizes in nodes of 8 GPUs")
	flag.IntVar(&c.otherNodes, "contention-other-nodes", 200, "contention: CPU nodes beside the GPU pool (instead of -nodes)")
	flag.Uint64Var(&c.seed, "seed", 1, "contention: seed of the gang stream (the same stream for every mode and run)")
	flag.Float64Var(&c.demand, "contention-demand", 2, "contention: the stream asks for about this many times the pool's GPUs")
	flag.DurationVar(&c.perNode, "contention-stream-per-node", 250*time.Millisecond, "contention: stream duration per pool node")
	flag.DurationVar(&c.quiet, "contention-quiet", 5*time.Second, "contention: settled once bound pods have not changed for this long")
	flag.DurationVar(&c.settleCap, "contention-settle-cap", 60*time.Second, "contention: wait at most this long after the stream for the pods to settle")
	flag.DurationVar(&c.partialWindow, "contention-partial-window", 2*time.Second, "contention: a group counts as partially bound once it has stayed so this long")
	var po preemptionOptions
	preemption := flag.Bool("preemption", false, "also run the preemption workload")
	psizes := flag.String("preemption-sizes", "16,64", "preemption: GPU pool sizes in nodes of 8 GPUs")
	flag.Float64Var(&po.share, "preemption-share", 0.25, "preemption: the preemptor's whole-node pods, as a share of the pool")
	flag.DurationVar(&po.timeout, "preemption-timeout", 2*time.Minute, "preemption: how long a run waits for the preemptor to be bound")
	flag.Parse()
	po.seed = c.seed
	quietLogs()
	if *runs < 1 {
		must(fmt.Errorf("-runs must be at least 1"))
	}

	var selected []workload
	known := map[string]bool{contentionName: true, preemptionName: true}
	for _, w := range workloads {
		known[w.name] = true
		if *only == "" || listed(*only, w.name) {
			w.gangs = max(1, int(float64(w.gangs)**scale))
			selected = append(selected, w)
		}
	}
	for _, name := range strings.Split(*only, ",") {
		if name = strings.TrimSpace(name); name != "" && !known[name] {
			must(fmt.Errorf("-workloads: unknown workload %q", name))
		}
	}
	runContention := *contention || listed(*only, contentionName)
	runPreemption := *preemption || listed(*only, preemptionName)
	if runPreemption {
		for _, s := range strings.Split(*psizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 {
				must(fmt.Errorf("-preemption-sizes: bad size %q", s))
			}
			po.sizes = append(po.sizes, n)
		}
	}
	runModes, err := parseModes(*modes)
	must(err)
	if runContention {
		for _, s := range strings.Split(*sizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 1 {
				must(fmt.Errorf("-contention-sizes: bad size %q", s))
			}
			c.sizes = append(c.sizes, n)
		}
	}

	began := time.Now()
	ctx := context.Background()
	fmt.Fprintf(os.Stderr, "starting control plane...\n")
	cp, err := startControlPlane(ctx)
	must(err)
	defer cp.Stop()

	b := newBench(cp)
	var tables []string

	// The contention workload runs first: it needs only a few CPU nodes beside its GPU pool,
	// and growing the node set afterwards is cheaper than shrinking it.
	if runContention {
		fmt.Fprintf(os.Stderr, "contention: %d CPU nodes beside the GPU pool\n", c.otherNodes)
		must(b.ensureCPUNodes(ctx, c.otherNodes))
		table, figs, err := b.contention(ctx, c, runModes, *runs)
		must(err)
		tables = append(tables, table)
		if *figures != "" {
			must(figs.write(*figures))
		}
	}

	if runPreemption {
		must(b.ensureCPUNodes(ctx, max(b.cpuNodes, 1)))
		table, figs, err := b.preemption(ctx, po, runModes, *runs)
		must(err)
		tables = append(tables, table)
		if *figures != "" {
			must(figs.write(*figures))
		}
	}

	if len(selected) > 0 {
		fmt.Fprintf(os.Stderr, "%d CPU nodes for the upstream workloads\n", *nodes)
		must(b.ensureCPUNodes(ctx, *nodes))
		tp, err := b.throughput(ctx, selected, runModes, *runs, *cpuProfile)
		must(err)
		tables = append(tables, tp.table(*nodes))
		if *figures != "" {
			must(tp.writeFigures(*figures))
		}
	}
	all := strings.Join(tables, "\n")
	fmt.Print(all)
	fmt.Fprintf(os.Stderr, "gangbench: done in %s\n", time.Since(began).Round(time.Second))
	if *out != "" {
		must(os.WriteFile(*out, []byte(all), 0o644))
	}
}

// startControlPlane starts the apiserver and etcd with native gangs served (the
// scheduling.k8s.io/v1beta1 API and the GenericWorkload gate).
func startControlPlane(ctx context.Context) (*controlplane.ControlPlane, error) {
	flags := append(controlplane.DefaultAPIServerFlags(),
		"--runtime-config=scheduling.k8s.io/v1beta1=true",
		"--feature-gates=GenericWorkload=true",
		// Deleting a run's pods between runs is otherwise one etcd delete at a time.
		"--delete-collection-workers=16",
	)
	// The schedulers alone, as kube-scheduler's scheduler_perf measures them: no garbage
	// collector or other controllers beside them.
	return controlplane.Start(ctx, controlplane.Options{APIServerFlags: flags, NoControllers: true})
}

// listed says whether name is in the comma-separated list.
func listed(list, name string) bool {
	for _, s := range strings.Split(list, ",") {
		if strings.TrimSpace(s) == name {
			return true
		}
	}
	return false
}

// rotate returns the modes starting at the r-th, so no mode always runs first (or right
// after another) and drift over a long run is shared out.
func rotate(modes []mode, r int) []mode {
	if len(modes) == 0 {
		return nil
	}
	k := r % len(modes)
	return append(slices.Clone(modes[k:]), modes[:k]...)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// num formats a measured value, or a dash when the mode did not run.
func num(v float64, prec int) string {
	if v == 0 {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

type bench struct {
	cp   *controlplane.ControlPlane
	cfg  *rest.Config
	kube kubernetes.Interface
	vc   volcanoclient.Interface
	runs int
	// cpuNodes is how many CPU nodes exist (node-00000 on).
	cpuNodes int
}

func newBench(cp *controlplane.ControlPlane) *bench {
	cfg := cp.RESTConfig()
	cfg.QPS, cfg.Burst = 5000, 5000
	return &bench{cp: cp, cfg: cfg, kube: kubernetes.NewForConfigOrDie(cfg), vc: volcanoclient.NewForConfigOrDie(cfg)}
}

// ensureCPUNodes makes the CPU node set node-00000 … node-<n-1>, creating or deleting
// nodes as needed. Each is scheduler_perf's default node: 4 CPU, 32Gi, 110 pods.
func (b *bench) ensureCPUNodes(ctx context.Context, n int) error {
	if n > b.cpuNodes {
		from := b.cpuNodes
		if err := fanout.Run(n-from, 16, func(i int) error {
			node := sim.NewNode(cpuNodeName(from+i), sim.NodeShape{CPU: "4", Memory: "32Gi"}, nil)
			_, err := b.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
			return err
		}); err != nil {
			return err
		}
	}
	if n < b.cpuNodes {
		if err := fanout.Run(b.cpuNodes-n, 16, func(i int) error {
			return b.kube.CoreV1().Nodes().Delete(ctx, cpuNodeName(n+i), metav1.DeleteOptions{})
		}); err != nil {
			return err
		}
	}
	b.cpuNodes = n
	return nil
}

func cpuNodeName(i int) string { return fmt.Sprintf("node-%05d", i) }

// startScheduler runs the scheduler of a mode until stop is called; done reports its exit.
func (b *bench) startScheduler(ctx context.Context, m mode) (stop func(), done <-chan error, err error) {
	configFile, err := b.schedulerConfig(m)
	if err != nil {
		return nil, nil, err
	}
	schedCtx, cancel := context.WithCancel(ctx)
	schedDone := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		err := scheduler.Run(schedCtx, scheduler.Options{ConfigFile: configFile})
		schedDone <- err
		exited <- err
	}()
	return func() { cancel(); <-exited }, schedDone, nil
}

// run schedules one workload in one mode and returns pods bound per second.
func (b *bench) run(ctx context.Context, w workload, m mode) (float64, error) {
	b.runs++
	ns := fmt.Sprintf("%s-%d", m, b.runs)
	if _, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return 0, err
	}
	stopScheduler, schedDone, err := b.startScheduler(ctx, m)
	if err != nil {
		return 0, err
	}
	defer func() {
		stopScheduler()
		cleanup := time.Now()
		_ = b.kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
		// Let the apiserver's watch fan-out of the deletions drain before the next run.
		runtime.GC()
		time.Sleep(2 * time.Second)
		fmt.Fprintf(os.Stderr, "  cleanup %s\n", time.Since(cleanup).Round(time.Second))
	}()

	// Count bound pods of this namespace from a watch.
	total := w.gangs * w.podsPerGroup
	var bound atomic.Int64
	allBound := make(chan struct{})
	factory := informers.NewSharedInformerFactoryWithOptions(b.kube, 0, informers.WithNamespace(ns))
	seen := sync.Map{}
	count := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			if _, dup := seen.LoadOrStore(p.Name, true); !dup && bound.Add(1) == int64(total)+1 {
				close(allBound) // total+1: the warm-up pod counts too
			}
		}
	}
	_, _ = factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: count, UpdateFunc: func(_, n any) { count(n) },
	})
	infCtx, stopInformer := context.WithCancel(ctx)
	defer stopInformer()
	factory.Start(infCtx.Done())
	factory.WaitForCacheSync(infCtx.Done())

	// Warm up: the scheduler has synced its informers once it binds a pod.
	warm := b.pod(ns, m, "warmup", "")
	if _, err := b.kube.CoreV1().Pods(ns).Create(ctx, warm, metav1.CreateOptions{}); err != nil {
		return 0, err
	}
	for bound.Load() < 1 {
		time.Sleep(20 * time.Millisecond)
	}

	if err := b.createGroups(ctx, ns, w, m); err != nil {
		return 0, err
	}
	start := time.Now()
	fmt.Fprintf(os.Stderr, "  %s/%s: scheduler ready, creating %d pods\n", w.name, m, total)
	if err := fanout.Run(total, 16, func(i int) error {
		group := ""
		if m.gangs() {
			group = fmt.Sprintf("gang-%d", i/w.podsPerGroup)
		}
		_, err := b.kube.CoreV1().Pods(ns).Create(ctx, b.pod(ns, m, fmt.Sprintf("pod-%d", i), group), metav1.CreateOptions{})
		return err
	}); err != nil {
		return 0, err
	}
	select {
	case <-allBound:
	case <-time.After(10 * time.Minute):
		return 0, fmt.Errorf("%s/%s: only %d of %d pods bound after 10m", w.name, m, bound.Load()-1, total)
	case err := <-schedDone:
		return 0, fmt.Errorf("%s/%s: scheduler exited: %v", w.name, m, err)
	}
	rate := float64(total) / time.Since(start).Seconds()
	// Pods that were once reported unschedulable cost an extra status write each; say so.
	if pods, err := b.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		retried := 0
		reasons := map[string]int{}
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
					retried++
					reasons[c.Message]++
				}
			}
		}
		if retried > 0 {
			fmt.Fprintf(os.Stderr, "%s/%s: %d pods were reported unschedulable on the way: %v\n", w.name, m, retried, reasons)
		}
	}
	return rate, nil
}

func (b *bench) createGroups(ctx context.Context, ns string, w workload, m mode) error {
	switch m {
	case native:
		return fanout.Run(w.gangs, 16, func(i int) error {
			_, err := b.kube.SchedulingV1beta1().PodGroups(ns).Create(ctx, &schedulingv1beta1.PodGroup{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gang-%d", i)},
				Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
					Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(w.podsPerGroup)}}},
			}, metav1.CreateOptions{})
			return err
		})
	case berth:
		return fanout.Run(w.gangs, 16, func(i int) error {
			_, err := b.vc.SchedulingV1beta1().PodGroups(ns).Create(ctx, &volcanov1beta1.PodGroup{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gang-%d", i)},
				Spec:       volcanov1beta1.PodGroupSpec{MinMember: int32(w.podsPerGroup)},
			}, metav1.CreateOptions{})
			return err
		})
	}
	return nil
}

// pod is scheduler_perf's gang pod: a pause container asking 100m CPU and 100Mi.
func (b *bench) pod(ns string, m mode, name, group string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "pause", Image: "registry.k8s.io/pause:3.10.1",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("100Mi")}}}}},
	}
	switch m {
	case berth, berthNoGang:
		p.Spec.SchedulerName = workloadv1alpha1.BerthSchedulerName
		if group != "" {
			p.Annotations = map[string]string{groupNameKey: group}
		}
	case native:
		if group != "" {
			p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
		}
	}
	return p
}

// schedulerConfig writes the profile for a mode: the shipped berth profile, or the default
// profile (which includes GangScheduling when the GenericWorkload gate is on).
func (b *bench) schedulerConfig(m mode) (string, error) {
	dir, err := os.MkdirTemp("", "gangbench")
	if err != nil {
		return "", err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := b.cp.WriteKubeconfig(kubeconfig); err != nil {
		return "", err
	}
	// Every mode at the same client QPS and burst (BenchRate): a scheduler's rate toward
	// the apiserver bounds its bind rate, so a difference would be measured, not the scheduler.
	var cfg []byte
	if m.berthScheduler() {
		cfg, err = inprocess.SchedulerConfig(kubeconfig, inprocess.SchedulerOptions{})
	} else {
		cfg, err = inprocess.DefaultSchedulerConfig(kubeconfig, inprocess.BenchRate)
	}
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "config.yaml")
	return path, os.WriteFile(path, cfg, 0o600)
}

// quietLogs silences klog: the apiserver and scheduler log per request at the default level
// (and the native gang plugin an error per refused pod); a benchmark wants none of it.
// klog copies errors to stderr even when its output is discarded (-stderrthreshold=ERROR),
// so the threshold is raised too.
func quietLogs() {
	fs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(fs)
	must(fs.Set("logtostderr", "false"))
	must(fs.Set("stderrthreshold", "FATAL"))
	klog.SetOutput(io.Discard)
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "gangbench:", err)
		os.Exit(1)
	}
}
