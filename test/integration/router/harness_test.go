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
	"os"
	"path/filepath"
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
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/redistest"
	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/scheduler"
	"github.com/berth-sh/berth/pkg/sim"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) { cptest.Main(m, &cp) }

// timeScaleLabel on a pod overrides its engine's time scale (tests that watch streaming
// pace use real-time engines; everything else runs 100 times faster than a GPU).
const timeScaleLabel = "berth.test/timescale"

const defaultTimeScale = 0.01

var (
	startOnce sync.Once
	kube      kubernetes.Interface
	cl        client.Client
	engines   *sim.Engines
	routers   [2]*router.Router
	redisAddr string
	nsCount   atomic.Int32
)

func startSystem(t *testing.T) {
	startOnce.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		var running sync.WaitGroup
		cptest.BeforeStop(func() { cancel(); running.Wait() })
		cfg := cp.RESTConfig()
		var err error
		kube = kubernetes.NewForConfigOrDie(cfg)
		cl, err = client.New(cfg, client.Options{Scheme: controller.Scheme()})
		require.NoError(t, err)
		redis, err := redistest.New()
		require.NoError(t, err)
		cptest.BeforeStop(redis.Close)
		redisAddr = redis.Addr()

		dir, err := os.MkdirTemp("", "berth-router-test")
		require.NoError(t, err)
		kubeconfig := filepath.Join(dir, "kubeconfig")
		require.NoError(t, cp.WriteKubeconfig(kubeconfig))
		running.Add(3)
		go func() {
			defer running.Done()
			if err := scheduler.RunInProcess(ctx, dir, kubeconfig, nil); err != nil && ctx.Err() == nil {
				panic(fmt.Sprintf("berth-scheduler exited: %v", err))
			}
		}()
		mgr, err := controller.NewManager(cfg, controller.Options{MetricsAddr: "0"})
		require.NoError(t, err)
		go func() { defer running.Done(); _ = mgr.Start(ctx) }()

		engines, err = sim.NewEngines(cfg, sim.EngineOptions{
			TimeScale:    defaultTimeScale,
			DrainTimeout: 10 * time.Second,
			Configure: func(p *corev1.Pod, c *engine.Config) {
				if v, ok := p.Labels[timeScaleLabel]; ok {
					c.TimeScale, _ = strconv.ParseFloat(v, 64)
				}
			},
		})
		require.NoError(t, err)
		go func() { _ = engines.Run(ctx) }()
		kubelet := sim.NewKubelet(kube, 50*time.Millisecond)
		kubelet.BeforeReady = engines.Ensure
		go func() { defer running.Done(); kubelet.Run(ctx) }()

		for i := range routers {
			r, err := router.New(cfg, router.Options{Addr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", ScrapeInterval: 100 * time.Millisecond,
				MaxBodyBytes: 1 << 20, ShutdownTimeout: time.Second},
				// Not a t-bound logger: the routers outlive the test that started them.
				klog.Background().WithName(fmt.Sprintf("router-%d", i)))
			require.NoError(t, err)
			routers[i] = r
			running.Add(1)
			go func() { defer running.Done(); _ = r.Run(ctx) }()
			select {
			case <-r.Ready():
			case <-time.After(30 * time.Second):
				t.Fatal("router not ready after 30s")
			}
		}
	})
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
		_, err := kube.CoreV1().Nodes().Create(w.ctx, sim.NewNode(fmt.Sprintf("%s-gpu-%d", w.ns, i), sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: 8},
			map[string]string{"berth.test/owner": w.ns}), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			w.dump()
		}
		zero := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
		bg := context.Background()
		_ = cl.DeleteAllOf(bg, &workloadv1alpha1.ModelServing{}, client.InNamespace(w.ns))
		_ = cl.DeleteAllOf(bg, &networkingv1alpha1.ModelRoute{}, client.InNamespace(w.ns))
		_ = cl.DeleteAllOf(bg, &networkingv1alpha1.ModelServer{}, client.InNamespace(w.ns))
		_ = kube.CoreV1().Pods(w.ns).DeleteCollection(bg, zero, metav1.ListOptions{})
		_ = kube.CoreV1().Nodes().DeleteCollection(bg, zero, metav1.ListOptions{LabelSelector: "berth.test/owner=" + w.ns})
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
		var meta metav1.TypeMeta
		require.NoError(w.t, yaml.Unmarshal([]byte(m), &meta))
		var obj client.Object
		switch meta.Kind {
		case "ModelServing":
			obj = &workloadv1alpha1.ModelServing{}
		case "ModelServer":
			obj = &networkingv1alpha1.ModelServer{}
		case "ModelRoute":
			obj = &networkingv1alpha1.ModelRoute{}
		case "Pod":
			obj = &corev1.Pod{}
		default:
			w.t.Fatalf("apply: unexpected kind %q", meta.Kind)
		}
		require.NoError(w.t, yaml.UnmarshalStrict([]byte(m), obj), m)
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
	w.eventually(fmt.Sprintf("both routers see %d endpoints of ModelServer %s", n, server), 60*time.Second, func() bool {
		for _, r := range routers {
			s := r.View().Snapshot().Server(w.ns, server)
			if s == nil || len(s.Endpoints)+len(s.Prefill)+len(s.Decode) != n {
				return false
			}
		}
		return true
	})
	time.Sleep(300 * time.Millisecond) // three scrape intervals: metrics and adapters are known
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
