// Command controllerbench measures berth-controller bringing ModelServings to Available on
// the in-process control plane: 200 ModelServings × 4 ServingGroups × 4 pods (a role of 2
// replicas, each an entry and a worker), placed by berth-scheduler and started by the
// simulated kubelet.
//
// It reports pods created per second (first ModelServing created → last one Available) and
// the CPU seconds spent in the controller's goroutines, read from a CPU profile in which
// every goroutine the controller manager starts carries the label component=controller.
// The peer is a plain client creating the same pods and PodGroups directly with 8 workers:
// what the apiserver accepts on this machine without any controller logic.
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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/berth-sh/berth/bench/internal/fanout"
	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/inprocess"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/sim"
	"github.com/berth-sh/berth/pkg/workload"
)

func main() {
	count := flag.Int("modelservings", 200, "ModelServings to create")
	groups := flag.Int("groups", 4, "ServingGroups per ModelServing")
	flag.Parse()
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	ctrllog.SetLogger(klog.Background())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{})
	must(err)
	defer cp.Stop()
	kube := kubernetes.NewForConfigOrDie(cp.RESTConfig())
	cl, err := client.New(cp.RESTConfig(), client.Options{Scheme: controller.Scheme()})
	must(err)

	pods := *count * *groups * 4
	must(createNodes(ctx, kube, pods/100+1))
	startScheduler(ctx, cp)
	kubelet := sim.NewKubelet(kube, 0)
	go kubelet.Run(ctx)

	// Peer: the same pods and PodGroups created directly.
	direct := directCreate(ctx, cl, *count, *groups)
	fmt.Fprintf(os.Stderr, "direct creation: %.0f pods/s\n", direct)

	// Berth: the controller creates them from ModelServings.
	var prof bytes.Buffer
	must(pprof.StartCPUProfile(&prof))
	mgr, err := controller.NewManager(cp.RESTConfig(), controller.Options{MetricsAddr: "0"})
	must(err)
	go pprof.Do(ctx, pprof.Labels("component", "controller"), func(ctx context.Context) { _ = mgr.Start(ctx) })
	start := time.Now()
	must(fanout.Run(*count, 8, func(i int) error { return cl.Create(ctx, modelServing(i, *groups)) }))
	for {
		var list workloadv1alpha1.ModelServingList
		must(cl.List(ctx, &list, client.InNamespace("bench")))
		available := 0
		for _, ms := range list.Items {
			if int(ms.Status.AvailableReplicas) == *groups {
				available++
			}
		}
		if available == *count {
			break
		}
		if time.Since(start) > 15*time.Minute {
			must(fmt.Errorf("only %d of %d ModelServings available after 15m", available, *count))
		}
		time.Sleep(200 * time.Millisecond)
	}
	elapsed := time.Since(start)
	pprof.StopCPUProfile()
	controllerCPU, totalCPU := labelledCPU(prof.Bytes())
	rate := float64(pods) / elapsed.Seconds()

	fmt.Printf("| ModelServings × groups × pods | to Available | pods/s (controller) | pods/s (direct client) | controller/direct | controller CPU s | whole process CPU s |\n")
	fmt.Printf("|---|---:|---:|---:|---:|---:|---:|\n")
	fmt.Printf("| %d × %d × 4 = %d | %.1fs | %.0f | %.0f | %.2f | %.1f | %.1f |\n",
		*count, *groups, pods, elapsed.Seconds(), rate, direct, rate/direct, controllerCPU, totalCPU)
}

func modelServing(i, groups int) *workloadv1alpha1.ModelServing {
	tmpl := workloadv1alpha1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{
		Name: "engine", Image: "vllm", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("100Mi")}}}}}}
	return &workloadv1alpha1.ModelServing{
		ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("ms-%03d", i)},
		Spec: workloadv1alpha1.ModelServingSpec{
			Replicas:      ptr.To(int32(groups)),
			SchedulerName: workloadv1alpha1.BerthSchedulerName,
			Template: workloadv1alpha1.ServingGroup{Roles: []workloadv1alpha1.Role{{
				Name: "server", Replicas: ptr.To[int32](2), WorkerReplicas: 1, EntryTemplate: tmpl, WorkerTemplate: tmpl.DeepCopy(),
			}}},
		},
	}
}

// directCreate creates, from a plain client, the pods and PodGroups the controller would
// create for the same ModelServings (in another namespace, unscheduled), and returns pods/s.
func directCreate(ctx context.Context, cl client.Client, count, groups int) float64 {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "direct"}}
	must(cl.Create(ctx, ns))
	must(cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}))
	var objs []client.Object
	for i := 0; i < count; i++ {
		ms := modelServing(i, groups)
		ms.Namespace, ms.UID = "direct", "00000000-0000-0000-0000-000000000000"
		for g := 0; g < groups; g++ {
			objs = append(objs, workload.BuildPodGroup(ms, g))
			for j := 0; j < 2; j++ {
				for k := 0; k < 2; k++ {
					p := workload.BuildPod(ms, "rev", g, &ms.Spec.Template.Roles[0], j, k)
					p.Spec.SchedulerName = "none" // nobody schedules these
					objs = append(objs, p)
				}
			}
		}
	}
	for _, o := range objs {
		o.SetOwnerReferences(nil)
	}
	start := time.Now()
	must(fanout.Run(len(objs), 8, func(i int) error { return cl.Create(ctx, objs[i]) }))
	elapsed := time.Since(start)
	_ = cl.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace("direct"), client.GracePeriodSeconds(0))
	return float64(count*groups*4) / elapsed.Seconds()
}

// labelledCPU sums the CPU samples of goroutines labelled component=controller, and all.
func labelledCPU(raw []byte) (controller, total float64) {
	p, err := profile.Parse(bytes.NewReader(raw))
	must(err)
	idx := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" {
			idx = i
		}
	}
	for _, s := range p.Sample {
		v := float64(s.Value[idx]) / 1e9
		total += v
		if strings.Join(s.Label["component"], "") == "controller" {
			controller += v
		}
	}
	return controller, total
}

func createNodes(ctx context.Context, kube kubernetes.Interface, n int) error {
	return fanout.Run(n, 8, func(i int) error {
		node := sim.NewNode(fmt.Sprintf("node-%04d", i), sim.NodeShape{CPU: "64", Memory: "512Gi"}, nil)
		_, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		return err
	})
}

func startScheduler(ctx context.Context, cp *controlplane.ControlPlane) {
	dir, err := os.MkdirTemp("", "controllerbench")
	must(err)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	must(cp.WriteKubeconfig(kubeconfig))
	go func() { _ = inprocess.RunScheduler(ctx, dir, kubeconfig, inprocess.SchedulerOptions{}) }()
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "controllerbench:", err)
		os.Exit(1)
	}
}
