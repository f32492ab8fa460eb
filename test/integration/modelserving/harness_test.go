// Package modelserving runs berth-controller, berth-scheduler and the simulated kubelet
// in-process against a real apiserver and checks what a ModelServing user sees.
package modelserving

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/inprocess"
	"github.com/berth-sh/berth/internal/systemtest"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/sim"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) { cptest.Main(m, &cp) }

// The scheduler, the controller and the simulated kubelet are shared by the package's tests
// (started on first use); each test works in its own namespace on its own nodes.
var (
	startOnce sync.Once
	kubelet   *sim.Kubelet
	kube      kubernetes.Interface
	cl        client.Client
	nsCount   atomic.Int32
)

const gpu = corev1.ResourceName("nvidia.com/gpu")

func startSystem(t *testing.T) {
	startOnce.Do(func() {
		cfg := cp.RESTConfig()
		kube = kubernetes.NewForConfigOrDie(cfg)
		var err error
		cl, err = client.New(cp.RESTConfig(), client.Options{Scheme: controller.Scheme()})
		require.NoError(t, err)

		dir, err := os.MkdirTemp("", "berth-ms-test")
		require.NoError(t, err)
		kubeconfig := filepath.Join(dir, "kubeconfig")
		require.NoError(t, cp.WriteKubeconfig(kubeconfig))
		sys, err := inprocess.Start(context.Background(), cfg, inprocess.Options{Dir: dir, Kubeconfig: kubeconfig,
			Scheduler:  &inprocess.SchedulerOptions{},
			Controller: &controller.Options{},
			Kubelet:    &inprocess.KubeletOptions{PodStartDelay: 200 * time.Millisecond, Client: kube},
		})
		require.NoError(t, err)
		cptest.BeforeStop(sys.Stop)
		go func() { panic(fmt.Sprintf("%v", <-sys.Failed())) }()
		kubelet = sys.Kubelet
	})
}

type world struct {
	t   *testing.T
	ctx context.Context
	ns  string
}

func newWorld(t *testing.T, gpuNodes int) *world {
	startSystem(t)
	w := &world{t: t, ctx: context.Background(), ns: fmt.Sprintf("ms-%d", nsCount.Add(1))}
	_, err := kube.CoreV1().Namespaces().Create(w.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	for i := 0; i < gpuNodes; i++ {
		w.addNode(fmt.Sprintf("gpu-%d", i))
	}
	t.Cleanup(func() {
		if t.Failed() {
			w.dump()
		}
		zero := metav1.DeleteOptions{GracePeriodSeconds: new(int64)}
		_ = kube.CoreV1().Nodes().DeleteCollection(context.Background(), zero, metav1.ListOptions{LabelSelector: "berth.test/owner=" + w.ns})
		require.NoError(t, systemtest.RemoveNamespace(kube, w.ns), "the test's namespace is removed with everything in it")
	})
	return w
}

// addNode adds an 8-GPU node.
func (w *world) addNode(name string) {
	_, err := kube.CoreV1().Nodes().Create(w.ctx, sim.NewNode(w.ns+"-"+name, sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: 8},
		map[string]string{"berth.test/owner": w.ns}), metav1.CreateOptions{})
	require.NoError(w.t, err)
}

func (w *world) apply(manifest string) *workloadv1alpha1.ModelServing {
	w.t.Helper()
	ms := &workloadv1alpha1.ModelServing{}
	require.NoError(w.t, yaml.UnmarshalStrict([]byte(manifest), ms))
	ms.Namespace = w.ns
	require.NoError(w.t, cl.Create(w.ctx, ms))
	return ms
}

func (w *world) get(name string) *workloadv1alpha1.ModelServing {
	w.t.Helper()
	ms := &workloadv1alpha1.ModelServing{}
	require.NoError(w.t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, ms))
	return ms
}

func (w *world) pods(selector map[string]string) []corev1.Pod {
	w.t.Helper()
	var list corev1.PodList
	require.NoError(w.t, cl.List(w.ctx, &list, client.InNamespace(w.ns), client.MatchingLabels(selector)))
	return list.Items
}

func (w *world) eventually(what string, timeout time.Duration, cond func() bool) {
	w.t.Helper()
	err := wait.PollUntilContextTimeout(w.ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond(), nil })
	require.NoError(w.t, err, "timed out after %s waiting until %s", timeout, what)
}

// setReady reports a pod's readiness as a kubelet does for its readiness probe: the Ready
// and ContainersReady conditions and every container's ready flag. The simulated kubelet
// keeps a pod ready through a container restart, where a real one reports it not ready
// until the new container passes its probe. A pod already gone is left alone: whoever
// deleted it is what the caller checks.
func (w *world) setReady(name string, ready bool) {
	w.t.Helper()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := kube.CoreV1().Pods(w.ns).Get(w.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		for _, typ := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
			for i := range p.Status.Conditions {
				if c := &p.Status.Conditions[i]; c.Type == typ && c.Status != status {
					c.Status, c.LastTransitionTime = status, now
				}
			}
		}
		for i := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[i].Ready = ready
		}
		_, err = kube.CoreV1().Pods(w.ns).UpdateStatus(w.ctx, p, metav1.UpdateOptions{})
		return err
	})
	if !apierrors.IsNotFound(err) {
		require.NoError(w.t, err, "set pod %s ready=%t", name, ready)
	}
}

type metav1Condition = metav1.Condition

func metav1IsControlledBy(obj metav1.Object, owner metav1.Object) bool {
	return metav1.IsControlledBy(obj, owner)
}

// dump logs the ModelServings and pods so a failed run explains itself.
func (w *world) dump() {
	var list workloadv1alpha1.ModelServingList
	if err := cl.List(context.Background(), &list, client.InNamespace(w.ns)); err == nil {
		for _, ms := range list.Items {
			w.t.Logf("modelserving %s gen=%d status=%+v", ms.Name, ms.Generation, ms.Status)
		}
	}
	pods, _ := kube.CoreV1().Pods(w.ns).List(context.Background(), metav1.ListOptions{})
	for _, p := range pods.Items {
		sched := ""
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled {
				sched = c.Reason + " " + c.Message
			}
		}
		w.t.Logf("pod %s node=%q phase=%s %s", p.Name, p.Spec.NodeName, p.Status.Phase, sched)
	}
}

var metav1GetOptions = metav1.GetOptions{}
