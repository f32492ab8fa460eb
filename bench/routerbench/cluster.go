package main

import (
	"context"
	"fmt"
	"net"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-sh/berth/internal/controlplane"
	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/router/pick"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

// The objects the router reads: one ModelRoute for model "m" sending everything to one
// ModelServer, whose selector picks the engine pods of the namespace.
const (
	namespace   = "bench"
	modelName   = "m"
	serverName  = "engines"
	enginePort  = 8000
	engineLabel = "routerbench-engine"
)

// cluster is the in-process control plane with the route and server installed. The pods
// it creates stand for the engines: nothing schedules or runs them, their status says
// Running and Ready at the engine's loopback address.
type cluster struct {
	cp *controlplane.ControlPlane
	cl client.Client
}

func startCluster(ctx context.Context) (*cluster, error) {
	cp, err := controlplane.Start(ctx, controlplane.Options{}) // installs the CRDs too
	if err != nil {
		return nil, err
	}
	cl, err := client.New(cp.RESTConfig(), client.Options{Scheme: controller.Scheme()})
	if err != nil {
		cp.Stop()
		return nil, err
	}
	c := &cluster{cp: cp, cl: cl}
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}},
		&networkingv1alpha1.ModelServer{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: serverName},
			Spec: networkingv1alpha1.ModelServerSpec{
				InferenceEngine:  networkingv1alpha1.VLLM,
				WorkloadSelector: &networkingv1alpha1.WorkloadSelector{MatchLabels: map[string]string{"app": engineLabel}},
				WorkloadPort:     &networkingv1alpha1.WorkloadPort{Port: enginePort},
			},
		},
		&networkingv1alpha1.ModelRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: modelName},
			Spec: networkingv1alpha1.ModelRouteSpec{
				ModelName: modelName,
				Rules: []networkingv1alpha1.Rule{{
					Name:         "all",
					TargetModels: []networkingv1alpha1.TargetModel{{ModelServerName: serverName, Weight: ptr.To[uint32](100)}},
				}},
			},
		},
	}
	for _, o := range objs {
		if err := cl.Create(ctx, o); err != nil {
			cp.Stop()
			return nil, fmt.Errorf("creating %T %s: %w", o, o.GetName(), err)
		}
	}
	return c, nil
}

func (c *cluster) stop() { c.cp.Stop() }

// engineIPs gives every engine of an experiment its own loopback address, all on the
// same port as pods in a cluster would be.
func engineIPs(subnet, n int) []string {
	ips := make([]string, n)
	for i := range ips {
		ips[i] = fmt.Sprintf("127.%d.0.%d", subnet, i+1)
	}
	return ips
}

func engineAddr(ip string) string { return net.JoinHostPort(ip, strconv.Itoa(enginePort)) }

// setPods replaces the engine pods by one Ready pod per IP. The router started after this
// sees exactly these endpoints in its first snapshot.
func (c *cluster) setPods(ctx context.Context, ips []string) error {
	return c.setPodsNamed(ctx, ips, func(i int) (string, map[string]string) {
		return fmt.Sprintf("engine-%s-%d", ips[i], i), map[string]string{"app": engineLabel}
	})
}

// setPodsNamed is setPods with each pod's name and labels (which must include app:
// engineLabel) given by named.
func (c *cluster) setPodsNamed(ctx context.Context, ips []string, named func(i int) (string, map[string]string)) error {
	if err := c.cl.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(namespace),
		client.MatchingLabels{"app": engineLabel}, client.GracePeriodSeconds(0)); err != nil {
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		var pods corev1.PodList
		if err := c.cl.List(ctx, &pods, client.InNamespace(namespace)); err != nil {
			return err
		}
		if len(pods.Items) == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d old engine pods still there after 30s", len(pods.Items))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i, ip := range ips {
		name, labels := named(i)
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "vllm",
				Ports: []corev1.ContainerPort{{ContainerPort: enginePort}}}}},
		}
		if err := c.cl.Create(ctx, p); err != nil {
			return err
		}
		now := metav1.Now()
		p.Status = corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &now,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}},
		}
		if err := c.cl.Status().Update(ctx, p); err != nil {
			return fmt.Errorf("setting pod %s Running and Ready: %w", p.Name, err)
		}
	}
	return nil
}

// startEngines starts one simulated engine per IP with cfg (its ID set per engine).
func startEngines(cfg engine.Config, ips []string) ([]*engine.Server, error) {
	var out []*engine.Server
	for _, ip := range ips {
		c := cfg
		c.ID = namespace + "/" + ip
		// The label follows the engine's goroutines into a CPU profile (-cpuprofile).
		var e *engine.Server
		var err error
		pprof.Do(context.Background(), pprof.Labels("component", "engine"), func(context.Context) {
			e = engine.New(c)
			err = e.Start(engineAddr(ip))
		})
		if err != nil {
			closeEngines(out)
			e.Close()
			return nil, fmt.Errorf("engine on %s: %w", ip, err)
		}
		out = append(out, e)
	}
	return out, nil
}

func closeEngines(es []*engine.Server) {
	for _, e := range es {
		_ = e.Close()
	}
}

// routerHandle is a running in-process berth-router.
type routerHandle struct {
	url  string
	stop func()
	// cpuSeconds is the CPU time the router's process has used so far; nil when the
	// router runs in the benchmark's process (its CPU is then the profile's to split).
	cpuSeconds func() float64
}

// startRouter runs a router with the given picking policy and waits until it answers a
// request, so its view holds the pods before any load is measured.
// scrapeInterval 0 keeps the router's default (1s).
func (c *cluster) startRouter(ctx context.Context, policy pick.Policy, scorers string, scrapeInterval time.Duration, probeBody []byte) (*routerHandle, error) {
	return c.startRouterWith(ctx, router.Options{Policy: policy, Scorers: scorers, ScrapeInterval: scrapeInterval}, probeBody)
}

// startRouterWith is startRouter with more options (a Redis to share through).
func (c *cluster) startRouterWith(ctx context.Context, o router.Options, probeBody []byte) (*routerHandle, error) {
	o.Addr, o.ShutdownTimeout = "127.0.0.1:0", 5*time.Second
	policy := o.Policy
	r, err := router.New(c.cp.RESTConfig(), o, logr.Discard())
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go pprof.Do(rctx, pprof.Labels("component", "router-"+string(policy)), func(ctx context.Context) { done <- r.Run(ctx) })
	stop := func() { cancel(); <-done }
	select {
	case <-r.Ready():
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("router stopped before ready: %v", err)
	case <-time.After(30 * time.Second):
		stop()
		return nil, fmt.Errorf("router not ready after 30s")
	}
	h := &routerHandle{url: "http://" + r.Addr() + "/v1/chat/completions", stop: stop}
	cl := newHTTPClient(0)
	for deadline := time.Now().Add(30 * time.Second); ; {
		err := doRequest(cl, h.url, probeBody)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("router at %s does not serve: %w", h.url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cl.CloseIdleConnections()
	return h, nil
}
