package modelbooster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// boosterManifest has two vLLM backends on two accelerator classes; the a100 one loads a
// LoRA adapter and caches the model on the host.
const boosterManifest = `
metadata: {name: llama, namespace: ns, uid: mb-uid}
spec:
  name: llama-3-8b
  backends:
  - name: h100
    type: vLLM
    modelURI: hf://meta-llama/Llama-3.1-8B-Instruct
    minReplicas: 2
    routeWeight: 70
    env: [{name: HF_ENDPOINT, value: "https://hf.example"}]
    envFrom: [{secretRef: {name: hf-token}}]
    workers:
    - type: server
      image: vllm/vllm-openai:v0.11.0
      replicas: 2
      pods: 1
      resources: {requests: {nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}
      affinity:
        nodeAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            nodeSelectorTerms:
            - matchExpressions: [{key: nvidia.com/gpu.product, operator: In, values: [NVIDIA-H100-80GB-HBM3]}]
      config:
        max-model-len: 32768
        gpu-memory-utilization: 0.9
        enforce-eager: true
        disable-log-stats: false
        override-generation-config: {temperature: 0.5}
  - name: a100
    type: vLLM
    modelURI: hf://meta-llama/Llama-3.1-8B-Instruct
    cacheURI: hostpath:///var/cache/models
    loraAdapters:
    - {name: sql-expert, artifactURL: "hf://example/sql-lora"}
    workers:
    - {type: server}
`

func parseBooster(t *testing.T, manifest string) *workloadv1alpha1.ModelBooster {
	t.Helper()
	mb := &workloadv1alpha1.ModelBooster{}
	require.NoError(t, yaml.UnmarshalStrict([]byte(manifest), mb))
	return mb
}

func build(t *testing.T, mb *workloadv1alpha1.ModelBooster) *Objects {
	t.Helper()
	objs, err := BuildObjects(mb)
	require.NoError(t, err)
	return objs
}

func assertGenerated(t *testing.T, obj metav1.Object, name, backend string) {
	t.Helper()
	assert.Equal(t, name, obj.GetName())
	assert.Equal(t, "ns", obj.GetNamespace())
	assert.Equal(t, wantLabels("llama", backend), obj.GetLabels(), "labels of %s", name)
	require.Len(t, obj.GetOwnerReferences(), 1)
	ref := obj.GetOwnerReferences()[0]
	assert.Equal(t, metav1.OwnerReference{APIVersion: "workload.serving.volcano.sh/v1alpha1", Kind: "ModelBooster", Name: "llama", UID: "mb-uid",
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}, ref)
	assert.NotEmpty(t, obj.GetAnnotations()[boosterSpecHashAnnotation])
}

// wantLabels are the labels of what ModelBooster mb generates for backend ("" for the
// shared objects): Berth's, and Kthena's with Kthena's values.
func wantLabels(mb, backend string) map[string]string {
	want := map[string]string{
		workloadv1alpha1.ModelBoosterNameLabel:  mb,
		workloadv1alpha1.KthenaModelNameLabel:   mb,
		workloadv1alpha1.KthenaBackendNameLabel: backend,
		workloadv1alpha1.KthenaManagedByLabel:   "workload.serving.volcano.sh",
	}
	if backend != "" {
		want[workloadv1alpha1.ModelBoosterBackendLabel] = backend
	}
	return want
}

func TestBoosterVLLMBackendBecomesModelServingAndModelServer(t *testing.T) {
	objs := build(t, parseBooster(t, boosterManifest))
	require.Len(t, objs.ModelServings, 2)
	require.Len(t, objs.ModelServers, 2)

	ms := objs.ModelServings[0]
	assertGenerated(t, ms, "llama-h100", "h100")
	assert.Equal(t, int32(2), *ms.Spec.Replicas, "minReplicas, not autoscaled")
	assert.Equal(t, "berth-scheduler", ms.Spec.SchedulerName)
	assert.Nil(t, ms.Spec.Template.GangPolicy)
	require.Len(t, ms.Spec.Template.Roles, 1)
	role := ms.Spec.Template.Roles[0]
	assert.Equal(t, "server", role.Name)
	assert.Equal(t, int32(2), *role.Replicas)
	assert.Zero(t, role.WorkerReplicas)
	assert.Nil(t, role.WorkerTemplate)
	pod := role.EntryTemplate.Spec
	assert.Equal(t, "berth-scheduler", pod.SchedulerName)
	assert.Equal(t, wantLabels("llama", "h100"), role.EntryTemplate.Metadata.Labels)
	require.NotNil(t, pod.Affinity)
	assert.Equal(t, "nvidia.com/gpu.product", pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key)
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	assert.Equal(t, "vllm/vllm-openai:v0.11.0", c.Image)
	assert.Equal(t, []string{"vllm", "serve"}, c.Command)
	assert.Equal(t, []string{
		"meta-llama/Llama-3.1-8B-Instruct", "--served-model-name", "llama-3-8b", "--port", "8000",
		// config, keys sorted; false left out
		"--enforce-eager", "--gpu-memory-utilization", "0.9", "--max-model-len", "32768", "--override-generation-config", `{"temperature":0.5}`,
	}, c.Args)
	assert.Equal(t, []corev1.ContainerPort{{Name: "http", ContainerPort: 8000, Protocol: corev1.ProtocolTCP}}, c.Ports)
	assert.Equal(t, []corev1.EnvVar{{Name: "HF_ENDPOINT", Value: "https://hf.example"}}, c.Env)
	assert.Equal(t, "hf-token", c.EnvFrom[0].SecretRef.Name)
	gpu := c.Resources.Limits["nvidia.com/gpu"]
	assert.Equal(t, "1", gpu.String())
	require.NotNil(t, c.ReadinessProbe)
	assert.Equal(t, "/health", c.ReadinessProbe.HTTPGet.Path)
	assert.Empty(t, pod.Volumes)

	// The a100 backend: default image, one replica, the cache on the host, LoRA enabled.
	ms = objs.ModelServings[1]
	assertGenerated(t, ms, "llama-a100", "a100")
	assert.Equal(t, int32(1), *ms.Spec.Replicas, "max(minReplicas, 1)")
	role = ms.Spec.Template.Roles[0]
	assert.Equal(t, int32(1), *role.Replicas, "worker replicas 0 means 1")
	c = role.EntryTemplate.Spec.Containers[0]
	assert.Equal(t, "vllm/vllm-openai:latest", c.Image)
	assert.Equal(t, []string{"meta-llama/Llama-3.1-8B-Instruct", "--served-model-name", "llama-3-8b", "--port", "8000",
		"--download-dir", "/model-cache", "--enable-lora"}, c.Args)
	assert.Equal(t, []corev1.EnvVar{{Name: "VLLM_ALLOW_RUNTIME_LORA_UPDATING", Value: "True"}}, c.Env, "vLLM's LoRA API is on")
	assert.Equal(t, []corev1.VolumeMount{{Name: "model-cache", MountPath: "/model-cache"}}, c.VolumeMounts)
	require.Len(t, role.EntryTemplate.Spec.Volumes, 1)
	assert.Equal(t, "/var/cache/models", role.EntryTemplate.Spec.Volumes[0].HostPath.Path)

	srv := objs.ModelServers[0]
	assertGenerated(t, srv, "llama-h100", "h100")
	assert.Equal(t, "llama-3-8b", *srv.Spec.Model)
	assert.Equal(t, networkingv1alpha1.VLLM, srv.Spec.InferenceEngine)
	assert.Equal(t, map[string]string{workloadv1alpha1.ModelServingNameLabel: "llama-h100", workloadv1alpha1.EntryLabel: "true"},
		srv.Spec.WorkloadSelector.MatchLabels)
	assert.Nil(t, srv.Spec.WorkloadSelector.PDGroup)
	assert.Equal(t, &networkingv1alpha1.WorkloadPort{Port: 8000, Protocol: "http"}, srv.Spec.WorkloadPort)
	assert.Nil(t, srv.Spec.KVConnector)

	assert.Empty(t, objs.Policies, "nothing is autoscaled")
	assert.Empty(t, objs.Bindings)
}

func TestBoosterServedNameDefaultsToMetadataName(t *testing.T) {
	mb := parseBooster(t, boosterManifest)
	mb.Spec.Name = ""
	objs := build(t, mb)
	assert.Equal(t, "llama", *objs.ModelServers[0].Spec.Model)
	assert.Equal(t, "llama", objs.ModelRoute.Spec.ModelName)
	assert.Contains(t, strings.Join(objs.ModelServings[0].Spec.Template.Roles[0].EntryTemplate.Spec.Containers[0].Args, " "), "--served-model-name llama ")
}

// Kthena 1.0's quick start names the model in the worker's config and asks for that name.
func TestBoosterServedNameFromWorkerConfig(t *testing.T) {
	mb := parseBooster(t, `
metadata: {name: chat, namespace: ns}
spec:
  name: ignored-when-config-names-it
  backend:
    name: cpu
    type: vLLM
    modelURI: hf://org/tiny-instruct
    replicas: 1
    workers:
    - type: server
      config: {served-model-name: tiny-instruct, enable-prefix-caching: ""}
`)
	objs := build(t, mb)
	assert.Equal(t, "tiny-instruct", *objs.ModelServers[0].Spec.Model)
	assert.Equal(t, "tiny-instruct", objs.ModelRoute.Spec.ModelName)
	args := strings.Join(objs.ModelServings[0].Spec.Template.Roles[0].EntryTemplate.Spec.Containers[0].Args, " ")
	assert.Equal(t, 1, strings.Count(args, "--served-model-name"), args)
	assert.Contains(t, args, "--served-model-name tiny-instruct ")
	assert.True(t, strings.HasSuffix(args, "--enable-prefix-caching"), "an empty value is a bare flag: %s", args)
}

func TestBoosterConfigArgs(t *testing.T) {
	for _, tc := range []struct {
		config string
		want   []string
	}{
		{``, nil},
		{`null`, nil},
		{`{}`, nil},
		{`{"tensor-parallel-size": 4}`, []string{"--tensor-parallel-size", "4"}},
		{`{"--dtype": "bfloat16"}`, []string{"--dtype", "bfloat16"}},
		{`{"trust-remote-code": true, "enable-prefix-caching": false, "quantization": null}`, []string{"--trust-remote-code"}},
		{`{"gpu-memory-utilization": 0.95, "max-num-seqs": 256}`, []string{"--gpu-memory-utilization", "0.95", "--max-num-seqs", "256"}},
		{`{"max_model_len": 1e4}`, []string{"--max_model_len", "1e4"}},
		{`{"enable-prefix-caching": "", "block-size": 128}`, []string{"--block-size", "128", "--enable-prefix-caching"}},
		{`{"served-model-name": "x", "dtype": "half"}`, []string{"--dtype", "half"}},
		{`{"allowed-origins": ["a", "b"], "kv-transfer-config": {"kv_connector": "NixlConnector"}}`,
			[]string{"--allowed-origins", `["a","b"]`, "--kv-transfer-config", `{"kv_connector":"NixlConnector"}`}},
	} {
		var cfg *apiextensionsv1.JSON
		if tc.config != "" {
			cfg = &apiextensionsv1.JSON{Raw: []byte(tc.config)}
		}
		got, err := configArgs(cfg)
		require.NoError(t, err, tc.config)
		assert.Equal(t, tc.want, got, tc.config)
	}
	_, err := configArgs(&apiextensionsv1.JSON{Raw: []byte(`["--x"]`)})
	assert.ErrorContains(t, err, "JSON object")
}

const disaggregatedManifest = `
metadata: {name: llama, namespace: ns, uid: mb-uid}
spec:
  name: llama-pd
  backends:
  - name: pd
    type: vLLMDisaggregated
    modelURI: pvc://models/llama/8b
    cacheURI: pvc://cache/hf
    workers:
    - {type: decode, replicas: 2, resources: {limits: {nvidia.com/gpu: "2"}}}
    - {type: prefill, resources: {limits: {nvidia.com/gpu: "1"}}}
`

func TestBoosterDisaggregatedBackend(t *testing.T) {
	objs := build(t, parseBooster(t, disaggregatedManifest))
	ms := objs.ModelServings[0]
	require.Len(t, ms.Spec.Template.Roles, 2)
	prefill, decode := ms.Spec.Template.Roles[0], ms.Spec.Template.Roles[1]
	assert.Equal(t, "prefill", prefill.Name, "roles in a fixed order, whatever the workers' order")
	assert.Equal(t, "decode", decode.Name)
	assert.Equal(t, int32(1), *prefill.Replicas)
	assert.Equal(t, int32(2), *decode.Replicas)
	assert.Equal(t, &workloadv1alpha1.GangPolicy{MinRoleReplicas: map[string]int32{"prefill": 1, "decode": 2}}, ms.Spec.Template.GangPolicy,
		"a PD group is placed whole")
	for _, r := range ms.Spec.Template.Roles {
		c := r.EntryTemplate.Spec.Containers[0]
		assert.Equal(t, []string{"/model-source/llama/8b", "--served-model-name", "llama-pd", "--port", "8000", "--download-dir", "/model-cache",
			"--kv-transfer-config", `{"kv_connector":"NixlConnector","kv_role":"kv_both"}`}, c.Args, r.Name)
		assert.Equal(t, []corev1.VolumeMount{
			{Name: "model-source", MountPath: "/model-source", ReadOnly: true},
			{Name: "model-cache", MountPath: "/model-cache", SubPath: "hf"},
		}, c.VolumeMounts)
		vols := r.EntryTemplate.Spec.Volumes
		require.Len(t, vols, 2)
		assert.Equal(t, "models", vols[0].PersistentVolumeClaim.ClaimName)
		assert.True(t, vols[0].PersistentVolumeClaim.ReadOnly)
		assert.Equal(t, "cache", vols[1].PersistentVolumeClaim.ClaimName)
	}

	srv := objs.ModelServers[0]
	assert.Equal(t, &networkingv1alpha1.PDGroup{
		GroupKey:      workloadv1alpha1.GroupNameLabel,
		PrefillLabels: map[string]string{workloadv1alpha1.RoleLabel: "prefill"},
		DecodeLabels:  map[string]string{workloadv1alpha1.RoleLabel: "decode"},
	}, srv.Spec.WorkloadSelector.PDGroup)
	assert.Equal(t, networkingv1alpha1.ConnectorTypeNIXL, srv.Spec.KVConnector.Type)

	// A connector of the user's choice is kept, and the router follows it.
	mb := parseBooster(t, disaggregatedManifest)
	for i := range mb.Spec.Backends[0].Workers {
		mb.Spec.Backends[0].Workers[i].Config = &apiextensionsv1.JSON{Raw: []byte(`{"kv-transfer-config": {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}}`)}
	}
	objs = build(t, mb)
	assert.Equal(t, networkingv1alpha1.ConnectorTypeLMCache, objs.ModelServers[0].Spec.KVConnector.Type)
	args := objs.ModelServings[0].Spec.Template.Roles[0].EntryTemplate.Spec.Containers[0].Args
	assert.Equal(t, 1, strings.Count(strings.Join(args, " "), "--kv-transfer-config"))
	assert.Contains(t, args, `{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}`)
}

func TestBoosterMindIEDisaggregatedWithControlPlaneRoles(t *testing.T) {
	mb := parseBooster(t, `
metadata: {name: llama, namespace: ns, uid: mb-uid}
spec:
  backends:
  - name: ascend
    type: MindIEDisaggregated
    modelURI: hf://org/model
    workers:
    - {type: prefill}
    - {type: decode}
    - {type: coordinator, image: mindie-ms, config: {log-level: debug}}
    - {type: controller, image: mindie-ms}
`)
	objs := build(t, mb)
	ms := objs.ModelServings[0]
	var names []string
	for _, r := range ms.Spec.Template.Roles {
		names = append(names, r.Name)
	}
	assert.Equal(t, []string{"prefill", "decode", "controller", "coordinator"}, names)
	assert.Equal(t, map[string]int32{"prefill": 1, "decode": 1}, ms.Spec.Template.GangPolicy.MinRoleReplicas)
	coord := ms.Spec.Template.Roles[3].EntryTemplate.Spec.Containers[0]
	assert.Equal(t, "mindie-ms", coord.Image)
	assert.Nil(t, coord.Command)
	assert.Equal(t, []string{"--log-level", "debug"}, coord.Args, "no model flags: the coordinator serves no model")
	prefill := ms.Spec.Template.Roles[0].EntryTemplate.Spec.Containers[0]
	assert.Equal(t, []string{"--model", "org/model", "--served-model-name", "llama", "--port", "1025"}, prefill.Args)
	assert.Equal(t, int32(1025), prefill.Ports[0].ContainerPort)
	assert.Nil(t, prefill.ReadinessProbe)

	srv := objs.ModelServers[0]
	assert.Equal(t, networkingv1alpha1.VLLM, srv.Spec.InferenceEngine, "MindIE speaks the vLLM-compatible API")
	assert.Equal(t, networkingv1alpha1.ConnectorTypeHTTP, srv.Spec.KVConnector.Type)
	assert.Equal(t, int32(1025), srv.Spec.WorkloadPort.Port)
}

func TestBoosterSGLangAndMultiPodReplicas(t *testing.T) {
	mb := parseBooster(t, `
metadata: {name: m, namespace: ns, uid: mb-uid}
spec:
  name: qwen
  backends:
  - name: sg
    type: SGLang
    modelURI: hf://Qwen/Qwen3-8B
    workers: [{type: server, pods: 2, config: {tp-size: 16}}]
  - name: vl
    type: vLLM
    modelURI: s3://bucket/qwen
    workers: [{type: server, pods: 3, config: {pipeline-parallel-size: 3, hf-overrides: {"a": "b c"}}}]
  - name: mi
    type: MindIE
    modelURI: hf://Qwen/Qwen3-8B
    workers: [{type: server}]
`)
	objs := build(t, mb)

	sg := objs.ModelServings[0].Spec.Template.Roles[0]
	c := sg.EntryTemplate.Spec.Containers[0]
	assert.Equal(t, "lmsysorg/sglang:latest", c.Image)
	assert.Equal(t, []string{"python3", "-m", "sglang.launch_server"}, c.Command)
	assert.Equal(t, []string{"--model-path", "Qwen/Qwen3-8B", "--host", "0.0.0.0", "--served-model-name", "qwen", "--port", "30000",
		"--nnodes", "2", "--node-rank", "$(WORKER_INDEX)", "--dist-init-addr", "$(ENTRY_ADDRESS):5000", "--tp-size", "16"}, c.Args,
		"the worker's config comes last")
	assert.Equal(t, int32(1), sg.WorkerReplicas, "pods 2: the entry and one worker")
	require.NotNil(t, sg.WorkerTemplate)
	assert.Equal(t, c.Args, sg.WorkerTemplate.Spec.Containers[0].Args, "every SGLang rank runs the server")
	assert.Nil(t, sg.WorkerTemplate.Spec.Containers[0].ReadinessProbe)
	assert.Equal(t, networkingv1alpha1.SGLang, objs.ModelServers[0].Spec.InferenceEngine)
	assert.Equal(t, int32(30000), objs.ModelServers[0].Spec.WorkloadPort.Port)

	vl := objs.ModelServings[1].Spec.Template.Roles[0]
	assert.Equal(t, int32(2), vl.WorkerReplicas)
	c = vl.EntryTemplate.Spec.Containers[0]
	assert.Equal(t, []string{"/bin/sh", "-c"}, c.Command)
	assert.Equal(t, []string{`ray start --head --port=6379 && exec vllm serve s3://bucket/qwen --served-model-name qwen --port 8000 ` +
		`--distributed-executor-backend ray --hf-overrides '{"a":"b c"}' --pipeline-parallel-size 3`}, c.Args)
	w := vl.WorkerTemplate.Spec.Containers[0]
	assert.Equal(t, []string{"ray start --block --address=$(ENTRY_ADDRESS):6379"}, w.Args)
	assert.Empty(t, w.Ports)

	mi := objs.ModelServings[2].Spec.Template.Roles[0].EntryTemplate.Spec.Containers[0]
	assert.Equal(t, "swr.cn-south-1.myhuaweicloud.com/ascendhub/mindie:latest", mi.Image)
	assert.Equal(t, int32(1025), mi.Ports[0].ContainerPort)
}

func TestBoosterRouteWeightsAndLoRA(t *testing.T) {
	mb := parseBooster(t, boosterManifest)
	mb.Spec.ModelMatch = &networkingv1alpha1.ModelMatch{Headers: map[string]networkingv1alpha1.StringMatch{"x-team": {Exact: ptr.To("sql")}}}
	mb.Spec.Backends[0].LoraAdapters = []workloadv1alpha1.LoraAdapter{{Name: "chat", ArtifactURL: "s3://b/chat"}, {Name: "sql-expert", ArtifactURL: "hf://example/sql-lora"}}
	route := build(t, mb).ModelRoute
	assertGenerated(t, route, "llama", "")
	assert.Equal(t, "llama-3-8b", route.Spec.ModelName)
	assert.Equal(t, []string{"chat", "sql-expert"}, route.Spec.LoraAdapters, "the union of every backend's adapters, each once")

	h100 := networkingv1alpha1.TargetModel{ModelServerName: "llama-h100", Weight: ptr.To[uint32](70)}
	a100 := networkingv1alpha1.TargetModel{ModelServerName: "llama-a100", Weight: ptr.To[uint32](100)}
	require.Len(t, route.Spec.Rules, 2)
	// "chat" is only on h100: its own rule, first, so it never reaches an a100 engine.
	assert.Equal(t, networkingv1alpha1.Rule{
		Name: "lora-chat",
		ModelMatch: &networkingv1alpha1.ModelMatch{
			Headers: map[string]networkingv1alpha1.StringMatch{"x-team": {Exact: ptr.To("sql")}},
			Body:    &networkingv1alpha1.BodyMatch{Model: ptr.To("chat")},
		},
		TargetModels: []networkingv1alpha1.TargetModel{h100},
	}, route.Spec.Rules[0])
	assert.Equal(t, networkingv1alpha1.Rule{Name: "default", ModelMatch: mb.Spec.ModelMatch, TargetModels: []networkingv1alpha1.TargetModel{h100, a100}},
		route.Spec.Rules[1], "sql-expert is on both backends: the default rule serves it")
}

func TestBoosterAutoscalingPerBackendAndOptimizer(t *testing.T) {
	mb := parseBooster(t, boosterManifest)
	policy := &workloadv1alpha1.AutoscalingPolicySpec{Metrics: []workloadv1alpha1.AutoscalingPolicyMetric{{MetricName: "vllm:num_requests_waiting"}}}
	// h100 has a policy of its own; the model's policy covers a100 (and a third backend).
	mb.Spec.Backends[0].AutoscalingPolicy = policy.DeepCopy()
	mb.Spec.Backends[0].MaxReplicas = 8
	mb.Spec.AutoscalingPolicy = &workloadv1alpha1.AutoscalingPolicySpec{TolerancePercent: ptr.To[int32](5)}
	mb.Spec.Backends[1].MinReplicas = 0
	mb.Spec.Backends[1].ScalingCost = 60
	mb.Spec.Backends[1].ScaleToZeroGracePeriod = &metav1.Duration{Duration: 10 * time.Minute}
	sg := mb.Spec.Backends[1].DeepCopy()
	sg.Name, sg.Type, sg.MinReplicas, sg.MaxReplicas, sg.ScalingCost = "sg", workloadv1alpha1.ModelBackendTypeSGLang, 1, 3, 40
	sg.ScaleToZeroGracePeriod = nil
	mb.Spec.Backends = append(mb.Spec.Backends, *sg)
	objs := build(t, mb)

	assert.Equal(t, int32(2), *objs.ModelServings[0].Spec.Replicas, "autoscaled: minReplicas at creation")
	assert.Equal(t, int32(0), *objs.ModelServings[1].Spec.Replicas, "autoscaled with minReplicas 0 starts at 0")
	assert.Equal(t, "10m0s", objs.ModelServings[1].Annotations[workloadv1alpha1.ScaleToZeroGracePeriodAnnotation])
	assert.NotContains(t, objs.ModelServings[0].Annotations, workloadv1alpha1.ScaleToZeroGracePeriodAnnotation)

	require.Len(t, objs.Policies, 2)
	require.Len(t, objs.Bindings, 2)
	assertGenerated(t, objs.Policies[0], "llama-h100", "h100")
	assert.Equal(t, *policy, objs.Policies[0].Spec)
	assertGenerated(t, objs.Bindings[0], "llama-h100", "h100")
	assert.Equal(t, workloadv1alpha1.AutoscalingPolicyBindingSpec{
		PolicyRef: corev1.LocalObjectReference{Name: "llama-h100"},
		ScalingConfiguration: &workloadv1alpha1.ScalingConfiguration{
			Target: workloadv1alpha1.Target{
				TargetRef:      corev1.ObjectReference{APIVersion: "workload.serving.volcano.sh/v1alpha1", Kind: "ModelServing", Name: "llama-h100"},
				MetricEndpoint: &workloadv1alpha1.MetricEndpoint{URI: "/metrics", Port: 8000},
			},
			MinReplicas: 2, MaxReplicas: 8,
		},
	}, objs.Bindings[0].Spec)

	assertGenerated(t, objs.Policies[1], "llama", "")
	assert.Equal(t, int32(5), *objs.Policies[1].Spec.TolerancePercent)
	assertGenerated(t, objs.Bindings[1], "llama", "")
	opt := objs.Bindings[1].Spec.OptimizerConfiguration
	require.NotNil(t, opt)
	assert.Nil(t, objs.Bindings[1].Spec.ScalingConfiguration)
	assert.Equal(t, int32(200), *opt.CostExpansionRatePercent, "the default rate")
	require.Len(t, opt.Params, 2, "only the backends without a policy of their own")
	assert.Equal(t, workloadv1alpha1.OptimizerParam{
		Target: workloadv1alpha1.Target{
			TargetRef:      corev1.ObjectReference{APIVersion: "workload.serving.volcano.sh/v1alpha1", Kind: "ModelServing", Name: "llama-a100"},
			MetricEndpoint: &workloadv1alpha1.MetricEndpoint{URI: "/metrics", Port: 8000},
		},
		Cost: 60, MinReplicas: 0, MaxReplicas: 1, // maxReplicas unset: max(minReplicas, 1)
	}, opt.Params[0])
	assert.Equal(t, "llama-sg", opt.Params[1].Target.TargetRef.Name)
	assert.Equal(t, int32(30000), opt.Params[1].Target.MetricEndpoint.Port)
	assert.Equal(t, int32(40), opt.Params[1].Cost)
	assert.Equal(t, int32(3), opt.Params[1].MaxReplicas)

	mb.Spec.CostExpansionRatePercent = ptr.To[int32](150)
	assert.Equal(t, int32(150), *build(t, mb).Bindings[1].Spec.OptimizerConfiguration.CostExpansionRatePercent)

	// Every backend with its own policy: the model's policy applies to none.
	for i := range mb.Spec.Backends {
		mb.Spec.Backends[i].AutoscalingPolicy = policy.DeepCopy()
	}
	objs = build(t, mb)
	assert.Len(t, objs.Policies, 3)
	for _, b := range objs.Bindings {
		assert.NotNil(t, b.Spec.ScalingConfiguration, b.Name)
	}
}

func TestBoosterInvalidSpecs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend string
		want    []string // substrings of the error, each naming a field
	}{
		{"disaggregated without decode", `{name: pd, type: vLLMDisaggregated, modelURI: "hf://m", workers: [{type: prefill}]}`,
			[]string{"spec.backends[0].workers: Required value: a vLLMDisaggregated backend needs a worker of type decode"}},
		{"disaggregated with a server", `{name: pd, type: MindIEDisaggregated, modelURI: "hf://m", workers: [{type: server}, {type: prefill}, {type: decode}]}`,
			[]string{`spec.backends[0].workers[0].type: Unsupported value: "server"`}},
		{"vLLM without a server", `{name: a, type: vLLM, modelURI: "hf://m", workers: [{type: decode}]}`,
			[]string{`spec.backends[0].workers[0].type: Unsupported value: "decode"`, "spec.backends[0].workers: Required value: a vLLM backend needs a worker of type server"}},
		{"aggregated with a coordinator", `{name: a, type: SGLang, modelURI: "hf://m", workers: [{type: server}, {type: coordinator}]}`,
			[]string{`spec.backends[0].workers[1].type: Unsupported value: "coordinator"`}},
		{"two servers", `{name: a, type: vLLM, modelURI: "hf://m", workers: [{type: server}, {type: server}]}`,
			[]string{`spec.backends[0].workers[1].type: Duplicate value: "server"`}},
		{"no model", `{name: a, type: vLLM, workers: [{type: server}]}`,
			[]string{"spec.backends[0].modelURI: Required value"}},
		{"config not an object", `{name: a, type: vLLM, modelURI: "hf://m", workers: [{type: server, config: [1]}]}`,
			[]string{"spec.backends[0].workers[0].config: Invalid value"}},
		{"config sets the port", `{name: a, type: vLLM, modelURI: "hf://m", workers: [{type: server, config: {port: 9000, model: x}}]}`,
			[]string{"spec.backends[0].workers[0].config[port]: Forbidden", "spec.backends[0].workers[0].config[model]: Forbidden"}},
		{"prefill and decode serve different names", `{name: pd, type: vLLMDisaggregated, modelURI: "hf://m", workers: [{type: prefill, config: {served-model-name: a}}, {type: decode, config: {served_model_name: b}}]}`,
			[]string{`spec.backends[0].workers[1].config[served_model_name]: Invalid value: "b": another serving worker sets served-model-name "a"`}},
		{"served-model-name not a string", `{name: a, type: vLLM, modelURI: "hf://m", workers: [{type: server, config: {served-model-name: 7}}]}`,
			[]string{"spec.backends[0].workers[0].config[served-model-name]: Invalid value"}},
		{"adapter named like the model", `{name: a, type: vLLM, modelURI: "hf://m", workers: [{}], loraAdapters: [{name: llama, artifactURL: "hf://x"}]}`,
			[]string{"spec.backends[0].loraAdapters[0].name: Invalid value"}},
		{"name too long for a label", `{name: a-very-long-backend-name-that-will-surely-not-fit-into-a-label, type: vLLM, modelURI: "hf://m", workers: [{}]}`,
			[]string{"spec.backends[0].name: Invalid value"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mb := parseBooster(t, "metadata: {name: llama, namespace: ns}\nspec:\n  backends:\n  - "+tc.backend+"\n")
			objs, err := BuildObjects(mb)
			require.Error(t, err)
			assert.Nil(t, objs, "nothing is built from an invalid spec")
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}

	// One adapter name with two artifacts across backends.
	mb := parseBooster(t, boosterManifest)
	mb.Spec.Backends[0].LoraAdapters = []workloadv1alpha1.LoraAdapter{{Name: "sql-expert", ArtifactURL: "hf://other/sql"}}
	_, err := BuildObjects(mb)
	assert.ErrorContains(t, err, "spec.backends[1].loraAdapters[0].artifactURL")
}

// The example applies unchanged and compiles to what its comments promise.
func TestBoosterExampleManifest(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "examples", "modelbooster-two-accelerators.yaml"))
	require.NoError(t, err)
	mb := &workloadv1alpha1.ModelBooster{}
	require.NoError(t, yaml.Unmarshal(raw, mb))
	objs := build(t, mb)
	require.Len(t, objs.ModelServings, 2)
	assert.Equal(t, "llama-3-1-8b-h100", objs.ModelServings[0].Name)
	assert.Equal(t, "10m0s", objs.ModelServings[1].Annotations[workloadv1alpha1.ScaleToZeroGracePeriodAnnotation])
	require.Len(t, objs.Bindings, 1, "the model's policy covers both backends")
	opt := objs.Bindings[0].Spec.OptimizerConfiguration
	assert.Equal(t, int32(150), *opt.CostExpansionRatePercent)
	assert.Equal(t, []int32{100, 60}, []int32{opt.Params[0].Cost, opt.Params[1].Cost})
	assert.Equal(t, []int32{8, 4}, []int32{opt.Params[0].MaxReplicas, opt.Params[1].MaxReplicas})
	assert.Equal(t, []string{"sql-expert"}, objs.ModelRoute.Spec.LoraAdapters)
	require.NotNil(t, objs.ModelServings[0].Spec.Template.Roles[0].EntryTemplate.Spec.Volumes[0].HostPath)
	assert.Equal(t, "/var/cache/models", objs.ModelServings[0].Spec.Template.Roles[0].EntryTemplate.Spec.Volumes[0].HostPath.Path)
}

// kthena10Manifest is a ModelBooster as Kthena 1.0 writes it: one backend with a fixed
// replica count, a RuntimeClass and tolerations on its worker.
const kthena10Manifest = `
metadata: {name: llama, namespace: ns, uid: mb-uid}
spec:
  backend:
    name: gpu
    type: vLLM
    modelURI: ms://Qwen/Qwen3-8B
    replicas: 3
    runtimeClassName: nvidia
    workers:
    - type: server
      pods: 2
      resources: {limits: {nvidia.com/gpu: "8"}}
      tolerations:
      - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
`

func TestBoosterSingleBackendAsKthena10WritesIt(t *testing.T) {
	objs := build(t, parseBooster(t, kthena10Manifest))
	require.Len(t, objs.ModelServings, 1)
	require.Len(t, objs.ModelServers, 1)
	assert.Empty(t, objs.Policies, "a fixed backend is never autoscaled")
	assert.Empty(t, objs.Bindings)

	ms := objs.ModelServings[0]
	assertGenerated(t, ms, "llama-gpu", "gpu")
	assert.Equal(t, int32(3), *ms.Spec.Replicas, "replicas, as written")
	assert.Equal(t, "berth-scheduler", ms.Spec.SchedulerName)
	role := ms.Spec.Template.Roles[0]
	require.NotNil(t, role.WorkerTemplate)
	for what, pod := range map[string]workloadv1alpha1.PodTemplateSpec{"entry": role.EntryTemplate, "worker": *role.WorkerTemplate} {
		assert.Equal(t, wantLabels("llama", "gpu"), pod.Metadata.Labels, what)
		assert.Equal(t, ptr.To("nvidia"), pod.Spec.RuntimeClassName, what)
		assert.Equal(t, []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}, pod.Spec.Tolerations, what)
		assert.Equal(t, "berth-scheduler", pod.Spec.SchedulerName, what)
		// ms:// is a ModelScope model id, which vLLM downloads from there.
		assert.Contains(t, pod.Spec.Containers[0].Env, corev1.EnvVar{Name: "VLLM_USE_MODELSCOPE", Value: "True"}, what)
	}
	assert.Contains(t, role.EntryTemplate.Spec.Containers[0].Args[0], "exec vllm serve Qwen/Qwen3-8B ")

	assertGenerated(t, objs.ModelServers[0], "llama-gpu", "gpu")
	assertGenerated(t, objs.ModelRoute, "llama", "")
	require.Len(t, objs.ModelRoute.Spec.Rules, 1)
	assert.Equal(t, []networkingv1alpha1.TargetModel{{ModelServerName: "llama-gpu", Weight: ptr.To[uint32](100)}}, objs.ModelRoute.Spec.Rules[0].TargetModels)

	// The same backend written as a list of one compiles to the same objects.
	mb := parseBooster(t, kthena10Manifest)
	mb.Spec.Backends = []workloadv1alpha1.ModelBackend{*mb.Spec.Backend}
	mb.Spec.Backend = nil
	assert.Equal(t, objs, build(t, mb))

	// A scheduler named by the backend runs its ModelServing and pods.
	mb = parseBooster(t, kthena10Manifest)
	mb.Spec.Backend.SchedulerName = "volcano"
	ms = build(t, mb).ModelServings[0]
	assert.Equal(t, "volcano", ms.Spec.SchedulerName)
	assert.Equal(t, "volcano", ms.Spec.Template.Roles[0].EntryTemplate.Spec.SchedulerName)
	assert.Equal(t, "volcano", ms.Spec.Template.Roles[0].WorkerTemplate.Spec.SchedulerName)
}

// A listed backend with fixed replicas stays out of the model's autoscaling.
func TestBoosterFixedBackendBesideAutoscaledOnes(t *testing.T) {
	mb := parseBooster(t, `
metadata: {name: llama, namespace: ns, uid: mb-uid}
spec:
  autoscalingPolicy: {metrics: [{metricName: "vllm:num_requests_waiting", targetValue: "4"}]}
  backends:
  - {name: fixed, type: vLLM, modelURI: "hf://m", replicas: 2, workers: [{}]}
  - {name: scaled, type: vLLM, modelURI: "hf://m", minReplicas: 1, maxReplicas: 4, workers: [{}]}
`)
	objs := build(t, mb)
	assert.Equal(t, int32(2), *objs.ModelServings[0].Spec.Replicas)
	assert.False(t, BackendAutoscaled(mb, &mb.Spec.Backends[0]))
	assert.True(t, BackendAutoscaled(mb, &mb.Spec.Backends[1]))
	require.Len(t, objs.Bindings, 1)
	params := objs.Bindings[0].Spec.OptimizerConfiguration.Params
	require.Len(t, params, 1)
	assert.Equal(t, "llama-scaled", params[0].Target.TargetRef.Name)
}

// The shapes' rules, repeated from the CRD's CEL: every error names its field.
func TestBoosterShapeErrors(t *testing.T) {
	backend := `{name: a, type: vLLM, modelURI: "hf://m", replicas: 1, workers: [{}]}`
	for _, tc := range []struct {
		name, spec string
		want       []string
	}{
		{"both shapes", "backend: " + backend + "\n  backends: [" + backend + "]",
			[]string{"spec.backend: Forbidden: spec.backend and spec.backends are mutually exclusive"}},
		{"neither shape", "name: x",
			[]string{"spec.backends: Required value: set spec.backends (a list of backends) or spec.backend"}},
		{"single backend without replicas", `backend: {name: a, type: vLLM, modelURI: "hf://m", workers: [{}]}`,
			[]string{"spec.backend.replicas: Required value"}},
		{"single backend with the model's autoscaling", "backend: " + backend + "\n  autoscalingPolicy: {metrics: [{metricName: m, targetValue: \"1\"}]}\n  costExpansionRatePercent: 100",
			[]string{"spec.autoscalingPolicy: Forbidden", "spec.costExpansionRatePercent: Forbidden"}},
		{"fixed replicas with a range", `backend: {name: a, type: vLLM, modelURI: "hf://m", replicas: 1, minReplicas: 1, maxReplicas: 2, workers: [{}]}`,
			[]string{"spec.backend.minReplicas: Forbidden", "spec.backend.maxReplicas: Forbidden"}},
		{"listed fixed backend with a policy", `backends: [{name: a, type: vLLM, modelURI: "hf://m", replicas: 1, autoscalingPolicy: {metrics: [{metricName: m, targetValue: "1"}]}, workers: [{}]}]`,
			[]string{"spec.backends[0].autoscalingPolicy: Forbidden"}},
		{"single backend's own errors", `backend: {name: a, type: vLLM, modelURI: "ftp://m", replicas: 1, workers: [{type: decode}]}`,
			[]string{"spec.backend.modelURI: Invalid value", `spec.backend.workers[0].type: Unsupported value: "decode"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mb := parseBooster(t, "metadata: {name: llama, namespace: ns}\nspec:\n  "+tc.spec+"\n")
			objs, err := BuildObjects(mb)
			require.Error(t, err)
			assert.Nil(t, objs)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}
