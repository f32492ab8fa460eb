// Package inprocess assembles Berth in one process for the sandbox, the integration tests
// and the benchmarks: berth-scheduler (from the shipped configuration), kube-scheduler's
// default profile, berth-controller, the simulated kubelet with an engine per serving pod,
// and berth-router replicas. Each component is wired here once, so a new one reaches every
// in-process user by one change. The production assembly stays in pkg/scheduler,
// pkg/controller and pkg/router, which cmd/ wires to flags.
package inprocess

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/sim"
)

// Options say which components run and how. A nil pointer leaves a component out.
type Options struct {
	// Dir holds the components' configuration files; Kubeconfig is a kubeconfig for the
	// control plane (the schedulers read it, as the binary does).
	Dir, Kubeconfig string
	// Scheduler runs berth-scheduler from the shipped configuration.
	Scheduler *SchedulerOptions
	// DefaultScheduler runs kube-scheduler's default profile beside it, as every cluster
	// does, at ClusterRate.
	DefaultScheduler bool
	// Controller runs berth-controller (every reconciler, as cmd/controller runs them).
	// MetricsAddr "" means "0": no metrics server.
	Controller *controller.Options
	// Kubelet runs the simulated kubelet.
	Kubelet *KubeletOptions
	// Routers run one berth-router each; RouterLogger names router i's logger
	// (klog's, named router-<i>, when nil).
	Routers      []router.Options
	RouterLogger func(i int) logr.Logger
	// RouterReadyTimeout bounds the wait for every router to be ready (0: 30 s).
	RouterReadyTimeout time.Duration
}

// KubeletOptions configure the simulated kubelet.
type KubeletOptions struct {
	// PodStartDelay is how long a bound pod takes to become Running and Ready.
	PodStartDelay time.Duration
	// Engines, when not nil, start a simulated engine for every serving pod before it is Ready.
	Engines *sim.EngineOptions
	// Client is the kubelet's client (nil: one made from the system's rest.Config).
	Client kubernetes.Interface
	// PodNetwork is the kubelet's (sim.Kubelet.PodNetwork: 0 gives pods loopback addresses).
	PodNetwork byte
	// BeforeReady, when Engines is nil, is called with every pod about to be Ready
	// (sim.Kubelet.BeforeReady): it starts the servers a test's pods run.
	BeforeReady func(ctx context.Context, p *corev1.Pod)
}

// System is the running components.
type System struct {
	Manager ctrl.Manager // berth-controller's, when it runs
	Kubelet *sim.Kubelet
	Engines *sim.Engines
	Routers []*router.Router

	cancel  context.CancelFunc
	running sync.WaitGroup
	failed  chan error
}

// Start starts what o asks for against the control plane cfg points at, and returns once
// every router is ready. The components run until ctx ends or Stop is called.
func Start(ctx context.Context, cfg *rest.Config, o Options) (*System, error) {
	ctx, cancel := context.WithCancel(ctx)
	s := &System{cancel: cancel, failed: make(chan error, 8+len(o.Routers))}
	ok := false
	defer func() {
		if !ok {
			s.Stop()
		}
	}()
	if o.Scheduler != nil {
		so := *o.Scheduler
		s.run(ctx, workloadv1alpha1.BerthSchedulerName, func(ctx context.Context) error { return RunScheduler(ctx, o.Dir, o.Kubeconfig, so) })
	}
	if o.DefaultScheduler {
		s.run(ctx, "kube-scheduler", func(ctx context.Context) error { return RunDefaultScheduler(ctx, o.Dir, o.Kubeconfig, ClusterRate) })
	}
	if o.Controller != nil {
		co := *o.Controller
		if co.MetricsAddr == "" {
			co.MetricsAddr = "0"
		}
		mgr, err := controller.NewManager(cfg, co)
		if err != nil {
			return nil, err
		}
		s.Manager = mgr
		s.run(ctx, "berth-controller", mgr.Start)
	}
	if o.Kubelet != nil {
		kube := o.Kubelet.Client
		if kube == nil {
			var err error
			if kube, err = kubernetes.NewForConfig(cfg); err != nil {
				return nil, err
			}
		}
		s.Kubelet = sim.NewKubelet(kube, o.Kubelet.PodStartDelay)
		s.Kubelet.PodNetwork, s.Kubelet.BeforeReady = o.Kubelet.PodNetwork, o.Kubelet.BeforeReady
		if o.Kubelet.Engines != nil {
			var err error
			if s.Engines, err = sim.NewEngines(cfg, *o.Kubelet.Engines); err != nil {
				return nil, err
			}
			s.run(ctx, "simulated engines", s.Engines.Run)
			s.Kubelet.BeforeReady = s.Engines.Ensure
		}
		s.run(ctx, "simulated kubelet", func(ctx context.Context) error { s.Kubelet.Run(ctx); return nil })
	}
	for i, ro := range o.Routers {
		logger := klog.Background().WithName(fmt.Sprintf("router-%d", i))
		if o.RouterLogger != nil {
			logger = o.RouterLogger(i)
		}
		r, err := router.New(cfg, ro, logger)
		if err != nil {
			return nil, err
		}
		s.Routers = append(s.Routers, r)
		s.run(ctx, fmt.Sprintf("berth-router %d", i), r.Run)
	}
	timeout := o.RouterReadyTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	deadline := time.After(timeout)
	for i, r := range s.Routers {
		select {
		case <-r.Ready():
		case err := <-s.failed:
			return nil, err
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline:
			return nil, fmt.Errorf("berth-router %d not ready after %s", i, timeout)
		}
	}
	ok = true
	return s, nil
}

// run runs a component until ctx ends; one that returns before that is reported on Failed.
func (s *System) run(ctx context.Context, name string, f func(context.Context) error) {
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		err := f(ctx)
		if ctx.Err() != nil {
			return // stopping
		}
		if err == nil {
			err = errors.New("stopped")
		}
		select {
		case s.failed <- fmt.Errorf("%s: %w", name, err):
		default: // an earlier failure is unread; that one is reported
		}
	}()
}

// Failed reports a component that stopped on its own, with its name and error.
func (s *System) Failed() <-chan error { return s.failed }

// Stop stops every component and waits until they have returned. It may be called more
// than once.
func (s *System) Stop() {
	s.cancel()
	s.running.Wait()
}
