// Package lws runs LeaderWorkerSets on Berth without LWS's controller: berth-controller turns
// a LeaderWorkerSet whose pod templates name berth-scheduler into a ModelServing,
// berth-scheduler places each group as a gang on simulated GPU nodes, the simulated kubelet
// starts an engine in each pod, and berth-router serves the leaders through a ModelServer
// that selects them by LWS's labels.
package lws

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	leaderworkerset "sigs.k8s.io/lws/api/leaderworkerset/v1"
	"sigs.k8s.io/yaml"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/systemtest"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/sim"
)

// The package's control plane has every CRD of manifests/crds, LeaderWorkerSet's
// (manifests/crds/lws) included, so berth-controller runs the LeaderWorkerSet reconciler.
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
		sys, err := systemtest.Start(cp, systemtest.Options{Engines: sim.EngineOptions{TimeScale: 0.01, DrainTimeout: 5 * time.Second}})
		require.NoError(t, err)
		system, kube, cl, rt = sys, sys.Kube, sys.Client, sys.Routers[0]
	})
	require.NotNil(t, system, "the system did not start")
}

type world struct {
	t     *testing.T
	ctx   context.Context
	ns    string
	nodes int
}

// newWorld gives the test a namespace and n 8-GPU H100 nodes.
func newWorld(t *testing.T, n int) *world {
	startSystem(t)
	w := &world{t: t, ctx: context.Background(), ns: fmt.Sprintf("lws-%d", nsCount.Add(1))}
	_, err := kube.CoreV1().Namespaces().Create(w.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	w.addNodes(n, nil)
	t.Cleanup(func() {
		if t.Failed() {
			w.dump()
		}
		require.NoError(t, system.Cleanup(w.ns), "the test's namespace is removed with everything in it")
	})
	return w
}

// addNodes adds n 8-GPU nodes with extra labels.
func (w *world) addNodes(n int, labels map[string]string) {
	w.t.Helper()
	for range n {
		node := systemtest.GPUNode(fmt.Sprintf("%s-gpu-%d", w.ns, w.nodes), w.ns, "NVIDIA-H100-80GB-HBM3")
		for k, v := range labels {
			node.Labels[k] = v
		}
		w.nodes++
		_, err := kube.CoreV1().Nodes().Create(w.ctx, node, metav1.CreateOptions{})
		require.NoError(w.t, err)
	}
}

// apply creates every YAML document in the world's namespace as kubectl does: as written
// (decoded strictly into its type first, so a misspelt field fails the test), not through
// the Go type, which would send LeaderWorkerSet's unset startupPolicy and rollout type as ""
// where LWS's CRD defaults them.
func (w *world) apply(docs ...string) {
	w.t.Helper()
	for _, d := range docs {
		_, err := systemtest.Decode(d)
		require.NoError(w.t, err, d)
		var obj unstructured.Unstructured
		require.NoError(w.t, yaml.Unmarshal([]byte(d), &obj.Object), d)
		obj.SetNamespace(w.ns)
		require.NoError(w.t, cl.Create(w.ctx, &obj), d)
	}
}

func (w *world) eventually(what string, cond func() bool) {
	w.t.Helper()
	err := wait.PollUntilContextTimeout(w.ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) { return cond(), nil })
	require.NoError(w.t, err, "timed out after %s waiting until %s", waitTimeout, what)
}

// never fails if cond holds at any check during d.
func (w *world) never(what string, d time.Duration, cond func() bool) {
	w.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		require.False(w.t, cond(), what)
		time.Sleep(100 * time.Millisecond)
	}
}

func (w *world) lws(name string) *leaderworkerset.LeaderWorkerSet {
	w.t.Helper()
	var l leaderworkerset.LeaderWorkerSet
	require.NoError(w.t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, &l))
	return &l
}

// patchLWS merge-patches the LeaderWorkerSet, as kubectl patch does. (An update through the
// Go type would send the unset startupPolicy and rollout type as "", which LWS's CRD refuses:
// LWS's webhook, absent here, defaults them.)
func (w *world) patchLWS(name, patch string) {
	w.t.Helper()
	require.NoError(w.t, cl.Patch(w.ctx, w.lws(name), client.RawPatch(types.MergePatchType, []byte(patch))))
}

func (w *world) modelServing(name string) (*workloadv1alpha1.ModelServing, error) {
	var ms workloadv1alpha1.ModelServing
	err := cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, &ms)
	return &ms, err
}

// pods are the LeaderWorkerSet's pods, found by LWS's own label.
func (w *world) pods(name string) []corev1.Pod {
	w.t.Helper()
	var pods corev1.PodList
	require.NoError(w.t, cl.List(w.ctx, &pods, client.InNamespace(w.ns), client.MatchingLabels{leaderworkerset.SetNameLabelKey: name}))
	return pods.Items
}

// boundByGroup counts the bound pods of each group (by LWS's group-index label).
func (w *world) boundByGroup(name string) map[string]int {
	out := map[string]int{}
	for _, p := range w.pods(name) {
		if p.Spec.NodeName != "" {
			out[p.Labels[leaderworkerset.GroupIndexLabelKey]]++
		}
	}
	return out
}

// condition is (status, reason, message) of a condition.
func condition(conds []metav1.Condition, typ string) (string, string, string) {
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		return "", "", ""
	}
	return string(c.Status), c.Reason, c.Message
}

// waitAvailable waits for the LeaderWorkerSet's Available condition; on a timeout it says
// what the condition last was.
func (w *world) waitAvailable(name string) *leaderworkerset.LeaderWorkerSet {
	w.t.Helper()
	var l *leaderworkerset.LeaderWorkerSet
	var last string
	err := wait.PollUntilContextTimeout(w.ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		l = w.lws(name)
		s, reason, msg := condition(l.Status.Conditions, "Available")
		last = fmt.Sprintf("%s %s: %s", s, reason, msg)
		return s == "True", nil
	})
	require.NoError(w.t, err, "timed out after %s waiting until LeaderWorkerSet %s Available; Available is %s", waitTimeout, name, last)
	return l
}

// event is the message of the newest event with reason about the object named name.
func (w *world) event(name, reason string) string {
	w.t.Helper()
	list, err := kube.EventsV1().Events(w.ns).List(w.ctx, metav1.ListOptions{})
	require.NoError(w.t, err)
	msg := ""
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == reason {
			msg = e.Note
		}
	}
	return msg
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
	var ls leaderworkerset.LeaderWorkerSetList
	_ = cl.List(bg, &ls, client.InNamespace(w.ns))
	for _, l := range ls.Items {
		st, _ := json.Marshal(l.Status)
		w.t.Logf("leaderworkerset %s status=%s", l.Name, st)
	}
	var mss workloadv1alpha1.ModelServingList
	_ = cl.List(bg, &mss, client.InNamespace(w.ns))
	for _, ms := range mss.Items {
		st, _ := json.Marshal(ms.Status.Conditions)
		w.t.Logf("modelserving %s replicas=%v available=%d %s", ms.Name, *ms.Spec.Replicas, ms.Status.AvailableReplicas, st)
	}
	pods, _ := kube.CoreV1().Pods(w.ns).List(bg, metav1.ListOptions{})
	for _, p := range pods.Items {
		var why []string
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Message != "" {
				why = append(why, c.Message)
			}
		}
		w.t.Logf("pod %s node=%q phase=%s %s", p.Name, p.Spec.NodeName, p.Status.Phase, strings.Join(why, "; "))
	}
	evs, _ := kube.EventsV1().Events(w.ns).List(bg, metav1.ListOptions{})
	for _, e := range evs.Items {
		w.t.Logf("event %s/%s %s %s: %s", e.Regarding.Kind, e.Regarding.Name, e.Type, e.Reason, e.Note)
	}
}
