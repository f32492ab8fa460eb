package autoscale

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// routeByModelServing is a ModelServer selecting the pods of ModelServing name (by the
// label every pod of it carries) and a ModelRoute serving model through it: the router
// then knows which ModelServing to bring up from zero.
func routeByModelServing(name, model string) []string {
	return []string{fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: %[1]s}
spec:
  model: %[2]s
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {%[3]s: %[1]s}}
  workloadPort: {port: 8000}
`, name, model, workloadv1alpha1.ModelServingNameLabel), fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: %[1]s}
spec:
  modelName: %[2]s
  rules:
  - targetModels: [{modelServerName: %[1]s}]
`, name, model)}
}

// routerMetric is the value of the router's series of metric with label route (and
// outcome when set), 0 before it exists.
func routerMetric(t *testing.T, metric, route, outcome string) float64 {
	t.Helper()
	mfs, err := rt.MetricsRegistry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := route == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "route" && l.GetValue() == route {
					match = true
				}
				if l.GetName() == "outcome" && outcome != "" && l.GetValue() != outcome {
					match = false
				}
			}
			if match {
				if m.Counter != nil {
					return m.GetCounter().GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// Scale from zero: a model at zero replicas has no pods, so no metric asks for one. The
// router holds the requests for it and writes the ModelServing's demand annotation; the
// autoscaler scales it 0 -> 1; berth-scheduler places the pod; the held requests are then
// answered, and reach the engine in the order they arrived.
func TestScaleFromZeroAnswersHeldRequestsInArrivalOrder(t *testing.T) {
	w := newWorld(t, 1)
	w.served("cold", "qwen3-cold", "cold", 0)
	w.apply(routeByModelServing("cold", "qwen3-cold")...)
	log := w.watchReplicas("cold")["cold"]
	w.apply(policyYAML("running", `
    scaleDown: {instances: 1, percent: 100, period: 1s, stabilizationWindow: 60s}`),
		scalingBindingYAML("cold", "running", "cold", 0, 2))
	w.eventually("the router sees ModelServing cold at zero replicas", 30*time.Second, func() bool {
		s := rt.View().Snapshot().Server(w.ns, "cold")
		return s != nil && s.Workload != nil && s.Workload.Replicas == 0
	})
	// Without demand the autoscaler leaves the target at zero: no pods, no metric.
	w.decided(3, "cold")
	require.Equal(t, []int32{0}, log.values(), "nothing scaled the ModelServing before a request came")

	// The world's one node is cordoned while the requests are sent: the model comes up as
	// soon as the first request's demand is seen, and on a fast run it was serving before
	// the third request was sent. Held until the node is uncordoned, all three wait.
	node := w.ns + "-gpu-0"
	cordon := func(on bool) {
		patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
		_, err := kube.CoreV1().Nodes().Patch(w.ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	cordon(true)

	type answer struct {
		status int
		body   string
		err    error
	}
	answers := make([]chan answer, 3)
	for i := range answers {
		answers[i] = make(chan answer, 1)
		body := `{"model":"qwen3-cold","max_tokens":4,"messages":[{"role":"user","content":"request ` + strconv.Itoa(i) + `"}]}`
		go func() {
			req, _ := http.NewRequestWithContext(w.ctx, http.MethodPost, "http://"+rt.Addr()+"/v1/chat/completions", bytes.NewBufferString(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Test-Seq", strconv.Itoa(i))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers[i] <- answer{err: err}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers[i] <- answer{status: resp.StatusCode, body: string(b)}
		}()
		// Arrival order is the order they are sent in: each is sent once the one before is
		// held (a fixed gap was not enough under the race detector, where the second
		// request once reached the router first).
		w.eventually(fmt.Sprintf("request %d is held", i), 20*time.Second, func() bool {
			return routerMetric(t, "berth_router_held_requests", "", "") >= float64(i+1)
		})
	}
	cordon(false)
	for i, ch := range answers {
		select {
		case a := <-ch:
			require.NoError(t, a.err, "request %d", i)
			require.Equal(t, http.StatusOK, a.status, "request %d was answered once the model came up: %s", i, a.body)
		case <-time.After(90 * time.Second):
			t.Fatalf("request %d was not answered within 90s", i)
		}
	}
	assert.Equal(t, float64(3), routerMetric(t, "berth_router_held_requests_total", w.ns+"/cold", "released"),
		"all three were held until the model came up, then released")

	// The autoscaler scaled 0 -> 1 (not further: one request in flight at most asks for no more).
	vals := log.values()
	require.GreaterOrEqual(t, len(vals), 2, "replicas %v", vals)
	assert.Equal(t, []int32{0, 1}, vals[:2], "scaled from zero to max(1, minReplicas 0)")
	w.hasEvent("cold", "ScaledFromZero")
	var ms workloadv1alpha1.ModelServing
	require.NoError(t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "cold"}, &ms))
	assert.NotEmpty(t, ms.Annotations[workloadv1alpha1.DemandAnnotation], "the router told the autoscaler through the annotation")

	// The pod came up through berth-scheduler.
	var pods corev1.PodList
	require.NoError(t, cl.List(w.ctx, &pods, client.InNamespace(w.ns), client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: "cold"}))
	require.Len(t, pods.Items, 1)
	pod := pods.Items[0]
	assert.Equal(t, "berth-scheduler", pod.Spec.SchedulerName)
	assert.NotEmpty(t, pod.Spec.NodeName, "placed on a node")

	// In arrival order at the engine.
	eng := system.Engines.Engine(w.ns, pod.Name)
	require.NotNil(t, eng)
	var order []string
	for _, r := range eng.Requests() {
		if s := r.Header.Get("X-Test-Seq"); s != "" {
			order = append(order, s)
		}
	}
	assert.Equal(t, []string{"0", "1", "2"}, order, "the held requests reached the engine in arrival order")
}

// boosterAtZero is a ModelBooster whose two backends both start at zero (minReplicas 0):
// one model-wide policy, so one optimizer binding spreads the demand cheapest first. Each
// backend's route weight is 50, so the router may write the demand on either.
const boosterAtZero = `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelBooster
metadata: {name: idle}
spec:
  name: idle-model
  autoscalingPolicy:
    tolerancePercent: 10
    metrics:
    - {metricName: "vllm:num_requests_running", targetValue: "2"}
    behavior:
      scaleDown: {instances: 1, percent: 100, period: 1s, stabilizationWindow: 60s}
  backends:
  - name: cheap
    type: vLLM
    modelURI: hf://Qwen/Qwen3-8B
    minReplicas: 0
    maxReplicas: 2
    scalingCost: 10
    routeWeight: 50
    workers:
    - {type: server, image: vllm/vllm-openai:v0.11.0, replicas: 1, pods: 1, resources: {limits: {nvidia.com/gpu: "1"}}}
  - name: dear
    type: vLLM
    modelURI: hf://Qwen/Qwen3-8B
    minReplicas: 0
    maxReplicas: 2
    scalingCost: 100
    routeWeight: 50
    workers:
    - {type: server, image: vllm/vllm-openai:v0.11.0, replicas: 1, pods: 1, resources: {limits: {nvidia.com/gpu: "1"}}}
`

// A ModelBooster backend at zero scales from zero as a ModelServing does: the router holds
// a request for the model, writes the demand on a backend's ModelServing, the booster's
// optimizer binding brings up the cheapest backend (not necessarily the one the demand was
// written on), berth-scheduler places it, and the held request is answered by it. The
// dearer backend stays at zero throughout.
func TestBoosterBackendScalesFromZero(t *testing.T) {
	w := newWorld(t, 2)
	logs := w.watchReplicas("idle-cheap", "idle-dear")
	w.apply(boosterAtZero)
	w.eventually("the router routes idle-model to both backends, each at zero replicas", 30*time.Second, func() bool {
		snap := rt.View().Snapshot()
		for _, name := range []string{"idle-cheap", "idle-dear"} {
			if s := snap.Server(w.ns, name); s == nil || s.Workload == nil || s.Workload.Replicas != 0 {
				return false
			}
		}
		return slices.Contains(snap.Routes.Models(), "idle-model")
	})
	w.decided(3, "idle")
	require.Equal(t, []int32{0}, logs["idle-cheap"].values(), "nothing scaled a backend before a request came")

	body := `{"model":"idle-model","max_tokens":4,"messages":[{"role":"user","content":"are you awake?"}]}`
	type answer struct {
		status   int
		body     string
		endpoint string
		err      error
	}
	done := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequestWithContext(w.ctx, http.MethodPost, "http://"+rt.Addr()+"/v1/chat/completions", bytes.NewBufferString(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- answer{err: err}
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- answer{status: resp.StatusCode, body: string(b), endpoint: resp.Header.Get("X-Berth-Endpoint")}
	}()
	var a answer
	select {
	case a = <-done:
	case <-time.After(90 * time.Second):
		t.Fatal("the request was not answered within 90s")
	}
	require.NoError(t, a.err)
	require.Equal(t, http.StatusOK, a.status, "answered once a backend came up: %s", a.body)
	assert.True(t, strings.HasPrefix(a.endpoint, w.ns+"/idle-cheap-"), "answered by the cheap backend: %q", a.endpoint)
	assert.GreaterOrEqual(t, routerMetric(t, "berth_router_held_requests_total", "", "released"), float64(1), "the request was held, then released")

	cheap, dear := logs["idle-cheap"].values(), logs["idle-dear"].values()
	require.GreaterOrEqual(t, len(cheap), 2, "the cheap backend's replicas: %v", cheap)
	assert.Equal(t, []int32{0, 1}, cheap[:2], "the cheap backend scaled from zero to one")
	assert.Equal(t, []int32{0}, dear, "the dear backend stayed at zero")
	w.hasEvent("idle", "ScaledFromZero")
	var pods corev1.PodList
	require.NoError(t, cl.List(w.ctx, &pods, client.InNamespace(w.ns), client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: "idle-cheap"}))
	require.Len(t, pods.Items, 1)
	assert.Equal(t, "berth-scheduler", pods.Items[0].Spec.SchedulerName)
	assert.NotEmpty(t, pods.Items[0].Spec.NodeName)
}

// kthena10AtZero is a ModelBooster as Kthena 1.0 writes it (one backend, fixed replicas, here
// 0) and, beside it, the Kthena 1.0 AutoscalingPolicy its user writes to scale the generated
// ModelServing (<booster>-<backend>) between 0 and 1.
var kthena10AtZero = []string{`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelBooster
metadata: {name: k1}
spec:
  name: k1-model
  backend:
    name: gpu
    type: vLLM
    modelURI: hf://Qwen/Qwen3-8B
    replicas: 0
    workers:
    - {type: server, image: vllm/vllm-openai:v0.11.0, replicas: 1, pods: 1, resources: {limits: {nvidia.com/gpu: "1"}}}
`, homogeneousPolicyYAML("k1-scaler", "k1-gpu", 0, 1, `
    scaleDown: {instances: 1, percent: 100, period: 1s, stabilizationWindow: 60s}`)}

// A Kthena 1.0 ModelBooster backend at zero, scaled by the user's own Kthena 1.0 policy,
// comes up from zero for a held request, and the ModelBooster does not put its fixed count
// back over the autoscaler's (it would, for a backend no autoscaler names): the replicas go
// 0 -> 1 once and stay, and the ModelBooster says why in an event.
func TestKthena10BoosterBackendScalesFromZero(t *testing.T) {
	w := newWorld(t, 1)
	log := w.watchReplicas("k1-gpu")["k1-gpu"]
	w.apply(kthena10AtZero...)
	w.eventually("the router routes k1-model to the backend at zero replicas", 30*time.Second, func() bool {
		snap := rt.View().Snapshot()
		s := snap.Server(w.ns, "k1-gpu")
		return s != nil && s.Workload != nil && s.Workload.Replicas == 0 && slices.Contains(snap.Routes.Models(), "k1-model")
	})
	w.eventually("the policy has decided", 20*time.Second, func() bool { return w.decisions("autoscalingpolicy/k1-scaler") >= 3 })

	req, err := http.NewRequestWithContext(w.ctx, http.MethodPost, "http://"+rt.Addr()+"/v1/chat/completions",
		strings.NewReader(`{"model":"k1-model","max_tokens":4,"messages":[{"role":"user","content":"wake up"}]}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 90 * time.Second}
	resp, err := client.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "answered once the backend came up: %s", b)

	// A few of the ModelBooster's reconciles later (pods becoming Ready each cause one), the
	// count is still the autoscaler's.
	w.waitAvailable("k1-gpu", 1)
	time.Sleep(2 * time.Second)
	assert.Equal(t, []int32{0, 1}, log.values(), "scaled 0 -> 1 once; the ModelBooster never put its 0 back")
	w.hasEventOn("ModelBooster", "k1", "ScaledByAutoscaler")
}
