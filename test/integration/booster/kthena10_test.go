package booster

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-sh/berth/internal/systemtest"
	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/modelbooster"
)

// kthena10Manifest is a ModelBooster written the Kthena 1.0 way: one backend (not a list)
// with a fixed replica count, a RuntimeClass for its pods and, on its worker, a toleration
// for the taint that keeps the GPU nodes for inference. RUNTIME_CLASS is replaced by the
// test's RuntimeClass.
const kthena10Manifest = `
metadata: {name: qwen-k1}
spec:
  backend:
    name: gpu
    type: vLLM
    modelURI: hf://Qwen/Qwen3-8B
    replicas: 2
    runtimeClassName: RUNTIME_CLASS
    workers:
    - type: server
      image: vllm/vllm-openai:v0.11.0
      replicas: 1
      pods: 1
      resources: {limits: {nvidia.com/gpu: "1"}}
      tolerations:
      - {key: dedicated, operator: Equal, value: inference, effect: NoSchedule}
      config: {max-model-len: 4096}
`

// A ModelBooster as Kthena 1.0 writes it comes up on Berth and serves: its one backend
// becomes a ModelServing of the fixed replica count, whose pods carry the backend's
// runtimeClassName and the worker's tolerations (the only node is tainted, so they are
// placed because of them), and the model answers through berth-router. Selectors on
// Kthena's label keys find every object the ModelBooster made, and its pods.
func TestBoosterKthena10SingleBackendServes(t *testing.T) {
	w := newWorld(t, nil)
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu-" + w.ns}, Handler: "runc"}
	require.NoError(t, cl.Create(w.ctx, rc))
	t.Cleanup(func() { _ = cl.Delete(w.ctx, rc) })
	node := systemtest.GPUNode(w.ns+"-gpu-tainted", w.ns, "")
	node.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "inference", Effect: corev1.TaintEffectNoSchedule}}
	_, err := kube.CoreV1().Nodes().Create(w.ctx, node, metav1.CreateOptions{})
	require.NoError(t, err)

	w.apply(strings.ReplaceAll(kthena10Manifest, "RUNTIME_CLASS", rc.Name))
	mb := w.waitReady("qwen-k1")
	assert.Equal(t, []workloadv1alpha1.ModelBackendStatus{{Name: "gpu", Replicas: 2}}, mb.Status.BackendStatuses)

	ms := &workloadv1alpha1.ModelServing{}
	require.NoError(t, cl.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: "qwen-k1-gpu"}, ms))
	assert.Equal(t, ptr.To[int32](2), ms.Spec.Replicas, "the backend's replicas")
	assert.Equal(t, int32(2), ms.Status.AvailableReplicas)

	// Every pod placed on the tainted node, Running, with the runtime class and toleration.
	pods := w.entryPods("qwen-k1-gpu")
	require.Len(t, pods, 2)
	want := corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "inference", Effect: corev1.TaintEffectNoSchedule}
	for _, p := range pods {
		assert.Equal(t, node.Name, p.Spec.NodeName, p.Name)
		assert.Equal(t, corev1.PodRunning, p.Status.Phase, p.Name)
		assert.Equal(t, ptr.To(rc.Name), p.Spec.RuntimeClassName, p.Name)
		assert.Contains(t, p.Spec.Tolerations, want, p.Name)
		assert.Equal(t, "berth-scheduler", p.Spec.SchedulerName, p.Name)
	}

	// The model (metadata.name: the manifest sets no spec.name) through the router.
	answer, endpoint := w.chatEventually("qwen-k1")
	assert.NotEmpty(t, answer)
	assert.True(t, strings.HasPrefix(endpoint, w.ns+"/qwen-k1-gpu-"), endpoint)

	// Selectors written for Kthena: its label keys with its values.
	kthena := client.MatchingLabels{
		workloadv1alpha1.KthenaModelNameLabel: "qwen-k1",
		workloadv1alpha1.KthenaManagedByLabel: "workload.serving.volcano.sh",
	}
	backend := client.MatchingLabels{workloadv1alpha1.KthenaBackendNameLabel: "gpu"}
	names := func(list client.ObjectList, sel ...client.ListOption) []string {
		t.Helper()
		require.NoError(t, cl.List(w.ctx, list, append(sel, client.InNamespace(w.ns))...))
		var out []string
		switch l := list.(type) {
		case *workloadv1alpha1.ModelServingList:
			for _, o := range l.Items {
				out = append(out, o.Name)
			}
		case *networkingv1alpha1.ModelServerList:
			for _, o := range l.Items {
				out = append(out, o.Name)
			}
		case *networkingv1alpha1.ModelRouteList:
			for _, o := range l.Items {
				out = append(out, o.Name)
			}
		case *corev1.PodList:
			for _, o := range l.Items {
				out = append(out, o.Name)
			}
		}
		return out
	}
	assert.Equal(t, []string{"qwen-k1-gpu"}, names(&workloadv1alpha1.ModelServingList{}, kthena, backend))
	assert.Equal(t, []string{"qwen-k1-gpu"}, names(&networkingv1alpha1.ModelServerList{}, kthena, backend))
	assert.Equal(t, []string{"qwen-k1"}, names(&networkingv1alpha1.ModelRouteList{}, kthena,
		client.MatchingLabels{workloadv1alpha1.KthenaBackendNameLabel: ""}), "the route is every backend's: backend-name is empty, as Kthena writes it")
	assert.ElementsMatch(t, []string{pods[0].Name, pods[1].Name}, names(&corev1.PodList{}, kthena, backend), "the pods carry Kthena's labels too")
	// Berth's own labels stay beside them.
	assert.Equal(t, "qwen-k1", ms.Labels[workloadv1alpha1.ModelBoosterNameLabel])
	assert.Equal(t, "gpu", ms.Labels[workloadv1alpha1.ModelBoosterBackendLabel])

	var bindings workloadv1alpha1.AutoscalingPolicyBindingList
	require.NoError(t, cl.List(w.ctx, &bindings, client.InNamespace(w.ns)))
	assert.Empty(t, bindings.Items, "a fixed backend is not autoscaled")

	// The replica count is the ModelBooster's: a scale by hand is undone.
	require.NoError(t, cl.Patch(w.ctx, ms, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":1}}`))))
	w.eventually("the ModelServing is back at the backend's 2 replicas", func() bool {
		got := &workloadv1alpha1.ModelServing{}
		return cl.Get(w.ctx, client.ObjectKeyFromObject(ms), got) == nil && ptr.Deref(got.Spec.Replicas, 0) == 2
	})

	// Changing replicas in the ModelBooster changes the ModelServing.
	w.update("qwen-k1", func(mb *workloadv1alpha1.ModelBooster) { mb.Spec.Backend.Replicas = ptr.To[int32](1) })
	w.waitReady("qwen-k1")
	w.eventually("one ServingGroup is left and the status says so", func() bool {
		mb := w.booster("qwen-k1")
		return len(w.entryPods("qwen-k1-gpu")) == 1 &&
			len(mb.Status.BackendStatuses) == 1 && mb.Status.BackendStatuses[0] == workloadv1alpha1.ModelBackendStatus{Name: "gpu", Replicas: 1}
	})
}

// kthena10ServedNameManifest is a disaggregated ModelBooster written the Kthena 1.0 way:
// one backend with fixed replicas whose prefill and decode workers each name the served
// model in their config, with flags written as empty strings (Kthena's spelling of a flag
// without a value).
const kthena10ServedNameManifest = `
metadata: {name: chat-pd}
spec:
  backend:
    name: pd
    type: vLLMDisaggregated
    modelURI: hf://example-org/Tiny-Chat-1B
    replicas: 1
    workers:
    - type: prefill
      replicas: 1
      pods: 1
      resources: {limits: {nvidia.com/gpu: "1"}}
      config: {served-model-name: "example-org/TinyChat", max-model-len: 2048, enforce-eager: ""}
    - type: decode
      replicas: 1
      pods: 1
      resources: {limits: {nvidia.com/gpu: "1"}}
      config: {served-model-name: "example-org/TinyChat", max-model-len: 2048, enforce-eager: ""}
`

// A worker's config served-model-name (Kthena 1.0's quick start sets it and then asks for
// that name) is the model the engines serve, the ModelServer names and the ModelRoute
// matches: a chat completion for it answers through a prefill/decode pair. The flag is on
// each engine's command line once, and an empty config value is a bare flag.
func TestBoosterKthena10ServedModelNameServes(t *testing.T) {
	w := newWorld(t, map[string]int{"": 1})
	w.apply(kthena10ServedNameManifest)
	w.waitReady("chat-pd")

	const model = "example-org/TinyChat"
	srv := &networkingv1alpha1.ModelServer{}
	require.NoError(t, cl.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: "chat-pd-pd"}, srv))
	assert.Equal(t, ptr.To(model), srv.Spec.Model)
	route := &networkingv1alpha1.ModelRoute{}
	require.NoError(t, cl.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: "chat-pd"}, route))
	assert.Equal(t, model, route.Spec.ModelName)

	pods, err := kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{})
	require.NoError(t, err)
	require.Len(t, pods.Items, 2, "one prefill and one decode pod")
	for _, p := range pods.Items {
		args := strings.Join(p.Spec.Containers[0].Args, " ")
		assert.Equal(t, 1, strings.Count(args, "--served-model-name"), "%s: %s", p.Name, args)
		assert.Contains(t, args, "--served-model-name "+model+" ", p.Name)
		assert.Contains(t, args, "--enforce-eager", p.Name)
		assert.NotContains(t, p.Spec.Containers[0].Args, "", "%s: no empty argument", p.Name)
	}

	answer, endpoint := w.chatEventually(model)
	assert.NotEmpty(t, answer)
	prefill, decode, ok := strings.Cut(endpoint, "+")
	require.True(t, ok, "not served by a prefill/decode pair: %q", endpoint)
	assert.Contains(t, prefill, "-prefill-")
	ns, pod, _ := strings.Cut(decode, "/")
	e := engines.Engine(ns, pod)
	require.NotNil(t, e)
	assert.Equal(t, model, e.Config().Model, "the engine serves the configured name")

	// Workers that disagree on the name are refused, naming the field; the objects built
	// before stay as they were.
	w.update("chat-pd", func(mb *workloadv1alpha1.ModelBooster) {
		mb.Spec.Backend.Workers[1].Config.Raw = []byte(`{"served-model-name":"other-name"}`)
	})
	mb := w.waitCondition("chat-pd", modelbooster.ConditionReady, metav1.ConditionFalse, modelbooster.ReasonInvalidSpec)
	c := meta.FindStatusCondition(mb.Status.Conditions, modelbooster.ConditionReady)
	assert.Contains(t, c.Message, "spec.backend.workers[1].config[served-model-name]")
	require.NoError(t, cl.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: "chat-pd"}, route))
	assert.Equal(t, model, route.Spec.ModelName, "an invalid spec changes nothing")
}
