package rbac

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/routestatus"
	"github.com/berth-sh/berth/pkg/sim"
)

const (
	leafLabel  = "network.berth.sh/leaf"
	spineLabel = "network.berth.sh/spine"
)

// 2 groups of one role with 1 worker: 2 pods of 1 GPU per group, each group confined to a
// leaf, so the controller makes PodGroups and the scheduler's gang and topology plugins run.
const servingManifest = `
metadata: {name: llm}
spec:
  replicas: 2
  schedulerName: berth-scheduler
  template:
    networkTopology: {mode: hard, highestTierAllowed: 1}
    roles:
    - name: server
      replicas: 1
      workerReplicas: 1
      entryTemplate:
        spec:
          containers: [{name: vllm, image: vllm, resources: {requests: {nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}}]
      workerTemplate:
        spec:
          containers: [{name: vllm, image: vllm, resources: {requests: {nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}}]
`

// With only the permissions manifests/ grants them, berth-scheduler and berth-controller
// bring a gang-scheduled, topology-confined ModelServing to Available, and the apiserver
// refuses none of their requests.
func TestShippedRBACServesAModel(t *testing.T) {
	s := sharedSystem(t)
	ctx := context.Background()
	ns := "rbac"
	_, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	// 2 leaves of 2 nodes with 8 GPUs, in one spine.
	for i := range 4 {
		node := sim.NewNode(fmt.Sprintf("gpu-%d", i), sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: 8},
			map[string]string{leafLabel: fmt.Sprintf("leaf-%d", i/2), spineLabel: "spine-0"})
		_, err := s.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	ms := &workloadv1alpha1.ModelServing{}
	require.NoError(t, yaml.UnmarshalStrict([]byte(servingManifest), ms))
	ms.Namespace = ns
	require.NoError(t, s.cl.Create(ctx, ms))
	t.Cleanup(func() {
		if t.Failed() {
			s.dump(t, ns)
		}
	})

	// The roles are in force (startSystem waited for the authorizer), so a refused request is
	// a missing permission: stop waiting at the first one.
	start, lastAudit := time.Now(), time.Now()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		if time.Since(lastAudit) > time.Second {
			lastAudit = time.Now()
			if _, refused := audit(t, s.components); len(refused) > 0 {
				return false, fmt.Errorf("the apiserver refused Berth's ServiceAccounts:\n  %s", strings.Join(refused, "\n  "))
			}
		}
		got := &workloadv1alpha1.ModelServing{}
		if err := s.cl.Get(ctx, client.ObjectKeyFromObject(ms), got); err != nil {
			return false, nil
		}
		st := got.Status
		return st.ObservedGeneration == got.Generation && st.AvailableReplicas == 2 &&
			conditionTrue(st.Conditions, workloadv1alpha1.ModelServingAvailable), nil
	})
	require.NoError(t, err, "waiting (up to a minute) for the ModelServing to become Available")
	t.Logf("Available after %s", time.Since(start).Round(10*time.Millisecond))

	// Every pod bound, each group within one leaf.
	var pods corev1.PodList
	require.NoError(t, s.cl.List(ctx, &pods, client.InNamespace(ns)))
	require.Len(t, pods.Items, 4, "2 groups × (entry + worker)")
	leaves := map[string]map[string]bool{}
	for _, p := range pods.Items {
		require.NotEmpty(t, p.Spec.NodeName, "pod %s is not bound", p.Name)
		node, err := s.kube.CoreV1().Nodes().Get(ctx, p.Spec.NodeName, metav1.GetOptions{})
		require.NoError(t, err)
		group := p.Labels[workloadv1alpha1.GroupNameLabel]
		if leaves[group] == nil {
			leaves[group] = map[string]bool{}
		}
		leaves[group][node.Labels[leafLabel]] = true
	}
	require.Len(t, leaves, 2)
	for group, in := range leaves {
		assert.Len(t, in, 1, "group %s spans leaves %v despite highestTierAllowed: 1", group, in)
	}

	// The scheduler writes the PodGroups' status (podgroups/status).
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		var pgs volcanov1beta1.PodGroupList
		if err := s.cl.List(ctx, &pgs, client.InNamespace(ns)); err != nil || len(pgs.Items) != 2 {
			return false, nil
		}
		for _, pg := range pgs.Items {
			if pg.Status.Phase != volcanov1beta1.PodGroupRunning || pg.Status.Running != 2 {
				return false, nil
			}
		}
		return true, nil
	})
	require.NoError(t, err, "the scheduler did not report both PodGroups Running with 2 pods")

	// The autoscaler, with the same rights: a binding whose minimum is above the current
	// replicas scales the ModelServing through its scale subresource (and reads the pods,
	// the policy, discovery and the target's metadata on the way).
	for _, doc := range []string{`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: running}
spec:
  metrics: [{metricName: "vllm:num_requests_running", targetValue: "4"}]
`, `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicyBinding
metadata: {name: llm}
spec:
  policyRef: {name: running}
  scalingConfiguration:
    target: {targetRef: {name: llm}, metricEndpoint: {port: 8000}}
    minReplicas: 3
    maxReplicas: 4
`} {
		var obj client.Object = &workloadv1alpha1.AutoscalingPolicy{}
		if strings.Contains(doc, "kind: AutoscalingPolicyBinding") {
			obj = &workloadv1alpha1.AutoscalingPolicyBinding{}
		}
		require.NoError(t, yaml.UnmarshalStrict([]byte(doc), obj))
		obj.SetNamespace(ns)
		require.NoError(t, s.cl.Create(ctx, obj))
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got := &workloadv1alpha1.ModelServing{}
		return s.cl.Get(ctx, client.ObjectKeyFromObject(ms), got) == nil && *got.Spec.Replicas == 3, nil
	})
	require.NoError(t, err, "the autoscaler did not scale the ModelServing to its binding's minimum 3")

	// Route status, with the same rights: a ModelServer selecting the pods and a ModelRoute
	// naming it get their conditions (modelservers/status, modelroutes/status, events).
	for _, doc := range []string{`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: llm}
spec:
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {modelserving.volcano.sh/name: llm}}
`, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: llm}
spec:
  modelName: rbac-llm
  rules: [{targetModels: [{modelServerName: llm}]}]
`} {
		var obj client.Object = &networkingv1alpha1.ModelServer{}
		if strings.Contains(doc, "kind: ModelRoute") {
			obj = &networkingv1alpha1.ModelRoute{}
		}
		require.NoError(t, yaml.UnmarshalStrict([]byte(doc), obj))
		obj.SetNamespace(ns)
		require.NoError(t, s.cl.Create(ctx, obj))
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var server networkingv1alpha1.ModelServer
		var route networkingv1alpha1.ModelRoute
		if s.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "llm"}, &server) != nil || s.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "llm"}, &route) != nil {
			return false, nil
		}
		return conditionTrue(server.Status.Conditions, routestatus.ConditionWorkloadsFound) &&
			conditionTrue(route.Status.Conditions, routestatus.ConditionResolvedRefs), nil
	})
	require.NoError(t, err, "berth-controller did not write the ModelServer's and ModelRoute's conditions")

	// Deletion cost (docs/router.md): the router owns the pod-deletion-cost annotation of the
	// ModelServing pods it routes to and writes back the cost it knows (0: no traffic here)
	// over a value set by hand, with the pods patch its ClusterRole grants.
	served := &corev1.Pod{}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, e := range s.router.View().Snapshot().Endpoints {
			if e.Namespace == ns && e.ModelServing == "llm" {
				return s.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: e.Pod}, served) == nil, nil
			}
		}
		return false, nil
	})
	require.NoError(t, err, "the router routes to no pod of llm")
	require.NoError(t, s.cl.Patch(ctx, served, client.RawPatch(types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"7"}}}`))))
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		var p corev1.Pod
		return s.cl.Get(ctx, client.ObjectKeyFromObject(served), &p) == nil && p.Annotations[corev1.PodDeletionCost] == "0", nil
	})
	require.NoError(t, err, "berth-router, as its ServiceAccount, did not write pod %s's deletion cost", served.Name)

	// Leader election as shipped: each component holds its own lease in berth-system.
	for _, name := range []string{"berth-scheduler", "berth-controller"} {
		lease, err := s.kube.CoordinationV1().Leases("berth-system").Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err, "lease berth-system/%s", name)
		require.NotNil(t, lease.Spec.HolderIdentity, "lease berth-system/%s has no holder", name)
		assert.NotEmpty(t, *lease.Spec.HolderIdentity, "lease berth-system/%s has no holder", name)
	}

	// Nothing either component asked for was refused, even where it did not block serving
	// (events, status writes, the lease). The request counts show the audit log saw both
	// identities, so an empty list means something.
	requests, refused := audit(t, s.components)
	t.Logf("requests by ServiceAccount: %v", requests)
	for _, comp := range s.components {
		assert.Positive(t, requests[comp.namespace+":"+comp.serviceAccount], "requests by %s/%s in the audit log", comp.namespace, comp.serviceAccount)
	}
	assert.Empty(t, refused, "requests by Berth's ServiceAccounts the apiserver refused")
}

func conditionTrue(conds []metav1.Condition, typ string) bool {
	for _, c := range conds {
		if c.Type == typ {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// dump logs what a failure needs: the refused requests (which permission is missing), the
// ModelServing, the pods' scheduling conditions and the PodGroups.
func (s *system) dump(t *testing.T, ns string) {
	ctx := context.Background()
	if _, refused := audit(t, s.components); len(refused) > 0 {
		t.Logf("the apiserver refused these requests by Berth's ServiceAccounts (missing from manifests/):\n  %s",
			strings.Join(refused, "\n  "))
	} else {
		t.Log("the apiserver refused no request by Berth's ServiceAccounts")
	}
	var mss workloadv1alpha1.ModelServingList
	if err := s.cl.List(ctx, &mss, client.InNamespace(ns)); err == nil {
		for _, ms := range mss.Items {
			t.Logf("modelserving %s status=%+v", ms.Name, ms.Status)
		}
	}
	if pods, err := s.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err == nil {
		t.Logf("%d pods", len(pods.Items))
		for _, p := range pods.Items {
			scheduled := "no PodScheduled condition (the scheduler never tried it)"
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled {
					scheduled = fmt.Sprintf("PodScheduled=%s %s %s", c.Status, c.Reason, c.Message)
				}
			}
			t.Logf("pod %s node=%q phase=%s %s", p.Name, p.Spec.NodeName, p.Status.Phase, scheduled)
		}
	}
	var pgs volcanov1beta1.PodGroupList
	if err := s.cl.List(ctx, &pgs, client.InNamespace(ns)); err == nil {
		for _, pg := range pgs.Items {
			t.Logf("podgroup %s phase=%s running=%d conditions=%+v", pg.Name, pg.Status.Phase, pg.Status.Running, pg.Status.Conditions)
		}
	}
}
