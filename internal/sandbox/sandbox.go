// Package sandbox runs the whole of Berth on one machine: a real control plane (etcd and
// kube-apiserver), a simulated leaf/spine fabric of GPU nodes with its Volcano HyperNodes,
// the simulated kubelet, berth-scheduler and berth-controller, all in this process. It
// applies a directory of manifests, reports while the ModelServings come up, and prints
// where every pod landed.
//
// cmd/sandbox is its command line; the tests run it against a shared control plane.
package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/inprocess"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/sim"
)

// Options configure Run.
type Options struct {
	// Fabric is the simulated network of GPU nodes.
	Fabric sim.Fabric
	// DRAGPUs names leaves and spines of the fabric whose nodes publish their GPUs through
	// the simulated gpu.nvidia.com DRA driver (ResourceSlices) instead of the device plugin
	// (nvidia.com/gpu); empty keeps the device plugin everywhere. DefaultDRAGPUs is the
	// command's default.
	DRAGPUs []string
	// PlainNodes, when positive, replaces the fabric with this many nodes without GPUs,
	// network labels or HyperNodes, like a kind cluster's workers: the end-to-end suite
	// (test/e2e) gives nodes fake GPUs and network tiers itself.
	PlainNodes int
	// OnReady, when set, is called once every component runs and the manifests are applied,
	// with the kubeconfig path (Kubeconfig, or an internal one when that is empty).
	OnReady func(kubeconfig string)
	// ExamplesDir holds the manifests to apply (every document of every *.yaml, *.yml and
	// *.json file in it, server-side, whatever the kind).
	ExamplesDir string
	// Kubeconfig is where to write a kubeconfig for kubectl while the sandbox runs; it is
	// removed when Run returns. Empty writes none.
	Kubeconfig string
	// Once makes Run return as soon as every ModelServing it applied is Available (nil),
	// or when Timeout passes first (an error saying which is not and why).
	Once bool
	// Timeout bounds the wait for the ModelServings, counted from when the manifests are
	// applied. Without Once, passing it only prints why they are not Available yet.
	Timeout time.Duration
	// PodStartDelay is how long the simulated kubelet takes to start a bound pod.
	PodStartDelay time.Duration
	// ControlPlane, when set, is used instead of starting one, and left running: tests share
	// one per test binary. Objects the sandbox creates stay in it.
	ControlPlane *controlplane.ControlPlane
	// RouterAddr is where berth-router serves the OpenAI API ("127.0.0.1:0" picks a port).
	RouterAddr string
	// EngineTimeScale is the simulated engines' real/simulated time ratio (1: as fast as a
	// real GPU would answer; smaller is faster).
	EngineTimeScale float64
	// Load, when its Concurrency is positive, drives traffic through the router once
	// everything is Available and prints the autoscaled replicas as they change. With Once,
	// Run returns after it, failing if no autoscaler scaled up.
	Load Load
	// AutoscaleSyncPeriod is how often the autoscaler decides (0: berth-controller's default).
	AutoscaleSyncPeriod time.Duration
	// VariantSyncPeriod is how often each VariantAutoscaling is sized (0: 5 s, a sixth of
	// berth-controller's default, so the sandbox shows a sized variant soon after start).
	VariantSyncPeriod time.Duration
}

// pollInterval is how often Run looks at the ModelServings; a line is printed only when it
// changed, or every heartbeat while a ModelServing is not Available.
const (
	pollInterval = 250 * time.Millisecond
	heartbeat    = 5 * time.Second
)

// controlPlaneStopTimeout bounds stopping the control plane; it normally takes a second.
const controlPlaneStopTimeout = 10 * time.Second

// stopControlPlane stops the control plane, giving up after controlPlaneStopTimeout: the
// apiserver never finishes stopping once etcd is gone, and Ctrl-C in a terminal signals the
// whole foreground process group, etcd included. When Run returns the process exits, and
// etcd, if still alive, dies with it (Pdeathsig); only temporary files remain.
func stopControlPlane(cp *controlplane.ControlPlane, out io.Writer) {
	fmt.Fprintln(out, "stopping the control plane")
	done := make(chan struct{})
	go func() { cp.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(controlPlaneStopTimeout):
		fmt.Fprintf(out, "the control plane did not stop within %s (did etcd get the interrupt too?); leaving it behind\n", controlPlaneStopTimeout)
	}
}

// Run runs the sandbox until ctx ends (or, with Once, until the ModelServings are
// Available), writing its progress and placement table to out. Everything it started is
// stopped before it returns: the scheduler, controller and kubelet first, then the control
// plane, which would otherwise wait for their open watches.
func Run(ctx context.Context, o Options, out io.Writer) error {
	var dra []*corev1.Node
	if o.PlainNodes <= 0 {
		if err := o.Fabric.Validate(); err != nil {
			return err
		}
		var err error
		if dra, err = draNodes(o.Fabric, o.DRAGPUs); err != nil {
			return err
		}
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("timeout must be positive, got %s", o.Timeout)
	}
	// Read the manifests first: a broken file should fail before anything starts.
	manifests, err := readManifests(o.ExamplesDir)
	if err != nil {
		return err
	}

	cp := o.ControlPlane
	if cp == nil {
		fmt.Fprintln(out, "starting etcd and kube-apiserver (building etcd takes about a minute the first time)...")
		t := time.Now()
		cp, err = controlplane.Start(ctx, controlplane.Options{})
		if err != nil {
			return fmt.Errorf("control plane: %w", err)
		}
		defer stopControlPlane(cp, out)
		fmt.Fprintf(out, "control plane ready in %s\n", time.Since(t).Round(100*time.Millisecond))
	}

	dir, err := os.MkdirTemp("", "berth-sandbox-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	internalKubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteKubeconfig(internalKubeconfig); err != nil {
		return err
	}
	kubeconfigHint := ""
	if o.Kubeconfig != "" {
		path, err := filepath.Abs(o.Kubeconfig)
		if err != nil {
			return err
		}
		if err := cp.WriteKubeconfig(path); err != nil {
			return fmt.Errorf("writing kubeconfig: %w", err)
		}
		defer os.Remove(path) // its credentials die with the control plane
		kubeconfigHint = fmt.Sprintf("kubectl --kubeconfig %s get modelservings,podgroups,pods -o wide", path)
		fmt.Fprintf(out, "kubeconfig: %s (valid while the sandbox runs)\n  %s\n", path, kubeconfigHint)
	}

	cfg := cp.RESTConfig()
	cfg.QPS, cfg.Burst = 200, 400
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	vc, err := volcanoclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cl, err := client.New(cfg, client.Options{Scheme: controller.Scheme()})
	if err != nil {
		return err
	}

	if o.PlainNodes > 0 {
		if err := createPlainNodes(ctx, o.PlainNodes, kube); err != nil {
			return fmt.Errorf("simulated nodes: %w", err)
		}
		fmt.Fprintf(out, "nodes: %d plain workers (no GPUs, no network tiers)\n", o.PlainNodes)
	} else {
		f := o.Fabric
		if err := createDRANodes(ctx, dra, kube); err != nil {
			return fmt.Errorf("simulated fabric: %w", err)
		}
		if err := createFabric(ctx, f, kube, vc); err != nil {
			return fmt.Errorf("simulated fabric: %w", err)
		}
		nvlink := ""
		if d := f.NVLinkDomains(); d > 0 {
			nvlink = fmt.Sprintf("%d %s (tier %d), ", d, sim.NVLinkTierName, sim.NVLinkTier)
		}
		fmt.Fprintf(out, "fabric: %d nodes, %d GPUs (%s); HyperNodes: %s%d leaf (tier %d), %d spine (tier %d)\n",
			f.NodeCount(), f.NodeCount()*f.GPUsPerNode, f.Describe(), nvlink, f.Leaves(), f.LeafTier(), f.Spines, f.SpineTier())
		if len(dra) > 0 {
			fmt.Fprintf(out, "DRA GPUs: the %d nodes of %s publish theirs as %s ResourceSlices (DeviceClass %s); the others offer %s\n",
				len(dra), strings.Join(o.DRAGPUs, ", "), sim.DRADriver, sim.GPUDeviceClassName, sim.GPUResource)
		}
	}
	if err := publishInstallation(ctx, kube); err != nil {
		return fmt.Errorf("publishing the installation: %w", err)
	}

	// The components. Registered after the control plane's Stop, so deferred calls stop
	// them first.
	if o.VariantSyncPeriod <= 0 {
		o.VariantSyncPeriod = 5 * time.Second
	}
	routerAddr := o.RouterAddr
	if routerAddr == "" {
		routerAddr = "127.0.0.1:0"
	}
	sys, err := inprocess.Start(ctx, cfg, inprocess.Options{
		Dir: dir, Kubeconfig: internalKubeconfig,
		Scheduler: &inprocess.SchedulerOptions{},
		// kube-scheduler's default profile, as every cluster runs beside berth-scheduler:
		// pods that name no scheduler (a plain Deployment's) are placed too.
		DefaultScheduler: true,
		// InProcessRestart: a second sandbox in one process (the tests) registers the same
		// controller names again.
		Controller: &controller.Options{InProcessRestart: true,
			AutoscaleSyncPeriod: o.AutoscaleSyncPeriod, VariantSyncPeriod: o.VariantSyncPeriod},
		Kubelet: &inprocess.KubeletOptions{PodStartDelay: o.PodStartDelay, Engines: &sim.EngineOptions{TimeScale: o.EngineTimeScale}, Client: kube},
		// Gateway listener ports open on the router's own host; answers name the pod that
		// served (X-Berth-Endpoint), which the sandbox's load report shows.
		Routers: []router.Options{{Addr: routerAddr, ShutdownTimeout: 2 * time.Second, GatewayHost: hostOf(routerAddr),
			EndpointHeader: true}},
		RouterLogger: func(int) logr.Logger { return routerLogger() },
		// Building the first router's view waits for the informers' first lists.
		RouterReadyTimeout: o.Timeout,
	})
	if err != nil {
		return err
	}
	defer sys.Stop()
	failed := sys.Failed()
	rt := sys.Routers[0]
	routerURL := "http://" + rt.Addr()
	fmt.Fprintf(out, "running berth-scheduler, berth-controller, berth-router (%s), kube-scheduler, kube-controller-manager's garbage collector, namespace, Deployment, ReplicaSet and ResourceClaim controllers, the simulated kubelet (and DRA driver) and engines\n", routerURL)

	ap, err := newApplier(cfg, kube)
	if err != nil {
		return err
	}
	var objs []applied
	for _, m := range manifests {
		a, err := ap.apply(ctx, m)
		if err != nil {
			return err
		}
		objs = append(objs, a)
		fmt.Fprintf(out, "applied %s (%s)\n", a, filepath.Base(a.file))
	}
	if len(objs) == 0 {
		fmt.Fprintf(out, "%s holds no manifests\n", o.ExamplesDir)
	}
	if o.OnReady != nil {
		kc := o.Kubeconfig
		if kc == "" {
			kc = internalKubeconfig
		}
		o.OnReady(kc)
	}

	onAvailable := func() error {
		cold, err := coldModels(ctx, cl)
		if err != nil {
			return err
		}
		if err := probeRoutes(ctx, cl, routerURL, cold, out); err != nil {
			return err
		}
		if err := probeGateways(ctx, cfg, rt, out); err != nil {
			return err
		}
		if err := reportVariants(ctx, cl, o.VariantSyncPeriod, out); err != nil || o.Load.Concurrency <= 0 {
			return err
		}
		// The load's first requests: those for models at zero, held until they come up.
		coldNames := make([]string, 0, len(cold))
		for m := range cold {
			coldNames = append(coldNames, m)
		}
		sort.Strings(coldNames)
		for _, m := range coldNames {
			if err := runFromZero(ctx, cl, routerURL, m, cold[m], out); err != nil {
				return err
			}
		}
		models, err := loadModels(ctx, cl)
		if err != nil {
			return err
		}
		rep, err := runLoad(ctx, cl, routerURL, models, o.Load, out)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "load done: %d requests answered, %d failed\n", rep.ok, rep.bad)
		for _, e := range rep.errors {
			fmt.Fprintf(out, "  failed: %s\n", e)
		}
		if !rep.scaledUp {
			return errors.New("no autoscaler scaled anything up under the load (is an AutoscalingPolicyBinding or a ModelBooster with a policy applied?)")
		}
		// Then a node drain under load: its ServingGroups move whole (drain.go).
		return runDrain(ctx, cl, routerURL, out)
	}
	return watch(ctx, o, out, cl, newTracked(objs), failed, kubeconfigHint, onAvailable)
}

// watch prints progress until every tracked ModelServing is Available, then the placement
// table; with Once it returns there, otherwise it goes on (printing changes, and the table
// again whenever the placement settles differently) until ctx ends.
//
// Once everything is Available the first time, onAvailable runs (it sends requests through
// the router); with Once its error is Run's.
func watch(ctx context.Context, o Options, out io.Writer, cl client.Client, t tracked, failed <-chan error, kubeconfigHint string, onAvailable func() error) error {
	start := time.Now()
	timeout := time.NewTimer(o.Timeout)
	defer timeout.Stop()
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()

	type printed struct {
		line string
		at   time.Time
	}
	last := map[string]printed{}
	lastTable := ""
	timedOut, reported := false, false
	var snap *snapshot
	for {
		s, err := observe(ctx, cl, t)
		switch {
		case err == nil:
			snap = s
		case ctx.Err() == nil:
			return fmt.Errorf("reading ModelServings: %w", err)
		}
		if snap != nil && ctx.Err() == nil {
			lines := snap.progress()
			keys := make([]string, 0, len(lines))
			for k := range lines {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			now := time.Now()
			for _, k := range keys {
				p, ok := last[k]
				stale := p.line == lines[k] && now.Sub(p.at) >= heartbeat && !snap.allAvailable()
				if !ok || p.line != lines[k] || stale {
					fmt.Fprintln(out, lines[k])
					last[k] = printed{line: lines[k], at: now}
				}
			}

			if snap.allAvailable() {
				var tb bytes.Buffer
				snap.table(&tb)
				if tb.String() != lastTable {
					if lastTable == "" {
						fmt.Fprintf(out, "\nevery ModelServing is Available (%d, %s after applying)\n\n", len(snap.servings), time.Since(start).Round(100*time.Millisecond))
					} else {
						fmt.Fprintln(out, "\nplacement changed:")
					}
					_, _ = out.Write(tb.Bytes())
					if lastTable == "" {
						if err := onAvailable(); err != nil && o.Once {
							return err
						}
					}
					if o.Once {
						return nil
					}
					if lastTable == "" {
						fmt.Fprintln(out, "\nrunning until interrupted (Ctrl-C)")
						if kubeconfigHint != "" {
							fmt.Fprintln(out, "  "+kubeconfigHint)
						}
					}
					lastTable = tb.String()
				}
			} else if timedOut && !reported {
				reason := fmt.Sprintf("not every ModelServing is Available after %s:\n%s", o.Timeout, snap.notAvailable())
				if o.Once {
					fmt.Fprintln(out)
					snap.table(out)
					return errors.New(reason)
				}
				fmt.Fprintf(out, "\n%s\n\n", reason)
				reported = true
			}
		}

		select {
		case <-ctx.Done():
			if o.Once {
				msg := "interrupted before every ModelServing was Available"
				if snap != nil {
					msg += ":\n" + snap.notAvailable()
				}
				return errors.New(msg)
			}
			fmt.Fprintln(out, "\nshutting down")
			return nil
		case err := <-failed:
			return err
		case <-timeout.C:
			timedOut = true
		case <-ticker.C:
		}
	}
}
