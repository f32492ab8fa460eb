// Package llmaz runs llmaz's kinds end to end on Berth: berth-controller turns Playgrounds into
// llmaz Services, ModelServers and ModelRoutes, Services into ModelServings that
// berth-scheduler places on simulated GPU nodes, the simulated kubelet starts an engine in
// each pod, and berth-router serves the model to the official OpenAI Go client.
package llmaz

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/systemtest"
	inferenceapi "github.com/berth-sh/berth/pkg/apis/llmaz/inference/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/sim"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) { cptest.Main(m, &cp) }

const waitTimeout = 60 * time.Second

var (
	startOnce sync.Once
	system    *systemtest.System
	kube      kubernetes.Interface
	cl        client.Client
	rt        *router.Router
	nsCount   atomic.Int32
)

func startSystem(t *testing.T) {
	startOnce.Do(func() {
		// Engines 100 times faster than a GPU: answers come at once.
		sys, err := systemtest.Start(cp, systemtest.Options{Engines: sim.EngineOptions{TimeScale: 0.01, DrainTimeout: 5 * time.Second}})
		require.NoError(t, err)
		system, kube, cl, rt = sys, sys.Kube, sys.Client, sys.Routers[0]
	})
	require.NotNil(t, system, "the system did not start")
}

type world struct {
	t   *testing.T
	ctx context.Context
	ns  string
}

// newWorld gives the test a namespace with n 8-GPU H100 nodes.
func newWorld(t *testing.T, n int) *world {
	startSystem(t)
	w := &world{t: t, ctx: context.Background(), ns: fmt.Sprintf("llmaz-%d", nsCount.Add(1))}
	_, err := kube.CoreV1().Namespaces().Create(w.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	for i := range n {
		_, err := kube.CoreV1().Nodes().Create(w.ctx, systemtest.GPUNode(fmt.Sprintf("%s-gpu-%d", w.ns, i), w.ns, "NVIDIA-H100-80GB-HBM3"), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			w.dump()
		}
		require.NoError(t, system.Cleanup(w.ns), "the test's namespace is removed with everything in it")
	})
	return w
}

// apply creates every YAML document; namespaced objects go in the world's namespace,
// cluster-scoped ones (OpenModel, BackendRuntime) are deleted when the test ends.
func (w *world) apply(docs ...string) {
	w.t.Helper()
	for _, d := range docs {
		obj, err := systemtest.Decode(d)
		require.NoError(w.t, err, d)
		namespaced, err := cl.IsObjectNamespaced(obj)
		require.NoError(w.t, err)
		if namespaced {
			obj.SetNamespace(w.ns)
		} else {
			w.t.Cleanup(func() { _ = cl.Delete(context.Background(), obj) })
		}
		require.NoError(w.t, cl.Create(w.ctx, obj), d)
	}
}

func (w *world) eventually(what string, cond func() bool) {
	w.t.Helper()
	err := wait.PollUntilContextTimeout(w.ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) { return cond(), nil })
	require.NoError(w.t, err, "timed out after %s waiting until %s", waitTimeout, what)
}

func (w *world) playground(name string) *inferenceapi.Playground {
	w.t.Helper()
	var pg inferenceapi.Playground
	require.NoError(w.t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, &pg))
	return &pg
}

func (w *world) service(name string) *inferenceapi.Service {
	w.t.Helper()
	var svc inferenceapi.Service
	require.NoError(w.t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, &svc))
	return &svc
}

func (w *world) modelServing(name string) *workloadv1alpha1.ModelServing {
	w.t.Helper()
	var ms workloadv1alpha1.ModelServing
	require.NoError(w.t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, &ms))
	return &ms
}

// condition is (status, reason, message) of a condition.
func condition(conds []metav1.Condition, typ string) (string, string, string) {
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		return "", "", ""
	}
	return string(c.Status), c.Reason, c.Message
}

// waitPlaygroundAvailable waits for the Playground's Available condition; on a timeout it
// says what the condition last was.
func (w *world) waitPlaygroundAvailable(name string) *inferenceapi.Playground {
	w.t.Helper()
	var pg *inferenceapi.Playground
	var last string
	err := wait.PollUntilContextTimeout(w.ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		pg = w.playground(name)
		s, reason, msg := condition(pg.Status.Conditions, "Available")
		last = fmt.Sprintf("%s %s: %s", s, reason, msg)
		return s == "True", nil
	})
	require.NoError(w.t, err, "timed out after %s waiting until Playground %s Available; Available is %s", waitTimeout, name, last)
	return pg
}

// chat sends one chat completion through berth-router and returns the answer, retrying
// until the router has seen the Ready pods.
func (w *world) chat(model string) string {
	w.t.Helper()
	c := openai.NewClient(option.WithBaseURL("http://"+rt.Addr()+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	var answer string
	var last error
	err := wait.PollUntilContextTimeout(w.ctx, 200*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: model, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("Hello")}, MaxTokens: openai.Int(8),
		})
		if err != nil {
			last = err
			return false, nil
		}
		answer = resp.Choices[0].Message.Content
		return true, nil
	})
	require.NoError(w.t, err, "no chat completion for %s: %v", model, last)
	return answer
}

func (w *world) dump() {
	bg := context.Background()
	var pgs inferenceapi.PlaygroundList
	_ = cl.List(bg, &pgs, client.InNamespace(w.ns))
	for _, pg := range pgs.Items {
		st, _ := json.Marshal(pg.Status)
		w.t.Logf("playground %s status=%s", pg.Name, st)
	}
	var svcs inferenceapi.ServiceList
	_ = cl.List(bg, &svcs, client.InNamespace(w.ns))
	for _, s := range svcs.Items {
		st, _ := json.Marshal(s.Status)
		w.t.Logf("service %s status=%s", s.Name, st)
	}
	var mss workloadv1alpha1.ModelServingList
	_ = cl.List(bg, &mss, client.InNamespace(w.ns))
	for _, ms := range mss.Items {
		st, _ := json.Marshal(ms.Status.Conditions)
		w.t.Logf("modelserving %s replicas=%v available=%d %s", ms.Name, *ms.Spec.Replicas, ms.Status.AvailableReplicas, st)
	}
	pods, _ := kube.CoreV1().Pods(w.ns).List(bg, metav1.ListOptions{})
	for _, p := range pods.Items {
		w.t.Logf("pod %s node=%q phase=%s ip=%s", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP)
	}
}
