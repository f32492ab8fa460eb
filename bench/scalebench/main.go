// Command scalebench is the scale and soak benchmark: 1000 ModelServings of 10 pods (10,000
// pods) on 5,000 simulated 8-GPU nodes, brought to Available by berth-scheduler and
// berth-controller, then a churn phase (scale, roll, fail pods) long enough to see whether
// their memory or goroutines grow.
//
// The peer, in the same run, is what a cluster does for the same pods without Berth: 1000
// plain Deployments of 10 replicas placed by kube-scheduler's default profile and run by
// kube-controller-manager's Deployment and ReplicaSet controllers (and its garbage collector
// and namespace controller), with the same churn.
//
// Both schedulers run at the shipped configuration's client rate (manifests/scheduler/
// config.yaml), both controllers at the same rate as each other.
//
// Every component runs in a process of its own (this binary, re-executed), so its peak memory
// (VmHWM) and CPU time are read from /proc; each reports its goroutines and heap every
// second. Each mode runs in a process of its own too (modeproc.go), which holds the mode's
// apiserver, etcd and simulated kubelet; the modes run one after the other.
//
//	go run ./bench/scalebench                      # the full size, both modes
//	go run ./bench/scalebench -servings 100 -nodes 500 -churn 30s   # a quick look
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/berth-sh/berth/bench/internal/fanout"
	"github.com/berth-sh/berth/bench/internal/figure"
	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/inprocess"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/sim"
)

const (
	ns       = "scale"
	warmupNS = "scale-warmup"
)

type config struct {
	servings, podsPerServing, nodes int
	churn                           time.Duration
	modes                           []string
	figures                         string
	log                             io.Writer
}

func main() {
	if runIfChild() {
		return
	}
	var c config
	modes := "berth,peer"
	flag.IntVar(&c.servings, "servings", 1000, "ModelServings (Berth) and Deployments (peer)")
	flag.IntVar(&c.podsPerServing, "pods", 10, "pods per ModelServing (2 ServingGroups of an entry and pods/2-1 workers) and per Deployment; even")
	flag.IntVar(&c.nodes, "nodes", 5000, "simulated 8-GPU nodes")
	flag.DurationVar(&c.churn, "churn", 3*time.Minute, "how long the churn phase lasts")
	flag.StringVar(&modes, "modes", modes, "berth, peer or both")
	profiles := flag.String("cpuprofile-dir", "", "write each component's CPU profile (<role>.cpu.pprof) here")
	flag.StringVar(&c.figures, "figures", "", "write the progress figure (SVG) and its raw numbers (CSV) into this directory")
	flag.Parse()
	c.log = os.Stderr
	c.modes = strings.Split(modes, ",")
	if *profiles != "" {
		must(os.Setenv(profileEnv, *profiles))
	}
	quietLogs()

	results, err := runAll(c)
	must(err)
	text, err := report(c, results)
	must(err)
	fmt.Print(text)
	if c.figures != "" {
		must(writeFigures(c.figures, results))
	}
}

// quietLogs keeps klog's and controller-runtime's lines out of the output.
func quietLogs() {
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	ctrllog.SetLogger(klog.Background())
}

// runAll runs every mode, one after the other, each in a process of its own.
func runAll(c config) ([]result, error) {
	var results []result
	for _, mode := range c.modes {
		fmt.Fprintf(c.log, "== %s\n", mode)
		r, err := runMode(mode, c)
		if err != nil {
			return nil, err
		}
		results = append(results, r)
	}
	return results, nil
}

// result is one mode's measurements.
type result struct {
	mode       string
	available  time.Duration // first object created → all Available
	components []*component
	churnOps   int
	settle     time.Duration // churn end → all Available again
	progress   []sample      // Available objects during the fill and the settle after churn
}

// sample is how many objects were Available at one moment of a phase, and how many of
// their pods existed, were bound and were Ready: where a slow fill waits (pods not yet
// created: the controller; created but not bound: the scheduler; bound but not Ready: the
// engines' start).
type sample struct {
	phase                  string // "fill" (from the first object created) or "settle" (from the churn's end)
	at                     time.Duration
	available              int
	pods, bound, podsReady int
}

func run(mode string, c config) (result, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{NoControllers: true, APIServerFlags: append(controlplane.DefaultAPIServerFlags(),
		"--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000")})
	if err != nil {
		return result{}, err
	}
	// The kubelet's watches end before the apiserver stops (else it waits a minute for them).
	defer func() { cancel(); cp.Stop() }()
	cfg := cp.RESTConfig()
	cfg.QPS, cfg.Burst = 2000, 4000
	kube := kubernetes.NewForConfigOrDie(cfg)
	cl, err := client.New(cfg, client.Options{Scheme: controller.Scheme()})
	if err != nil {
		return result{}, err
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return result{}, err
	}
	t := time.Now()
	if err := fanout.Run(c.nodes, 16, func(i int) error {
		_, err := kube.CoreV1().Nodes().Create(ctx, sim.NewNode(fmt.Sprintf("node-%05d", i), sim.NodeShape{CPU: "96", Memory: "1Ti", GPUs: 8}, nil), metav1.CreateOptions{})
		return err
	}); err != nil {
		return result{}, err
	}
	fmt.Fprintf(c.log, "%d nodes in %s\n", c.nodes, time.Since(t).Round(time.Second))
	kubelet := sim.NewKubelet(kube, 0)
	go kubelet.Run(ctx)
	pods, err := watchPods(ctx, kube)
	if err != nil {
		return result{}, err
	}

	dir, err := os.MkdirTemp("", "scalebench-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	roles := map[string][]string{"berth": {"berth-scheduler", "berth-controller"}, "peer": {"kube-scheduler", "kube-controller-manager"}}[mode]
	if roles == nil {
		return result{}, fmt.Errorf("unknown mode %q", mode)
	}
	r := result{mode: mode}
	for _, role := range roles {
		comp, err := startComponent(ctx, cp, dir, role)
		if err != nil {
			return r, err
		}
		defer comp.stop()
		r.components = append(r.components, comp)
	}

	// A warm-up object in a namespace of its own, brought to Available before the clock
	// starts: the fill measures the components at work, not their processes starting and
	// their caches syncing (berth-controller took about 2 s longer to create its first pod
	// than kube-controller-manager).
	warm := c
	warm.servings = 1
	warm.log = io.Discard
	wu := workload{mode: mode, c: warm, ns: warmupNS, cl: cl, kube: kube, progress: &[]sample{}, pods: &podCounts{}}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: warmupNS}}, metav1.CreateOptions{}); err != nil {
		return result{}, err
	}
	t = time.Now()
	if err := wu.create(ctx, 0); err != nil {
		return r, err
	}
	if err := wu.waitAvailable(ctx, "warm-up", t, 5*time.Minute); err != nil {
		return r, err
	}
	fmt.Fprintf(c.log, "warm-up object Available after %s\n", time.Since(t).Round(100*time.Millisecond))
	for _, comp := range r.components {
		comp.mark("start") // the fill's CPU and requests are counted from here
	}

	w := workload{mode: mode, c: c, ns: ns, cl: cl, kube: kube, progress: &r.progress, pods: pods}
	start := time.Now()
	if err := fanout.Run(c.servings, 8, func(i int) error { return w.create(ctx, i) }); err != nil {
		return r, err
	}
	fmt.Fprintf(c.log, "created %d objects in %s\n", c.servings, time.Since(start).Round(time.Second))
	if err := w.waitAvailable(ctx, "fill", start, 30*time.Minute); err != nil {
		return r, err
	}
	r.available = time.Since(start)
	fmt.Fprintf(c.log, "all Available after %s\n", r.available.Round(time.Second))
	for _, comp := range r.components {
		comp.mark("fill")
	}

	// Churn: one action every 100 ms, at random: scale an object up or back, roll it to a new
	// image, or fail one of its pods.
	rng := rand.New(rand.NewPCG(1, 2))
	end := time.Now().Add(c.churn)
	nextReport := time.Now().Add(30 * time.Second)
	for time.Now().Before(end) {
		i := rng.IntN(c.servings)
		switch rng.IntN(3) {
		case 0:
			_ = w.scale(ctx, i, rng.IntN(2) == 0)
		case 1:
			_ = w.roll(ctx, i, rng.IntN(1000))
		case 2:
			_ = w.failPod(ctx, kubelet, i, rng)
		}
		r.churnOps++
		if time.Now().After(nextReport) {
			for _, comp := range r.components {
				s := comp.latest()
				fmt.Fprintf(c.log, "  churn: %s rss %d MiB, %d goroutines, heap %d MiB\n", comp.role, comp.rss()>>20, s.goroutines, s.heap>>20)
			}
			nextReport = nextReport.Add(30 * time.Second)
		}
		time.Sleep(100 * time.Millisecond)
	}
	churnEnd := time.Now()
	if err := w.waitAvailable(ctx, "settle", churnEnd, 30*time.Minute); err != nil {
		return r, err
	}
	r.settle = time.Since(churnEnd)
	for _, comp := range r.components {
		comp.mark("churn")
	}
	return r, nil
}

// workload creates and churns one mode's objects.
type workload struct {
	mode     string
	c        config
	ns       string // the objects' namespace
	cl       client.Client
	kube     kubernetes.Interface
	progress *[]sample
	pods     *podCounts
}

func name(i int) string { return fmt.Sprintf("m%04d", i) }

func podSpec(image, scheduler string) corev1.PodSpec {
	return corev1.PodSpec{SchedulerName: scheduler, Containers: []corev1.Container{{Name: "engine", Image: image,
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
			Limits: corev1.ResourceList{sim.GPUResource: resource.MustParse("1")}}}}}
}

func (w workload) create(ctx context.Context, i int) error {
	if w.mode == "peer" {
		labels := map[string]string{"app": name(i)}
		return w.cl.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name(i)},
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To(int32(w.c.podsPerServing)), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec("vllm:v0", corev1.DefaultSchedulerName)}}})
	}
	spec := podSpec("vllm:v0", "")
	return w.cl.Create(ctx, &workloadv1alpha1.ModelServing{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name(i)},
		Spec: workloadv1alpha1.ModelServingSpec{Replicas: ptr.To[int32](2), SchedulerName: workloadv1alpha1.BerthSchedulerName,
			Template: workloadv1alpha1.ServingGroup{Roles: []workloadv1alpha1.Role{{Name: "server", Replicas: ptr.To[int32](1),
				EntryTemplate: workloadv1alpha1.PodTemplateSpec{Spec: spec}, WorkerReplicas: int32(w.c.podsPerServing/2 - 1),
				WorkerTemplate: &workloadv1alpha1.PodTemplateSpec{Spec: spec}}}}}})
}

// groupPods is the pods a scale step adds or removes: one ServingGroup's.
func (w workload) groupPods() int32 { return int32(w.c.podsPerServing / 2) }

func (w workload) scale(ctx context.Context, i int, up bool) error {
	if w.mode == "peer" {
		d := &appsv1.Deployment{}
		if err := w.cl.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: name(i)}, d); err != nil {
			return err
		}
		n := int32(w.c.podsPerServing)
		if up {
			n += w.groupPods()
		}
		d.Spec.Replicas = &n
		return w.cl.Update(ctx, d)
	}
	ms := &workloadv1alpha1.ModelServing{}
	if err := w.cl.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: name(i)}, ms); err != nil {
		return err
	}
	n := int32(2)
	if up {
		n = 3
	}
	ms.Spec.Replicas = &n
	return w.cl.Update(ctx, ms)
}

func (w workload) roll(ctx context.Context, i, version int) error {
	image := fmt.Sprintf("vllm:v%d", version+1)
	if w.mode == "peer" {
		d := &appsv1.Deployment{}
		if err := w.cl.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: name(i)}, d); err != nil {
			return err
		}
		d.Spec.Template.Spec.Containers[0].Image = image
		return w.cl.Update(ctx, d)
	}
	ms := &workloadv1alpha1.ModelServing{}
	if err := w.cl.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: name(i)}, ms); err != nil {
		return err
	}
	role := &ms.Spec.Template.Roles[0]
	role.EntryTemplate.Spec.Containers[0].Image = image
	role.WorkerTemplate.Spec.Containers[0].Image = image
	return w.cl.Update(ctx, ms)
}

func (w workload) failPod(ctx context.Context, kubelet *sim.Kubelet, i int, rng *rand.Rand) error {
	selector := "app=" + name(i)
	if w.mode == "berth" {
		selector = workloadv1alpha1.ModelServingNameLabel + "=" + name(i)
	}
	pods, err := w.kube.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: "0"})
	if err != nil || len(pods.Items) == 0 {
		return err
	}
	p := pods.Items[rng.IntN(len(pods.Items))]
	if p.Status.Phase != corev1.PodRunning {
		return nil
	}
	return kubelet.FailPod(ctx, w.ns, p.Name)
}

// waitAvailable waits until every object is Available at its current spec, recording the
// progress of the phase that started at since.
func (w workload) waitAvailable(ctx context.Context, phase string, since time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ready, total := 0, 0
		if w.mode == "peer" {
			var list appsv1.DeploymentList
			if err := w.cl.List(ctx, &list, client.InNamespace(w.ns)); err != nil {
				return err
			}
			for _, d := range list.Items {
				total++
				st := d.Status
				if st.ObservedGeneration == d.Generation && st.AvailableReplicas == *d.Spec.Replicas && st.UpdatedReplicas == *d.Spec.Replicas && st.Replicas == *d.Spec.Replicas {
					ready++
				}
			}
		} else {
			var list workloadv1alpha1.ModelServingList
			if err := w.cl.List(ctx, &list, client.InNamespace(w.ns)); err != nil {
				return err
			}
			for _, ms := range list.Items {
				total++
				st := ms.Status
				if st.ObservedGeneration == ms.Generation && st.AvailableReplicas == *ms.Spec.Replicas && st.UpdatedReplicas == *ms.Spec.Replicas && st.Replicas == *ms.Spec.Replicas {
					ready++
				}
			}
		}
		created, bound, podsReady := w.pods.counts()
		*w.progress = append(*w.progress, sample{phase: phase, at: time.Since(since), available: ready, pods: created, bound: bound, podsReady: podsReady})
		if ready == total && total == w.c.servings {
			return nil
		}
		if s := fmt.Sprintf("%d/%d Available", ready, total); s != last {
			fmt.Fprintf(w.c.log, "  %s\n", s)
			last = s
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("%s: not all Available after %s (%s)", w.mode, timeout, last)
}

func report(c config, results []result) (string, error) {
	rate, err := inprocess.ShippedRate()
	if err != nil {
		return "", err
	}
	var out strings.Builder
	fmt.Fprintf(&out, "\n%d objects × %d pods on %d nodes; churn %s; both schedulers at client QPS %g, burst %d (manifests/scheduler/config.yaml's); both controllers at QPS %d, burst %d\n\n",
		c.servings, c.podsPerServing, c.nodes, c.churn, rate.QPS, rate.Burst, controllerQPS, controllerBurst)
	tw := tabwriter.NewWriter(&out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "mode\tto Available\tpods/s\tchurn ops\tsettle after churn\tcomponent\tpeak RSS MiB\tCPU s (fill)\tCPU s (churn)\tgoroutines fill→churn end\theap MiB fill→churn end")
	for _, r := range results {
		for i, comp := range r.components {
			lead := "\t\t\t\t"
			if i == 0 {
				lead = fmt.Sprintf("%s\t%s\t%.0f\t%d\t%s", r.mode, r.available.Round(time.Second),
					float64(c.servings*c.podsPerServing)/r.available.Seconds(), r.churnOps, r.settle.Round(time.Second))
			}
			start, fill, churn := comp.marks["start"], comp.marks["fill"], comp.marks["churn"]
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.1f\t%d→%d\t%d→%d\n", lead, comp.role, comp.peakRSS()>>20,
				fill.cpu-start.cpu, churn.cpu-fill.cpu, fill.goroutines, churn.goroutines, fill.heap>>20, churn.heap>>20)
		}
	}
	tw.Flush()
	if len(results) == 2 {
		a, b := results[0], results[1]
		fmt.Fprintf(&out, "\ntime to Available %s/%s: %.2f\n", a.mode, b.mode, a.available.Seconds()/b.available.Seconds())
		var ra, rb uint64
		var ca, cb, fa, fb float64
		for _, comp := range a.components {
			ra += comp.peakRSS()
			ca += comp.marks["churn"].cpu - comp.marks["start"].cpu
			fa += comp.marks["fill"].cpu - comp.marks["start"].cpu
		}
		for _, comp := range b.components {
			rb += comp.peakRSS()
			cb += comp.marks["churn"].cpu - comp.marks["start"].cpu
			fb += comp.marks["fill"].cpu - comp.marks["start"].cpu
		}
		fmt.Fprintf(&out, "peak RSS (scheduler + controller) %s/%s: %.2f\n", a.mode, b.mode, float64(ra)/float64(rb))
		fmt.Fprintf(&out, "CPU seconds (scheduler + controller, fill) %s/%s: %.2f\n", a.mode, b.mode, fa/fb)
		fmt.Fprintf(&out, "CPU seconds (scheduler + controller, fill and churn) %s/%s: %.2f\n", a.mode, b.mode, ca/cb)
	}
	// What each controller asked of the apiserver, per object: the writes are what its CPU
	// in the fill goes to beside reconciling.
	first := true
	for _, r := range results {
		for _, comp := range r.components {
			fill := since(comp.marks["fill"].requests, comp.marks["start"].requests)
			if fill == nil {
				continue
			}
			if first {
				fmt.Fprintf(&out, "\nAPI requests (and berth-controller's reconciles) per object in the fill, by controller:\n")
				first = false
			}
			fmt.Fprintf(&out, "%s writes: %s\n", comp.role, perObject(fill, c.servings, isWrite))
			fmt.Fprintf(&out, "%s reads: %s\n", comp.role, perObject(fill, c.servings, isRead))
			if comp.role == "berth-controller" {
				fmt.Fprintf(&out, "%s reconciles: %s\n", comp.role, perObject(fill, c.servings, isReconcile))
			}
			if churn := comp.marks["churn"].requests; churn != nil && r.churnOps > 0 {
				diff := since(churn, comp.marks["fill"].requests)
				fmt.Fprintf(&out, "%s writes per churn op: %s\n", comp.role, perObject(diff, r.churnOps, isWrite))
			}
		}
	}
	return out.String(), nil
}

// since is the request counts of now less those of before (nil when now is).
func since(now, before map[string]int) map[string]int {
	if now == nil {
		return nil
	}
	out := make(map[string]int, len(now))
	for k, n := range now {
		out[k] = n - before[k]
	}
	return out
}

// writeFigures writes progress.svg (objects Available during the fill, per mode),
// pods.svg (the fill's pods created, bound and Ready, per mode), settle.svg (objects
// Available after the churn) and progress.csv (their raw numbers) into dir.
func writeFigures(dir string, results []result) error {
	table := figure.NewTable("mode", "phase", "seconds", "available", "pods", "bound", "ready")
	fill := figure.Line{Title: "Objects Available since the first was created", XLabel: "seconds", YLabel: "objects Available"}
	settle := figure.Line{Title: "Objects Available after the churn stopped", XLabel: "seconds", YLabel: "objects Available"}
	podsFig := figure.Line{Title: "The fill's pods: created, bound, Ready", XLabel: "seconds", YLabel: "pods"}
	for _, r := range results {
		series := map[string]*figure.Series{"fill": {Name: r.mode}, "settle": {Name: r.mode}}
		created, bound, ready := figure.Series{Name: r.mode + " created"}, figure.Series{Name: r.mode + " bound"}, figure.Series{Name: r.mode + " Ready"}
		for _, s := range r.progress {
			table.Add(r.mode, s.phase, s.at, s.available, s.pods, s.bound, s.podsReady)
			if x := series[s.phase]; x != nil {
				x.X, x.Y = append(x.X, s.at.Seconds()), append(x.Y, float64(s.available))
			}
			if s.phase == "fill" {
				for _, p := range []struct {
					s *figure.Series
					n int
				}{{&created, s.pods}, {&bound, s.bound}, {&ready, s.podsReady}} {
					p.s.X, p.s.Y = append(p.s.X, s.at.Seconds()), append(p.s.Y, float64(p.n))
				}
			}
		}
		fill.Series = append(fill.Series, *series["fill"])
		settle.Series = append(settle.Series, *series["settle"])
		podsFig.Series = append(podsFig.Series, created, bound, ready)
	}
	if err := figure.Save(filepath.Join(dir, "progress.svg"), fill); err != nil {
		return err
	}
	if err := figure.Save(filepath.Join(dir, "pods.svg"), podsFig); err != nil {
		return err
	}
	if err := figure.Save(filepath.Join(dir, "settle.svg"), settle); err != nil {
		return err
	}
	return table.WriteFile(filepath.Join(dir, "progress.csv"))
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "scalebench:", err)
		os.Exit(1)
	}
}
