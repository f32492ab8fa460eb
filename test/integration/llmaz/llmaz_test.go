package llmaz

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inferenceapi "github.com/berth-sh/berth/pkg/apis/llmaz/inference/v1alpha1"
	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// vllmRuntime is the vLLM BackendRuntime as llmaz's Helm chart installs it (its template
// placeholders as they render).
const vllmRuntime = `
apiVersion: inference.llmaz.io/v1alpha1
kind: BackendRuntime
metadata:
  name: vllm
spec:
  command: [python3, -m, vllm.entrypoints.openai.api_server]
  image: vllm/vllm-openai
  version: v0.8.5
  recommendedConfigs:
    - name: default
      args: [--model, "{{ .ModelPath }}", --served-model-name, "{{ .ModelName }}", --host, "0.0.0.0", --port, "8080"]
      sharedMemorySize: 2Gi
      resources:
        requests: {cpu: 4, memory: 8Gi}
        limits: {cpu: 4, memory: 8Gi}
    - name: speculative-decoding
      args: [--model, "{{ .ModelPath }}", --served-model-name, "{{ .ModelName }}", --speculative_model, "{{ .DraftModelPath }}",
             --host, "0.0.0.0", --port, "8080", --num_speculative_tokens, "5", -tp, "1"]
      sharedMemorySize: 2Gi
      resources:
        requests: {cpu: 4, memory: 8Gi}
        limits: {cpu: 8, memory: 16Gi}
  startupProbe: {periodSeconds: 10, failureThreshold: 30, httpGet: {path: /health, port: 8080}}
  readinessProbe: {initialDelaySeconds: 5, periodSeconds: 5, failureThreshold: 3, httpGet: {path: /health, port: 8080}}
`

// llmaz's docs/examples/huggingface/playground.yaml, the model renamed per test (OpenModels
// are cluster-scoped), with elasticConfig from docs/examples/hpa.
func openModel(name string) string {
	return fmt.Sprintf(`
apiVersion: llmaz.io/v1alpha1
kind: OpenModel
metadata:
  name: %s
spec:
  familyName: opt
  source:
    modelHub:
      modelID: facebook/opt-125m
  inferenceConfig:
    flavors:
      - name: t4 # GPU type
        limits:
          nvidia.com/gpu: 1
`, name)
}

// A Playground written for llmaz comes up on Berth and serves chat completions through
// berth-router by its model's name: Playground → Service → ModelServing, with the
// BackendRuntime's arguments rendered as llmaz renders them, the model loader, the flavor's
// GPU, a ModelServer and ModelRoute, the HPA of its elasticConfig, and kubectl scale.
func TestPlaygroundServesAChatCompletion(t *testing.T) {
	w := newWorld(t, 2)
	model := "opt-125m-" + w.ns
	w.apply(vllmRuntime, openModel(model), fmt.Sprintf(`
apiVersion: inference.llmaz.io/v1alpha1
kind: Playground
metadata:
  name: opt-125m
spec:
  replicas: 1
  modelClaim:
    modelName: %s
  backendRuntimeConfig:
    args: [--max-model-len, "4096"]
  elasticConfig:
    minReplicas: 1
    maxReplicas: 3
    scaleTrigger:
      hpa:
        metrics:
          - type: Resource
            resource:
              name: cpu
              target:
                averageUtilization: 50
                type: Utilization
`, model))

	pg := w.waitPlaygroundAvailable("opt-125m")
	assert.Equal(t, int32(1), pg.Status.Replicas)
	assert.Equal(t, "modelserving.volcano.sh/entry=true,modelserving.volcano.sh/name=opt-125m", pg.Status.Selector)

	// The Service, as llmaz's Playground controller builds it.
	svc := w.service("opt-125m")
	c := svc.Spec.WorkloadTemplate.WorkerTemplate.Spec.Containers[0]
	assert.Equal(t, "model-runner", c.Name)
	assert.Equal(t, "vllm/vllm-openai:v0.8.5", c.Image)
	assert.Equal(t, []string{"python3", "-m", "vllm.entrypoints.openai.api_server"}, c.Command)
	assert.Equal(t, []string{"--model", "/workspace/models/models--facebook--opt-125m", "--served-model-name", model,
		"--host", "0.0.0.0", "--port", "8080", "--max-model-len", "4096"}, c.Args, "recommended args rendered, the Playground's appended")
	assert.Equal(t, resource.MustParse("8Gi"), c.Resources.Limits[corev1.ResourceMemory])
	require.NotNil(t, c.ReadinessProbe)
	assert.Equal(t, "/dev/shm", c.VolumeMounts[0].MountPath)

	// The ModelServing: the pod on berth-scheduler with the model loader and the flavor's GPU.
	ms := w.modelServing("opt-125m")
	assert.Equal(t, "berth-scheduler", ms.Spec.SchedulerName)
	require.Len(t, ms.Spec.Template.Roles, 1)
	role := ms.Spec.Template.Roles[0]
	assert.Zero(t, role.WorkerReplicas)
	spec := role.EntryTemplate.Spec
	require.Len(t, spec.InitContainers, 1)
	assert.Equal(t, "model-loader", spec.InitContainers[0].Name)
	assert.Equal(t, resource.MustParse("1"), spec.Containers[0].Resources.Limits["nvidia.com/gpu"])
	assert.Equal(t, "t4", ms.Annotations[inferenceapi.InferenceServiceFlavorsAnnoKey])

	// Served by name through the router.
	assert.NotEmpty(t, w.chat(model))

	// The HPA llmaz creates, on the Playground's scale subresource.
	var hpa autoscalingv2.HorizontalPodAutoscaler
	require.NoError(t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "opt-125m"}, &hpa))
	assert.Equal(t, autoscalingv2.CrossVersionObjectReference{APIVersion: "inference.llmaz.io/v1alpha1", Kind: "Playground", Name: "opt-125m"}, hpa.Spec.ScaleTargetRef)
	assert.Equal(t, int32(1), *hpa.Spec.MinReplicas)
	assert.Equal(t, int32(3), hpa.Spec.MaxReplicas)
	require.Len(t, hpa.Spec.Metrics, 1)
	assert.Equal(t, corev1.ResourceCPU, hpa.Spec.Metrics[0].Resource.Name)

	// kubectl scale on the Playground (what the HPA does) reaches the ModelServing.
	sc, err := kube.Discovery().ServerResourcesForGroupVersion("inference.llmaz.io/v1alpha1")
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(sc.APIResources, func(r metav1.APIResource) bool { return r.Name == "playgrounds/scale" }))
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"replicas":2}}`))
	require.NoError(t, cl.SubResource("scale").Patch(w.ctx, w.playground("opt-125m"), patch))
	w.eventually("the ModelServing at 2 replicas and the Playground reporting them", func() bool {
		pg := w.playground("opt-125m")
		return *w.modelServing("opt-125m").Spec.Replicas == 2 && pg.Status.Replicas == 2
	})
	w.waitPlaygroundAvailable("opt-125m")
}

// llmaz's docs/examples/speculative-decoding/vllm/playground.yaml: a main and a draft model
// pick the speculative-decoding config, with the draft model's path rendered.
func TestPlaygroundSpeculativeDecoding(t *testing.T) {
	w := newWorld(t, 1)
	main, draft := "opt-6--7b-"+w.ns, "opt-125m-"+w.ns
	w.apply(vllmRuntime, fmt.Sprintf(`
apiVersion: llmaz.io/v1alpha1
kind: OpenModel
metadata:
  name: %s
spec:
  familyName: opt
  source:
    modelHub:
      modelID: facebook/opt-6.7b
  inferenceConfig:
    flavors:
      - name: a10 # gpu type
        limits:
          nvidia.com/gpu: 1
`, main), fmt.Sprintf(`
apiVersion: llmaz.io/v1alpha1
kind: OpenModel
metadata:
  name: %s
spec:
  familyName: opt
  source:
    modelHub:
      modelID: facebook/opt-125m
`, draft), fmt.Sprintf(`
apiVersion: inference.llmaz.io/v1alpha1
kind: Playground
metadata:
  name: vllm-speculator
spec:
  replicas: 1
  modelClaims:
    models:
    - name: %s # the target model
      role: main
    - name: %s  # the draft model
      role: draft
`, main, draft))
	w.waitPlaygroundAvailable("vllm-speculator")
	args := w.service("vllm-speculator").Spec.WorkloadTemplate.WorkerTemplate.Spec.Containers[0].Args
	assert.Equal(t, []string{"--model", "/workspace/models/models--facebook--opt-6.7b", "--served-model-name", main,
		"--speculative_model", "/workspace/models/models--facebook--opt-125m", "--host", "0.0.0.0", "--port", "8080",
		"--num_speculative_tokens", "5", "-tp", "1"}, args)
	// Both models are loaded before the engine starts.
	inits := w.modelServing("vllm-speculator").Spec.Template.Roles[0].EntryTemplate.Spec.InitContainers
	require.Len(t, inits, 2)
	assert.Equal(t, []string{"model-loader", "model-loader-1"}, []string{inits[0].Name, inits[1].Name})
	assert.NotEmpty(t, w.chat(main))
}

// llmaz's docs/examples/multi-nodes/service.yaml: a Service whose LeaderWorkerSet template
// has a leader and one worker becomes a ModelServing whose groups are an entry pod and a
// worker, placed together; LWS's variables and labels resolve; the leader serves chats.
func TestServiceLeaderWorker(t *testing.T) {
	w := newWorld(t, 2)
	model := "llama3-405b-instruct-" + w.ns
	w.apply(fmt.Sprintf(`
apiVersion: llmaz.io/v1alpha1
kind: OpenModel
metadata:
  name: %s
spec:
  familyName: llama3
  source:
    modelHub:
      modelID: meta-llama/Llama-3.1-405B
`, model), strings.ReplaceAll(multiNodeService, "MODEL", model),
		// A bare Service has no ModelServer: the user routes to its leaders.
		fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: llama3}
spec:
  model: %s
  inferenceEngine: SGLang
  workloadSelector: {matchLabels: {modelserving.volcano.sh/name: llama3-405b-instruct, modelserving.volcano.sh/entry: "true"}}
  workloadPort: {port: 40000}
`, model), fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: llama3}
spec:
  modelName: %s
  rules: [{name: default, targetModels: [{modelServerName: llama3}]}]
`, model))

	w.eventually("Service available", func() bool {
		s, _, _ := condition(w.service("llama3-405b-instruct").Status.Conditions, "Available")
		return s == "True"
	})
	ms := w.modelServing("llama3-405b-instruct")
	require.Len(t, ms.Spec.Template.Roles, 1)
	assert.Equal(t, int32(1), ms.Spec.Template.Roles[0].WorkerReplicas, "size 2: the leader and one worker")
	assert.Equal(t, workloadv1alpha1.ServingGroupRecreate, ms.Spec.RecoveryPolicy, "RecreateGroupOnPodRestart")

	var pods corev1.PodList
	require.NoError(t, cl.List(w.ctx, &pods, client.InNamespace(w.ns)))
	require.Len(t, pods.Items, 2)
	for _, p := range pods.Items {
		idx := p.Labels["leaderworkerset.sigs.k8s.io/worker-index"]
		env := map[string]string{}
		for _, e := range p.Spec.Containers[0].Env {
			env[e.Name] = e.Value
		}
		assert.Equal(t, "2", env["LWS_GROUP_SIZE"], p.Name)
		assert.NotEmpty(t, env["LWS_LEADER_ADDRESS"], p.Name)
		if p.Labels[workloadv1alpha1.EntryLabel] == "true" {
			assert.Equal(t, "0", idx)
			assert.Equal(t, "leader", p.Labels["role"], "the leader template's labels")
		} else {
			assert.Equal(t, "1", idx)
		}
	}
	assert.NotEmpty(t, w.chat(model))
}

const multiNodeService = `
apiVersion: inference.llmaz.io/v1alpha1
kind: Service
metadata:
  name: llama3-405b-instruct
spec:
  modelClaims:
    models:
      - name: MODEL
  replicas: 1
  workloadTemplate:
    size: 2
    restartPolicy: RecreateGroupOnPodRestart
    leaderTemplate:
      metadata:
        labels:
          role: leader
      spec:
        containers:
          - name: model-runner
            image: lmsysorg/sglang:latest
            env:
              - name: LWS_WORKER_INDEX
                valueFrom:
                  fieldRef:
                    fieldPath: metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']
            command: [python3, -m, sglang.launch_server, --model-path, /workspace/models/models--meta-llama--Meta-Llama-3.1-8B-Instruct,
              --tp, "2", --dist-init-addr, $(LWS_LEADER_ADDRESS):20000, --nnodes, $(LWS_GROUP_SIZE), --node-rank, $(LWS_WORKER_INDEX),
              --trust-remote-code, --host, "0.0.0.0", --port, "40000"]
            resources:
              limits:
                nvidia.com/gpu: "1"
            ports:
              - containerPort: 40000
    workerTemplate:
      spec:
        containers:
          - name: model-runner
            image: lmsysorg/sglang:latest
            env:
              - name: LWS_WORKER_INDEX
                valueFrom:
                  fieldRef:
                    fieldPath: metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']
            command: [python3, -m, sglang.launch_server, --model-path, /workspace/models/models--meta-llama--Meta-Llama-3.1-8B-Instruct,
              --tp, "2", --dist-init-addr, $(LWS_LEADER_ADDRESS):20000, --nnodes, $(LWS_GROUP_SIZE), --node-rank, $(LWS_WORKER_INDEX),
              --trust-remote-code]
            resources:
              limits:
                nvidia.com/gpu: "1"
`

// Bad input is reported in the Playground's status with nothing created: an unknown
// BackendRuntime, then (once it exists) an unknown model. Creating what is missing brings
// the Playground up without touching it.
func TestPlaygroundBadInput(t *testing.T) {
	w := newWorld(t, 1)
	model := "opt-125m-" + w.ns
	w.apply(fmt.Sprintf(`
apiVersion: inference.llmaz.io/v1alpha1
kind: Playground
metadata:
  name: waiting
spec:
  modelClaim:
    modelName: %s
  backendRuntimeConfig:
    backendName: no-such-runtime
`, model), fmt.Sprintf(`
apiVersion: inference.llmaz.io/v1alpha1
kind: Playground
metadata:
  name: no-model
spec:
  modelClaim:
    modelName: %s
`, "no-such-model-"+w.ns), vllmRuntime)

	for name, want := range map[string][]string{
		"waiting":  {"ModelNotFound", fmt.Sprintf(`spec.modelClaim.modelName: OpenModel %q not found`, model)},
		"no-model": {"ModelNotFound", fmt.Sprintf(`spec.modelClaim.modelName: OpenModel "no-such-model-%s" not found`, w.ns)},
	} {
		w.eventually(name+" reports "+want[0], func() bool {
			s, reason, msg := condition(w.playground(name).Status.Conditions, "Available")
			return s == "False" && reason == want[0] && strings.Contains(msg, want[1])
		})
	}
	// The model appears: "waiting" now lacks its runtime.
	w.apply(openModel(model))
	w.eventually("waiting reports the runtime", func() bool {
		s, reason, msg := condition(w.playground("waiting").Status.Conditions, "Available")
		return s == "False" && reason == "BackendRuntimeNotFound" && strings.Contains(msg, `spec.backendRuntimeConfig.backendName: BackendRuntime "no-such-runtime" not found`)
	})
	s, _, _ := condition(w.playground("waiting").Status.Conditions, "Progressing")
	assert.Equal(t, "True", s, "still waiting")
	// Nothing was created for either.
	for _, obj := range []client.Object{&inferenceapi.Service{}, &workloadv1alpha1.ModelServing{}, &networkingv1alpha1.ModelServer{},
		&networkingv1alpha1.ModelRoute{}, &autoscalingv2.HorizontalPodAutoscaler{}} {
		for _, name := range []string{"waiting", "no-model"} {
			err := cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, obj)
			assert.True(t, apierrors.IsNotFound(err), "%T %s exists for a Playground that cannot be served", obj, name)
		}
	}
	// The runtime appears under the name it asks for: it comes up.
	w.apply(strings.Replace(vllmRuntime, "name: vllm", "name: no-such-runtime", 1))
	w.waitPlaygroundAvailable("waiting")
	assert.NotEmpty(t, w.chat(model))
}
