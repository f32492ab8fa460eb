// Package autoscale runs berth-controller's autoscaler against the whole in-process system:
// a real apiserver, berth-scheduler placing the pods, the ModelServing controller, the
// simulated kubelet with an engine per pod, and berth-router carrying the load, sent with
// the official OpenAI Go client. Every test watches its ModelServings' replicas for its
// whole run and checks the bounds and the timing of each change against that record.
package autoscale

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/systemtest"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/sim"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) { cptest.Main(m, &cp) }

// syncPeriod is the autoscaler's; short so a test sees several decisions per second.
const syncPeriod = 250 * time.Millisecond

// capacityPeriod is berth-scheduler's groups-that-fit publishing period.
const capacityPeriod = 500 * time.Millisecond

// variantSyncPeriod is the VariantAutoscaling reconciler's: long enough that a counter
// rate over one period averages a few requests.
const variantSyncPeriod = time.Second

var (
	startOnce sync.Once
	kube      kubernetes.Interface
	cl        client.WithWatch
	rt        *router.Router
	nsCount   atomic.Int32
)

func startSystem(t *testing.T) {
	startOnce.Do(func() {
		// Real-time engines: a request holds its batch slot for as long as a GPU would, so
		// the number of running requests per pod is what the load makes it.
		sys, err := systemtest.Start(cp, systemtest.Options{
			Engines:             sim.EngineOptions{TimeScale: 1, DrainTimeout: 5 * time.Second},
			AutoscaleSyncPeriod: syncPeriod,
			VariantSyncPeriod:   variantSyncPeriod,
			CapacityPeriod:      capacityPeriod,
			// BERTH_TEST_BLIND_SCALING=1 runs the package with placement-aware scale-up off
			// (--placement-aware-scaling=false), to see TestOverflowGoesWhereItLands fail.
			BlindScaling: os.Getenv("BERTH_TEST_BLIND_SCALING") == "1",
		})
		require.NoError(t, err)
		kube, cl, rt = sys.Kube, sys.Client, sys.Routers[0]
		system = sys
	})
	require.NotNil(t, system, "the system did not start")
}

var system *systemtest.System

// world is one test's namespace with its own GPU nodes.
type world struct {
	t   *testing.T
	ctx context.Context
	ns  string
}

func newWorld(t *testing.T, gpuNodes int) *world {
	startSystem(t)
	ctx, cancel := context.WithCancel(context.Background())
	w := &world{t: t, ctx: ctx, ns: fmt.Sprintf("as-%d", nsCount.Add(1))}
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	for i := range gpuNodes {
		_, err := kube.CoreV1().Nodes().Create(ctx, systemtest.GPUNode(fmt.Sprintf("%s-gpu-%d", w.ns, i), w.ns, ""), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		cancel()
		if t.Failed() {
			w.dump()
		}
		require.NoError(t, system.Cleanup(w.ns), "the test's namespace is removed with everything in it")
	})
	return w
}

func (w *world) dump() {
	var bindings workloadv1alpha1.AutoscalingPolicyBindingList
	_ = cl.List(context.Background(), &bindings, client.InNamespace(w.ns))
	for _, b := range bindings.Items {
		out, _ := yaml.Marshal(b.Status)
		w.t.Logf("binding %s status:\n%s", b.Name, out)
	}
	var policies workloadv1alpha1.AutoscalingPolicyList
	_ = cl.List(context.Background(), &policies, client.InNamespace(w.ns))
	for _, p := range policies.Items {
		out, _ := yaml.Marshal(p.Status)
		w.t.Logf("policy %s status:\n%s", p.Name, out)
	}
	var pods corev1.PodList
	_ = cl.List(context.Background(), &pods, client.InNamespace(w.ns))
	for _, p := range pods.Items {
		w.t.Logf("pod %s node=%q phase=%s", p.Name, p.Spec.NodeName, p.Status.Phase)
	}
	evs, _ := kube.CoreV1().Events(w.ns).List(context.Background(), metav1.ListOptions{})
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind == "AutoscalingPolicyBinding" || e.InvolvedObject.Kind == "AutoscalingPolicy" {
			w.t.Logf("event %s %s: %s", e.InvolvedObject.Name, e.Reason, e.Message)
		}
	}
}

// apply creates every object of the YAML documents in the world's namespace.
func (w *world) apply(manifests ...string) {
	w.t.Helper()
	for _, m := range manifests {
		obj, err := systemtest.Decode(m)
		require.NoError(w.t, err, m)
		obj.SetNamespace(w.ns)
		require.NoError(w.t, cl.Create(w.ctx, obj))
	}
}

// served is a ModelServing of one-GPU engine pods for model, with a ModelServer and a
// ModelRoute so the router serves it by that name. Pods carry label app=<app> (the
// ModelServer selects on it, so several ModelServings can serve one model).
func (w *world) served(name, model, app string, replicas int) {
	w.apply(servedYAML(name, model, app, replicas, 1, "", ""))
}

// servedYAML is a one-role ModelServing for berth-scheduler whose engine pods (label app)
// serve model, each asking gpus GPUs, with extraArgs after --model (a JSON list tail such as
// `, "--max-num-seqs", "8"`) and nodeSelector (a YAML flow map, "" for none).
func servedYAML(name, model, app string, replicas, gpus int, extraArgs, nodeSelector string) string {
	sel := ""
	if nodeSelector != "" {
		sel = "\n          nodeSelector: " + nodeSelector
	}
	return fmt.Sprintf(`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata: {name: %[1]s}
spec:
  schedulerName: berth-scheduler
  replicas: %[4]d
  template:
    roles:
    - name: server
      replicas: 1
      entryTemplate:
        metadata: {labels: {app: %[3]s}}
        spec:%[7]s
          containers:
          - name: vllm
            image: vllm/vllm-openai:v0.11.0
            args: ["--model", "%[2]s"%[6]s]
            ports: [{containerPort: 8000}]
            resources: {limits: {nvidia.com/gpu: "%[5]d"}}
`, name, model, app, replicas, gpus, extraArgs, sel)
}

func (w *world) route(app, model string) {
	w.apply(fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: %[1]s}
spec:
  model: %[2]s
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {app: %[1]s}}
  workloadPort: {port: 8000}
`, app, model), fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: %[1]s}
spec:
  modelName: %[2]s
  rules:
  - targetModels: [{modelServerName: %[1]s}]
`, app, model))
}

// replicasLog records a ModelServing's spec.replicas over time from a watch that runs for
// the whole test.
type replicasLog struct {
	mu      *sync.Mutex // shared by the logs of one watch, so their order is the watch's
	changes []change
}

type change struct {
	at  time.Time
	seq int // position in the watch's stream
	n   int32
}

// watchReplicas records the replicas of the named ModelServings from one watch, so
// changes to different ModelServings keep the order etcd wrote them in.
func (w *world) watchReplicas(names ...string) map[string]*replicasLog {
	w.t.Helper()
	mu := &sync.Mutex{}
	logs := map[string]*replicasLog{}
	for _, n := range names {
		logs[n] = &replicasLog{mu: mu}
	}
	wi, err := cl.Watch(w.ctx, &workloadv1alpha1.ModelServingList{}, client.InNamespace(w.ns))
	require.NoError(w.t, err)
	done := make(chan struct{})
	// A raw watch can end (the apiserver closes it, or sends an Error) and the log would
	// silently miss every change after: the test fails then, rather than judging half a log.
	var stopping atomic.Bool
	var broke string
	go func() {
		defer close(done)
		// Stopped by the test (its cleanup, or its context ending): the stream's close may
		// arrive as an Error event ("response body closed"), which is not a broken log.
		ended := func() bool { return stopping.Load() || w.ctx.Err() != nil }
		defer func() {
			if !ended() && broke == "" {
				broke = "the watch ended early"
			}
		}()
		seq := 0
		for ev := range wi.ResultChan() {
			if ev.Type == watch.Error {
				if !ended() {
					broke = fmt.Sprintf("the watch failed: %v", apierrors.FromObject(ev.Object))
				}
				return
			}
			ms, ok := ev.Object.(*workloadv1alpha1.ModelServing)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			l := logs[ms.Name]
			if l == nil {
				continue
			}
			mu.Lock()
			seq++
			if len(l.changes) == 0 || l.changes[len(l.changes)-1].n != *ms.Spec.Replicas {
				l.changes = append(l.changes, change{time.Now(), seq, *ms.Spec.Replicas})
			}
			mu.Unlock()
		}
	}()
	w.t.Cleanup(func() {
		stopping.Store(true)
		wi.Stop()
		<-done
		if broke != "" {
			w.t.Errorf("the replicas log of %v is incomplete: %s at %s", names, broke, time.Now().Format(time.StampMilli))
		}
	})
	return logs
}

func (l *replicasLog) snapshot() []change {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]change(nil), l.changes...)
}

func (l *replicasLog) last() int32 {
	c := l.snapshot()
	if len(c) == 0 {
		return -1
	}
	return c[len(c)-1].n
}

func (l *replicasLog) values() []int32 {
	var out []int32
	for _, c := range l.snapshot() {
		out = append(out, c.n)
	}
	return out
}

// load keeps `concurrency` chat completions in flight through the router until stopped.
type load struct {
	want    atomic.Int32
	ok, bad atomic.Int64
	stop    context.CancelFunc
	wg      sync.WaitGroup
}

// startLoad sends requests for model; each asks for tokens output tokens (about 10 ms of
// decode each on a real-time engine).
func (w *world) startLoad(model string, concurrency int32, tokens int64) *load {
	ctx, cancel := context.WithCancel(w.ctx)
	l := &load{stop: cancel}
	l.want.Store(concurrency)
	c := openai.NewClient(option.WithBaseURL("http://"+rt.Addr()+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0),
		option.WithRequestTimeout(60*time.Second))
	for i := range int32(64) {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for ctx.Err() == nil {
				if i >= l.want.Load() {
					select {
					case <-ctx.Done():
					case <-time.After(50 * time.Millisecond):
					}
					continue
				}
				_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
					Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("request %d", i))},
					MaxTokens: openai.Int(tokens),
				})
				switch {
				case err == nil:
					l.ok.Add(1)
				case ctx.Err() == nil && !errors.Is(err, context.Canceled):
					l.bad.Add(1)
					time.Sleep(50 * time.Millisecond)
				}
			}
		}()
	}
	w.t.Cleanup(l.end)
	return l
}

func (l *load) end() { l.stop(); l.wg.Wait() }

// scale sets a target's replicas through the scale subresource, as `kubectl scale` does.
func (w *world) scale(name string, n int32) {
	w.t.Helper()
	ms := &workloadv1alpha1.ModelServing{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns}}
	s := &autoscalingv1.Scale{}
	require.NoError(w.t, cl.SubResource("scale").Get(w.ctx, ms, s))
	s.Spec.Replicas = n
	require.NoError(w.t, cl.SubResource("scale").Update(w.ctx, ms, client.WithSubResourceBody(s)))
}

func (w *world) binding(name string) *workloadv1alpha1.AutoscalingPolicyBinding {
	var b workloadv1alpha1.AutoscalingPolicyBinding
	require.NoError(w.t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, &b))
	return &b
}

func (w *world) eventually(what string, timeout time.Duration, cond func() bool) {
	w.t.Helper()
	err := wait.PollUntilContextTimeout(w.ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond(), nil })
	require.NoError(w.t, err, "timed out after %s waiting until %s", timeout, what)
}

// waitReady waits until n of the ModelServing's groups are available.
func (w *world) waitAvailable(name string, n int32) {
	w.t.Helper()
	w.eventually(fmt.Sprintf("%s has %d available replicas", name, n), 60*time.Second, func() bool {
		var ms workloadv1alpha1.ModelServing
		if cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, &ms) != nil {
			return false
		}
		return ms.Status.AvailableReplicas == n
	})
}

// events lists the reasons of the events on a binding.
func (w *world) events(kind, name string) []string {
	evs, err := kube.CoreV1().Events(w.ns).List(w.ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=" + kind + ",involvedObject.name=" + name})
	require.NoError(w.t, err)
	var out []string
	for _, e := range evs.Items {
		out = append(out, e.Reason)
	}
	return out
}

// hasEvent waits for an event with reason on a binding (events are recorded asynchronously).
func (w *world) hasEvent(binding, reason string) {
	w.t.Helper()
	w.hasEventOn("AutoscalingPolicyBinding", binding, reason)
}

// hasEventOn waits for an event with reason on an object of kind.
func (w *world) hasEventOn(kind, name, reason string) {
	w.t.Helper()
	w.eventually(fmt.Sprintf("%s %s has a %s event", kind, name, reason), 10*time.Second, func() bool {
		return slices.Contains(w.events(kind, name), reason)
	})
}

func yamlStrict(doc string, obj any) error { return yaml.UnmarshalStrict([]byte(doc), obj) }

// decisions is how many decisions the autoscaler has taken for a binding (for a policy with
// its own target, "autoscalingpolicy/<policy>"), read off its berth_autoscaler_decisions_total.
func (w *world) decisions(binding string) float64 {
	return w.counter("berth_autoscaler_decisions_total", labels.Set{"namespace": w.ns, "binding": binding})
}

// counter is the value of the metric's one series with these labels, 0 before it exists.
func (w *world) counter(metric string, set labels.Set) float64 {
	w.t.Helper()
	s, err := gather(metric, labels.SelectorFromSet(set))
	require.NoError(w.t, err)
	if len(s) == 0 {
		return 0
	}
	return s[0].value
}

// decided waits until the autoscaler has taken n more decisions for each binding than it
// had when called. A check that nothing changed means something only after it: the
// autoscaler looked at the system since the moment in question and left it as it was,
// rather than not looking at all (as a fixed sleep cannot tell). With n >= 2, at least one
// of those decisions started after the call, not just finished after it.
func (w *world) decided(n int, bindings ...string) {
	w.t.Helper()
	since := map[string]float64{}
	for _, b := range bindings {
		since[b] = w.decisions(b)
	}
	timeout := 10*time.Second + time.Duration(n)*4*syncPeriod
	deadline := time.Now().Add(timeout)
	for {
		behind := ""
		for _, b := range bindings {
			if d := w.decisions(b) - since[b]; d < float64(n) {
				behind += fmt.Sprintf(" %s decided %v times;", b, d)
			}
		}
		if behind == "" {
			return
		}
		require.True(w.t, time.Now().Before(deadline), "the autoscaler did not decide %d more times within %s (by berth_autoscaler_decisions_total):%s", n, timeout, behind)
		time.Sleep(50 * time.Millisecond)
	}
}

// sizings is how many times a variant (a VariantAutoscaling, or an annotated HPA or
// ScaledObject) was sized, read off its berth_variant_sizings_total.
func (w *world) sizings(variant string) float64 {
	return w.counter("berth_variant_sizings_total", labels.Set{"namespace": w.ns, "variant_name": variant})
}

// sized waits until the variant was sized n more times than when called: the evidence, as
// decided's for a binding, that berth-controller looked again before a check that nothing
// changed.
func (w *world) sized(n int, variant string) {
	w.t.Helper()
	since := w.sizings(variant)
	timeout := 10*time.Second + time.Duration(n)*4*variantSyncPeriod
	deadline := time.Now().Add(timeout)
	for w.sizings(variant)-since < float64(n) {
		require.True(w.t, time.Now().Before(deadline), "%s was not sized %d more times within %s (by berth_variant_sizings_total): %v times",
			variant, n, timeout, w.sizings(variant)-since)
		time.Sleep(50 * time.Millisecond)
	}
}
