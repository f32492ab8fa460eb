package llmazserving

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	lws "sigs.k8s.io/lws/api/leaderworkerset/v1"

	coreapi "github.com/berth-sh/berth/pkg/apis/llmaz/core/v1alpha1"
	inferenceapi "github.com/berth-sh/berth/pkg/apis/llmaz/inference/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

func hubModel(name, id string, flavors ...coreapi.Flavor) *coreapi.OpenModel {
	m := &coreapi.OpenModel{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coreapi.ModelSpec{FamilyName: "opt",
		Source: coreapi.ModelSource{ModelHub: &coreapi.ModelHub{ModelID: id}}}}
	if len(flavors) > 0 {
		m.Spec.InferenceConfig = &coreapi.InferenceConfig{Flavors: flavors}
	}
	return m
}

func uriModel(name, uri string) *coreapi.OpenModel {
	u := coreapi.URIProtocol(uri)
	return &coreapi.OpenModel{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: coreapi.ModelSpec{Source: coreapi.ModelSource{URI: &u}}}
}

func TestModelPath(t *testing.T) {
	gguf := hubModel("q", "Qwen/Qwen2-0.5B-Instruct-GGUF")
	gguf.Spec.Source.ModelHub.Filename = ptr.To("qwen2-0_5b-instruct-q5_k_m.gguf")
	for _, c := range []struct {
		model *coreapi.OpenModel
		skip  bool
		want  string
	}{
		{hubModel("o", "facebook/opt-125m"), false, "/workspace/models/models--facebook--opt-125m"},
		{hubModel("o", "facebook/opt-125m"), true, "facebook/opt-125m"},
		{gguf, false, "/workspace/models/qwen2-0_5b-instruct-q5_k_m.gguf"},
		{uriModel("h", "host:///mnt/models/qwen"), false, "/mnt/models/qwen"},
		{uriModel("s", "s3://bucket/models/qwen3"), false, "/workspace/models/models--qwen3"},
		{uriModel("s", "oss://bucket.endpoint/models/q.gguf"), false, "/workspace/models/q.gguf"},
		{uriModel("s", "s3://bucket/models/qwen3"), true, "s3://bucket/models/qwen3"},
		{uriModel("l", "ollama://llama3.3"), false, "llama3.3"},
	} {
		assert.Equal(t, c.want, ModelPath(c.model, c.skip), "%v skip=%v", c.model.Spec.Source, c.skip)
	}
}

// {{ .ModelName }} is the OpenModel's name, except for ollama:// models: Ollama's own name,
// which the engine pulls and serves (llmaz's URIProvider.ModelName), and which the
// Playground's ModelServer then serves.
func TestModelName(t *testing.T) {
	assert.Equal(t, "opt", ModelName(hubModel("opt", "facebook/opt-125m")))
	assert.Equal(t, "q", ModelName(uriModel("q", "s3://bucket/models/qwen3")))
	assert.Equal(t, "qwen2:0.5b", ModelName(uriModel("qwen2-0--5b", "ollama://qwen2:0.5b")))

	br := &inferenceapi.BackendRuntime{ObjectMeta: metav1.ObjectMeta{Name: "ollama"}, Spec: inferenceapi.BackendRuntimeSpec{
		Image: "ollama/ollama", Version: "0.6.8", Command: []string{"/bin/sh", "-c"},
		RecommendedConfigs: []inferenceapi.RecommendedConfig{{Name: "default", Args: []string{"ollama pull {{ .ModelName }}"}}},
	}}
	pg := &inferenceapi.Playground{ObjectMeta: metav1.ObjectMeta{Name: "pg", Namespace: "ns"}}
	m := &Models{Main: uriModel("qwen2-0--5b", "ollama://qwen2:0.5b"), Claims: []coreapi.ModelRef{{Name: "qwen2-0--5b"}}}
	svc, err := BuildService(pg, m, br, &br.Spec.RecommendedConfigs[0])
	require.NoError(t, err)
	assert.Equal(t, []string{"ollama pull qwen2:0.5b"}, svc.Spec.WorkloadTemplate.WorkerTemplate.Spec.Containers[0].Args)
}

func TestRenderArgs(t *testing.T) {
	vars := map[string]string{"ModelPath": "/workspace/models/m", "ModelName": "m"}
	got, err := RenderArgs([]string{"--model", "{{ .ModelPath }}", "--served-model-name={{.ModelName}}", "--port", "8080"}, vars)
	require.NoError(t, err)
	assert.Equal(t, []string{"--model", "/workspace/models/m", "--served-model-name=m", "--port", "8080"}, got)

	_, err = RenderArgs([]string{"--speculative_model", "{{ .DraftModelPath }}"}, vars)
	require.Error(t, err)
	assert.Equal(t, `argument "{{ .DraftModelPath }}": {{ .DraftModelPath }} has no value (known: ModelName, ModelPath)`, err.Error())
}

func runtime() *inferenceapi.BackendRuntime {
	return &inferenceapi.BackendRuntime{
		ObjectMeta: metav1.ObjectMeta{Name: "vllm"},
		Spec: inferenceapi.BackendRuntimeSpec{
			Command: []string{"python3", "-m", "vllm.entrypoints.openai.api_server"},
			Image:   "vllm/vllm-openai", Version: "v0.8.5",
			Envs: []corev1.EnvVar{{Name: "A", Value: "runtime"}, {Name: "B", Value: "runtime"}},
			RecommendedConfigs: []inferenceapi.RecommendedConfig{{
				Name: "default", Args: []string{"--model", "{{ .ModelPath }}", "--port", "9000"},
				SharedMemorySize: ptr.To(resource.MustParse("2Gi")),
				Resources: &inferenceapi.ResourceRequirements{
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")},
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi")},
				},
			}},
		},
	}
}

// The Playground's backendRuntimeConfig overrides in llmaz's order: args appended, envs by
// name, resources by resource (a request above the recommended limit raises the limit),
// the version, and /dev/shm.
func TestBuildServiceOverrides(t *testing.T) {
	br := runtime()
	pg := &inferenceapi.Playground{
		ObjectMeta: metav1.ObjectMeta{Name: "pg", Namespace: "ns"},
		Spec: inferenceapi.PlaygroundSpec{
			Replicas: ptr.To[int32](2),
			BackendRuntimeConfig: &inferenceapi.BackendRuntimeConfig{
				Version: ptr.To("v0.9.0"), Args: []string{"--max-model-len", "4096"},
				Envs:             []corev1.EnvVar{{Name: "B", Value: "playground"}, {Name: "C", Value: "playground"}},
				Resources:        &inferenceapi.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("6")}},
				SharedMemorySize: ptr.To(resource.MustParse("4Gi")),
			},
		},
	}
	m := &Models{Main: hubModel("opt", "facebook/opt-125m"), Claims: []coreapi.ModelRef{{Name: "opt"}}}
	svc, err := BuildService(pg, m, br, &br.Spec.RecommendedConfigs[0])
	require.NoError(t, err)
	c := svc.Spec.WorkloadTemplate.WorkerTemplate.Spec.Containers[0]
	assert.Equal(t, "vllm/vllm-openai:v0.9.0", c.Image)
	assert.Equal(t, []string{"--model", "/workspace/models/models--facebook--opt-125m", "--port", "9000", "--max-model-len", "4096"}, c.Args)
	assert.Equal(t, []corev1.EnvVar{{Name: "A", Value: "runtime"}, {Name: "B", Value: "playground"}, {Name: "C", Value: "playground"}}, c.Env)
	assert.Equal(t, resource.MustParse("6"), c.Resources.Requests[corev1.ResourceCPU])
	assert.Equal(t, resource.MustParse("6"), c.Resources.Limits[corev1.ResourceCPU], "the limit follows a request raised above it")
	assert.Equal(t, resource.MustParse("8Gi"), c.Resources.Limits[corev1.ResourceMemory])
	assert.Equal(t, int32(9000), c.Ports[0].ContainerPort, "the port the args name")
	assert.Equal(t, "4Gi", svc.Spec.WorkloadTemplate.WorkerTemplate.Spec.Volumes[0].EmptyDir.SizeLimit.String())
	assert.Equal(t, int32(2), *svc.Spec.Replicas)
	assert.Equal(t, int32(1), *svc.Spec.WorkloadTemplate.Size)
	// The runtime is not changed by building from it.
	assert.Equal(t, resource.MustParse("4"), br.Spec.RecommendedConfigs[0].Resources.Limits[corev1.ResourceCPU])
}

func TestConfigName(t *testing.T) {
	pg := &inferenceapi.Playground{}
	assert.Equal(t, "default", ConfigName(pg, &Models{}))
	assert.Equal(t, "speculative-decoding", ConfigName(pg, &Models{Draft: hubModel("d", "x/y")}))
	pg.Spec.BackendRuntimeConfig = &inferenceapi.BackendRuntimeConfig{ConfigName: ptr.To("custom")}
	assert.Equal(t, "custom", ConfigName(pg, &Models{Draft: hubModel("d", "x/y")}))
}

// Flavors: the first one's accelerators on the container, their node selectors required
// (any of them) and preferred in order; a claim's names pick and order them.
func TestFlavors(t *testing.T) {
	a100 := coreapi.Flavor{Name: "a100", Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}, NodeSelector: map[string]string{"gpu": "a100"}}
	h100 := coreapi.Flavor{Name: "h100", Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}, NodeSelector: map[string]string{"gpu": "h100"}}
	m := &Models{Main: hubModel("m", "x/y", a100, h100), Flavors: []coreapi.FlavorName{"h100", "a100"}}
	fl, err := Flavors(m)
	require.NoError(t, err)
	require.Equal(t, []coreapi.FlavorName{"h100", "a100"}, []coreapi.FlavorName{fl[0].Name, fl[1].Name})

	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: ModelRunnerContainer}}}}
	applyFlavors(tmpl, fl)
	assert.Equal(t, resource.MustParse("1"), tmpl.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"])
	assert.Equal(t, resource.MustParse("1"), tmpl.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"])
	na := tmpl.Spec.Affinity.NodeAffinity
	require.Len(t, na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, 2, "either flavor's nodes")
	require.Len(t, na.PreferredDuringSchedulingIgnoredDuringExecution, 2)
	assert.Equal(t, "h100", na.PreferredDuringSchedulingIgnoredDuringExecution[0].Preference.MatchExpressions[0].Values[0])
	assert.Greater(t, na.PreferredDuringSchedulingIgnoredDuringExecution[0].Weight, na.PreferredDuringSchedulingIgnoredDuringExecution[1].Weight)

	_, err = Flavors(&Models{Main: hubModel("m", "x/y", a100), Flavors: []coreapi.FlavorName{"t4"}})
	require.Error(t, err)
	assert.Equal(t, `flavor "t4" is not one of OpenModel m's flavors [a100]`, err.Error())

	// A flavor that may run anywhere requires nothing.
	any := coreapi.Flavor{Name: "any", Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}
	tmpl = &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: ModelRunnerContainer}}}}
	applyFlavors(tmpl, []coreapi.Flavor{any})
	assert.Nil(t, tmpl.Spec.Affinity)
}

// An LWS template becomes one role: the leader is the entry pod, size − 1 workers; the
// rollout and restart policy carry over; LWS compatibility is switched on.
func TestBuildModelServing(t *testing.T) {
	leader := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"role": "leader"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: ModelRunnerContainer, Image: "sglang"}}}}
	worker := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: ModelRunnerContainer, Image: "sglang"}}}}
	svc := &inferenceapi.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "llama", Namespace: "ns"},
		Spec: inferenceapi.ServiceSpec{
			Replicas: ptr.To[int32](3),
			WorkloadTemplate: lws.LeaderWorkerTemplate{LeaderTemplate: &leader, WorkerTemplate: worker, Size: ptr.To[int32](4),
				RestartPolicy: lws.NoneRestartPolicy},
			RolloutStrategy: &lws.RolloutStrategy{Type: lws.RollingUpdateStrategyType,
				RollingUpdateConfiguration: &lws.RollingUpdateConfiguration{MaxUnavailable: intstr.FromInt32(2), MaxSurge: intstr.FromInt32(1)}},
		},
	}
	m := &Models{Main: hubModel("llama", "meta/llama")}
	ms := BuildModelServing(svc, m, nil)
	assert.Equal(t, int32(3), *ms.Spec.Replicas)
	assert.Equal(t, "berth-scheduler", ms.Spec.SchedulerName)
	assert.Equal(t, workloadv1alpha1.NoneRestartPolicy, ms.Spec.RecoveryPolicy)
	assert.Equal(t, "true", ms.Annotations[workloadv1alpha1.LeaderWorkerSetCompatAnnotation])
	role := ms.Spec.Template.Roles[0]
	assert.Equal(t, int32(3), role.WorkerReplicas)
	assert.Equal(t, "leader", role.EntryTemplate.Metadata.Labels["role"])
	require.NotNil(t, role.WorkerTemplate)
	assert.Equal(t, "model-loader", role.EntryTemplate.Spec.InitContainers[0].Name)
	assert.Equal(t, "model-loader", role.WorkerTemplate.Spec.InitContainers[0].Name)
	assert.Equal(t, intstr.FromInt32(2), *ms.Spec.RolloutStrategy.RollingUpdateConfiguration.MaxUnavailable)
	assert.Equal(t, intstr.FromInt32(1), *ms.Spec.RolloutStrategy.RollingUpdateConfiguration.MaxSurge)
	// The Service's template is not changed by building from it.
	assert.Empty(t, svc.Spec.WorkloadTemplate.LeaderTemplate.Spec.InitContainers)

	// Without a leader template (size 1), the worker template is the entry pod.
	svc.Spec.WorkloadTemplate.LeaderTemplate, svc.Spec.WorkloadTemplate.Size = nil, ptr.To[int32](1)
	svc.Annotations = map[string]string{SkipModelLoaderAnnotation: "true"}
	ms = BuildModelServing(svc, m, nil)
	assert.Zero(t, ms.Spec.Template.Roles[0].WorkerReplicas)
	assert.Nil(t, ms.Spec.Template.Roles[0].WorkerTemplate)
	assert.Empty(t, ms.Spec.Template.Roles[0].EntryTemplate.Spec.InitContainers, "the engine loads the model itself")
}
