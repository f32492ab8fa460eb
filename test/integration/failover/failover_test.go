// Package failover kills berth-controller in the middle of a rollout and starts a new one:
// the rollout must converge with no duplicate and no orphaned object. It has its own control
// plane because the controller under test must be the only one running.
package failover

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/scheduler"
	"github.com/berth-sh/berth/pkg/sim"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) { cptest.Main(m, &cp) }

const manifest = `
metadata: {name: llm, namespace: default}
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

func TestControllerKilledMidRolloutConverges(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := cp.RESTConfig()
	kube := kubernetes.NewForConfigOrDie(cfg)
	cl, err := client.New(cfg, client.Options{Scheme: controller.Scheme()})
	require.NoError(t, err)

	startScheduler(t, ctx)
	kubelet := sim.NewKubelet(kube, 300*time.Millisecond)
	go kubelet.Run(ctx)
	for i := 0; i < 2; i++ {
		node := sim.NewNode(fmt.Sprintf("gpu-%d", i), sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: 8}, nil)
		_, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	stopFirst := startController(t, ctx)
	ms := &workloadv1alpha1.ModelServing{}
	require.NoError(t, yaml.UnmarshalStrict([]byte(manifest), ms))
	require.NoError(t, cl.Create(ctx, ms))
	get := func() *workloadv1alpha1.ModelServing {
		out := &workloadv1alpha1.ModelServing{}
		require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: "default", Name: "llm"}, out))
		return out
	}
	eventually(t, "3 groups are available", func() bool { return get().Status.AvailableReplicas == 3 })

	ms = get()
	for i := range ms.Spec.Template.Roles {
		ms.Spec.Template.Roles[i].EntryTemplate.Spec.Containers[0].Image = "vllm:v2"
	}
	require.NoError(t, cl.Update(ctx, ms))
	eventually(t, "the rollout has started", func() bool {
		st := get().Status
		return st.UpdateRevision != st.CurrentRevision && st.UpdatedReplicas >= 1
	})
	stopFirst() // killed mid-rollout
	require.Less(t, get().Status.UpdatedReplicas, int32(3), "the rollout finished before the controller was killed; the test proves nothing")

	startController(t, ctx)
	eventually(t, "the rollout converges", func() bool {
		m := get()
		st := m.Status
		return st.ObservedGeneration == m.Generation && st.UpdatedReplicas == 3 && st.AvailableReplicas == 3 && st.Replicas == 3
	})

	// No duplicate and no orphan: exactly the objects of 3 groups, all on the new revision.
	final := get()
	var pods corev1.PodList
	require.NoError(t, cl.List(ctx, &pods, client.InNamespace("default")))
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
	require.NoError(t, cl.List(ctx, &pgs, client.InNamespace("default")))
	var pgNames []string
	for _, pg := range pgs.Items {
		pgNames = append(pgNames, pg.Name)
	}
	assert.ElementsMatch(t, groupNames(pods.Items), pgNames, "one PodGroup per group, none left over")
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

// startController runs a controller manager until the returned stop is called.
func startController(t *testing.T, ctx context.Context) (stop func()) {
	mgr, err := controller.NewManager(cp.RESTConfig(), controller.Options{MetricsAddr: "0", InProcessRestart: true})
	require.NoError(t, err)
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = mgr.Start(mctx) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func startScheduler(t *testing.T, ctx context.Context) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	require.NoError(t, cp.WriteKubeconfig(kubeconfig))
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = scheduler.RunInProcess(sctx, dir, kubeconfig, nil) }()
	t.Cleanup(func() { cancel(); <-done })
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) { return cond(), nil })
	require.NoError(t, err, "timed out waiting until %s", what)
}
