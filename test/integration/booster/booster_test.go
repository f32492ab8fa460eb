package booster

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/modelbooster"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

// One model on two node pools picked by GPU product, 70/30, with a LoRA adapter only the
// A100 backend loads.
const twoPoolsManifest = `
metadata: {name: llama}
spec:
  name: llama-3-8b
  owner: test
  backends:
  - name: h100
    type: vLLM
    modelURI: hf://meta-llama/Llama-3.1-8B-Instruct
    routeWeight: 70
    env: [{name: HF_ENDPOINT, value: "https://huggingface.co/"}]
    workers:
    - type: server
      image: vllm/vllm-openai:v0.11.0
      replicas: 1
      pods: 1
      resources: {requests: {nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions: [{key: nvidia.com/gpu.product, operator: In, values: [NVIDIA-H100-80GB-HBM3]}]
      config: {max-model-len: 8192, enforce-eager: true}
  - name: a100
    type: vLLM
    modelURI: hf://meta-llama/Llama-3.1-8B-Instruct
    cacheURI: hostpath:///var/cache/berth-models
    routeWeight: 30
    loraAdapters:
    - {name: sql-expert, artifactURL: "hf://example/llama-3.1-8b-sql-lora"}
    workers:
    - type: server
      resources: {requests: {nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions: [{key: nvidia.com/gpu.product, operator: In, values: [NVIDIA-A100-SXM4-80GB]}]
`

func TestBoosterServesTwoNodePoolsAndALoRAAdapter(t *testing.T) {
	w := newWorld(t, map[string]int{h100: 1, a100: 1})
	w.apply(twoPoolsManifest)
	w.waitReady("llama")
	mb := w.waitCondition("llama", modelbooster.ConditionLoRAAdaptersLoaded, metav1.ConditionTrue, modelbooster.ReasonAdaptersLoaded)

	assert.Equal(t, []workloadv1alpha1.ModelBackendStatus{{Name: "h100", Replicas: 1}, {Name: "a100", Replicas: 1}}, mb.Status.BackendStatuses)
	ready := meta.FindStatusCondition(mb.Status.Conditions, modelbooster.ConditionReady)
	assert.Equal(t, modelbooster.ReasonBackendsAvailable, ready.Reason)

	// Each backend on its own node pool.
	for backend, product := range map[string]string{"h100": h100, "a100": a100} {
		pods := w.entryPods("llama-" + backend)
		require.Len(t, pods, 1, backend)
		node, err := kube.CoreV1().Nodes().Get(w.ctx, pods[0].Spec.NodeName, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, product, node.Labels["nvidia.com/gpu.product"], "node of backend %s", backend)
		assert.Equal(t, "berth-scheduler", pods[0].Spec.SchedulerName)
	}

	// The model through the router, from either backend.
	answer, endpoint := w.chatEventually("llama-3-8b")
	assert.NotEmpty(t, answer)
	assert.True(t, strings.HasPrefix(endpoint, w.ns+"/llama-h100-") || strings.HasPrefix(endpoint, w.ns+"/llama-a100-"), endpoint)

	// The adapter through the router: only the A100 engine has it, and only it gets it.
	a100Pod := w.entryPods("llama-a100")[0]
	for range 5 {
		answer, endpoint = w.chatEventually("sql-expert")
		assert.NotEmpty(t, answer)
		assert.Equal(t, w.ns+"/"+a100Pod.Name, endpoint)
	}
	// The engine lists it, loaded from the Hugging Face repo of its artifactURL.
	var lora *modelCard
	for _, m := range engineModels(t, &a100Pod, 8000) {
		if m.ID == "sql-expert" {
			lora = &m
		}
	}
	require.NotNil(t, lora, "the A100 engine does not list the adapter")
	assert.Equal(t, "example/llama-3.1-8b-sql-lora", lora.Root)
	assert.Equal(t, "llama-3-8b", *lora.Parent)
	h100Pod := w.entryPods("llama-h100")[0]
	var h100Models []string
	for _, m := range engineModels(t, &h100Pod, 8000) {
		h100Models = append(h100Models, m.ID)
	}
	assert.Equal(t, []string{"llama-3-8b"}, h100Models, "the H100 engine serves the base model and nothing else")

	// Every generated object: labels and a controller reference to the ModelBooster.
	checkOwned := func(obj client.Object, backend string) {
		t.Helper()
		assert.Equal(t, "llama", obj.GetLabels()[workloadv1alpha1.ModelBoosterNameLabel], obj.GetName())
		assert.Equal(t, backend, obj.GetLabels()[workloadv1alpha1.ModelBoosterBackendLabel], obj.GetName())
		ref := metav1.GetControllerOf(obj)
		require.NotNil(t, ref, "%T %s has no controller", obj, obj.GetName())
		assert.Equal(t, metav1.OwnerReference{APIVersion: "workload.serving.volcano.sh/v1alpha1", Kind: "ModelBooster", Name: "llama", UID: mb.UID,
			Controller: ref.Controller, BlockOwnerDeletion: ref.BlockOwnerDeletion}, *ref)
		assert.True(t, *ref.BlockOwnerDeletion, obj.GetName())
	}
	generations := map[string]int64{}
	for _, backend := range []string{"h100", "a100"} {
		ms := &workloadv1alpha1.ModelServing{}
		require.NoError(t, cl.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: "llama-" + backend}, ms))
		checkOwned(ms, backend)
		assert.Equal(t, "berth-scheduler", ms.Spec.SchedulerName)
		generations["ModelServing/"+ms.Name] = ms.Generation
		srv := &networkingv1alpha1.ModelServer{}
		require.NoError(t, cl.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: "llama-" + backend}, srv))
		checkOwned(srv, backend)
		assert.Equal(t, "llama-3-8b", *srv.Spec.Model)
		generations["ModelServer/"+srv.Name] = srv.Generation
	}
	route := &networkingv1alpha1.ModelRoute{}
	require.NoError(t, cl.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: "llama"}, route))
	checkOwned(route, "")
	generations["ModelRoute/llama"] = route.Generation
	assert.Equal(t, "llama-3-8b", route.Spec.ModelName)
	assert.Equal(t, []string{"sql-expert"}, route.Spec.LoraAdapters)
	require.Len(t, route.Spec.Rules, 2)
	assert.Equal(t, []networkingv1alpha1.TargetModel{{ModelServerName: "llama-a100", Weight: ptrTo[uint32](30)}}, route.Spec.Rules[0].TargetModels)
	assert.Equal(t, []networkingv1alpha1.TargetModel{{ModelServerName: "llama-h100", Weight: ptrTo[uint32](70)}, {ModelServerName: "llama-a100", Weight: ptrTo[uint32](30)}},
		route.Spec.Rules[1].TargetModels)
	var policies workloadv1alpha1.AutoscalingPolicyBindingList
	require.NoError(t, cl.List(w.ctx, &policies, client.InNamespace(w.ns)))
	assert.Empty(t, policies.Items, "nothing is autoscaled")

	// A spec change that generates nothing new (the owner): the controller observes it
	// and writes none of its objects, despite the defaults the apiserver added to them.
	w.update("llama", func(mb *workloadv1alpha1.ModelBooster) { mb.Spec.Owner = "someone-else" })
	// The evidence that the controller looked: waitReady waits for status.observedGeneration
	// to reach the new generation, and the reconciler writes its objects before its status,
	// so any (unwanted) write of that reconcile has landed.
	w.waitReady("llama")
	for key, gen := range generations {
		kind, name, _ := strings.Cut(key, "/")
		var obj client.Object = &workloadv1alpha1.ModelServing{}
		switch kind {
		case "ModelServer":
			obj = &networkingv1alpha1.ModelServer{}
		case "ModelRoute":
			obj = &networkingv1alpha1.ModelRoute{}
		}
		require.NoError(t, cl.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: name}, obj))
		assert.Equal(t, gen, obj.GetGeneration(), "%s was rewritten", key)
	}
}

const twoBackendsManifest = `
metadata: {name: qwen}
spec:
  backends:
  - name: a
    type: vLLM
    modelURI: hf://Qwen/Qwen3-8B
    workers: [{type: server, resources: {limits: {nvidia.com/gpu: "1"}}}]
  - name: b
    type: vLLM
    modelURI: hf://Qwen/Qwen3-8B
    workers: [{type: server, resources: {limits: {nvidia.com/gpu: "1"}}}]
`

// Renaming a backend replaces its objects and leaves the other backend's alone.
func TestBoosterRenamedBackendIsReplaced(t *testing.T) {
	w := newWorld(t, map[string]int{"": 1})
	w.apply(twoBackendsManifest)
	w.waitReady("qwen")
	w.chatEventually("qwen")

	get := func(obj client.Object, name string) error {
		return cl.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: name}, obj)
	}
	keptServing, keptServer := &workloadv1alpha1.ModelServing{}, &networkingv1alpha1.ModelServer{}
	require.NoError(t, get(keptServing, "qwen-a"))
	require.NoError(t, get(keptServer, "qwen-a"))
	oldServing := &workloadv1alpha1.ModelServing{}
	require.NoError(t, get(oldServing, "qwen-b"))

	w.update("qwen", func(mb *workloadv1alpha1.ModelBooster) { mb.Spec.Backends[1].Name = "c" })
	w.eventually("qwen-b's ModelServing and ModelServer are deleted", func() bool {
		return apierrors.IsNotFound(get(&workloadv1alpha1.ModelServing{}, "qwen-b")) && apierrors.IsNotFound(get(&networkingv1alpha1.ModelServer{}, "qwen-b"))
	})
	mb := w.waitReady("qwen")
	assert.Equal(t, []workloadv1alpha1.ModelBackendStatus{{Name: "a", Replicas: 1}, {Name: "c", Replicas: 1}}, mb.Status.BackendStatuses)

	renamed := &workloadv1alpha1.ModelServing{}
	require.NoError(t, get(renamed, "qwen-c"))
	assert.NotEqual(t, oldServing.UID, renamed.UID)
	assert.Equal(t, "c", renamed.Labels[workloadv1alpha1.ModelBoosterBackendLabel])
	require.NoError(t, get(&networkingv1alpha1.ModelServer{}, "qwen-c"))

	// Backend a: the same objects, never rewritten.
	nowServing, nowServer := &workloadv1alpha1.ModelServing{}, &networkingv1alpha1.ModelServer{}
	require.NoError(t, get(nowServing, "qwen-a"))
	require.NoError(t, get(nowServer, "qwen-a"))
	assert.Equal(t, keptServing.UID, nowServing.UID)
	assert.Equal(t, keptServing.Generation, nowServing.Generation)
	assert.Equal(t, keptServer.UID, nowServer.UID)
	assert.Equal(t, keptServer.Generation, nowServer.Generation)

	route := &networkingv1alpha1.ModelRoute{}
	require.NoError(t, get(route, "qwen"))
	var targets []string
	for _, tm := range route.Spec.Rules[len(route.Spec.Rules)-1].TargetModels {
		targets = append(targets, tm.ModelServerName)
	}
	assert.Equal(t, []string{"qwen-a", "qwen-c"}, targets)

	// The renamed backend serves: ask until qwen-c answers.
	w.eventually("the renamed backend answers through the router", func() bool {
		_, endpoint, err := chat(w.ctx, "qwen")
		return err == nil && strings.HasPrefix(endpoint, w.ns+"/qwen-c-")
	})
}

// Specs the schema accepts but the controller cannot compile: reported with the fields,
// nothing created; fixed, the objects come.
func TestBoosterInvalidSpecCreatesNothing(t *testing.T) {
	w := newWorld(t, map[string]int{"": 1})
	w.apply(`
metadata: {name: broken}
spec:
  backends:
  - name: pd
    type: vLLMDisaggregated
    modelURI: hf://Qwen/Qwen3-8B
    workers: [{type: prefill}]
  - name: plain
    type: vLLM
    modelURI: hf://Qwen/Qwen3-8B
    workers: [{type: decode}]
`)
	mb := w.waitCondition("broken", modelbooster.ConditionReady, metav1.ConditionFalse, modelbooster.ReasonInvalidSpec)
	msg := meta.FindStatusCondition(mb.Status.Conditions, modelbooster.ConditionReady).Message
	assert.Contains(t, msg, "spec.backends[0].workers: Required value: a vLLMDisaggregated backend needs a worker of type decode")
	assert.Contains(t, msg, `spec.backends[1].workers[0].type: Unsupported value: "decode"`)
	assert.Contains(t, msg, "spec.backends[1].workers: Required value: a vLLM backend needs a worker of type server")

	// waitCondition saw observedGeneration reach the generation with the refusal: the
	// reconcile that refused it has run, and a (wrong) create of it would have come first.
	for _, list := range []client.ObjectList{&workloadv1alpha1.ModelServingList{}, &networkingv1alpha1.ModelServerList{}, &networkingv1alpha1.ModelRouteList{}} {
		require.NoError(t, cl.List(w.ctx, list, client.InNamespace(w.ns)))
		assert.Zero(t, meta.LenList(list), "%T", list)
	}
	evs, err := kube.EventsV1().Events(w.ns).List(w.ctx, metav1.ListOptions{})
	require.NoError(t, err)
	found := false
	for _, e := range evs.Items {
		found = found || (e.Regarding.Name == "broken" && e.Reason == modelbooster.ReasonInvalidSpec && e.Type == corev1.EventTypeWarning)
	}
	assert.True(t, found, "no InvalidSpec warning event")

	// Fixed: compiled at once.
	w.update("broken", func(mb *workloadv1alpha1.ModelBooster) {
		mb.Spec.Backends[0].Workers = append(mb.Spec.Backends[0].Workers, workloadv1alpha1.ModelWorker{Type: workloadv1alpha1.ModelWorkerTypeDecode})
		mb.Spec.Backends[1].Workers[0].Type = workloadv1alpha1.ModelWorkerTypeServer
	})
	w.waitReady("broken")
}

// A disaggregated vLLM backend: prefill and decode in one ServingGroup, each request served
// by a pair.
func TestBoosterDisaggregatedBackendServesThroughPairs(t *testing.T) {
	w := newWorld(t, map[string]int{"": 1})
	w.apply(`
metadata: {name: pd}
spec:
  name: qwen-pd
  backends:
  - name: nixl
    type: vLLMDisaggregated
    modelURI: hf://Qwen/Qwen3-8B
    workers:
    - {type: prefill, resources: {limits: {nvidia.com/gpu: "1"}}}
    - {type: decode, replicas: 2, resources: {limits: {nvidia.com/gpu: "1"}}}
`)
	w.waitReady("pd")
	srv := &networkingv1alpha1.ModelServer{}
	require.NoError(t, cl.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: "pd-nixl"}, srv))
	require.NotNil(t, srv.Spec.WorkloadSelector.PDGroup)
	assert.Equal(t, networkingv1alpha1.ConnectorTypeNIXL, srv.Spec.KVConnector.Type)

	answer, endpoint := w.chatEventually("qwen-pd")
	assert.NotEmpty(t, answer)
	prefill, decode, ok := strings.Cut(endpoint, "+")
	require.True(t, ok, "not served by a prefill/decode pair: %q", endpoint)
	assert.Contains(t, prefill, "-prefill-")
	assert.Contains(t, decode, "-decode-")
	ns, pod, _ := strings.Cut(decode, "/")
	e := engines.Engine(ns, pod)
	require.NotNil(t, e)
	assert.Equal(t, engine.RoleDecode, e.Config().Role)
	assert.Equal(t, "qwen-pd", e.Config().Model)
}

// SGLang and MindIE backends start engines of the right kind on the right ports, and both
// serve the model through the router.
func TestBoosterSGLangAndMindIEEnginesServe(t *testing.T) {
	w := newWorld(t, map[string]int{"": 1})
	w.apply(`
metadata: {name: mixed}
spec:
  name: qwen-mixed
  backends:
  - name: sglang
    type: SGLang
    modelURI: hf://Qwen/Qwen3-8B
    workers: [{type: server, resources: {limits: {nvidia.com/gpu: "1"}}, config: {mem-fraction-static: 0.8}}]
  - name: mindie
    type: MindIE
    modelURI: hf://Qwen/Qwen3-8B
    workers: [{type: server, image: mindie:test, resources: {limits: {nvidia.com/gpu: "1"}}}]
`)
	w.waitReady("mixed")
	for backend, want := range map[string]struct {
		port  int32
		owner string
	}{"sglang": {30000, "sglang"}, "mindie": {1025, "vllm"}} {
		pods := w.entryPods("mixed-" + backend)
		require.Len(t, pods, 1)
		models := engineModels(t, &pods[0], want.port)
		require.Len(t, models, 1, backend)
		assert.Equal(t, "qwen-mixed", models[0].ID, backend)
		assert.Equal(t, want.owner, models[0].OwnedBy, backend)
	}
	seen := map[string]bool{}
	w.eventually("both backends answer through the router", func() bool {
		if _, endpoint, err := chat(w.ctx, "qwen-mixed"); err == nil {
			seen[strings.SplitN(strings.TrimPrefix(endpoint, w.ns+"/"), "-0-", 2)[0]] = true
		}
		return seen["mixed-sglang"] && seen["mixed-mindie"]
	})
}

func ptrTo[T any](v T) *T { return &v }

// Every shape the translation produces is accepted by the real apiserver's schemas and CEL
// rules (a server-side dry run), including the ones no other test here runs: control-plane
// roles, multi-pod replicas, PVC volumes, both kinds of autoscaling binding.
func TestBoosterGeneratedObjectsPassTheAPISchemas(t *testing.T) {
	w := newWorld(t, nil)
	mb := &workloadv1alpha1.ModelBooster{}
	require.NoError(t, yaml.UnmarshalStrict([]byte(`
metadata: {name: shapes, uid: 0a0b0c0d-0000-0000-0000-000000000000}
spec:
  name: shapes
  autoscalingPolicy: {metrics: [{metricName: "vllm:num_requests_waiting", targetValue: "4"}]}
  costExpansionRatePercent: 150
  modelMatch: {headers: {x-tenant: {exact: a}}}
  backends:
  - name: ascend
    type: MindIEDisaggregated
    modelURI: pvc://models/qwen
    cacheURI: pvc://cache/hf
    scalingCost: 10
    maxReplicas: 4
    scaleToZeroGracePeriod: 5m
    workers:
    - {type: prefill, pods: 2, replicas: 2}
    - {type: decode, pods: 2}
    - {type: controller, image: mindie-ms}
    - {type: coordinator, image: mindie-ms, config: {port: 1026}}
  - name: tp
    type: vLLM
    modelURI: s3://bucket/qwen
    cacheURI: hostpath:///data/cache
    minReplicas: 1
    maxReplicas: 2
    autoscalingPolicy: {metrics: [{metricName: "vllm:gpu_cache_usage_perc", targetValue: "0.8"}]}
    loraAdapters: [{name: sql, artifactURL: "s3://bucket/sql"}]
    workers: [{type: server, pods: 4, config: {tensor-parallel-size: 8, pipeline-parallel-size: 4, hf-overrides: {rope_scaling: {type: yarn}}}}]
  - name: sg
    type: SGLang
    modelURI: hf://Qwen/Qwen3-8B
    workers: [{type: server, pods: 2}]
`), mb))
	mb.Namespace = w.ns
	objs, err := modelbooster.BuildObjects(mb)
	require.NoError(t, err)
	all := []client.Object{objs.ModelRoute}
	for _, o := range objs.ModelServings {
		all = append(all, o)
	}
	for _, o := range objs.ModelServers {
		all = append(all, o)
	}
	for _, o := range objs.Policies {
		all = append(all, o)
	}
	for _, o := range objs.Bindings {
		all = append(all, o)
	}
	require.Len(t, all, 1+3+3+2+2)
	for _, o := range all {
		assert.NoError(t, cl.Create(w.ctx, o, client.DryRunAll), "%T %s", o, o.GetName())
	}
}
