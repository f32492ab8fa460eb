package modelvariants

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	llmdv1alpha1 "github.com/berth-sh/berth/pkg/apis/llmd/v1alpha1"
)

func TestFromHPA(t *testing.T) {
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "chat-hpa",
			Labels:      map[string]string{"inference.optimization/acceleratorName": "H100"},
			Annotations: map[string]string{"llm-d.ai/managed": "true", "llm-d.ai/model-id": "chat", "llm-d.ai/variant-cost": "80"}},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{Kind: "ModelServing", Name: "chat"},
			MaxReplicas:    6,
		},
	}
	require.True(t, IsManaged(hpa))
	v, err := FromHPA(hpa)
	require.NoError(t, err)
	assert.Equal(t, Variant{Source: SourceHPA, Namespace: "ns", Name: "chat-hpa", ModelID: "chat", Cost: 80,
		Target: autoscalingv1.CrossVersionObjectReference{APIVersion: "workload.serving.volcano.sh/v1alpha1", Kind: "ModelServing", Name: "chat"},
		Min:    1, Max: 6, Accelerator: "H100"}, v)
	assert.True(t, v.ScalesModelServing())

	hpa.Spec.MinReplicas = ptr.To[int32](2)
	delete(hpa.Annotations, "llm-d.ai/variant-cost")
	v, err = FromHPA(hpa)
	require.NoError(t, err)
	assert.Equal(t, int32(2), v.Min)
	assert.Equal(t, 10.0, v.Cost, "llm-d's default cost")

	hpa.Annotations["llm-d.ai/variant-cost"] = "-1"
	_, err = FromHPA(hpa)
	assert.ErrorContains(t, err, `annotation llm-d.ai/variant-cost: "-1" is not a non-negative decimal`)
	delete(hpa.Annotations, "llm-d.ai/model-id")
	_, err = FromHPA(hpa)
	assert.ErrorContains(t, err, "annotation llm-d.ai/model-id is missing or empty")

	hpa.Annotations["llm-d.ai/managed"] = "yes"
	assert.False(t, IsManaged(hpa), `only "true" opts in`)

	hpa.Spec.ScaleTargetRef = autoscalingv2.CrossVersionObjectReference{Kind: "Deployment", Name: "d"}
	hpa.Annotations = map[string]string{"llm-d.ai/managed": "true", "llm-d.ai/model-id": "chat"}
	v, err = FromHPA(hpa)
	require.NoError(t, err)
	assert.Equal(t, "apps/v1", v.Target.APIVersion, "llm-d's default for a scaleTargetRef without apiVersion")
	assert.False(t, v.ScalesModelServing())
}

func TestFromScaledObject(t *testing.T) {
	so := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(`
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: chat-scaler
  namespace: ns
  annotations: {llm-d.ai/managed: "true", llm-d.ai/model-id: chat}
spec:
  scaleTargetRef: {apiVersion: workload.serving.volcano.sh/v1alpha1, kind: ModelServing, name: chat}
  minReplicaCount: 2
  triggers: [{type: prometheus, metadata: {query: 'wva_desired_replicas{variant_name="chat-scaler"}', threshold: "1"}}]
`), &so.Object))
	v, err := FromScaledObject(so)
	require.NoError(t, err)
	assert.Equal(t, Variant{Source: SourceScaledObject, Namespace: "ns", Name: "chat-scaler", ModelID: "chat", Cost: 10,
		Target: autoscalingv1.CrossVersionObjectReference{APIVersion: "workload.serving.volcano.sh/v1alpha1", Kind: "ModelServing", Name: "chat"},
		Min:    2, Max: 100}, v, "KEDA's default maxReplicaCount")

	unstructured.RemoveNestedField(so.Object, "spec", "scaleTargetRef", "kind")
	unstructured.RemoveNestedField(so.Object, "spec", "scaleTargetRef", "apiVersion")
	v, err = FromScaledObject(so)
	require.NoError(t, err)
	assert.Equal(t, autoscalingv1.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "chat"}, v.Target, "KEDA's defaults")
}

func TestControlledByScaledObject(t *testing.T) {
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "keda.sh/v1alpha1", Kind: "ScaledObject", Name: "chat-scaler", UID: "u", Controller: ptr.To(true)},
	}}}
	assert.True(t, ControlledByScaledObject(hpa))
	hpa.OwnerReferences[0].APIVersion = "inference.llmaz.io/v1alpha1"
	assert.False(t, ControlledByScaledObject(hpa))
}

func TestFromVariantAutoscaling(t *testing.T) {
	va := &llmdv1alpha1.VariantAutoscaling{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "llama-a100", Labels: map[string]string{"inference.optimization/acceleratorName": "A100"}},
		Spec: llmdv1alpha1.VariantAutoscalingSpec{ModelID: "llama",
			ScaleTargetRef: &autoscalingv1.CrossVersionObjectReference{Kind: "ModelServing", Name: "llama-a100"}},
		Status: llmdv1alpha1.VariantAutoscalingStatus{DesiredOptimizedAlloc: &llmdv1alpha1.OptimizedAlloc{Accelerator: "A100", NumReplicas: 3}},
	}
	require.True(t, va.Spec.IsV05())
	v, err := FromVariantAutoscaling(va)
	require.NoError(t, err)
	assert.Equal(t, Variant{Source: SourceVariantAutoscaling, Namespace: "ns", Name: "llama-a100", ModelID: "llama", Cost: 10,
		Target: autoscalingv1.CrossVersionObjectReference{APIVersion: "workload.serving.volcano.sh/v1alpha1", Kind: "ModelServing", Name: "llama-a100"},
		Min:    1, Accelerator: "A100", Desired: 3}, v)
}

func TestClamp(t *testing.T) {
	assert.Equal(t, int32(1), clamp(0, 0, 0), "never below one")
	assert.Equal(t, int32(2), clamp(1, 2, 5))
	assert.Equal(t, int32(5), clamp(9, 2, 5))
	assert.Equal(t, int32(9), clamp(9, 1, 0), "no maximum")
}
