package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/sandbox"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/sim"
)

// One control plane for the package; each test runs a whole sandbox (scheduler, controller,
// kubelet) on it, one after the other.
var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	sandbox.ConfigureLogging(0)
	cptest.Main(m, &cp)
}

func options() sandbox.Options {
	return sandbox.Options{
		Fabric:        sandbox.DefaultFabric(),
		DRAGPUs:       sandbox.DefaultDRAGPUs(sandbox.DefaultFabric()),
		Once:          true,
		Timeout:       60 * time.Second,
		PodStartDelay: 50 * time.Millisecond,
		ControlPlane:  cp,
		RouterAddr:    "127.0.0.1:0",
		// Engines 100 times faster than a GPU: the probe requests answer at once.
		EngineTimeScale:   0.01,
		VariantSyncPeriod: 500 * time.Millisecond,
	}
}

// TestExamples runs the sandbox on examples/ and checks that every ModelServing became
// Available and that the placement table names every group and every pod with the node,
// leaf and spine it runs on.
func TestExamples(t *testing.T) {
	o := options()
	o.ExamplesDir = filepath.Join("..", "..", "examples")
	var out bytes.Buffer
	require.NoError(t, sandbox.Run(context.Background(), o, &out), "output:\n%s", out.String())
	t.Logf("output:\n%s", out.String())

	// Every routed model answered a chat completion through the router.
	assert.Contains(t, out.String(), "berth-router serves the OpenAI API at http://127.0.0.1:")
	for _, model := range []string{"Qwen/Qwen3-8B", "deepseek-r1", "llama-3-1-8b", "meta-llama/Llama-3.1-8B-Instruct", "qwen3-0--6b", "qwen3-32b"} {
		assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(model)+` +200 in .* from default/`, out.String())
	}

	// The model at zero replicas is not asked (it would come up); --load asks it (TestLoad).
	assert.Regexp(t, `(?m)^  qwen3-4b +at zero replicas \(default/qwen3-4b-on-demand\)`, out.String())

	// The Gateway example answered through its listener, from the InferencePool's engines.
	assert.Contains(t, out.String(), "berth-router serves Gateway default/inference listener http at http://127.0.0.1:18081")
	assert.Regexp(t, `(?m)^  deepseek-ai/DeepSeek-R1 +200 in .* from default/deepseek-r1-tp-`, out.String())

	// The VariantAutoscaling example was sized: one H100 replica for an idle model.
	assert.Regexp(t, `(?m)^  default/llama-3-1-8b-premium  meta-llama/Llama-3.1-8B-Instruct: 1 × H100 now \(cost 65.00, [0-9.]+ req/min\), optimized 1 × H100, applied true$`, out.String())

	// The table's rows by pod name.
	rows := map[string][]string{}
	groups := map[string]bool{}
	header := -1
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[0] == "MODELSERVING" {
			header = len(f)
			continue
		}
		if header > 0 && len(f) >= 7 {
			rows[f[3]] = f
			groups[f[1]] = true
		}
	}
	require.Positive(t, header, "no placement table in the output")

	cl, err := client.New(cp.RESTConfig(), client.Options{Scheme: controller.Scheme()})
	require.NoError(t, err)
	ctx := context.Background()
	var list workloadv1alpha1.ModelServingList
	require.NoError(t, cl.List(ctx, &list, client.InNamespace("default")))
	// Three ModelServings, two the ModelBooster made (one per backend; the A100 one at 0),
	// and one each for the llmaz Playground and the llmaz Service.
	var names []string
	for _, ms := range list.Items {
		names = append(names, ms.Name)
	}
	require.ElementsMatch(t, []string{"deepseek-r1-tp", "qwen3-8b-pd", "llama-3-1-8b-premium", "llama-3-1-8b-h100", "llama-3-1-8b-a100",
		"qwen3-0--6b", "llama3-405b-instruct", "qwen3-32b-dra", "qwen3-4b-on-demand"}, names)
	var nodes corev1.NodeList
	require.NoError(t, cl.List(ctx, &nodes))
	nodeLabels := map[string]map[string]string{}
	for _, n := range nodes.Items {
		nodeLabels[n.Name] = n.Labels
	}
	for _, ms := range list.Items {
		for i := int32(0); i < *ms.Spec.Replicas; i++ {
			group := fmt.Sprintf("%s-%d", ms.Name, i)
			assert.True(t, groups[group], "group %s missing from the table", group)
		}
		var pods corev1.PodList
		require.NoError(t, cl.List(ctx, &pods, client.InNamespace(ms.Namespace),
			client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: ms.Name}))
		if *ms.Spec.Replicas == 0 {
			require.Empty(t, pods.Items, "%s has no replicas", ms.Name)
			continue
		}
		require.NotEmpty(t, pods.Items)
		for _, p := range pods.Items {
			row := rows[p.Name]
			if !assert.NotNil(t, row, "pod %s missing from the table", p.Name) {
				continue
			}
			labels := nodeLabels[p.Spec.NodeName]
			require.NotNil(t, labels, "pod %s is on no known node", p.Name)
			assert.Equal(t, []string{
				ms.Namespace + "/" + ms.Name, p.Labels[workloadv1alpha1.GroupNameLabel], p.Labels[workloadv1alpha1.RoleLabel],
				p.Name, p.Spec.NodeName, labels[sim.LeafLabel], labels[sim.SpineLabel],
			}, row[:7], "row of pod %s", p.Name)
			assert.NotEmpty(t, labels[sim.LeafLabel])
			assert.NotEmpty(t, labels[sim.SpineLabel])
			if ms.Name == "qwen3-32b-dra" {
				draPodOnItsNode(t, cl, &p)
			}
		}
	}
	assert.Contains(t, out.String(), "DRA GPUs: the 4 nodes of leaf-3 publish theirs as gpu.nvidia.com ResourceSlices")
}

// draPodOnItsNode checks that a pod of the DRA example runs on a DRA node of the last leaf
// with two A100s of that node allocated to its claim and reported Ready by the driver.
func draPodOnItsNode(t *testing.T, cl client.Client, p *corev1.Pod) {
	t.Helper()
	var node corev1.Node
	require.NoError(t, cl.Get(context.Background(), client.ObjectKey{Name: p.Spec.NodeName}, &node))
	assert.Equal(t, "8", node.Annotations[sim.DRAGPUsAnnotation], "pod %s runs on a node with 8 DRA GPUs", p.Name)
	require.Len(t, p.Status.ResourceClaimStatuses, 1)
	var claim resourcev1.ResourceClaim
	require.NoError(t, cl.Get(context.Background(), client.ObjectKey{Namespace: p.Namespace, Name: *p.Status.ResourceClaimStatuses[0].ResourceClaimName}, &claim))
	require.NotNil(t, claim.Status.Allocation, "claim of %s", p.Name)
	require.Len(t, claim.Status.Allocation.Devices.Results, 2)
	for _, r := range claim.Status.Allocation.Devices.Results {
		assert.Equal(t, sim.DRADriver, r.Driver)
		assert.Equal(t, p.Spec.NodeName, r.Pool, "the claim's devices are on the pod's node")
	}
	assert.Len(t, claim.Status.Devices, 2, "the driver reported both devices prepared")
}

// A --dra-gpus name that is no leaf or spine of the fabric fails the sandbox before anything
// starts, naming it and what the fabric has.
func TestDRAGPUsUnknownDomain(t *testing.T) {
	o := options()
	o.DRAGPUs = []string{"leaf-3", "leaf-9"}
	o.ExamplesDir = t.TempDir()
	var out bytes.Buffer
	err := sandbox.Run(context.Background(), o, &out)
	require.EqualError(t, err, `DRA GPUs: "leaf-9" is no leaf or spine of the fabric (it has leaf-0, leaf-1, leaf-2, leaf-3, spine-0, spine-1)`)
	assert.Empty(t, out.String(), "nothing started")
}

// TestDoesNotFit gives the sandbox a ModelServing whose pods ask for more GPUs than any node
// has: Run must fail after the timeout, naming it and saying why its pods are not placed.
func TestDoesNotFit(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "too-big.yaml"), []byte(`
# 16 GPUs per pod; the nodes have 8.
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata:
  name: too-big
  namespace: sandbox-unfit
spec:
  schedulerName: berth-scheduler
  template:
    roles:
    - name: server
      entryTemplate:
        spec:
          containers:
          - name: vllm
            image: vllm/vllm-openai:v0.11.0
            resources:
              requests:
                nvidia.com/gpu: "16"
              limits:
                nvidia.com/gpu: "16"
`), 0o600))
	o := options()
	o.ExamplesDir = dir
	o.Timeout = 5 * time.Second
	var out bytes.Buffer
	err := sandbox.Run(context.Background(), o, &out)
	t.Logf("output:\n%s", out.String())
	require.Error(t, err)
	t.Logf("error:\n%v", err)
	msg := err.Error()
	assert.Contains(t, msg, "modelserving sandbox-unfit/too-big is not Available")
	assert.Contains(t, msg, "pod sandbox-unfit/too-big-0-server-0-0 pending")
	assert.Contains(t, msg, string(sim.GPUResource), "the reason names the resource that is short")
}

// TestLoad runs the sandbox with --load on the ModelBooster example (in its own namespace):
// the load through the router must make the autoscaler scale the model up (Run fails
// otherwise), no request may fail, and the output must show the replicas over time.
func TestLoad(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "modelbooster-two-accelerators.yaml"))
	require.NoError(t, err)
	dir := t.TempDir()
	doc := strings.Replace(string(raw), "namespace: default", "namespace: sandbox-load", 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "booster.yaml"), []byte(doc), 0o600))
	// And a model at zero replicas: the load's first requests are held until it comes up.
	raw, err = os.ReadFile(filepath.Join("..", "..", "examples", "modelserving-scale-from-zero.yaml"))
	require.NoError(t, err)
	doc = strings.ReplaceAll(string(raw), "namespace: default", "namespace: sandbox-load")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "from-zero.yaml"), []byte(doc), 0o600))
	// And a ModelServing of two groups, each with its GPUs from a DRA claim: after the load,
	// the node of its group 0 is drained while streams for its model run.
	raw, err = os.ReadFile(filepath.Join("..", "..", "examples", "modelserving-dra-gpus.yaml"))
	require.NoError(t, err)
	doc = strings.ReplaceAll(string(raw), "namespace: default", "namespace: sandbox-load")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "dra.yaml"), []byte(doc), 0o600))
	o := options()
	o.ExamplesDir = dir
	// Real-time engines: requests hold their batch slots as long as on a GPU, so 160 in
	// flight overflow one engine's batch of 64 and queue.
	o.EngineTimeScale = 1
	o.AutoscaleSyncPeriod = 500 * time.Millisecond
	o.Load = sandbox.Load{Concurrency: 160, Duration: 8 * time.Second, MaxTokens: 64, Every: time.Second}
	var out bytes.Buffer
	require.NoError(t, sandbox.Run(context.Background(), o, &out), "output:\n%s", out.String())
	t.Logf("output:\n%s", out.String())
	assert.Regexp(t, `load done: [1-9][0-9]* requests answered, 0 failed`, out.String())
	// Scale from zero: held at zero, scaled to one, then answered.
	// (TestExamples, when it ran first, left its own qwen3-4b at zero too: the output names both.)
	assert.Regexp(t, `scale from zero: qwen3-4b is at zero replicas \(.*sandbox-load/qwen3-4b-on-demand`, out.String())
	assert.Regexp(t, `qwen3-4b-on-demand: replicas 0, available 0`, out.String())
	assert.Regexp(t, `qwen3-4b-on-demand: replicas 1, available 1`, out.String())
	assert.Regexp(t, `(?m)^  request 3 held, then 200 in `, out.String())
	assert.Contains(t, out.String(), "qwen3-4b: 3 held requests answered once it came up from zero")
	assert.Regexp(t, `replicas llama-3-1-8b-a100=\d+ llama-3-1-8b-h100=[2-9]`, out.String(), "the H100 backend grew past its minimum of 1")
	assert.Contains(t, out.String(), "PANIC", "a jump from 1 engine to 160 in flight is a burst")
	// The drain: the node's groups moved whole, at least one group kept serving, no stream
	// failed. The target is a routed ModelServing whose count no autoscaler sets (here
	// qwen3-32b-dra with its two DRA groups, or one TestExamples left): the autoscaled
	// backends scale down after the load, which once took the A100 backend from 3 groups to
	// 0 in the middle of its drain.
	assert.Regexp(t, `drain: cordoning \S+, which holds ServingGroup \S+-0 of \S+/\S+ \([2-9] available\)`, out.String())
	assert.Regexp(t, `drain: \d ServingGroups? moved off \S+ whole \([^)]+\); available groups never below [1-9] of [2-9] \(its count fixed\); [1-9]\d* streams answered during the drain, 0 failed`, out.String())
}

// syncBuffer is an io.Writer the sandbox writes to while the test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestClusterLoops runs the sandbox as `make run` does (until stopped) and uses it as a
// cluster user would: a plain Deployment beside a ModelServing runs (kube-scheduler places
// its pods, the simulated kubelet starts them); deleting the ModelServing takes its pods and
// PodGroups with it (garbage collector); deleting the namespace removes it.
func TestClusterLoops(t *testing.T) {
	dir := t.TempDir()
	const ns = "sandbox-loops"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mixed.yaml"), []byte(`
apiVersion: v1
kind: Namespace
metadata:
  name: `+ns+`
---
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata:
  name: small
  namespace: `+ns+`
spec:
  schedulerName: berth-scheduler
  replicas: 2
  template:
    roles:
    - name: server
      entryTemplate:
        spec:
          containers:
          - name: vllm
            image: vllm/vllm-openai:v0.11.0
            resources:
              limits:
                nvidia.com/gpu: "1"
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: `+ns+`
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
        resources:
          requests: {cpu: 100m}
`), 0o600))
	o := options()
	o.ExamplesDir = dir
	o.Once = false
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- sandbox.Run(ctx, o, out) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
		t.Logf("output:\n%s", out.String())
	}()
	kube, err := kubernetes.NewForConfig(cp.RESTConfig())
	require.NoError(t, err)
	vc, err := volcanoclient.NewForConfig(cp.RESTConfig())
	require.NoError(t, err)
	eventually := func(what string, cond func(ctx context.Context) (bool, error)) {
		t.Helper()
		require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, cond), "%s\noutput:\n%s", what, out.String())
	}

	eventually("every ModelServing Available", func(context.Context) (bool, error) {
		return strings.Contains(out.String(), "every ModelServing is Available"), nil
	})
	eventually("the plain Deployment's 3 pods run on simulated nodes", func(ctx context.Context) (bool, error) {
		d, err := kube.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		return err == nil && d.Status.AvailableReplicas == 3, nil
	})
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	require.NoError(t, err)
	for _, p := range pods.Items {
		assert.Equal(t, corev1.DefaultSchedulerName, p.Spec.SchedulerName)
		assert.NotEmpty(t, p.Spec.NodeName, "pod %s is placed", p.Name)
	}

	servingPods := metav1.ListOptions{LabelSelector: workloadv1alpha1.ModelServingNameLabel + "=small"}
	before, err := kube.CoreV1().Pods(ns).List(ctx, servingPods)
	require.NoError(t, err)
	require.Len(t, before.Items, 2)
	cl, err := client.New(cp.RESTConfig(), client.Options{Scheme: controller.Scheme()})
	require.NoError(t, err)
	require.NoError(t, cl.Delete(ctx, &workloadv1alpha1.ModelServing{ObjectMeta: metav1.ObjectMeta{Name: "small", Namespace: ns}}))
	eventually("the deleted ModelServing's pods and PodGroups are gone", func(ctx context.Context) (bool, error) {
		p, err := kube.CoreV1().Pods(ns).List(ctx, servingPods)
		if err != nil {
			return false, nil
		}
		pgs, err := vc.SchedulingV1beta1().PodGroups(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(p.Items) == 0 && len(pgs.Items) == 0, nil
	})

	require.NoError(t, kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
	eventually("the deleted namespace is gone, Deployment and all", func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
