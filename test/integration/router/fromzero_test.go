package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/router"
)

// atZero is a ModelServing at zero replicas (no binding scales it here), a ModelServer
// selecting its pods by the ModelServing's name and a route for model to it.
func (w *world) atZero(name, model string) {
	w.apply(fmt.Sprintf(`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata: {name: %[1]s}
spec:
  schedulerName: berth-scheduler
  replicas: 0
  template:
    roles:
    - name: server
      replicas: 1
      entryTemplate:
        spec:
          containers:
          - name: vllm
            image: vllm/vllm-openai:v0.11.0
            args: ["--model", "%[2]s"]
            ports: [{containerPort: 8000}]
`, name, model), fmt.Sprintf(`
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
`, name, model))
}

type refusal struct {
	status     int
	retryAfter string
	message    string
	took       time.Duration
	err        error
}

func postCold(r *router.Router, model string) refusal {
	start := time.Now()
	body := `{"model":"` + model + `","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
	resp, err := http.Post("http://"+r.Addr()+"/v1/chat/completions", "application/json", bytes.NewBufferString(body))
	if err != nil {
		return refusal{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct{ Message, Code string } `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return refusal{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), message: e.Error.Message, took: time.Since(start)}
}

// heldNow is the router's berth_router_held_requests gauge.
func heldNow(t *testing.T, r *router.Router) float64 {
	t.Helper()
	mfs, err := r.MetricsRegistry().Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "berth_router_held_requests" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return 0
}

func (w *world) waitAtZero(r *router.Router, name, model string) {
	w.t.Helper()
	w.eventually("the router sees ModelServing "+name+" at zero replicas and a route for "+model, 30*time.Second, func() bool {
		snap := r.View().Snapshot()
		s := snap.Server(w.ns, name)
		return s != nil && s.Workload != nil && s.Workload.Replicas == 0 && slices.Contains(snap.Routes.Models(), model)
	})
}

// With holding disabled a request for a model at zero is refused at once: 503, Retry-After
// and a message that says why; the autoscaler is still told (the demand annotation).
func TestScaleFromZeroHoldingDisabled(t *testing.T) {
	w := newWorld(t, 0)
	r := startRouter(t, router.Options{DisableHold: true})
	w.atZero("idle", "idle-model")
	w.waitAtZero(r, "idle", "idle-model")

	got := postCold(r, "idle-model")
	require.NoError(t, got.err)
	assert.Equal(t, http.StatusServiceUnavailable, got.status)
	assert.NotEmpty(t, got.retryAfter, "Retry-After tells the client when to come back")
	assert.Contains(t, got.message, "at zero replicas")
	assert.Contains(t, got.message, "holding requests is disabled")
	assert.Less(t, got.took, 2*time.Second, "refused at once, not held")
	w.eventually("the demand annotation is written", 10*time.Second, func() bool {
		var ms workloadv1alpha1.ModelServing
		return cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "idle"}, &ms) == nil && ms.Annotations[workloadv1alpha1.DemandAnnotation] != ""
	})
}

// A full hold queue refuses the next request at once; the held ones are refused when the
// hold timeout passes without the model coming up (nothing scales it here). Each says why.
func TestScaleFromZeroQueueFullAndTimeout(t *testing.T) {
	w := newWorld(t, 0)
	const timeout = 3 * time.Second
	r := startRouter(t, router.Options{HoldQueueSize: 2, HoldTimeout: timeout})
	w.atZero("sleepy", "sleepy-model")
	w.waitAtZero(r, "sleepy", "sleepy-model")

	held := make(chan refusal, 2)
	for range 2 {
		go func() { held <- postCold(r, "sleepy-model") }()
	}
	w.eventually("two requests held", 10*time.Second, func() bool { return heldNow(t, r) == 2 })

	full := postCold(r, "sleepy-model")
	require.NoError(t, full.err)
	assert.Equal(t, http.StatusServiceUnavailable, full.status)
	assert.NotEmpty(t, full.retryAfter)
	assert.Contains(t, full.message, "2 requests already wait")
	assert.Less(t, full.took, 2*time.Second, "a full queue refuses at once")

	for range 2 {
		got := <-held
		require.NoError(t, got.err)
		assert.Equal(t, http.StatusServiceUnavailable, got.status)
		assert.NotEmpty(t, got.retryAfter)
		assert.Contains(t, got.message, "did not come up")
		assert.GreaterOrEqual(t, got.took, timeout-100*time.Millisecond, "held until the timeout")
	}
	assert.Zero(t, heldNow(t, r), "nothing is left held")
}
