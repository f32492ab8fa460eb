// Package router runs the whole data path in-process against a real apiserver:
// berth-scheduler places the pods, berth-controller runs ModelServings, the simulated
// kubelet starts them with a simulated engine each, and two berth-router replicas (sharing
// one real redis-server) route requests sent with the official OpenAI Go client.
package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/redistest"
	"github.com/berth-sh/berth/internal/systemtest"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/router/view"
	"github.com/berth-sh/berth/pkg/sim"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) { cptest.Main(m, &cp) }

// timeScaleLabel on a pod overrides its engine's time scale (tests that watch streaming
// pace use real-time engines; everything else runs 100 times faster than a GPU).
const timeScaleLabel = "berth.test/timescale"

const defaultTimeScale = 0.01

// kvVersionLabel on a pod is its engine's build as far as its KV cache goes
// (engine.Config.Version): the simulator counts KV handed between different ones.
const kvVersionLabel = "berth.test/kv-version"

var (
	startOnce sync.Once
	system    *systemtest.System
	kube      kubernetes.Interface
	cl        client.Client
	engines   *sim.Engines
	routers   [2]*router.Router
	redisAddr string
	nsCount   atomic.Int32
)

func startSystem(t *testing.T) {
	startOnce.Do(func() {
		redis, err := redistest.New()
		require.NoError(t, err)
		cptest.BeforeStop(redis.Close)
		redisAddr = redis.Addr()
		sys, err := systemtest.Start(cp, systemtest.Options{
			Engines: sim.EngineOptions{
				TimeScale:    defaultTimeScale,
				DrainTimeout: 10 * time.Second,
				Configure: func(p *corev1.Pod, c *engine.Config) {
					if v, ok := p.Labels[timeScaleLabel]; ok {
						c.TimeScale, _ = strconv.ParseFloat(v, 64)
					}
					c.Version = p.Labels[kvVersionLabel]
				},
			},
			Routers: len(routers),
			// The installation's Redis (--redis-addr), for routes whose global limit names none.
			// Each replica opens Gateway listener ports on its own address (gateway_test.go);
			// both publish the same status.addresses, as replicas behind one Service do.
			Router: func(i int, o *router.Options) {
				o.RedisAddr, o.GatewayHost, o.GatewayAddresses = redisAddr, gatewayHost(i), []string{gatewayHost(0)}
			},
		})
		require.NoError(t, err)
		system, kube, cl, engines = sys, sys.Kube, sys.Client, sys.Engines
		copy(routers[:], sys.Routers)
	})
	require.NotNil(t, system, "the system did not start")
}

// world is one test's namespace with its own GPU nodes.
type world struct {
	t   *testing.T
	ctx context.Context
	ns  string
}

func newWorld(t *testing.T, gpuNodes int) *world {
	startSystem(t)
	w := &world{t: t, ctx: context.Background(), ns: fmt.Sprintf("rt-%d", nsCount.Add(1))}
	_, err := kube.CoreV1().Namespaces().Create(w.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	for i := range gpuNodes {
		_, err := kube.CoreV1().Nodes().Create(w.ctx, systemtest.GPUNode(fmt.Sprintf("%s-gpu-%d", w.ns, i), w.ns, ""), metav1.CreateOptions{})
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

// dump logs the pods, so a failed run explains itself.
func (w *world) dump() {
	pods, _ := kube.CoreV1().Pods(w.ns).List(context.Background(), metav1.ListOptions{})
	for _, p := range pods.Items {
		var conds []string
		for _, c := range p.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s %s", c.Type, c.Status, c.Message))
		}
		w.t.Logf("pod %s node=%q phase=%s ip=%s engine=%v %v", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.PodIP,
			engines.Engine(w.ns, p.Name) != nil, conds)
	}
}

// apply creates every object of a multi-document YAML in the world's namespace.
func (w *world) apply(manifests ...string) {
	w.t.Helper()
	for _, m := range manifests {
		obj, err := systemtest.Decode(m)
		require.NoError(w.t, err, m)
		obj.SetNamespace(w.ns)
		require.NoError(w.t, cl.Create(w.ctx, obj))
	}
}

// pod is a bare engine pod for berth-scheduler with the given labels (a workload that is
// not a ModelServing: what a ModelServer can select, too).
func (w *world) pod(name string, labels map[string]string) {
	w.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns, Labels: labels},
		Spec: corev1.PodSpec{
			SchedulerName: "berth-scheduler",
			Containers: []corev1.Container{{
				Name: "engine", Image: "vllm/vllm-openai:v0.11.0", Args: []string{"--model", "base-model"},
				Ports:     []corev1.ContainerPort{{ContainerPort: 8000}},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{sim.GPUResource: resource.MustParse("1")}},
			}},
		},
	}
	require.NoError(w.t, cl.Create(w.ctx, p))
}

// waitEndpoints waits until every router sees n Ready endpoints of the ModelServer (the
// prefill and decode ones of a PD server counted together) and every one has been scraped.
func (w *world) waitEndpoints(server string, n int) {
	w.t.Helper()
	w.eventually(fmt.Sprintf("both routers see %d endpoints of ModelServer %s, each scraped", n, server), 60*time.Second, func() bool {
		for _, r := range routers {
			if !scrapedServer(r, w.ns, server, n) {
				return false
			}
		}
		return true
	})
}

// scrapedServer says whether r sees n endpoints of the ModelServer and has scraped every one
// with success (so its metrics and adapters are known).
func scrapedServer(r *router.Router, ns, server string, n int) bool {
	s := r.View().Snapshot().Server(ns, server)
	if s == nil || len(s.Endpoints)+len(s.Prefill)+len(s.Decode) != n {
		return false
	}
	for _, eps := range [][]*view.Endpoint{s.Endpoints, s.Prefill, s.Decode} {
		for _, e := range eps {
			if st, ok := r.Scraped(e.Address); !ok || st.Updated.IsZero() || st.Err != nil {
				return false
			}
		}
	}
	return true
}

func (w *world) eventually(what string, timeout time.Duration, cond func() bool) {
	w.t.Helper()
	err := wait.PollUntilContextTimeout(w.ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond(), nil })
	require.NoError(w.t, err, "timed out after %s waiting until %s", timeout, what)
}

// engine returns a pod's simulated engine, waiting for it.
func (w *world) engine(pod string) *engine.Server {
	w.t.Helper()
	var e *engine.Server
	w.eventually("pod "+pod+" runs an engine", 60*time.Second, func() bool { e = engines.Engine(w.ns, pod); return e != nil })
	return e
}

// client is an OpenAI client of router i that never retries by itself (the router's
// retries are under test).
func client_(i int) openai.Client {
	return openai.NewClient(option.WithBaseURL("http://"+routers[i].Addr()+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0),
		option.WithRequestTimeout(30*time.Second))
}

// chat sends a non-streaming chat completion and returns the answer and who served it.
func chat(ctx context.Context, c openai.Client, model, prompt string, opts ...option.RequestOption) (*openai.ChatCompletion, *http.Response, error) {
	var resp *http.Response
	opts = append(opts, option.WithResponseInto(&resp))
	out, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:     model,
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		MaxTokens: openai.Int(4),
	}, opts...)
	return out, resp, err
}

// statusOf is the HTTP status of an OpenAI client error (0 if not one).
func statusOf(err error) int {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return apiErr.StatusCode
	}
	return 0
}

// servingYAML is a ModelServing of groups ServingGroups, each one role "server" of
// perGroup engine pods asking gpus GPUs each, for berth-scheduler, its simulated engines
// running at timescale (the berth.test/timescale label).
func servingYAML(name string, groups, perGroup int, timescale string, gpus int) string {
	return fmt.Sprintf(`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata: {name: %s}
spec:
  schedulerName: berth-scheduler
  replicas: %d
  template:
    roles:
    - name: server
      replicas: %d
      entryTemplate:
        metadata: {labels: {berth.test/timescale: "%s"}}
        spec:
          containers:
          - name: vllm
            image: vllm/vllm-openai:v0.11.0
            args: ["--model", "base-model"]
            ports: [{containerPort: 8000}]
            resources: {limits: {nvidia.com/gpu: "%d"}}
`, name, groups, perGroup, timescale, gpus)
}

// serverYAML is a ModelServer of the same name selecting every pod of ModelServing name.
func serverYAML(name string) string {
	return fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: %[1]s}
spec:
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {modelserving.volcano.sh/name: %[1]s}}
`, name)
}
