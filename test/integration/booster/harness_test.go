// Package booster runs ModelBoosters end to end against a real apiserver: berth-controller
// compiles them into ModelServings, ModelServers and ModelRoutes, berth-scheduler places the
// pods on simulated GPU nodes, the simulated kubelet starts a simulated engine in each, and
// a berth-router serves the model (and its LoRA adapters) to the official OpenAI Go client.
package booster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/systemtest"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/modelbooster"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/sim"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) { cptest.Main(m, &cp) }

// Products of the simulated GPU nodes, as GPU feature discovery labels them.
const (
	h100 = "NVIDIA-H100-80GB-HBM3"
	a100 = "NVIDIA-A100-SXM4-80GB"
)

// waitTimeout bounds every wait for the system to converge.
const waitTimeout = 60 * time.Second

var (
	startOnce sync.Once
	system    *systemtest.System
	kube      kubernetes.Interface
	cl        client.Client
	engines   *sim.Engines
	rt        *router.Router
	nsCount   atomic.Int32
)

// startSystem starts, once per package, berth-scheduler, berth-controller (every
// reconciler, as cmd/controller runs them), the simulated kubelet and engines, and one
// berth-router.
func startSystem(t *testing.T) {
	startOnce.Do(func() {
		// Engines 100 times faster than a GPU: answers come at once.
		sys, err := systemtest.Start(cp, systemtest.Options{Engines: sim.EngineOptions{TimeScale: 0.01, DrainTimeout: 5 * time.Second}})
		require.NoError(t, err)
		system, kube, cl, engines, rt = sys, sys.Kube, sys.Client, sys.Engines, sys.Routers[0]
	})
	require.NotNil(t, system, "the system did not start")
}

// world is one test's namespace with its own GPU nodes.
type world struct {
	t   *testing.T
	ctx context.Context
	ns  string
}

// newWorld starts the system once and gives the test a fresh namespace with nodes of 8 GPUs
// each: n nodes per product ("" for nodes without a product label).
func newWorld(t *testing.T, nodes map[string]int) *world {
	startSystem(t)
	w := &world{t: t, ctx: context.Background(), ns: fmt.Sprintf("mb-%d", nsCount.Add(1))}
	_, err := kube.CoreV1().Namespaces().Create(w.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	i := 0
	for product, n := range nodes {
		for range n {
			node := systemtest.GPUNode(fmt.Sprintf("%s-gpu-%d", w.ns, i), w.ns, product)
			_, err := kube.CoreV1().Nodes().Create(w.ctx, node, metav1.CreateOptions{})
			require.NoError(t, err)
			i++
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			w.dump()
		}
		require.NoError(t, system.Cleanup(w.ns), "the test's namespace is removed with everything in it")
	})
	return w
}

// dump logs the ModelBoosters' and ModelServings' conditions and the pods, so a failed run
// explains itself.
func (w *world) dump() {
	bg := context.Background()
	var mbs workloadv1alpha1.ModelBoosterList
	_ = cl.List(bg, &mbs, client.InNamespace(w.ns))
	for _, mb := range mbs.Items {
		st, _ := json.Marshal(mb.Status)
		w.t.Logf("modelbooster %s generation=%d status=%s", mb.Name, mb.Generation, st)
	}
	var mss workloadv1alpha1.ModelServingList
	_ = cl.List(bg, &mss, client.InNamespace(w.ns))
	for _, ms := range mss.Items {
		var conds []string
		for _, c := range ms.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Message))
		}
		w.t.Logf("modelserving %s replicas=%v available=%d %v", ms.Name, ms.Spec.Replicas, ms.Status.AvailableReplicas, conds)
	}
	pods, _ := kube.CoreV1().Pods(w.ns).List(bg, metav1.ListOptions{})
	for _, p := range pods.Items {
		var conds []string
		for _, c := range p.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s %s", c.Type, c.Status, c.Message))
		}
		w.t.Logf("pod %s node=%q phase=%s ip=%s engine=%v %v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP,
			engines.Engine(w.ns, p.Name) != nil, conds)
	}
	evs, _ := kube.EventsV1().Events(w.ns).List(bg, metav1.ListOptions{})
	for _, e := range evs.Items {
		if e.Regarding.Kind == "ModelBooster" {
			w.t.Logf("event %s %s %s: %s", e.Regarding.Name, e.Type, e.Reason, e.Note)
		}
	}
}

// apply creates a ModelBooster from YAML in the world's namespace.
func (w *world) apply(manifest string) *workloadv1alpha1.ModelBooster {
	w.t.Helper()
	mb := &workloadv1alpha1.ModelBooster{}
	require.NoError(w.t, yaml.UnmarshalStrict([]byte(manifest), mb), manifest)
	mb.Namespace = w.ns
	require.NoError(w.t, cl.Create(w.ctx, mb))
	return mb
}

// update changes a ModelBooster's spec, retrying on conflicts.
func (w *world) update(name string, change func(*workloadv1alpha1.ModelBooster)) {
	w.t.Helper()
	err := wait.PollUntilContextTimeout(w.ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		mb := w.booster(name)
		change(mb)
		err := cl.Update(w.ctx, mb)
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return err == nil, err
	})
	require.NoError(w.t, err)
}

func (w *world) booster(name string) *workloadv1alpha1.ModelBooster {
	w.t.Helper()
	mb := &workloadv1alpha1.ModelBooster{}
	require.NoError(w.t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, mb))
	return mb
}

func (w *world) eventually(what string, cond func() bool) {
	w.t.Helper()
	err := wait.PollUntilContextTimeout(w.ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) { return cond(), nil })
	require.NoError(w.t, err, "timed out after %s waiting until %s", waitTimeout, what)
}

// waitCondition waits until the ModelBooster's current generation has condition typ with
// status and (when not "") reason, and returns the ModelBooster.
func (w *world) waitCondition(name, typ string, status metav1.ConditionStatus, reason string) *workloadv1alpha1.ModelBooster {
	w.t.Helper()
	var mb *workloadv1alpha1.ModelBooster
	w.eventually(fmt.Sprintf("ModelBooster %s has %s=%s %s", name, typ, status, reason), func() bool {
		mb = &workloadv1alpha1.ModelBooster{}
		if err := cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, mb); err != nil {
			return false
		}
		c := meta.FindStatusCondition(mb.Status.Conditions, typ)
		return mb.Status.ObservedGeneration == mb.Generation && c != nil && c.Status == status && (reason == "" || c.Reason == reason)
	})
	return mb
}

func (w *world) waitReady(name string) *workloadv1alpha1.ModelBooster {
	w.t.Helper()
	return w.waitCondition(name, modelbooster.ConditionReady, metav1.ConditionTrue, "")
}

// openaiClient talks to the router; it never retries by itself.
func openaiClient() openai.Client {
	return openai.NewClient(option.WithBaseURL("http://"+rt.Addr()+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0),
		option.WithRequestTimeout(20*time.Second))
}

// chat sends one chat completion through the router and returns the answer and the pod
// (namespace/pod, or prefill+decode) that served it.
func chat(ctx context.Context, model string) (string, string, error) {
	var resp *http.Response
	c := openaiClient()
	out, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello from the ModelBooster test")},
		MaxTokens: openai.Int(4),
	}, option.WithResponseInto(&resp))
	if err != nil {
		return "", "", err
	}
	if len(out.Choices) == 0 {
		return "", "", fmt.Errorf("no choices in %+v", out)
	}
	return out.Choices[0].Message.Content, resp.Header.Get("X-Berth-Endpoint"), nil
}

// chatEventually retries until the router answers (it learns of Ready pods from its watch
// a moment after the ModelBooster turns Ready).
func (w *world) chatEventually(model string) (answer, endpoint string) {
	w.t.Helper()
	var lastErr error
	w.eventually("the router answers for "+model, func() bool {
		answer, endpoint, lastErr = chat(w.ctx, model)
		return lastErr == nil
	})
	require.NoError(w.t, lastErr)
	return answer, endpoint
}

// engineModels is GET /v1/models of a pod's engine, straight to the pod.
func engineModels(t *testing.T, pod *corev1.Pod, port int32) []modelCard {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s:%d/v1/models", pod.Status.PodIP, port))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var models struct {
		Data []modelCard `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&models))
	return models.Data
}

type modelCard struct {
	ID      string  `json:"id"`
	OwnedBy string  `json:"owned_by"`
	Root    string  `json:"root"`
	Parent  *string `json:"parent"`
}

// entryPods are the entry pods of a ModelServing.
func (w *world) entryPods(ms string) []corev1.Pod {
	w.t.Helper()
	var pods corev1.PodList
	require.NoError(w.t, cl.List(w.ctx, &pods, client.InNamespace(w.ns),
		client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: ms, workloadv1alpha1.EntryLabel: "true"}))
	return pods.Items
}
