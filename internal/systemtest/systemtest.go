// Package systemtest starts the whole of Berth in-process on a test control plane, as the
// integration tests need it: berth-scheduler, berth-controller (every reconciler, as
// cmd/controller runs them), the simulated kubelet with an engine per serving pod, and
// berth-router replicas. A test package starts it once (its components outlive single
// tests) and stops it before its control plane (cptest.BeforeStop).
package systemtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/inprocess"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/sim"
)

// Options shape the system.
type Options struct {
	// Engines are the simulated engines' options (TimeScale 0 means 1: real time).
	Engines sim.EngineOptions
	// AutoscaleSyncPeriod is berth-controller's (0: its default).
	AutoscaleSyncPeriod time.Duration
	// VariantSyncPeriod is how often berth-controller sizes each VariantAutoscaling (0: its default).
	VariantSyncPeriod time.Duration
	// Routers is how many berth-router replicas run (0 means 1).
	Routers int
	// Router adjusts router i's options; the defaults listen on loopback ports, scrape every
	// 100 ms, take bodies up to 1 MiB and drain for a second.
	Router func(i int, o *router.Options)
	// PodStartDelay is the simulated kubelet's (0 means 50 ms).
	PodStartDelay time.Duration
	// CapacityPeriod is berth-scheduler's --capacity-publish-period (0: its default).
	CapacityPeriod time.Duration
	// BlindScaling is berth-controller's --placement-aware-scaling=false.
	BlindScaling bool
}

// System is the running system and clients of its control plane.
type System struct {
	Kube    kubernetes.Interface
	Client  client.WithWatch
	Engines *sim.Engines
	Routers []*router.Router
}

// Start starts everything and waits until every router is ready. Everything stops before
// the package's control plane does.
func Start(cp *controlplane.ControlPlane, o Options) (*System, error) {
	cfg := cp.RESTConfig()
	s := &System{}
	var err error
	if s.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if s.Client, err = client.NewWithWatch(cfg, client.Options{Scheme: controller.Scheme()}); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "berth-systemtest-")
	if err != nil {
		return nil, err
	}
	cptest.BeforeStop(func() { _ = os.RemoveAll(dir) })
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	delay := o.PodStartDelay
	if delay <= 0 {
		delay = 50 * time.Millisecond
	}
	routers := make([]router.Options, max(o.Routers, 1))
	for i := range routers {
		// EndpointHeader: tests read X-Berth-Endpoint to see which pod served.
		routers[i] = router.Options{Addr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", ScrapeInterval: 100 * time.Millisecond,
			MaxBodyBytes: 1 << 20, ShutdownTimeout: time.Second, EndpointHeader: true}
		if o.Router != nil {
			o.Router(i, &routers[i])
		}
	}
	// Not test-bound loggers: the components outlive the test that started them.
	sys, err := inprocess.Start(context.Background(), cfg, inprocess.Options{
		Dir: dir, Kubeconfig: kubeconfig,
		Scheduler:  &inprocess.SchedulerOptions{CapacityPeriod: o.CapacityPeriod},
		Controller: &controller.Options{AutoscaleSyncPeriod: o.AutoscaleSyncPeriod, VariantSyncPeriod: o.VariantSyncPeriod, BlindScaling: o.BlindScaling},
		Kubelet:    &inprocess.KubeletOptions{PodStartDelay: delay, Engines: &o.Engines, Client: s.Kube},
		Routers:    routers,
	})
	if err != nil {
		return nil, err
	}
	cptest.BeforeStop(sys.Stop)
	go func() { panic(fmt.Sprintf("systemtest: %v", <-sys.Failed())) }()
	s.Engines, s.Routers = sys.Engines, sys.Routers
	return s, nil
}

// OwnerLabel marks the nodes a test's namespace created, so cleanup finds them.
const OwnerLabel = "berth.test/owner"

// GPUNode is a simulated 8-GPU node of the given product ("" for no product label) owned by
// namespace ns.
func GPUNode(name, ns, product string) *corev1.Node {
	return sim.NewNode(name, sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: 8, GPUProduct: product}, map[string]string{OwnerLabel: ns})
}

// Cleanup deletes namespace ns (see RemoveNamespace) and the nodes the namespace owns.
func (s *System) Cleanup(ns string) error {
	zero := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
	if err := s.Kube.CoreV1().Nodes().DeleteCollection(context.Background(), zero, metav1.ListOptions{LabelSelector: OwnerLabel + "=" + ns}); err != nil {
		return err
	}
	return RemoveNamespace(s.Kube, ns)
}

// RemoveNamespace deletes namespace ns, which the control plane's namespace controller
// empties (a kubelet, such as the simulated one, finishes its bound pods) and removes, and
// waits until it is gone. An error means something in it would not go (a finalizer nobody
// removes, a pod nobody finishes): a test should report it.
func RemoveNamespace(kube kubernetes.Interface, ns string) error {
	ctx := context.Background()
	if err := kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	var last *corev1.Namespace
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		last = n
		return false, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("namespace %s was not removed within a minute: %+v", ns, last.Status.Conditions)
	}
	return err
}

// Decode reads one YAML document of any kind berth-controller knows (Berth's, llm-d's,
// llmaz's and the built-in kinds) into its typed object, strictly: a misspelt field fails
// the test rather than being dropped.
func Decode(doc string) (client.Object, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
		return nil, err
	}
	gv, err := schema.ParseGroupVersion(tm.APIVersion)
	if err != nil {
		return nil, err
	}
	ro, err := controller.Scheme().New(gv.WithKind(tm.Kind))
	if err != nil {
		return nil, fmt.Errorf("unexpected kind %q: %w", tm.Kind, err)
	}
	obj, ok := ro.(client.Object)
	if !ok {
		return nil, fmt.Errorf("kind %q is not an object", tm.Kind)
	}
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return obj, nil
}
