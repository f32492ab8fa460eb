package api

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// createMinimal creates the smallest manifest a user could write and returns it read back,
// decoded into the Go type, so the assertions see exactly what a controller would see.
func createMinimal[T any, PT interface {
	*T
	clientObject
}](t *testing.T, manifest string) PT {
	t.Helper()
	c := newClient(t)
	ns := newNamespace(t, c)
	objs := decodeYAML(t, manifest)
	require.Len(t, objs, 1)
	objs[0].SetNamespace(ns)
	require.NoError(t, c.Create(context.Background(), objs[0]))
	out := PT(new(T))
	require.NoError(t, c.Get(context.Background(), keyOf(objs[0]), out))
	return out
}

func duration(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func TestDefaultsModelServing(t *testing.T) {
	ms := createMinimal[workloadv1alpha1.ModelServing](t, `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata: {name: minimal}
spec:
  template:
    networkTopology: {highestTierAllowed: 1}
    roles:
    - name: server
      entryTemplate:
        spec:
          containers: [{name: vllm, image: vllm/vllm-openai:v0.11.0}]
`)
	assert.Equal(t, ptr.To[int32](1), ms.Spec.Replicas, "spec.replicas")
	assert.Equal(t, workloadv1alpha1.RoleRecreate, ms.Spec.RecoveryPolicy, "spec.recoveryPolicy")
	require.NotNil(t, ms.Spec.RolloutStrategy, "spec.rolloutStrategy")
	assert.Equal(t, workloadv1alpha1.ServingGroupRollingUpdate, ms.Spec.RolloutStrategy.Type, "rolloutStrategy.type")
	ru := ms.Spec.RolloutStrategy.RollingUpdateConfiguration
	require.NotNil(t, ru, "rolloutStrategy.rollingUpdateConfiguration")
	assert.Equal(t, ptr.To(intstr.FromInt32(1)), ru.MaxUnavailable, "maxUnavailable")
	assert.Equal(t, ptr.To(intstr.FromInt32(0)), ru.MaxSurge, "maxSurge")
	assert.Nil(t, ru.Partition, "partition has no stored default: absent means 0")
	assert.Equal(t, ptr.To[int64](0), ms.Spec.Template.RestartGracePeriodSeconds, "restartGracePeriodSeconds")
	assert.Equal(t, ptr.To[int32](1), ms.Spec.Template.Roles[0].Replicas, "roles[0].replicas")
	require.NotNil(t, ms.Spec.Template.NetworkTopology)
	assert.Equal(t, volcanov1beta1.HardNetworkTopologyMode, ms.Spec.Template.NetworkTopology.Mode, "networkTopology.mode")
}

func TestDefaultsModelServingKeepsExplicitValues(t *testing.T) {
	ms := createMinimal[workloadv1alpha1.ModelServing](t, `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata: {name: explicit}
spec:
  replicas: 0
  recoveryPolicy: None
  rolloutStrategy:
    rollingUpdateConfiguration: {maxUnavailable: "25%", maxSurge: 0, partition: 2}
  template:
    roles:
    - name: server
      replicas: 3
      entryTemplate:
        spec:
          containers: [{name: vllm, image: vllm/vllm-openai:v0.11.0}]
`)
	assert.Equal(t, ptr.To[int32](0), ms.Spec.Replicas, "an explicit 0 is not replaced by the default")
	assert.Equal(t, workloadv1alpha1.NoneRestartPolicy, ms.Spec.RecoveryPolicy)
	ru := ms.Spec.RolloutStrategy.RollingUpdateConfiguration
	assert.Equal(t, ptr.To(intstr.FromString("25%")), ru.MaxUnavailable)
	assert.Equal(t, ptr.To(intstr.FromInt32(2)), ru.Partition, "the spec's integer partition reads back as an integer")
	assert.Equal(t, ptr.To[int32](3), ms.Spec.Template.Roles[0].Replicas)
}

func TestDefaultsAutoscalingPolicy(t *testing.T) {
	p := createMinimal[workloadv1alpha1.AutoscalingPolicy](t, `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: minimal}
spec:
  metrics:
  - {metricName: vllm:num_requests_waiting, targetValue: "10"}
`)
	assert.Equal(t, ptr.To[int32](10), p.Spec.TolerancePercent, "tolerancePercent")
	require.NotNil(t, p.Spec.Behavior)
	require.NotNil(t, p.Spec.Behavior.ScaleUp)
	wantStable := &workloadv1alpha1.AutoscalingPolicyStablePolicy{
		Instances:    ptr.To[int32](1),
		Percent:      ptr.To[int32](100),
		Period:       duration(15 * time.Second),
		SelectPolicy: workloadv1alpha1.SelectPolicyOr,
	}
	assert.Equal(t, wantStable, p.Spec.Behavior.ScaleUp.StablePolicy, "behavior.scaleUp.stablePolicy")
	assert.Equal(t, wantStable, p.Spec.Behavior.ScaleDown, "behavior.scaleDown")
	assert.Equal(t, &workloadv1alpha1.AutoscalingPolicyPanicPolicy{
		Percent:               ptr.To[int32](1000),
		PanicThresholdPercent: ptr.To[int32](200),
		PanicModeHold:         duration(60 * time.Second),
	}, p.Spec.Behavior.ScaleUp.PanicPolicy, "behavior.scaleUp.panicPolicy")
}

func TestDefaultsAutoscalingPolicyBinding(t *testing.T) {
	// As in Kthena 0.1's CRD, metricEndpoint itself has no default (the autoscaler reads
	// :8100/metrics without one); written, even empty, it gets the spec's uri and port.
	scaling := createMinimal[workloadv1alpha1.AutoscalingPolicyBinding](t, `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicyBinding
metadata: {name: scaling}
spec:
  policyRef: {name: waiting}
  scalingConfiguration:
    target: {targetRef: {kind: ModelServing, name: llama}, metricEndpoint: {}}
    maxReplicas: 4
`)
	assert.Equal(t, &workloadv1alpha1.MetricEndpoint{URI: "/metrics", Port: 8100},
		scaling.Spec.ScalingConfiguration.Target.MetricEndpoint, "target.metricEndpoint")

	optimizer := createMinimal[workloadv1alpha1.AutoscalingPolicyBinding](t, `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicyBinding
metadata: {name: optimizer}
spec:
  policyRef: {name: waiting}
  optimizerConfiguration:
    params:
    - {target: {targetRef: {kind: ModelServing, name: h100}}, cost: 100, maxReplicas: 4}
`)
	oc := optimizer.Spec.OptimizerConfiguration
	assert.Equal(t, ptr.To[int32](200), oc.CostExpansionRatePercent, "costExpansionRatePercent")
	assert.Nil(t, oc.Params[0].Target.MetricEndpoint, "no metricEndpoint is added where none was written")
}

// Kthena 1.0's shape: the targets inside the policy and their metric sources get Kthena
// 1.0's defaults.
func TestDefaultsAutoscalingPolicyTargets(t *testing.T) {
	hetero := createMinimal[workloadv1alpha1.AutoscalingPolicy](t, `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: hetero}
spec:
  metrics: [{name: waiting, targetValue: "10"}]
  heterogeneousTarget:
    params:
    - target:
        targetRef: {name: h100}
        metricSources: {waiting: {pod: {name: vllm:num_requests_waiting}}}
      cost: 100
      maxReplicas: 4
`)
	ht := hetero.Spec.HeterogeneousTarget
	require.NotNil(t, ht)
	assert.Equal(t, ptr.To[int32](200), ht.CostExpansionRatePercent, "heterogeneousTarget.costExpansionRatePercent")
	assert.Equal(t, &workloadv1alpha1.PodMetricSource{Name: "vllm:num_requests_waiting", Uri: "/metrics", Port: 8100},
		ht.Params[0].Target.MetricSources["waiting"].Pod, "metricSources[waiting].pod")
	assert.Equal(t, ptr.To[int32](10), hetero.Spec.TolerancePercent)
	require.NotNil(t, hetero.Spec.Behavior.ScaleUp.PanicPolicy, "behavior defaults as in the spec's shape")

	pd := createMinimal[workloadv1alpha1.AutoscalingPolicy](t, `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: pd}
spec:
  disaggregatedTarget:
    targetRef: {name: pd}
    roles:
      prefill:
        minReplicas: 1
        maxReplicas: 4
        metrics: [{name: running, targetValue: "4"}]
        metricSources: {running: {pod: {name: vllm:num_requests_running, port: 8000}}}
      decode: {minReplicas: 2, maxReplicas: 2}
    ratioConstraint: {numeratorRole: prefill, denominatorRole: decode, minRatio: "0.5", maxRatio: "1"}
`)
	dt := pd.Spec.DisaggregatedTarget
	require.NotNil(t, dt)
	assert.Equal(t, &workloadv1alpha1.PodMetricSource{Name: "vllm:num_requests_running", Uri: "/metrics", Port: 8000},
		dt.Roles["prefill"].MetricSources["running"].Pod)
	assert.Equal(t, "500m", dt.RatioConstraint.MinRatio.String())
	assert.Empty(t, pd.Spec.Metrics, "a disaggregatedTarget's roles may bring their own metrics")
}

func TestDefaultsModelBooster(t *testing.T) {
	mb := createMinimal[workloadv1alpha1.ModelBooster](t, `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelBooster
metadata: {name: minimal}
spec:
  autoscalingPolicy:
    metrics: [{metricName: vllm:num_requests_waiting, targetValue: "10"}]
  backends:
  - name: main
    type: vLLM
    workers: [{image: vllm/vllm-openai:v0.11.0}]
`)
	b := mb.Spec.Backends[0]
	assert.Equal(t, ptr.To[int32](100), b.RouteWeight, "backends[0].routeWeight")
	assert.Equal(t, workloadv1alpha1.ModelWorkerTypeServer, b.Workers[0].Type, "workers[0].type")
	assert.Equal(t, ptr.To[int32](10), mb.Spec.AutoscalingPolicy.TolerancePercent, "autoscalingPolicy.tolerancePercent")
	assert.Equal(t, ptr.To[int32](1000), mb.Spec.AutoscalingPolicy.Behavior.ScaleUp.PanicPolicy.Percent)
}

// A ModelBooster as Kthena 1.0 writes it (one backend, its replicas, runtime class,
// scheduler and worker tolerations) is stored as written, with the same defaults.
func TestDefaultsModelBoosterKthena10Backend(t *testing.T) {
	mb := createMinimal[workloadv1alpha1.ModelBooster](t, `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelBooster
metadata: {name: minimal}
spec:
  backend:
    name: main
    type: vLLM
    modelURI: ms://Qwen/Qwen3-8B
    replicas: 0
    schedulerName: volcano
    runtimeClassName: nvidia
    workers:
    - image: vllm/vllm-openai:v0.11.0
      tolerations: [{key: dedicated, operator: Equal, value: inference, effect: NoSchedule}]
`)
	assert.Nil(t, mb.Spec.Backends)
	b := mb.Spec.Backend
	require.NotNil(t, b, "spec.backend")
	assert.Equal(t, ptr.To[int32](0), b.Replicas, "an explicit 0 is kept")
	assert.Equal(t, "volcano", b.SchedulerName)
	assert.Equal(t, ptr.To("nvidia"), b.RuntimeClassName)
	assert.Equal(t, "ms://Qwen/Qwen3-8B", b.ModelURI)
	assert.Equal(t, ptr.To[int32](100), b.RouteWeight, "backend.routeWeight")
	assert.Equal(t, workloadv1alpha1.ModelWorkerTypeServer, b.Workers[0].Type, "workers[0].type")
	require.Len(t, b.Workers[0].Tolerations, 1)
	assert.Equal(t, "inference", b.Workers[0].Tolerations[0].Value)
}

func TestDefaultsModelRoute(t *testing.T) {
	mr := createMinimal[networkingv1alpha1.ModelRoute](t, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: minimal}
spec:
  modelName: Qwen/Qwen3-8B
  rules:
  - targetModels: [{modelServerName: qwen}]
  rateLimit: {inputTokensPerUnit: 1000}
`)
	assert.Equal(t, ptr.To[uint32](100), mr.Spec.Rules[0].TargetModels[0].Weight, "targetModels[0].weight")
	assert.Equal(t, networkingv1alpha1.Second, mr.Spec.RateLimit.Unit, "rateLimit.unit")
}

func TestDefaultsModelServer(t *testing.T) {
	ms := createMinimal[networkingv1alpha1.ModelServer](t, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: minimal}
spec:
  inferenceEngine: SGLang
  workloadSelector: {matchLabels: {app: qwen}}
  workloadPort: {port: 8000}
  trafficPolicy: {retry: {attempts: 2}}
  kvConnector: {}
`)
	assert.Equal(t, "http", ms.Spec.WorkloadPort.Protocol, "workloadPort.protocol")
	assert.Equal(t, duration(100*time.Millisecond), ms.Spec.TrafficPolicy.Retry.RetryInterval, "trafficPolicy.retry.retryInterval")
	assert.Equal(t, networkingv1alpha1.ConnectorTypeHTTP, ms.Spec.KVConnector.Type, "kvConnector.type")
}
