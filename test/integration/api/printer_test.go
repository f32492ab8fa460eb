package api

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// tableAccept is the Accept header kubectl get sends: the apiserver answers with a
// meta.k8s.io Table built from the CRD's additionalPrinterColumns, which kubectl prints as is.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io"

// column is one printer column as kubectl shows it: its header, whether it only shows
// with -o wide (priority 1), and, when want is set, the cell it must show for the object
// the case creates ("" leaves the cell unchecked, e.g. status nobody writes in this package).
type column struct {
	name string
	wide bool
	want string
}

// printerCase is one kind of the API: the short name README promises, where kubectl must
// resolve it, an object to create, and the columns `kubectl get <short>` shows for it.
type printerCase struct {
	short    string
	gvr      schema.GroupVersionResource
	cluster  bool // cluster-scoped: the object is named per test and deleted afterwards
	manifest string
	// status, when set, is written through the status subresource after the object is
	// created (what berth-controller would write), so the status-derived columns can be
	// checked against it: a wrong jsonPath shows <none>.
	status  string
	columns []column
}

// The kinds README lists with short names (ms, mb, asp, aspb, mr, msvr; va; pl, isvc, br,
// om). Status columns are filled by berth-controller, which this package does not run: the
// test writes a status as the controller would and checks each status column shows it (the
// ModelServing's live counts are also checked in test/integration/modelserving).
var printerCases = []printerCase{
	{short: "ms", gvr: workloadGVR("modelservings"), manifest: `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata: {name: printed}
spec:
  replicas: 3
  schedulerName: berth-scheduler
  template:
    roles:
    - name: server
      entryTemplate:
        spec:
          containers: [{name: vllm, image: vllm/vllm-openai:v0.11.0}]
`, status: `{replicas: 3, updatedReplicas: 2, availableReplicas: 1}`,
		columns: []column{{name: "Desired", want: "3"}, {name: "Current", want: "3"}, {name: "Updated", want: "2"}, {name: "Available", want: "1"},
			{name: "Scheduler", wide: true, want: "berth-scheduler"}}},
	{short: "mb", gvr: workloadGVR("modelboosters"), manifest: `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelBooster
metadata: {name: printed}
spec:
  name: llama-3-1-8b
  owner: inference-team
  autoscalingPolicy:
    metrics: [{metricName: vllm:num_requests_waiting, targetValue: "10"}]
  backends:
  - name: main
    type: vLLM
    workers: [{image: vllm/vllm-openai:v0.11.0}]
`, status: `{conditions: [{type: Ready, status: "False", reason: BackendsNotReady, message: written by the test, lastTransitionTime: "2026-01-01T00:00:00Z"}]}`,
		columns: []column{{name: "Model", want: "llama-3-1-8b"}, {name: "Owner", wide: true, want: "inference-team"}, {name: "Ready", want: "False"},
			{name: "Reason", wide: true, want: "BackendsNotReady"}}},
	{short: "asp", gvr: workloadGVR("autoscalingpolicies"), manifest: `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: printed}
spec:
  tolerancePercent: 15
  metrics: [{metricName: vllm:num_requests_waiting, targetValue: "8"}]
`, status: `{conditions: [{type: Valid, status: "True", reason: Valid, message: written by the test, lastTransitionTime: "2026-01-01T00:00:00Z"}]}`,
		columns: []column{{name: "Tolerance", want: "15"}, {name: "Valid", want: "True"}}},
	{short: "aspb", gvr: workloadGVR("autoscalingpolicybindings"), manifest: `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicyBinding
metadata: {name: printed}
spec:
  policyRef: {name: waiting-requests}
  scalingConfiguration:
    target:
      targetRef: {apiVersion: workload.serving.volcano.sh/v1alpha1, kind: ModelServing, name: qwen3-8b-pd}
    minReplicas: 2
    maxReplicas: 4
`, status: `{currentReplicas: 2, recommendedReplicas: 4, desiredReplicas: 3, panicMode: true, conditions: [{type: Ready, status: "True", reason: Scaled, message: written by the test, lastTransitionTime: "2026-01-01T00:00:00Z"}]}`,
		columns: []column{{name: "Policy", want: "waiting-requests"}, {name: "Target", want: "qwen3-8b-pd"}, {name: "Current", want: "2"},
			{name: "Recommended", want: "4"}, {name: "Desired", want: "3"}, {name: "Panic", want: "true"}, {name: "Ready", want: "True"}}},
	{short: "mr", gvr: networkingGVR("modelroutes"), manifest: `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: printed}
spec:
  modelName: Qwen/Qwen3-8B
  loraAdapters: [qwen3-8b-sql, qwen3-8b-support]
  rules:
  - targetModels: [{modelServerName: qwen3-8b-pd}]
`, columns: []column{{name: "Model", want: "Qwen/Qwen3-8B"}, {name: "LoRA", wide: true, want: `["qwen3-8b-sql","qwen3-8b-support"]`}}},
	{short: "msvr", gvr: networkingGVR("modelservers"), manifest: `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: printed}
spec:
  model: Qwen/Qwen3-8B
  inferenceEngine: SGLang
  workloadSelector: {matchLabels: {modelserving.volcano.sh/name: qwen3-8b-pd}}
  workloadPort: {port: 8100}
`, columns: []column{{name: "Model", want: "Qwen/Qwen3-8B"}, {name: "Engine", want: "SGLang"}, {name: "Port", want: "8100"}}},
	{short: "emp", gvr: networkingGVR("externalmodelproviders"), manifest: `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ExternalModelProvider
metadata: {name: printed}
spec:
  providerType: Anthropic
  model: claude-test
  baseURL: https://llm.example.com
`, columns: []column{{name: "Type", want: "Anthropic"}, {name: "Model", want: "claude-test"}, {name: "Base URL", want: "https://llm.example.com"}}},
	{short: "va", gvr: schema.GroupVersionResource{Group: "llmd.ai", Version: "v1alpha1", Resource: "variantautoscalings"}, manifest: `
apiVersion: llmd.ai/v1alpha1
kind: VariantAutoscaling
metadata: {name: printed}
spec:
  modelID: meta-llama/Llama-3.1-8B-Instruct
  sloClassRef: {name: service-classes-config, key: premium.yaml}
  modelProfile:
    accelerators:
    - {acc: H100, accCount: 1, alpha: "8.0", beta: "0.15", maxBatchSize: 64}
`, status: `{currentAlloc: {accelerator: H100, numReplicas: 2, maxBatch: 64, variantCost: "80", itlAverage: "10", waitAverage: "5",
  load: {arrivalRate: "30", avgLength: "512"}}, desiredOptimizedAlloc: {accelerator: H100, numReplicas: 3},
  actuation: {applied: true}, conditions: [{type: Ready, status: "True", reason: Optimized, message: written by the test, lastTransitionTime: "2026-01-01T00:00:00Z"}]}`,
		columns: []column{{name: "Model", want: "meta-llama/Llama-3.1-8B-Instruct"}, {name: "Accelerator", want: "H100"}, {name: "CurrentReplicas", want: "2"},
			{name: "Optimized", want: "3"}, {name: "Applied", want: "true"}, {name: "Reason", wide: true, want: "Optimized"}}},
	{short: "pl", gvr: llmazInferenceGVR("playgrounds"), manifest: `
apiVersion: inference.llmaz.io/v1alpha1
kind: Playground
metadata: {name: printed}
spec:
  replicas: 1
  modelClaim: {modelName: qwen3-0--6b}
  backendRuntimeConfig: {backendName: sglang}
`, status: `{replicas: 1, conditions: [{type: Available, status: "True", reason: Available, message: written by the test, lastTransitionTime: "2026-01-01T00:00:00Z"}, {type: Progressing, status: "False", reason: Ready, message: written by the test, lastTransitionTime: "2026-01-01T00:00:00Z"}]}`,
		columns: []column{{name: "Model", want: "qwen3-0--6b"}, {name: "Backend", want: "sglang"}, {name: "Replicas", want: "1"}, {name: "Available", want: "True"},
			{name: "Reason", wide: true, want: "Ready"}}},
	{short: "isvc", gvr: llmazInferenceGVR("services"), manifest: `
apiVersion: inference.llmaz.io/v1alpha1
kind: Service
metadata: {name: printed}
spec:
  modelClaims: {models: [{name: llama3-405b-instruct}]}
  replicas: 1
  workloadTemplate:
    size: 2
    workerTemplate:
      spec:
        containers: [{name: model-runner, image: lmsysorg/sglang:latest}]
`, status: `{replicas: 1, conditions: [{type: Available, status: "False", reason: Pending, message: written by the test, lastTransitionTime: "2026-01-01T00:00:00Z"}, {type: Progressing, status: "True", reason: Pending, message: written by the test, lastTransitionTime: "2026-01-01T00:00:00Z"}]}`,
		columns: []column{{name: "Replicas", want: "1"}, {name: "Available", want: "False"}, {name: "Reason", wide: true, want: "Pending"}}},
	{short: "br", gvr: llmazInferenceGVR("backendruntimes"), cluster: true, manifest: `
apiVersion: inference.llmaz.io/v1alpha1
kind: BackendRuntime
metadata: {name: printed}
spec:
  image: vllm/vllm-openai
  version: v0.8.5
`, columns: []column{{name: "Image", want: "vllm/vllm-openai"}, {name: "Version", want: "v0.8.5"}}},
	{short: "om", gvr: schema.GroupVersionResource{Group: "llmaz.io", Version: "v1alpha1", Resource: "openmodels"}, cluster: true, manifest: `
apiVersion: llmaz.io/v1alpha1
kind: OpenModel
metadata: {name: printed}
spec:
  familyName: qwen3
  source:
    modelHub: {modelID: Qwen/Qwen3-0.6B}
`, columns: []column{{name: "Family", want: "qwen3"}, {name: "ModelHub", want: "Huggingface"}, {name: "ModelID", want: "Qwen/Qwen3-0.6B"},
		{name: "URI"}}},
}

func workloadGVR(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "workload.serving.volcano.sh", Version: "v1alpha1", Resource: resource}
}

func networkingGVR(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "networking.serving.volcano.sh", Version: "v1alpha1", Resource: resource}
}

func llmazInferenceGVR(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "inference.llmaz.io", Version: "v1alpha1", Resource: resource}
}

// `kubectl get <short name>` for every kind README names: the short name resolves through
// discovery to the kind (as kubectl's shortcut expander resolves it), and the Table the
// apiserver returns for it has the promised columns, wide ones marked so, with the
// object's own values in its row.
func TestKubectlGetByShortNameShowsPrinterColumns(t *testing.T) {
	c := newClient(t)
	ns := newNamespace(t, c)
	ctx := context.Background()
	cfg := cp.RESTConfig()
	dc := discovery.NewDiscoveryClientForConfigOrDie(cfg)
	cached := memory.NewMemCacheClient(dc)
	// kubectl's own resolution: a RESTMapper from discovery, with short names expanded.
	mapper := restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(cached), cached, nil)
	rest := kubernetes.NewForConfigOrDie(cfg).CoreV1().RESTClient()

	for _, pc := range printerCases {
		t.Run(pc.short, func(t *testing.T) {
			resources, err := dc.ServerResourcesForGroupVersion(pc.gvr.GroupVersion().String())
			require.NoError(t, err)
			var found *metav1.APIResource
			for i := range resources.APIResources {
				if resources.APIResources[i].Name == pc.gvr.Resource {
					found = &resources.APIResources[i]
				}
			}
			require.NotNil(t, found, "discovery lists %s", pc.gvr)
			assert.Contains(t, found.ShortNames, pc.short, "discovery's short names for %s", pc.gvr.Resource)
			assert.Equal(t, !pc.cluster, found.Namespaced, "%s is namespaced", pc.gvr.Resource)

			gvr, err := mapper.ResourceFor(schema.GroupVersionResource{Resource: pc.short})
			require.NoError(t, err, "kubectl get %s resolves", pc.short)
			require.Equal(t, pc.gvr, gvr, "kubectl get %s resolves to its kind", pc.short)

			objs := decodeYAML(t, pc.manifest)
			require.Len(t, objs, 1)
			obj := objs[0]
			name := obj.GetName()
			if pc.cluster {
				name = ns + "-" + pc.short
				obj.SetName(name)
				t.Cleanup(func() { _ = c.Delete(context.Background(), obj) })
			} else {
				obj.SetNamespace(ns)
			}
			require.NoError(t, c.Create(ctx, obj), "create %s", obj.GetKind())
			if pc.status != "" {
				var status map[string]any
				require.NoError(t, yaml.Unmarshal([]byte(pc.status), &status))
				obj.Object["status"] = status
				require.NoError(t, c.Status().Update(ctx, obj), "write the status of %s", obj.GetKind())
			}

			// The list request `kubectl get <short>` sends, narrowed to the object.
			path := []string{"/apis", gvr.Group, gvr.Version}
			if !pc.cluster {
				path = append(path, "namespaces", ns)
			}
			raw, err := rest.Get().AbsPath(append(path, gvr.Resource)...).
				Param("fieldSelector", "metadata.name="+name).
				SetHeader("Accept", tableAccept).Do(ctx).Raw()
			require.NoError(t, err)
			var table metav1.Table
			require.NoError(t, json.Unmarshal(raw, &table))
			require.Equal(t, "Table", table.Kind, "the apiserver answers with a Table: %s", raw)

			// The promised columns, in their order, between NAME and AGE. A kind may gain
			// columns (they are not README's promise), so others may sit between them.
			var gotNames []string
			wide := map[string]bool{}
			for _, def := range table.ColumnDefinitions {
				gotNames = append(gotNames, def.Name)
				wide[def.Name] = def.Priority > 0
			}
			require.NotEmpty(t, gotNames)
			assert.Equal(t, "Name", gotNames[0], "the first column")
			assert.Equal(t, "Age", gotNames[len(gotNames)-1], "the last column")
			last := 0
			for _, col := range pc.columns {
				i := indexOf(gotNames, col.name)
				if !assert.Greater(t, i, last, "kubectl get %s shows column %s after the ones before it; columns: %v", pc.short, col.name, gotNames) {
					continue
				}
				last = i
				assert.Equal(t, col.wide, wide[col.name], "whether column %s shows only with -o wide", col.name)
			}

			require.Len(t, table.Rows, 1, "kubectl get %s lists the object", pc.short)
			cells := table.Rows[0].Cells
			require.Len(t, cells, len(table.ColumnDefinitions))
			assert.Equal(t, name, printed(cells[0]), "NAME")
			assert.NotEqual(t, "<none>", printed(cells[len(cells)-1]), "AGE")
			for _, col := range pc.columns {
				if col.want == "" {
					continue
				}
				i := indexOf(gotNames, col.name)
				if assert.GreaterOrEqual(t, i, 0, "column %s", col.name) {
					assert.Equal(t, col.want, printed(cells[i]), "column %s of kubectl get %s", col.name, pc.short)
				}
			}
		})
	}
}

// printed is a cell as kubectl prints it: a missing value as <none>, numbers without a
// fraction (JSON decodes them as float64).
func printed(cell any) string {
	switch v := cell.(type) {
	case nil:
		return "<none>"
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	default:
		return fmt.Sprint(v)
	}
}

func indexOf(list []string, s string) int {
	for i, v := range list {
		if v == s {
			return i
		}
	}
	return -1
}
