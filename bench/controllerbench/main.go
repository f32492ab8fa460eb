// Command controllerbench measures a controller bringing serving pods to Ready on the
// in-process control plane, beside its peer in the same run, on the same apiserver, nodes,
// scheduler (berth-scheduler) and simulated kubelet:
//
//   - berth: berth-controller turning 200 ModelServings × 4 ServingGroups × 4 pods (a role of
//     2 replicas, each an entry and a worker; every group also gets a Volcano PodGroup) into
//     pods, Services and status;
//   - peer: kube-controller-manager's Deployment and ReplicaSet controllers turning 200
//     Deployments of 16 replicas (the same pod template) into ReplicaSets and pods.
//
// It reports the time from the first object created to the last one Available, pods/s, and
// the CPU seconds spent in the controller's goroutines, read from a CPU profile in which
// every goroutine of the controller under test carries a label (component=berth-controller
// or component=kube-controller-manager). Both controllers run with the same client rate.
// The modes run one after the other; between them the first mode's objects are deleted and
// the run waits until their pods are gone.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/google/pprof/profile"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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

// Both controllers' client rate: kube-controller-manager's loops in internal/controlplane run
// at this rate, and berth-controller gets the same.
const (
	controllerQPS   = 1000
	controllerBurst = 2000
	podsPerGroup    = 4
	createWorkers   = 8
)

// Mode names.
const (
	modeBerth = "berth"
	modePeer  = "peer"
)

type config struct {
	count, groups int
	modes         []string
	figures       string
	timeout       time.Duration
}

func main() {
	var c config
	modes := modePeer + "," + modeBerth
	flag.IntVar(&c.count, "modelservings", 200, "ModelServings (berth) and Deployments (peer) to create")
	flag.IntVar(&c.groups, "groups", 4, "ServingGroups per ModelServing (a Deployment has groups × 4 replicas)")
	flag.StringVar(&modes, "modes", modes, "modes to run, in order: berth, peer")
	flag.StringVar(&c.figures, "figures", "", "write the progress figure (SVG) and its raw numbers (CSV) into this directory")
	flag.DurationVar(&c.timeout, "timeout", 15*time.Minute, "how long a mode may take to make everything Available")
	flag.Parse()
	c.modes = strings.Split(modes, ",")
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	ctrllog.SetLogger(klog.Background())

	results, err := run(context.Background(), c, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "controllerbench:", err)
		os.Exit(1)
	}
	fmt.Print(report(c, results))
	if c.figures != "" {
		if err := writeFigures(c.figures, results); err != nil {
			fmt.Fprintln(os.Stderr, "controllerbench:", err)
			os.Exit(1)
		}
	}
}

// result is one mode's measurements.
type result struct {
	mode          string
	pods          int
	available     time.Duration // first object created → all Available
	controllerCPU float64       // seconds, in the controller's labelled goroutines
	totalCPU      float64       // seconds, the whole process (apiserver, scheduler, kubelet included)
	progress      []sample
}

// sample is the progress at one moment: pods of Available units (a ServingGroup counts its 4
// pods once it is Available; a Deployment its available replicas).
type sample struct {
	at   time.Duration
	pods int
}

func run(ctx context.Context, c config, log io.Writer) ([]result, error) {
	for _, m := range c.modes {
		if m != modeBerth && m != modePeer {
			return nil, fmt.Errorf("unknown mode %q (berth, peer)", m)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{NoControllers: true})
	if err != nil {
		return nil, err
	}
	// The components stop before the apiserver does.
	defer func() { cancel(); time.Sleep(time.Second); cp.Stop() }()
	cfg := cp.RESTConfig()
	cfg.QPS, cfg.Burst = controllerQPS, controllerBurst
	kube := kubernetes.NewForConfigOrDie(cfg)
	cl, err := client.New(cfg, client.Options{Scheme: controller.Scheme()})
	if err != nil {
		return nil, err
	}
	pods := c.count * c.groups * podsPerGroup
	if err := createNodes(ctx, kube, pods/100+1); err != nil {
		return nil, err
	}
	if err := startScheduler(ctx, cp); err != nil {
		return nil, err
	}
	kubelet := sim.NewKubelet(kube, 0)
	go kubelet.Run(ctx)
	// kube-controller-manager's loops run throughout, as in a cluster (the garbage collector
	// and namespace controller clean up between modes); their goroutines are labelled so the
	// peer's CPU is theirs alone.
	go pprof.Do(ctx, pprof.Labels("component", "kube-controller-manager"), func(ctx context.Context) {
		_ = controlplane.RunControllers(ctx, cp.RESTConfig())
	})

	var results []result
	for i, mode := range c.modes {
		fmt.Fprintf(log, "%s == %s\n", time.Now().Format("15:04:05"), mode)
		r, err := runMode(ctx, c, cfg, cl, kube, mode, log)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", mode, err)
		}
		fmt.Fprintf(log, "%s   all Available after %s\n", time.Now().Format("15:04:05"), r.available.Round(100*time.Millisecond))
		results = append(results, r)
		if i == len(c.modes)-1 {
			break
		}
		if err := cleanUp(ctx, kube, mode, log); err != nil {
			return nil, err
		}
	}
	return results, nil
}

func runMode(ctx context.Context, c config, cfg *rest.Config, cl client.Client, kube kubernetes.Interface, mode string, log io.Writer) (result, error) {
	r := result{mode: mode, pods: c.count * c.groups * podsPerGroup}
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mode}}); err != nil {
		return r, err
	}
	var prof bytes.Buffer
	if err := pprof.StartCPUProfile(&prof); err != nil {
		return r, err
	}
	label := "kube-controller-manager"
	mctx, stopManager := context.WithCancel(ctx)
	defer stopManager()
	if mode == modeBerth {
		label = "berth-controller"
		mgr, err := controller.NewManager(rest.CopyConfig(cfg), controller.Options{MetricsAddr: "0"})
		if err != nil {
			pprof.StopCPUProfile()
			return r, err
		}
		go pprof.Do(mctx, pprof.Labels("component", label), func(ctx context.Context) { _ = mgr.Start(ctx) })
	}
	start := time.Now()
	err := fanout.Run(c.count, createWorkers, func(i int) error {
		if mode == modePeer {
			return cl.Create(ctx, deployment(i, c.groups))
		}
		return cl.Create(ctx, modelServing(i, c.groups))
	})
	if err != nil {
		pprof.StopCPUProfile()
		return r, err
	}
	for {
		done, total, err := available(ctx, cl, mode, c.groups)
		if err != nil {
			pprof.StopCPUProfile()
			return r, err
		}
		r.progress = append(r.progress, sample{at: time.Since(start), pods: done})
		if total == c.count && done == r.pods {
			break
		}
		if time.Since(start) > c.timeout {
			pprof.StopCPUProfile()
			return r, fmt.Errorf("only %d of %d pods Available after %s", done, r.pods, c.timeout)
		}
		time.Sleep(250 * time.Millisecond)
	}
	r.available = time.Since(start)
	pprof.StopCPUProfile()
	stopManager()
	r.controllerCPU, r.totalCPU = labelledCPU(prof.Bytes(), label)
	return r, nil
}

// available counts the pods of Available units in mode's namespace, and the objects seen.
func available(ctx context.Context, cl client.Client, mode string, groups int) (pods, objects int, err error) {
	if mode == modePeer {
		var list appsv1.DeploymentList
		if err := cl.List(ctx, &list, client.InNamespace(mode)); err != nil {
			return 0, 0, err
		}
		for _, d := range list.Items {
			pods += int(d.Status.AvailableReplicas)
		}
		return pods, len(list.Items), nil
	}
	var list workloadv1alpha1.ModelServingList
	if err := cl.List(ctx, &list, client.InNamespace(mode)); err != nil {
		return 0, 0, err
	}
	for _, ms := range list.Items {
		pods += int(ms.Status.AvailableReplicas) * podsPerGroup
	}
	return pods, len(list.Items), nil
}

// cleanUp deletes mode's namespace and waits until its pods are gone, so the next mode
// starts on an empty cluster.
func cleanUp(ctx context.Context, kube kubernetes.Interface, mode string, log io.Writer) error {
	if err := kube.CoreV1().Namespaces().Delete(ctx, mode, metav1.DeleteOptions{}); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		list, err := kube.CoreV1().Pods(mode).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return nil
		}
		time.Sleep(time.Second)
	}
	fmt.Fprintf(log, "%s: pods still present 5 minutes after the namespace was deleted; going on\n", mode)
	return nil
}

func podTemplate() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{Spec: corev1.PodSpec{SchedulerName: workloadv1alpha1.BerthSchedulerName, Containers: []corev1.Container{{
		Name: "engine", Image: "vllm", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("100Mi")}}}}}}
}

func modelServing(i, groups int) *workloadv1alpha1.ModelServing {
	t := podTemplate()
	tmpl := workloadv1alpha1.PodTemplateSpec{Spec: t.Spec}
	return &workloadv1alpha1.ModelServing{
		ObjectMeta: metav1.ObjectMeta{Namespace: modeBerth, Name: fmt.Sprintf("ms-%03d", i)},
		Spec: workloadv1alpha1.ModelServingSpec{
			Replicas:      ptr.To(int32(groups)),
			SchedulerName: workloadv1alpha1.BerthSchedulerName,
			Template: workloadv1alpha1.ServingGroup{Roles: []workloadv1alpha1.Role{{
				Name: "server", Replicas: ptr.To[int32](2), WorkerReplicas: 1, EntryTemplate: tmpl, WorkerTemplate: tmpl.DeepCopy(),
			}}},
		},
	}
}

// deployment is the peer's object: as many replicas of the same pod as a ModelServing has.
func deployment(i, groups int) *appsv1.Deployment {
	name := fmt.Sprintf("d-%03d", i)
	labels := map[string]string{"app": name}
	t := podTemplate()
	t.Labels = labels
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: modePeer, Name: name}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To(int32(groups * podsPerGroup)), Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: t}}
}

// labelledCPU sums the CPU samples of goroutines labelled component=label, and all.
func labelledCPU(raw []byte, label string) (labelled, total float64) {
	p, err := profile.Parse(bytes.NewReader(raw))
	if err != nil {
		return 0, 0
	}
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			idx = i
		}
	}
	if idx < 0 {
		return 0, 0
	}
	for _, s := range p.Sample {
		v := float64(s.Value[idx]) / 1e9
		total += v
		if strings.Join(s.Label["component"], "") == label {
			labelled += v
		}
	}
	return labelled, total
}

func createNodes(ctx context.Context, kube kubernetes.Interface, n int) error {
	return fanout.Run(n, 8, func(i int) error {
		node := sim.NewNode(fmt.Sprintf("node-%04d", i), sim.NodeShape{CPU: "64", Memory: "512Gi"}, nil)
		_, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		return err
	})
}

func startScheduler(ctx context.Context, cp *controlplane.ControlPlane) error {
	dir, err := os.MkdirTemp("", "controllerbench")
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		return err
	}
	go func() { _ = inprocess.RunScheduler(ctx, dir, kubeconfig, inprocess.SchedulerOptions{}) }()
	return nil
}

func report(c config, results []result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d objects × %d pods each (berth: ModelServings of %d ServingGroups × %d pods; peer: Deployments of %d replicas), %d nodes, berth-scheduler, simulated kubelet; controllers at QPS %d, burst %d\n\n",
		c.count, c.groups*podsPerGroup, c.groups, podsPerGroup, c.groups*podsPerGroup, c.count*c.groups*podsPerGroup/100+1, controllerQPS, controllerBurst)
	b.WriteString("| mode | controller | pods | to Available | pods/s | controller CPU s | whole process CPU s |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|\n")
	byMode := map[string]result{}
	for _, r := range results {
		byMode[r.mode] = r
		who := "kube-controller-manager (Deployment, ReplicaSet)"
		if r.mode == modeBerth {
			who = "berth-controller"
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %.1fs | %.0f | %.1f | %.1f |\n", r.mode, who, r.pods, r.available.Seconds(),
			float64(r.pods)/r.available.Seconds(), r.controllerCPU, r.totalCPU)
	}
	if be, ok := byMode[modeBerth]; ok {
		if pe, ok := byMode[modePeer]; ok {
			fmt.Fprintf(&b, "\nberth/peer: time to Available %.2f, controller CPU %.2f\n", be.available.Seconds()/pe.available.Seconds(), be.controllerCPU/pe.controllerCPU)
		}
	}
	return b.String()
}

// writeFigures writes progress.svg (pods of Available objects over time, per mode) and
// progress.csv (its raw numbers) into dir.
func writeFigures(dir string, results []result) error {
	table := figure.NewTable("mode", "seconds", "pods_available")
	line := figure.Line{Title: "Pods of Available objects since the first object was created", XLabel: "seconds", YLabel: "pods"}
	for _, r := range results {
		var xs, ys []float64
		for _, s := range r.progress {
			table.Add(r.mode, s.at, s.pods)
			xs, ys = append(xs, s.at.Seconds()), append(ys, float64(s.pods))
		}
		name := "peer: Deployments (kube-controller-manager)"
		if r.mode == modeBerth {
			name = "berth: ModelServings (berth-controller)"
		}
		line.Series = append(line.Series, figure.Series{Name: name, X: xs, Y: ys})
	}
	if err := figure.Save(filepath.Join(dir, "progress.svg"), line); err != nil {
		return err
	}
	return table.WriteFile(filepath.Join(dir, "progress.csv"))
}
