package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/inprocess"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/sim"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

const (
	ns    = "squeeze"
	model = "squeeze-model"
	// The pools' GPU products: what the ModelServings' nodeSelectors name.
	cheapProduct = "NVIDIA-A100-SXM4-80GB"
	dearProduct  = "NVIDIA-H100-80GB-HBM3"
	// gpusPerGroup is each ServingGroup's one pod's GPUs: two groups per 8-GPU node.
	gpusPerGroup = 4
	// maxBatch is each engine's running sequences; the rest of its requests wait in it.
	// Small, so that a replica short shows in TTFT within a short run.
	maxBatch = 4
	// targetRunning is the policy's target of vllm:num_requests_running per pod.
	targetRunning = 2
	// podStartDelay is the simulated kubelet's time from bind to Ready: a (short) model load.
	podStartDelay = 5 * time.Second
	// sample is how often the watchers read the ModelServings and pods.
	sample = 250 * time.Millisecond
)

// replay runs the load once against a fresh control plane with berth-controller in mode.
func replay(c config, run int, mode string) (result, error) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cp, err := controlplane.Start(ctx, controlplane.Options{})
	if err != nil {
		return result{}, err
	}
	defer cp.Stop()
	dir, err := os.MkdirTemp("", "capacitybench-")
	if err != nil {
		return result{}, err
	}
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		return result{}, err
	}
	cfg := cp.RESTConfig()
	sys, err := inprocess.Start(ctx, cfg, inprocess.Options{
		Dir: dir, Kubeconfig: kubeconfig,
		// The shipped settings in both modes: capacity published every 5 s, the
		// autoscaler's sync every 5 s; only BlindScaling differs.
		Scheduler:  &inprocess.SchedulerOptions{},
		Controller: &controller.Options{BlindScaling: mode == modeBlind, InProcessRestart: true},
		Kubelet: &inprocess.KubeletOptions{PodStartDelay: podStartDelay, Engines: &sim.EngineOptions{
			Configure: func(_ *corev1.Pod, e *engine.Config) { e.MaxBatch = maxBatch },
		}},
		Routers: []router.Options{{Addr: "127.0.0.1:0", ShutdownTimeout: time.Second}},
	})
	if err != nil {
		return result{}, err
	}
	// The components stop before the control plane does (deferred calls run last first).
	defer sys.Stop()
	go func() {
		if err := <-sys.Failed(); err != nil {
			fmt.Fprintf(c.log, "capacitybench: a component stopped: %v\n", err)
			cancel()
		}
	}()

	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return result{}, err
	}
	cl, err := client.New(cfg, client.Options{Scheme: controller.Scheme()})
	if err != nil {
		return result{}, err
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return result{}, err
	}
	for i := range c.cheapNodes + c.dearNodes {
		pool, product := "cheap", cheapProduct
		if i >= c.cheapNodes {
			pool, product = "dear", dearProduct
		}
		node := sim.NewNode(fmt.Sprintf("%s-%d", pool, i), sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: 8, GPUProduct: product}, nil)
		if _, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
			return result{}, err
		}
	}
	if err := apply(ctx, cl, servingYAML("cheap", cheapProduct, 1), servingYAML("dear", dearProduct, 0), serverYAML, routeYAML); err != nil {
		return result{}, err
	}
	// Cheap serves one group before the load; berth-scheduler has published what fits.
	if err := waitFor(ctx, 2*time.Minute, "cheap Available and the capacity published", func() bool {
		var a, b workloadv1alpha1.ModelServing
		if cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cheap"}, &a) != nil || cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "dear"}, &b) != nil {
			return false
		}
		_, okA := a.Annotations[workloadv1alpha1.GroupsThatFitAnnotation]
		_, okB := b.Annotations[workloadv1alpha1.GroupsThatFitAnnotation]
		return a.Status.AvailableReplicas == 1 && okA && okB
	}); err != nil {
		return result{}, err
	}

	r := result{mode: mode, run: run + 1}
	start := time.Now()
	w := startWatch(ctx, cl, kube, start)
	if err := apply(ctx, cl, policyYAML, bindingYAML(c)); err != nil {
		return r, err
	}
	r.requests = runLoad(ctx, c, sys.Routers[0].Addr(), arrivals(c, c.seed+uint64(run)), start)
	r.samples = w.stop()
	r.elapsed = time.Since(start)
	if ctx.Err() != nil {
		return r, fmt.Errorf("stopped early: %w", ctx.Err())
	}
	r.summarize(c)
	return r, nil
}

// waitFor polls ok until it holds or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not after %s", what, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(sample):
		}
	}
	return nil
}

// apply creates each YAML document in the namespace.
func apply(ctx context.Context, cl client.Client, docs ...string) error {
	for _, doc := range docs {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			return fmt.Errorf("%s: %w", doc, err)
		}
		u.SetNamespace(ns)
		if err := cl.Create(ctx, u); err != nil {
			return fmt.Errorf("creating %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

// servingYAML is a one-role ModelServing whose one pod per group takes gpusPerGroup GPUs
// of product.
func servingYAML(name, product string, replicas int) string {
	return fmt.Sprintf(`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata: {name: %[1]s}
spec:
  schedulerName: berth-scheduler
  replicas: %[3]d
  template:
    roles:
    - name: server
      replicas: 1
      entryTemplate:
        metadata: {labels: {app: squeeze}}
        spec:
          nodeSelector: {%[4]s: %[2]s}
          containers:
          - name: vllm
            image: vllm/vllm-openai:v0.11.0
            args: ["--model", "%[5]s"]
            ports: [{containerPort: 8000}]
            resources: {limits: {nvidia.com/gpu: "%[6]d"}}
`, name, product, replicas, sim.GPUProductLabel, model, gpusPerGroup)
}

var serverYAML = fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: squeeze}
spec:
  model: %s
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {app: squeeze}}
  workloadPort: {port: 8000}
`, model)

var routeYAML = fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: squeeze}
spec:
  modelName: %s
  rules:
  - targetModels: [{modelServerName: squeeze}]
`, model)

// policyYAML scales on the engines' running requests, up by at most two replicas (or 100%)
// per 5 s, down after a minute's window.
var policyYAML = `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: squeeze}
spec:
  tolerancePercent: 10
  metrics:
  - {metricName: "vllm:num_requests_running", targetValue: "` + strconv.Itoa(targetRunning) + `"}
  behavior:
    scaleUp:
      stablePolicy: {instances: 2, percent: 100, period: 5s}
    scaleDown: {stabilizationWindow: 60s, period: 15s}
`

// bindingYAML is the optimizer binding over both targets, the cheap one ten times cheaper.
func bindingYAML(c config) string {
	return fmt.Sprintf(`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicyBinding
metadata: {name: squeeze}
spec:
  policyRef: {name: squeeze}
  optimizerConfiguration:
    costExpansionRatePercent: 100
    params:
    - target: {targetRef: {name: cheap}, metricEndpoint: {port: 8000}}
      cost: 10
      minReplicas: 1
      maxReplicas: %d
    - target: {targetRef: {name: dear}, metricEndpoint: {port: 8000}}
      cost: 100
      minReplicas: 0
      maxReplicas: %d
`, c.cheapMax, c.dearMax)
}
