// Command gangbench measures gang scheduling throughput on the in-process control plane,
// reproducing the upstream scheduler_perf workloads in
// k8s.io/kubernetes v1.37.1 test/integration/scheduler_perf/podgroup/gangscheduling
// (5000 nodes; 1000, 2000 and 3000 gangs of 3 pods; 3 gangs of 1000 pods).
//
// Each workload runs three times on the same nodes with the same pods:
//   - native:  kube-scheduler 1.37's GangScheduling plugin (GenericWorkload gate) on
//     scheduling.k8s.io/v1beta1 PodGroups;
//   - berth:   berth-scheduler (manifests/scheduler/config.yaml) on Volcano PodGroups;
//   - ceiling: the default profile, the same pods without any gang.
//
// Throughput is pods bound per second, from the first pod created to the last pod bound,
// with the scheduler already running and synced. All three share the machine, the
// apiserver and the node set, so their ratios are what to read.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
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
	"sigs.k8s.io/yaml"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/berth-sh/berth/bench/internal/fanout"
	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/pkg/plugins/gang"
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
	native  mode = "native"
	berth   mode = "berth"
	ceiling mode = "ceiling"
)

func main() {
	nodes := flag.Int("nodes", 5000, "simulated nodes (upstream: 5000)")
	only := flag.String("workloads", "", "comma-separated workload names to run (default: all)")
	scale := flag.Float64("scale", 1, "multiply gang counts by this (for a quick look; 1 = upstream)")
	out := flag.String("out", "", "also write the markdown table to this file")
	modes := flag.String("modes", "native,berth,ceiling", "which schedulers to run")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the berth runs to this file")
	flag.Parse()
	// The apiserver and scheduler log per request at the default level; a benchmark wants none of it.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)

	ctx := context.Background()
	flags := append(controlplane.DefaultAPIServerFlags(),
		"--runtime-config=scheduling.k8s.io/v1beta1=true",
		"--feature-gates=GenericWorkload=true",
		// Deleting a run's pods between runs is otherwise one etcd delete at a time.
		"--delete-collection-workers=16",
	)
	fmt.Fprintf(os.Stderr, "starting control plane...\n")
	cp, err := controlplane.Start(ctx, controlplane.Options{APIServerFlags: flags})
	must(err)
	defer cp.Stop()

	b := newBench(cp)
	fmt.Fprintf(os.Stderr, "creating %d nodes...\n", *nodes)
	must(b.createNodes(ctx, *nodes))

	var rows []string
	for _, w := range workloads {
		if *only != "" && !strings.Contains(","+*only+",", ","+w.name+",") {
			continue
		}
		w.gangs = max(1, int(float64(w.gangs)**scale))
		results := map[mode]float64{}
		for _, m := range []mode{native, berth, ceiling} {
			if !strings.Contains(","+*modes+",", ","+string(m)+",") {
				continue
			}
			if m == berth && *cpuProfile != "" {
				f, err := os.Create(*cpuProfile)
				must(err)
				must(pprof.StartCPUProfile(f))
			}
			podsPerSec, err := b.run(ctx, w, m)
			if m == berth && *cpuProfile != "" {
				pprof.StopCPUProfile()
			}
			must(err)
			results[m] = podsPerSec
			fmt.Fprintf(os.Stderr, "%-42s %-8s %8.1f pods/s\n", w.name, m, podsPerSec)
		}
		rows = append(rows, fmt.Sprintf("| %s | %d | %.0f | %.0f | %.0f | %.2f | %.2f |", w.name, w.gangs*w.podsPerGroup,
			results[native], results[berth], results[ceiling], results[berth]/results[native], results[berth]/results[ceiling]))
	}
	table := "| workload | pods | native pods/s | berth pods/s | ceiling pods/s | berth/native | berth/ceiling |\n" +
		"|---|---:|---:|---:|---:|---:|---:|\n" + strings.Join(rows, "\n") + "\n"
	fmt.Print(table)
	if *out != "" {
		must(os.WriteFile(*out, []byte(table), 0o644))
	}
}

type bench struct {
	cp   *controlplane.ControlPlane
	cfg  *rest.Config
	kube kubernetes.Interface
	vc   volcanoclient.Interface
	runs int
}

func newBench(cp *controlplane.ControlPlane) *bench {
	cfg := cp.RESTConfig()
	cfg.QPS, cfg.Burst = 5000, 5000
	return &bench{cp: cp, cfg: cfg, kube: kubernetes.NewForConfigOrDie(cfg), vc: volcanoclient.NewForConfigOrDie(cfg)}
}

// createNodes makes scheduler_perf's default node: 4 CPU, 32Gi, 110 pods.
func (b *bench) createNodes(ctx context.Context, n int) error {
	return fanout.Run(n, 16, func(i int) error {
		node := sim.NewNode(fmt.Sprintf("node-%05d", i), sim.NodeShape{CPU: "4", Memory: "32Gi"}, nil)
		_, err := b.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		return err
	})
}

// run schedules one workload in one mode and returns pods bound per second.
func (b *bench) run(ctx context.Context, w workload, m mode) (float64, error) {
	b.runs++
	ns := fmt.Sprintf("%s-%d", m, b.runs)
	if _, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return 0, err
	}
	configFile, err := b.schedulerConfig(m)
	if err != nil {
		return 0, err
	}
	schedCtx, stopScheduler := context.WithCancel(ctx)
	schedDone := make(chan error, 1)
	go func() { schedDone <- scheduler.Run(schedCtx, scheduler.Options{ConfigFile: configFile}) }()
	defer func() {
		stopScheduler()
		<-schedDone
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
		if m != ceiling {
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
	case berth:
		p.Spec.SchedulerName = scheduler.SchedulerName
		if group != "" {
			p.Annotations = map[string]string{gang.GroupNameKey: group}
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
	cfg := map[string]any{
		"apiVersion": "kubescheduler.config.k8s.io/v1",
		"kind":       "KubeSchedulerConfiguration",
	}
	if m == berth {
		out, err := scheduler.InProcessConfig(kubeconfig, nil)
		if err != nil {
			return "", err
		}
		path := filepath.Join(dir, "config.yaml")
		return path, os.WriteFile(path, out, 0o600)
	}
	cfg["clientConnection"] = map[string]any{"kubeconfig": kubeconfig, "qps": 5000, "burst": 5000}
	cfg["leaderElection"] = map[string]any{"leaderElect": false}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "config.yaml")
	return path, os.WriteFile(path, out, 0o600)
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "gangbench:", err)
		os.Exit(1)
	}
}
