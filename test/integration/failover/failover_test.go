// Package failover stops berth-controller in the middle of a rollout and starts a new one:
// the rollout must converge with no duplicate and no orphaned object. It stops the
// controller both ways one can: gracefully (its context is cancelled, as on SIGTERM: it
// finishes what it was doing and releases its lease) and hard (SIGKILL of a separate
// process: no deferred call runs, no lease is released, a request may be half done).
// It has its own control plane because the controller under test must be the only one
// running.
package failover

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/inprocess"
	"github.com/berth-sh/berth/internal/replicas"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/sim"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	// The hard-kill test re-executes this binary as a berth-controller process; in that
	// process this runs the controller and exits.
	replicas.RunIfReplica()
	cptest.Main(m, &cp)
}

const manifest = `
metadata: {name: llm}
spec:
  replicas: 3
  schedulerName: berth-scheduler
  rolloutStrategy:
    rollingUpdateConfiguration: {maxUnavailable: 1, maxSurge: 0}
  template:
    roles:
    - name: prefill
      entryTemplate:
        spec:
          containers: [{name: vllm, image: vllm:v1, resources: {requests: {nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}}]
    - name: decode
      replicas: 2
      workerReplicas: 1
      entryTemplate:
        spec:
          containers: [{name: vllm, image: vllm:v1, resources: {requests: {nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}}]
      workerTemplate:
        spec:
          containers: [{name: vllm, image: vllm:v1, resources: {requests: {nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}}]
`

// A graceful stop mid-rollout: the controller's context is cancelled, as on SIGTERM, and a
// new one (in the same process, as a restarted pod's would be a fresh one) takes over.
func TestControllerStoppedMidRolloutConverges(t *testing.T) {
	h := newHarness(t, "graceful-")
	first := h.startController("berth-controller (first)")
	h.createAndWaitAvailable()
	h.startRolloutAndWait()

	require.NoError(t, first.stop(), "the first berth-controller's Start returned an error when stopped")
	require.Less(t, h.get().Status.UpdatedReplicas, int32(3), "the rollout finished before the controller was stopped; the test proves nothing")

	second := h.startController("berth-controller (second)")
	h.requireConverged()
	require.NoError(t, second.stop(), "the second berth-controller's Start returned an error when stopped")
}

// A crash mid-rollout: berth-controller runs as its own process, as shipped (leader
// election on), and is killed with SIGKILL. Nothing it deferred runs: its lease stays
// held, so the replacement must wait the lease out before it may act, and whatever the
// killed one had half done, the replacement must finish or undo from what it finds.
func TestControllerKilledMidRolloutConverges(t *testing.T) {
	h := newHarness(t, "sigkill-")
	first := h.startControllerProcess("berth-controller-0")
	holder := h.leaseHolder()
	require.NotEmpty(t, holder, "the leading controller holds no lease")
	h.createAndWaitAvailable()
	h.startRolloutAndWait()

	h.kill(first)
	require.Less(t, h.get().Status.UpdatedReplicas, int32(3), "the rollout finished before the controller was killed; the test proves nothing")
	// A graceful stop releases the lease (the manager sets LeaderElectionReleaseOnCancel),
	// which would clear the holder; a crash cannot. This is what makes the kill a crash.
	require.Equal(t, holder, h.leaseHolder(), "the lease is no longer held by the killed controller: it was not killed hard")
	t.Logf("killed %s with %d of 3 groups updated", first.Name, h.get().Status.UpdatedReplicas)

	second := h.startControllerProcess("berth-controller-1")
	now := h.leaseHolder()
	require.NotEmpty(t, now)
	require.NotEqual(t, holder, now, "the replacement leads, but the lease still names the killed controller")
	h.requireConverged()
	assert.False(t, second.DiedOnItsOwn(), "%s exited without being killed (lost its lease?)", second.Name)
}

// harness is one ModelServing, in a namespace of its own, on two 8-GPU nodes of its own,
// with berth-scheduler and a simulated kubelet. It watches every component the test
// starts: one that fails to start or exits by itself fails the test at once, with its
// error, instead of showing up as a rollout that never converges.
type harness struct {
	t    *testing.T
	ctx  context.Context
	ns   string
	kube kubernetes.Interface
	cl   client.Client

	inProcess []*component
	processes []*replicas.Replica // running: not killed by the test
}

func newHarness(t *testing.T, prefix string) *harness {
	cfg := cp.RESTConfig()
	h := &harness{t: t, ctx: t.Context(), kube: kubernetes.NewForConfigOrDie(cfg)}
	var err error
	h.cl, err = client.New(cfg, client.Options{Scheme: controller.Scheme()})
	require.NoError(t, err)
	ns, err := h.kube.CoreV1().Namespaces().Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}, metav1.CreateOptions{})
	require.NoError(t, err)
	h.ns = ns.Name

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	require.NoError(t, cp.WriteKubeconfig(kubeconfig))
	h.inProcess = append(h.inProcess, startComponent(t, "berth-scheduler", func(ctx context.Context) error {
		return inprocess.RunScheduler(ctx, dir, kubeconfig, inprocess.SchedulerOptions{})
	}))
	kubelet := sim.NewKubelet(h.kube, 300*time.Millisecond)
	kctx, stopKubelet := context.WithCancel(context.Background())
	go kubelet.Run(kctx)
	t.Cleanup(stopKubelet)
	for i := 0; i < 2; i++ {
		node := sim.NewNode(fmt.Sprintf("%sgpu-%d", prefix, i), sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: 8}, nil)
		_, err := h.kube.CoreV1().Nodes().Create(h.ctx, node, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	return h
}

// startController runs a controller manager in this process, until the test stops it.
func (h *harness) startController(name string) *component {
	mgr, err := controller.NewManager(cp.RESTConfig(), controller.Options{MetricsAddr: "0", InProcessRestart: true})
	require.NoError(h.t, err)
	c := startComponent(h.t, name, mgr.Start)
	h.inProcess = append(h.inProcess, c)
	return c
}

// startControllerProcess runs berth-controller as a separate process, and returns once it
// leads.
func (h *harness) startControllerProcess(name string) *replicas.Replica {
	r := replicas.Start(h.t, cp, replicas.Controller, name, "")
	h.processes = append(h.processes, r)
	h.eventually(name+" leads", func() bool {
		select {
		case <-r.Leading():
			return true
		default:
			return false
		}
	})
	return r
}

// kill kills r with SIGKILL; from then on its exit is expected.
func (h *harness) kill(r *replicas.Replica) {
	r.Kill()
	for i, p := range h.processes {
		if p == r {
			h.processes = append(h.processes[:i], h.processes[i+1:]...)
			break
		}
	}
}

// leaseHolder is who holds berth-controller's lease.
func (h *harness) leaseHolder() string {
	var lease coordinationv1.Lease
	require.NoError(h.t, h.cl.Get(h.ctx, client.ObjectKey{Namespace: replicas.LeaseNamespace, Name: "berth-controller"}, &lease))
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

func (h *harness) get() *workloadv1alpha1.ModelServing {
	out := &workloadv1alpha1.ModelServing{}
	require.NoError(h.t, h.cl.Get(h.ctx, client.ObjectKey{Namespace: h.ns, Name: "llm"}, out))
	return out
}

func (h *harness) createAndWaitAvailable() {
	ms := &workloadv1alpha1.ModelServing{}
	require.NoError(h.t, yaml.UnmarshalStrict([]byte(manifest), ms))
	ms.Namespace = h.ns
	require.NoError(h.t, h.cl.Create(h.ctx, ms))
	h.eventually("3 groups are available", func() bool { return h.get().Status.AvailableReplicas == 3 })
}

// startRolloutAndWait changes the image and waits until the rollout is under way.
func (h *harness) startRolloutAndWait() {
	ms := h.get()
	for i := range ms.Spec.Template.Roles {
		ms.Spec.Template.Roles[i].EntryTemplate.Spec.Containers[0].Image = "vllm:v2"
	}
	require.NoError(h.t, h.cl.Update(h.ctx, ms))
	h.eventually("the rollout has started", func() bool {
		st := h.get().Status
		return st.UpdateRevision != st.CurrentRevision && st.UpdatedReplicas >= 1
	})
}

// requireConverged waits for the rollout to finish and checks that it left exactly the
// objects of 3 groups, all on the new revision: no duplicate and no orphan.
func (h *harness) requireConverged() {
	t := h.t
	h.eventually("the rollout converges", func() bool {
		m := h.get()
		st := m.Status
		return st.ObservedGeneration == m.Generation && st.UpdatedReplicas == 3 && st.AvailableReplicas == 3 && st.Replicas == 3
	})

	final := h.get()
	var pods corev1.PodList
	require.NoError(t, h.cl.List(h.ctx, &pods, client.InNamespace(h.ns)))
	names := map[string]bool{}
	for _, p := range pods.Items {
		assert.False(t, names[p.Name], "duplicate pod %s", p.Name)
		names[p.Name] = true
		assert.True(t, metav1.IsControlledBy(&p, final), "pod %s is not owned by the ModelServing", p.Name)
		assert.Equal(t, final.Status.UpdateRevision, p.Labels[workloadv1alpha1.RevisionLabel], "pod %s", p.Name)
		assert.Nil(t, p.DeletionTimestamp, "pod %s is still terminating", p.Name)
	}
	assert.Len(t, pods.Items, 15, "3 groups of 5 pods")
	var pgs volcanov1beta1.PodGroupList
	require.NoError(t, h.cl.List(h.ctx, &pgs, client.InNamespace(h.ns)))
	var pgNames []string
	for _, pg := range pgs.Items {
		pgNames = append(pgNames, pg.Name)
	}
	assert.ElementsMatch(t, groupNames(pods.Items), pgNames, "one PodGroup per group, none left over")
	require.NoError(t, h.exited(), "a component exited while the rollout converged")
}

// exited reports the first component that ended though the test did not stop it.
func (h *harness) exited() error {
	for _, c := range h.inProcess {
		if err := c.exitedEarly(); err != nil {
			return err
		}
	}
	for _, r := range h.processes {
		if r.DiedOnItsOwn() {
			return fmt.Errorf("%s (a separate process) exited without being killed; its log is printed at the end of the test", r.Name)
		}
	}
	return nil
}

// eventually waits until cond holds; a component that exits meanwhile ends the wait with
// its error.
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	err := wait.PollUntilContextTimeout(h.ctx, 100*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		if err := h.exited(); err != nil {
			return false, err
		}
		return cond(), nil
	})
	require.NoError(h.t, err, "waiting until %s", what)
}

func groupNames(pods []corev1.Pod) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range pods {
		g := p.Labels[workloadv1alpha1.GroupNameLabel]
		if !seen[g] {
			seen[g] = true
			out = append(out, g)
		}
	}
	return out
}

// component is a part of the system run in this process (berth-scheduler, an in-process
// berth-controller) until the test stops it. Its run function returning before that, with
// an error or without, means it failed to start or died.
type component struct {
	name    string
	cancel  context.CancelFunc
	done    chan struct{}
	err     error // what run returned; read only after done is closed
	stopped atomic.Bool
}

func startComponent(t *testing.T, name string, run func(context.Context) error) *component {
	ctx, cancel := context.WithCancel(context.Background())
	c := &component{name: name, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		c.err = run(ctx)
	}()
	// On the way out only: kube-scheduler's Run returns an error whenever it ends, even
	// when asked to, so what stop returns is for callers that know their component's
	// contract.
	t.Cleanup(func() { _ = c.stop() })
	return c
}

// exitedEarly is an error if run returned though stop was not called.
func (c *component) exitedEarly() error {
	select {
	case <-c.done:
		if !c.stopped.Load() {
			return fmt.Errorf("%s exited before the test stopped it: %v", c.name, c.err)
		}
	default:
	}
	return nil
}

// stop cancels the component's context, waits for run to return and returns its error.
func (c *component) stop() error {
	c.stopped.Store(true)
	c.cancel()
	<-c.done
	return c.err
}
