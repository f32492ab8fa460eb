package rbac

import (
	"testing"

	coreapi "github.com/berth-sh/berth/pkg/apis/llmaz/core/v1alpha1"
	inferenceapi "github.com/berth-sh/berth/pkg/apis/llmaz/inference/v1alpha1"
	llmdv1alpha1 "github.com/berth-sh/berth/pkg/apis/llmd/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

const (
	workloadGroup   = "workload.serving.volcano.sh/"
	networkingGroup = "networking.serving.volcano.sh/"
	events          = "create events.k8s.io/events"
)

// Backend a has a fixed size; b is autoscaled, so it has an AutoscalingPolicy and a binding.
const boosterManifest = `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelBooster
metadata: {name: mb}
spec:
  name: rbac-booster
  backends:
  - name: a
    type: vLLM
    modelURI: hf://Qwen/Qwen3-8B
    workers: [{type: server}]
  - name: b
    type: vLLM
    modelURI: hf://Qwen/Qwen3-8B
    minReplicas: 1
    maxReplicas: 2
    autoscalingPolicy: {metrics: [{metricName: "vllm:num_requests_waiting", targetValue: "4"}]}
    workers: [{type: server}]
`

// The ModelBooster reconciler, as its shipped ServiceAccount: it creates a ModelServing and a
// ModelServer per backend, the ModelRoute and b's policy and binding; a new image updates a's
// ModelServing and dropping b deletes b's objects and updates the route; the ModelBooster's
// deletion leaves the rest to the garbage collector.
func TestShippedRBACDrivesModelBooster(t *testing.T) {
	d := newDrive(t, "rbac-booster")
	start := d.mark()
	d.apply(boosterManifest)
	d.waitWrites("create", start,
		"create "+workloadGroup+"modelservings", "create "+workloadGroup+"modelservings",
		"create "+networkingGroup+"modelservers", "create "+networkingGroup+"modelservers",
		"create "+networkingGroup+"modelroutes",
		"create "+workloadGroup+"autoscalingpolicies", "create "+workloadGroup+"autoscalingpolicybindings",
		"update "+workloadGroup+"modelboosters/status", events)

	updated := d.mark()
	mb := &workloadv1alpha1.ModelBooster{}
	mb.Name = "mb"
	d.update(mb, func() {
		mb.Spec.Backends = mb.Spec.Backends[:1]
		mb.Spec.Backends[0].Workers[0].Image = "vllm/vllm-openai:v0.11.0"
	})
	d.waitWrites("update (a new image for a, b dropped)", updated,
		"update "+workloadGroup+"modelservings", "update "+networkingGroup+"modelroutes",
		"delete "+workloadGroup+"modelservings", "delete "+networkingGroup+"modelservers",
		"delete "+workloadGroup+"autoscalingpolicies", "delete "+workloadGroup+"autoscalingpolicybindings",
		"update "+workloadGroup+"modelboosters/status", events)

	d.delete(&workloadv1alpha1.ModelBooster{}, "mb")
	d.gone(&workloadv1alpha1.ModelServing{}, "mb-a") // the garbage collector's
	d.refusedNone()
}

// A ModelServing at zero replicas has no load: a VariantAutoscaling sizes it to one.
const (
	variantServing = `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata: {name: llm}
spec:
  replicas: 0
  template:
    roles:
    - name: server
      replicas: 1
      entryTemplate:
        spec:
          containers: [{name: vllm, image: vllm}]
`
	variantSLO = `
apiVersion: v1
kind: ConfigMap
metadata: {name: service-classes}
data:
  premium.yaml: |
    name: Premium
    priority: 1
    data:
      - model: rbac-model
        slo-tpot: 10
        slo-ttft: 300
`
	variantCosts = `
apiVersion: v1
kind: ConfigMap
metadata: {name: accelerator-unit-costs}
data:
  H100: '{"device": "NVIDIA-H100-80GB-HBM3", "cost": "50.00"}'
`
	variantManifest = `
apiVersion: llmd.ai/v1alpha1
kind: VariantAutoscaling
metadata:
  name: llm
  labels: {inference.optimization/acceleratorName: H100}
spec:
  modelID: rbac-model
  sloClassRef: {name: service-classes, key: premium.yaml}
  modelProfile:
    accelerators:
    - {acc: H100, accCount: 1, alpha: "8", beta: "0.15", maxBatchSize: 4}
`
)

// The VariantAutoscaling reconciler, as its shipped ServiceAccount: it scales its ModelServing
// through modelservings/scale, writes its status and records the scaling; a spec change is
// sized again; its deletion leaves nothing for it to write.
func TestShippedRBACDrivesVariantAutoscaling(t *testing.T) {
	d := newDrive(t, "rbac-variant")
	start := d.mark()
	d.apply(variantServing, variantSLO, variantCosts, variantManifest)
	d.waitWrites("create", start,
		"update "+workloadGroup+"modelservings/scale", "patch llmd.ai/variantautoscalings/status", events)

	updated := d.mark()
	va := &llmdv1alpha1.VariantAutoscaling{}
	va.Name = "llm"
	d.update(va, func() { va.Spec.ModelProfile.Accelerators[0].Alpha = "9" })
	d.waitWrites("update (a new profile)", updated, "patch llmd.ai/variantautoscalings/status")

	d.delete(&llmdv1alpha1.VariantAutoscaling{}, "llm")
	d.refusedNone()
}

// llmaz's objects: a vLLM BackendRuntime and two OpenModels (cluster-scoped, so named for
// this package), and a Playground with an elasticConfig (an HPA).
const (
	llmazRuntime = `
apiVersion: inference.llmaz.io/v1alpha1
kind: BackendRuntime
metadata: {name: rbac-vllm}
spec:
  command: [python3, -m, vllm.entrypoints.openai.api_server]
  image: vllm/vllm-openai
  version: v0.8.5
  recommendedConfigs:
  - name: default
    args: [--model, "{{ .ModelPath }}", --served-model-name, "{{ .ModelName }}", --port, "8080"]
    resources:
      requests: {cpu: 1, memory: 1Gi}
      limits: {cpu: 1, memory: 1Gi}
`
	llmazModelA = `
apiVersion: llmaz.io/v1alpha1
kind: OpenModel
metadata: {name: rbac-opt-a}
spec:
  familyName: opt
  source: {modelHub: {modelID: facebook/opt-125m}}
`
	llmazModelB = `
apiVersion: llmaz.io/v1alpha1
kind: OpenModel
metadata: {name: rbac-opt-b}
spec:
  familyName: opt
  source: {modelHub: {modelID: facebook/opt-350m}}
`
	llmazPlayground = `
apiVersion: inference.llmaz.io/v1alpha1
kind: Playground
metadata: {name: opt}
spec:
  replicas: 1
  modelClaim: {modelName: rbac-opt-a}
  backendRuntimeConfig: {backendName: rbac-vllm}
  elasticConfig:
    minReplicas: 1
    maxReplicas: 2
    scaleTrigger:
      hpa:
        metrics:
        - type: Resource
          resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}
`
)

// The llmaz reconcilers, as their shipped ServiceAccount: a Playground becomes a Service, a
// ModelServer, a ModelRoute and an HPA, the Service a ModelServing, and the Playground's,
// Service's and BackendRuntime's status are written; claiming another model updates them all
// and dropping elasticConfig deletes the HPA; the Playground's deletion leaves the rest to
// the garbage collector.
func TestShippedRBACDrivesLlmaz(t *testing.T) {
	const llmaz = "inference.llmaz.io/"
	d := newDrive(t, "rbac-llmaz", "rbac-vllm")
	start := d.mark()
	d.apply(llmazRuntime, llmazModelA, llmazModelB, llmazPlayground)
	d.waitWrites("create", start,
		"create "+llmaz+"services", "create "+networkingGroup+"modelservers", "create "+networkingGroup+"modelroutes",
		"create autoscaling/horizontalpodautoscalers", "create "+workloadGroup+"modelservings",
		"update "+llmaz+"playgrounds/status", "update "+llmaz+"services/status",
		"patch "+llmaz+"backendruntimes/status rbac-vllm", events)

	updated := d.mark()
	pg := &inferenceapi.Playground{}
	pg.Name = "opt"
	d.update(pg, func() {
		pg.Spec.ModelClaim.ModelName = coreapi.ModelName("rbac-opt-b")
		pg.Spec.ElasticConfig = nil
	})
	d.waitWrites("update (another model, no elasticConfig)", updated,
		"update "+llmaz+"services", "update "+networkingGroup+"modelservers", "update "+networkingGroup+"modelroutes",
		"update "+workloadGroup+"modelservings", "delete autoscaling/horizontalpodautoscalers",
		"update "+llmaz+"playgrounds/status", "update "+llmaz+"services/status", events)

	d.delete(&inferenceapi.Playground{}, "opt")
	d.gone(&workloadv1alpha1.ModelServing{}, "opt") // the garbage collector's, through the Service
	d.refusedNone()
}
