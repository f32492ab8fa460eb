package api

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Minimal valid objects; each bad case below patches one of them with a single mistake.
const (
	validModelServing = `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata: {name: bad}
spec:
  template:
    roles:
    - name: prefill
      replicas: 1
      entryTemplate: {spec: {containers: [{name: vllm, image: vllm}]}}
    - name: decode
      replicas: 2
      entryTemplate: {spec: {containers: [{name: vllm, image: vllm}]}}
`
	validModelBooster = `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelBooster
metadata: {name: bad}
spec:
  backends:
  - name: main
    type: vLLM
    modelURI: hf://Qwen/Qwen3-8B
    workers: [{image: vllm}]
`
	// validKthena10ModelBooster is the same model as Kthena 1.0 writes it: one backend with a
	// fixed replica count.
	validKthena10ModelBooster = `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelBooster
metadata: {name: bad}
spec:
  backend:
    name: main
    type: vLLM
    modelURI: hf://Qwen/Qwen3-8B
    replicas: 1
    workers: [{image: vllm}]
`
	validPolicy = `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: bad}
spec:
  metrics: [{metricName: waiting, targetValue: "10"}]
`
	validBinding = `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicyBinding
metadata: {name: bad}
spec:
  policyRef: {name: p}
  scalingConfiguration:
    target: {targetRef: {kind: ModelServing, name: m}}
    maxReplicas: 3
`
	validRoute = `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: bad}
spec:
  modelName: qwen
  rules:
  - modelMatch: {uri: {prefix: /v1}}
    targetModels: [{modelServerName: qwen}]
`
	validServer = `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: bad}
spec:
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {app: qwen}}
  workloadPort: {port: 8000}
`
)

// The llm-d and llmaz kinds' minimal valid objects.
const (
	validVariant = `
apiVersion: llmd.ai/v1alpha1
kind: VariantAutoscaling
metadata: {name: bad}
spec:
  modelID: meta/llama0-70b
  sloClassRef: {name: service-classes-config, key: premium.yaml}
  modelProfile:
    accelerators:
    - {acc: A100, accCount: 1, alpha: "20.58", beta: "0.41", maxBatchSize: 4}
`
	validPlayground = `
apiVersion: inference.llmaz.io/v1alpha1
kind: Playground
metadata: {name: bad}
spec:
  modelClaim: {modelName: qwen3}
  elasticConfig: {minReplicas: 1, maxReplicas: 3}
`
	validService = `
apiVersion: inference.llmaz.io/v1alpha1
kind: Service
metadata: {name: bad}
spec:
  modelClaims: {models: [{name: qwen3}]}
  workloadTemplate:
    size: 2
    leaderTemplate: {spec: {containers: [{name: model-runner, image: sglang}]}}
    workerTemplate: {spec: {containers: [{name: model-runner, image: sglang}]}}
`
	validBackendRuntime = `
apiVersion: inference.llmaz.io/v1alpha1
kind: BackendRuntime
metadata: {name: bad-runtime}
spec:
  image: vllm/vllm-openai
  version: v0.8.5
  recommendedConfigs:
  - {name: default, args: [--model, "{{ .ModelPath }}"]}
`
	validOpenModel = `
apiVersion: llmaz.io/v1alpha1
kind: OpenModel
metadata: {name: bad-model}
spec:
  familyName: qwen3
  source: {modelHub: {modelID: Qwen/Qwen3-0.6B}}
`
)

type badInput struct {
	name  string
	base  string
	patch func(obj map[string]any) // the one mistake
	field string                   // the field path the apiserver must name
	words string                   // a fragment of the message that explains the mistake
}

func TestValidationRejectsBadInput(t *testing.T) {
	roles := func(o map[string]any) []any { return dig(o, "spec", "template")["roles"].([]any) }
	role := func(o map[string]any, i int) map[string]any { return roles(o)[i].(map[string]any) }
	backend := func(o map[string]any) map[string]any { return dig(o, "spec")["backends"].([]any)[0].(map[string]any) }
	rule := func(o map[string]any) map[string]any { return dig(o, "spec")["rules"].([]any)[0].(map[string]any) }
	accelerator := func(o map[string]any) map[string]any {
		return dig(o, "spec", "modelProfile")["accelerators"].([]any)[0].(map[string]any)
	}

	cases := []badInput{
		// ModelServing
		{"unknown recovery policy", validModelServing, func(o map[string]any) { dig(o, "spec")["recoveryPolicy"] = "Restart" },
			"spec.recoveryPolicy", `supported values: "ServingGroupRecreate", "RoleRecreate", "None"`},
		{"unknown rollout type", validModelServing, func(o map[string]any) { dig(o, "spec", "rolloutStrategy")["type"] = "Recreate" },
			"spec.rolloutStrategy.type", "ServingGroupRollingUpdate"},
		{"negative replicas", validModelServing, func(o map[string]any) { dig(o, "spec")["replicas"] = -1 },
			"spec.replicas", "greater than or equal to 0"},
		{"no roles", validModelServing, func(o map[string]any) { dig(o, "spec", "template")["roles"] = []any{} },
			"spec.template.roles", "should have at least 1 items"},
		{"five roles", validModelServing, func(o map[string]any) {
			r := roles(o)
			dig(o, "spec", "template")["roles"] = append(r, copyRole(r[0], "a"), copyRole(r[0], "b"), copyRole(r[0], "c"))
		}, "spec.template.roles", "must have at most 4 items"},
		{"role name too long", validModelServing, func(o map[string]any) { role(o, 0)["name"] = "prefill-stage" },
			"spec.template.roles[0].name", "may not be more than 12"},
		{"role name with underscore", validModelServing, func(o map[string]any) { role(o, 0)["name"] = "pre_fill" },
			"spec.template.roles[0].name", "should match"},
		{"duplicate role names", validModelServing, func(o map[string]any) { role(o, 1)["name"] = "prefill" },
			"spec.template.roles", "role names must be unique"},
		{"missing entry template", validModelServing, func(o map[string]any) { delete(role(o, 0), "entryTemplate") },
			"spec.template.roles[0].entryTemplate", "Required value"},
		{"workers without a worker template", validModelServing, func(o map[string]any) { role(o, 0)["workerReplicas"] = 2 },
			"spec.template.roles[0].workerTemplate", "workerTemplate is required"},
		{"maxUnavailable and maxSurge both 0", validModelServing, func(o map[string]any) {
			dig(o, "spec", "rolloutStrategy", "rollingUpdateConfiguration")["maxUnavailable"] = 0
		}, "spec.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable", "cannot both be 0"},
		{"both 0 written as percentages", validModelServing, func(o map[string]any) {
			ru := dig(o, "spec", "rolloutStrategy", "rollingUpdateConfiguration")
			ru["maxUnavailable"], ru["maxSurge"] = "0%", "0%"
		}, "spec.rolloutStrategy.rollingUpdateConfiguration.maxUnavailable", "cannot both be 0"},
		{"maxSurge not a percentage", validModelServing, func(o map[string]any) {
			dig(o, "spec", "rolloutStrategy", "rollingUpdateConfiguration")["maxSurge"] = "half"
		}, "spec.rolloutStrategy.rollingUpdateConfiguration.maxSurge", "percentage"},
		{"minRoleReplicas names no role", validModelServing, func(o map[string]any) {
			dig(o, "spec", "template", "gangPolicy")["minRoleReplicas"] = map[string]any{"decoder": 1}
		}, "spec.template.gangPolicy.minRoleReplicas", "must name a role"},
		{"minRoleReplicas above role replicas", validModelServing, func(o map[string]any) {
			dig(o, "spec", "template", "gangPolicy")["minRoleReplicas"] = map[string]any{"decode": 3}
		}, "spec.template.gangPolicy.minRoleReplicas", "cannot exceed the replicas of its role"},
		{"both highest tier fields", validModelServing, func(o map[string]any) {
			dig(o, "spec", "template")["networkTopology"] = map[string]any{"highestTierAllowed": 1, "highestTierName": "spine"}
		}, "spec.template.networkTopology", "mutually exclusive"},
		{"unknown topology mode", validModelServing, func(o map[string]any) {
			dig(o, "spec", "template")["networkTopology"] = map[string]any{"mode": "strict"}
		}, "spec.template.networkTopology.mode", `supported values: "hard", "soft"`},
		{"unknown whenUnsatisfiable", validModelServing, func(o map[string]any) {
			dig(o, "spec")["topologySpreadConstraints"] = []any{map[string]any{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "Maybe"}}
		}, "spec.topologySpreadConstraints[0].whenUnsatisfiable", "DoNotSchedule"},

		// ModelBooster
		{"duplicate backend names", validModelBooster, func(o map[string]any) {
			b := dig(o, "spec")["backends"].([]any)
			dig(o, "spec")["backends"] = append(b, b[0])
		}, "spec.backends[1]", "Duplicate value"},
		{"no backends", validModelBooster, func(o map[string]any) { dig(o, "spec")["backends"] = []any{} },
			"spec.backends", "should have at least 1 items"},
		{"unknown backend type", validModelBooster, func(o map[string]any) { backend(o)["type"] = "TensorRT" },
			"spec.backends[0].type", "SGLang"},
		{"model URI over http", validModelBooster, func(o map[string]any) { backend(o)["modelURI"] = "https://hf.co/Qwen" },
			"spec.backends[0].modelURI", "should match"},
		{"cache URI on s3", validModelBooster, func(o map[string]any) { backend(o)["cacheURI"] = "s3://bucket" },
			"spec.backends[0].cacheURI", "should match"},
		{"route weight above 100", validModelBooster, func(o map[string]any) { backend(o)["routeWeight"] = 101 },
			"spec.backends[0].routeWeight", "less than or equal to 100"},
		{"backend without workers", validModelBooster, func(o map[string]any) { backend(o)["workers"] = []any{} },
			"spec.backends[0].workers", "should have at least 1 items"},
		{"unknown worker type", validModelBooster, func(o map[string]any) {
			backend(o)["workers"].([]any)[0].(map[string]any)["type"] = "gpu"
		}, "spec.backends[0].workers[0].type", "coordinator"},
		{"model name with capitals", validModelBooster, func(o map[string]any) { dig(o, "spec")["name"] = "Qwen3" },
			"spec.name", "should match"},
		{"LoRA artifact over ftp", validModelBooster, func(o map[string]any) {
			backend(o)["loraAdapters"] = []any{map[string]any{"name": "sql", "artifactURL": "ftp://x"}}
		}, "spec.backends[0].loraAdapters[0].artifactURL", "should match"},
		{"backend minReplicas above maxReplicas", validModelBooster, func(o map[string]any) {
			backend(o)["minReplicas"], backend(o)["maxReplicas"] = 5, 2
		}, "spec.backends[0].minReplicas", "cannot exceed maxReplicas"},
		// ModelBooster: the spec's backends beside Kthena 1.0's backend, exactly one.
		{"both backends and backend", validModelBooster, func(o map[string]any) {
			dig(o, "spec")["backend"] = map[string]any{"name": "one", "type": "vLLM", "modelURI": "hf://Qwen/Qwen3-8B", "replicas": 1,
				"workers": []any{map[string]any{"image": "vllm"}}}
		}, "spec.backend", "spec.backend and spec.backends are mutually exclusive"},
		{"neither backends nor backend", validModelBooster, func(o map[string]any) { delete(dig(o, "spec"), "backends") },
			"spec.backends", "set spec.backends (a list of backends) or spec.backend"},
		{"neither backend nor backends", validKthena10ModelBooster, func(o map[string]any) { delete(dig(o, "spec"), "backend") },
			"spec.backends", "set spec.backends (a list of backends) or spec.backend"},
		{"single backend without replicas", validKthena10ModelBooster, func(o map[string]any) { delete(dig(o, "spec", "backend"), "replicas") },
			"spec.backend.replicas", "spec.backend needs replicas"},
		{"single backend with the model's autoscaling", validKthena10ModelBooster, func(o map[string]any) {
			dig(o, "spec")["autoscalingPolicy"] = map[string]any{"metrics": []any{map[string]any{"metricName": "waiting", "targetValue": "10"}}}
		}, "spec.autoscalingPolicy", "spec.backend has fixed replicas"},
		{"single backend autoscaled by a range", validKthena10ModelBooster, func(o map[string]any) {
			dig(o, "spec", "backend")["maxReplicas"] = 4
		}, "spec.backend.replicas", "replicas fixes the backend's size"},
		{"listed backend with replicas and a range", validModelBooster, func(o map[string]any) {
			backend(o)["replicas"], backend(o)["minReplicas"] = 2, 1
		}, "spec.backends[0].replicas", "set one or the other"},
		{"single backend with negative replicas", validKthena10ModelBooster, func(o map[string]any) { dig(o, "spec", "backend")["replicas"] = -1 },
			"spec.backend.replicas", "greater than or equal to 0"},
		// A Kthena 1.0 AutoscalingPolicy (with its own target) embedded in a ModelBooster:
		// the booster binds the policy to its own ModelServings, so the target is refused
		// here, at the field, not later at the binding the booster writes.
		{"model's policy with a homogeneousTarget", validModelBooster, func(o map[string]any) {
			dig(o, "spec")["autoscalingPolicy"] = map[string]any{"metrics": []any{map[string]any{"name": "waiting", "targetValue": "10"}},
				"homogeneousTarget": map[string]any{"minReplicas": 1, "maxReplicas": 3, "target": map[string]any{"targetRef": map[string]any{"kind": "ModelServing", "name": "m"}}}}
		}, "spec.autoscalingPolicy.homogeneousTarget", "embedded in a ModelBooster scales the ModelServings the booster generates"},
		{"backend's policy with a disaggregatedTarget", validModelBooster, func(o map[string]any) {
			backend(o)["autoscalingPolicy"] = map[string]any{"disaggregatedTarget": map[string]any{
				"targetRef": map[string]any{"kind": "ModelServing", "name": "m"},
				"roles":     map[string]any{"decode": map[string]any{"minReplicas": 1, "maxReplicas": 2, "metrics": []any{map[string]any{"name": "waiting", "targetValue": "10"}}}}}}
		}, "spec.backends[0].autoscalingPolicy.disaggregatedTarget", "names no target of its own"},
		{"single backend model over ftp", validKthena10ModelBooster, func(o map[string]any) { dig(o, "spec", "backend")["modelURI"] = "ftp://m" },
			"spec.backend.modelURI", "should match"},

		// AutoscalingPolicy and its binding
		{"tolerance above 100", validPolicy, func(o map[string]any) { dig(o, "spec")["tolerancePercent"] = 150 },
			"spec.tolerancePercent", "less than or equal to 100"},
		{"no metrics", validPolicy, func(o map[string]any) { dig(o, "spec")["metrics"] = []any{} },
			"spec.metrics", "should have at least 1 items"},
		{"panic threshold below 110", validPolicy, func(o map[string]any) {
			dig(o, "spec", "behavior", "scaleUp", "panicPolicy")["panicThresholdPercent"] = 100
		}, "spec.behavior.scaleUp.panicPolicy.panicThresholdPercent", "greater than or equal to 110"},
		{"unknown select policy", validPolicy, func(o map[string]any) { dig(o, "spec", "behavior", "scaleDown")["selectPolicy"] = "Xor" },
			"spec.behavior.scaleDown.selectPolicy", `supported values: "Or", "And"`},
		{"binding with neither configuration", validBinding, func(o map[string]any) { delete(dig(o, "spec"), "scalingConfiguration") },
			"spec", "set exactly one of optimizerConfiguration and scalingConfiguration"},
		{"binding maxReplicas 0", validBinding, func(o map[string]any) { dig(o, "spec", "scalingConfiguration")["maxReplicas"] = 0 },
			"spec.scalingConfiguration.maxReplicas", "greater than or equal to 1"},
		{"optimizer without params", validBinding, func(o map[string]any) {
			delete(dig(o, "spec"), "scalingConfiguration")
			dig(o, "spec", "optimizerConfiguration")["params"] = []any{}
		}, "spec.optimizerConfiguration.params", "should have at least 1 items"},

		// ModelRoute
		{"route without model name or adapters", validRoute, func(o map[string]any) { delete(dig(o, "spec"), "modelName") },
			"spec.modelName", "modelName and loraAdapters cannot both be empty"},
		{"string match with two operators", validRoute, func(o map[string]any) {
			dig(rule(o), "modelMatch", "uri")["exact"] = "/v1/chat/completions"
		}, "spec.rules[0].modelMatch.uri", "exactly one of exact, prefix or regex"},
		{"empty header match", validRoute, func(o map[string]any) {
			dig(rule(o), "modelMatch")["headers"] = map[string]any{"x-canary": map[string]any{}}
		}, "spec.rules[0].modelMatch.headers[x-canary]", "exactly one of exact, prefix or regex"},
		{"target weight above 100", validRoute, func(o map[string]any) {
			rule(o)["targetModels"].([]any)[0].(map[string]any)["weight"] = 120
		}, "spec.rules[0].targetModels[0].weight", "less than or equal to 100"},
		{"eleven LoRA adapters", validRoute, func(o map[string]any) {
			dig(o, "spec")["loraAdapters"] = []any{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"}
		}, "spec.loraAdapters", "must have at most 10 items"},
		{"unknown rate-limit unit", validRoute, func(o map[string]any) { dig(o, "spec", "rateLimit")["unit"] = "week" },
			"spec.rateLimit.unit", `"second", "minute", "hour", "day", "month"`},
		{"zero input tokens per unit", validRoute, func(o map[string]any) { dig(o, "spec", "rateLimit")["inputTokensPerUnit"] = 0 },
			"spec.rateLimit.inputTokensPerUnit", "greater than or equal to 1"},
		{"redis without address", validRoute, func(o map[string]any) { dig(o, "spec", "rateLimit", "global")["redis"] = map[string]any{} },
			"spec.rateLimit.global.redis.address", "Required value"},

		// ModelServer
		{"unknown inference engine", validServer, func(o map[string]any) { dig(o, "spec")["inferenceEngine"] = "TGI" },
			"spec.inferenceEngine", `supported values: "vLLM", "SGLang"`},
		{"no workload selector", validServer, func(o map[string]any) { delete(dig(o, "spec"), "workloadSelector") },
			"spec.workloadSelector", "Required value"},
		{"port out of range", validServer, func(o map[string]any) { dig(o, "spec", "workloadPort")["port"] = 70000 },
			"spec.workloadPort.port", "less than or equal to 65535"},
		{"grpc protocol", validServer, func(o map[string]any) { dig(o, "spec", "workloadPort")["protocol"] = "grpc" },
			"spec.workloadPort.protocol", `supported values: "http", "https"`},
		{"unknown KV connector", validServer, func(o map[string]any) { dig(o, "spec", "kvConnector")["type"] = "rdma" },
			"spec.kvConnector.type", "mooncake"},
		{"model name too long", validServer, func(o map[string]any) { dig(o, "spec")["model"] = strings.Repeat("m", 257) },
			"spec.model", "may not be more than 256"},
		// VariantAutoscaling (llm-d)
		{"variant without a model ID", validVariant, func(o map[string]any) { dig(o, "spec")["modelID"] = "" },
			"spec.modelID", "at least 1 chars long"},
		{"variant without an SLO class", validVariant, func(o map[string]any) { delete(dig(o, "spec"), "sloClassRef") },
			"spec.sloClassRef", "Required value"},
		{"variant without accelerators", validVariant, func(o map[string]any) { dig(o, "spec", "modelProfile")["accelerators"] = []any{} },
			"spec.modelProfile.accelerators", "should have at least 1 items"},
		{"alpha not a decimal", validVariant, func(o map[string]any) { accelerator(o)["alpha"] = "2e1" },
			"spec.modelProfile.accelerators[0].alpha", "should match"},
		{"negative beta", validVariant, func(o map[string]any) { accelerator(o)["beta"] = "-0.5" },
			"spec.modelProfile.accelerators[0].beta", "should match"},
		{"accCount 0", validVariant, func(o map[string]any) { accelerator(o)["accCount"] = 0 },
			"spec.modelProfile.accelerators[0].accCount", "greater than or equal to 1"},
		{"maxBatchSize 0", validVariant, func(o map[string]any) { accelerator(o)["maxBatchSize"] = 0 },
			"spec.modelProfile.accelerators[0].maxBatchSize", "greater than or equal to 1"},
		// Playground, Service, BackendRuntime, OpenModel (llmaz)
		{"playground with both model claims", validPlayground, func(o map[string]any) {
			dig(o, "spec")["modelClaims"] = map[string]any{"models": []any{map[string]any{"name": "qwen3"}}}
		}, "spec", "set exactly one of modelClaim and modelClaims"},
		{"playground with no model claim", validPlayground, func(o map[string]any) { delete(dig(o, "spec"), "modelClaim") },
			"spec", "set exactly one of modelClaim and modelClaims"},
		{"two main models", validPlayground, func(o map[string]any) {
			delete(dig(o, "spec"), "modelClaim")
			dig(o, "spec")["modelClaims"] = map[string]any{"models": []any{map[string]any{"name": "a"}, map[string]any{"name": "b", "role": "main"}}}
		}, "spec.modelClaims", "only one main model is allowed"},
		{"draft without a main model", validPlayground, func(o map[string]any) {
			delete(dig(o, "spec"), "modelClaim")
			dig(o, "spec")["modelClaims"] = map[string]any{"models": []any{map[string]any{"name": "a", "role": "draft"}, map[string]any{"name": "b", "role": "lora"}}}
		}, "spec.modelClaims", "one main and one draft"},
		{"unknown model role", validPlayground, func(o map[string]any) {
			delete(dig(o, "spec"), "modelClaim")
			dig(o, "spec")["modelClaims"] = map[string]any{"models": []any{map[string]any{"name": "a", "role": "target"}}}
		}, "spec.modelClaims.models[0].role", `supported values: "main", "draft", "lora"`},
		{"minReplicas 0", validPlayground, func(o map[string]any) { dig(o, "spec", "elasticConfig")["minReplicas"] = 0 },
			"spec.elasticConfig.minReplicas", "greater than or equal to 1"},
		{"minReplicas not below maxReplicas", validPlayground, func(o map[string]any) { dig(o, "spec", "elasticConfig")["minReplicas"] = 3 },
			"spec.elasticConfig", "minReplicas must be less than maxReplicas"},
		{"elasticConfig without maxReplicas", validPlayground, func(o map[string]any) { delete(dig(o, "spec", "elasticConfig"), "maxReplicas") },
			"spec.elasticConfig.maxReplicas", "Required value"},
		{"scale trigger without hpa", validPlayground, func(o map[string]any) { dig(o, "spec", "elasticConfig")["scaleTrigger"] = map[string]any{} },
			"spec.elasticConfig.scaleTrigger", "hpa is required"},
		{"service with an unknown rollout type", validService, func(o map[string]any) { dig(o, "spec", "rolloutStrategy")["type"] = "Recreate" },
			"spec.rolloutStrategy.type", `supported values: "RollingUpdate"`},
		{"service with an unknown restart policy", validService, func(o map[string]any) { dig(o, "spec", "workloadTemplate")["restartPolicy"] = "Always" },
			"spec.workloadTemplate.restartPolicy", "RecreateGroupOnPodRestart"},
		{"service without a worker template", validService, func(o map[string]any) { delete(dig(o, "spec", "workloadTemplate"), "workerTemplate") },
			"spec.workloadTemplate.workerTemplate", "Required value"},
		{"runtime without an image", validBackendRuntime, func(o map[string]any) { delete(dig(o, "spec"), "image") },
			"spec.image", "Required value"},
		{"duplicate recommended configs", validBackendRuntime, func(o map[string]any) {
			c := dig(o, "spec")["recommendedConfigs"].([]any)
			dig(o, "spec")["recommendedConfigs"] = append(c, c[0])
		}, "spec.recommendedConfigs[1]", "Duplicate value"},
		{"model without a source", validOpenModel, func(o map[string]any) { dig(o, "spec")["source"] = map[string]any{} },
			"spec.source", "a model needs a source"},
		{"model from an unknown hub", validOpenModel, func(o map[string]any) { dig(o, "spec", "source", "modelHub")["name"] = "GitHub" },
			"spec.source.modelHub.name", `supported values: "Huggingface", "ModelScope"`},
		{"model file on ModelScope", validOpenModel, func(o map[string]any) {
			hub := dig(o, "spec", "source", "modelHub")
			hub["name"], hub["filename"] = "ModelScope", "model.gguf"
		}, "spec.source.modelHub", "filename can only be set when the modelHub is Huggingface"},
		{"model URI over http", validOpenModel, func(o map[string]any) {
			delete(dig(o, "spec"), "source")
			dig(o, "spec", "source")["uri"] = "http://example.com/model"
		}, "spec.source.uri", "protocol oss, s3, gcs, ollama or host"},
		{"nine flavors", validOpenModel, func(o map[string]any) {
			var fl []any
			for i := range 9 {
				fl = append(fl, map[string]any{"name": fmt.Sprintf("f%d", i)})
			}
			dig(o, "spec", "inferenceConfig")["flavors"] = fl
		}, "spec.inferenceConfig.flavors", "must have at most 8 items"},
	}
	require.GreaterOrEqual(t, len(cases), 40, "the issue asks for at least 40 bad objects across every kind")

	c := newClient(t)
	ns := newNamespace(t, c)
	ctx := context.Background()
	// What the README says of this test must stay true: its count of invalid objects and kinds.
	readme, err := os.ReadFile("../../../README.md")
	require.NoError(t, err)
	kinds := map[string]bool{}
	for _, tc := range cases {
		kinds[decodeYAML(t, tc.base)[0].GetKind()] = true
	}
	cited := fmt.Sprintf("%d invalid objects across all %d kinds", len(cases), len(kinds))
	require.Contains(t, strings.Join(strings.Fields(string(readme)), " "), cited, "README.md's Bad input line must cite this test's counts")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := decodeYAML(t, tc.base)
			obj := objs[0]
			obj.SetNamespace(ns)
			// The base must be valid, or the case would prove nothing: check with a dry run.
			require.NoError(t, c.Create(ctx, obj.DeepCopy(), dryRunAll), "the unmodified base must be accepted")

			tc.patch(obj.Object)
			err := c.Create(ctx, obj)
			require.Error(t, err, "the apiserver accepted a bad %s", obj.GetKind())
			assert.True(t, apierrors.IsInvalid(err), "want an Invalid error, got %v", err)
			assert.Contains(t, err.Error(), tc.field, "the error must name the field")
			assert.Contains(t, err.Error(), tc.words, "the error must explain the mistake")
			t.Logf("rejected as a user sees it: %v", err)

			// Rejected input changes nothing: the object does not exist afterwards.
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(obj.GroupVersionKind())
			assert.True(t, apierrors.IsNotFound(c.Get(ctx, keyOf(obj), got)), "a rejected object must not be stored")
		})
	}
}

// dig walks (and creates) nested maps so a patch can set a field at any depth.
func dig(obj map[string]any, path ...string) map[string]any {
	cur := obj
	for _, p := range path {
		next, ok := cur[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[p] = next
		}
		cur = next
	}
	return cur
}

func copyRole(r any, name string) map[string]any {
	out := map[string]any{}
	for k, v := range r.(map[string]any) {
		out[k] = v
	}
	out["name"] = name
	return out
}
