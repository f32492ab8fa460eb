package api

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A VariantAutoscaling as llm-d v0.5 writes it: the workload it scales, the model, the
// cost of a replica.
const validVariantV05 = `
apiVersion: llmd.ai/v1alpha1
kind: VariantAutoscaling
metadata: {name: bad}
spec:
  scaleTargetRef:
    apiVersion: workload.serving.volcano.sh/v1alpha1
    kind: ModelServing
    name: llama-8b-a100
  modelID: meta/llama-3.1-8b
  variantCost: "40.0"
`

// Both shapes of a VariantAutoscaling are accepted, each complete on its own; an object
// mixing them, or in neither, is refused with the field named.
func TestVariantAutoscalingShapes(t *testing.T) {
	c := newClient(t)
	ns := newNamespace(t, c)
	ctx := context.Background()

	t.Run("llm-d v0.5 shape is accepted as written", func(t *testing.T) {
		obj := decodeYAML(t, validVariantV05)[0]
		obj.SetNamespace(ns)
		obj.SetName("v05")
		require.NoError(t, c.Create(ctx, obj))
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(obj.GroupVersionKind())
		require.NoError(t, c.Get(ctx, keyOf(obj), got))
		spec := got.Object["spec"].(map[string]any)
		assert.Equal(t, map[string]any{"apiVersion": "workload.serving.volcano.sh/v1alpha1", "kind": "ModelServing", "name": "llama-8b-a100"}, spec["scaleTargetRef"])
		assert.Equal(t, "40.0", spec["variantCost"])
		assert.NotContains(t, spec, "sloClassRef")
	})
	t.Run("llm-d v0.5 shape without variantCost stores none", func(t *testing.T) {
		obj := decodeYAML(t, validVariantV05)[0]
		obj.SetNamespace(ns)
		obj.SetName("v05-nocost")
		delete(dig(obj.Object, "spec"), "variantCost")
		require.NoError(t, c.Create(ctx, obj))
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(obj.GroupVersionKind())
		require.NoError(t, c.Get(ctx, keyOf(obj), got))
		// llm-d's CRD defaults it to "10.0"; Berth applies that default when it reads the
		// object, so a spec-shaped object never gets a v0.5 field from the schema.
		assert.NotContains(t, got.Object["spec"], "variantCost")
	})
	t.Run("the spec's shape is accepted as written", func(t *testing.T) {
		obj := decodeYAML(t, validVariant)[0]
		obj.SetNamespace(ns)
		obj.SetName("spec-shape")
		require.NoError(t, c.Create(ctx, obj))
	})

	for _, tc := range []badInput{
		{"scaleTargetRef beside sloClassRef", validVariant, func(o map[string]any) {
			dig(o, "spec")["scaleTargetRef"] = map[string]any{"kind": "ModelServing", "name": "m"}
		}, "spec.scaleTargetRef", "scaleTargetRef (llm-d v0.5) cannot be combined with sloClassRef (the spec shape)"},
		{"variantCost beside the spec shape", validVariant, func(o map[string]any) { dig(o, "spec")["variantCost"] = "10.0" },
			"spec.variantCost", "variantCost (llm-d v0.5) cannot be combined with sloClassRef (the spec shape)"},
		{"modelProfile beside llm-d v0.5's shape", validVariantV05, func(o map[string]any) {
			dig(o, "spec")["modelProfile"] = map[string]any{"accelerators": []any{map[string]any{"acc": "A100", "accCount": 1, "alpha": "20", "beta": "0.4", "maxBatchSize": 4}}}
		}, "spec.scaleTargetRef", "scaleTargetRef (llm-d v0.5) cannot be combined with modelProfile (the spec shape)"},
		{"sloClassRef beside llm-d v0.5's shape", validVariantV05, func(o map[string]any) {
			dig(o, "spec")["sloClassRef"] = map[string]any{"name": "premium", "key": "opt-125m"}
		}, "spec.variantCost", "variantCost (llm-d v0.5) cannot be combined with sloClassRef (the spec shape)"},
		{"variantCost without scaleTargetRef", validVariantV05, func(o map[string]any) { delete(dig(o, "spec"), "scaleTargetRef") },
			"spec.scaleTargetRef", "Required value: llm-d v0.5's shape has scaleTargetRef beside variantCost"},
		{"sloClassRef without modelProfile", validVariant, func(o map[string]any) { delete(dig(o, "spec"), "modelProfile") },
			"spec.modelProfile", "Required value: the spec shape has modelProfile beside sloClassRef"},
		{"modelProfile without sloClassRef", validVariant, func(o map[string]any) { delete(dig(o, "spec"), "sloClassRef") },
			"spec.sloClassRef", "Required value: the spec shape has sloClassRef beside modelProfile"},
		{"neither shape", validVariantV05, func(o map[string]any) {
			delete(dig(o, "spec"), "scaleTargetRef")
			delete(dig(o, "spec"), "variantCost")
		}, "spec.sloClassRef", "set sloClassRef and modelProfile (the spec shape) or scaleTargetRef (llm-d v0.5)"},
		{"variantCost not a decimal", validVariantV05, func(o map[string]any) { dig(o, "spec")["variantCost"] = "$40" },
			"spec.variantCost", "should match"},
		{"scaleTargetRef without a name", validVariantV05, func(o map[string]any) { delete(dig(o, "spec", "scaleTargetRef"), "name") },
			"spec.scaleTargetRef.name", "Required value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := decodeYAML(t, tc.base)[0]
			obj.SetNamespace(ns)
			require.NoError(t, c.Create(ctx, obj.DeepCopy(), dryRunAll), "the unmodified base must be accepted")
			tc.patch(obj.Object)
			err := c.Create(ctx, obj)
			require.Error(t, err, "the apiserver accepted a bad VariantAutoscaling")
			assert.True(t, apierrors.IsInvalid(err), "want an Invalid error, got %v", err)
			assert.Contains(t, err.Error(), tc.field, "the error must name the field")
			assert.Contains(t, err.Error(), tc.words, "the error must explain the mistake")
			t.Logf("rejected as a user sees it: %v", err)
		})
	}
}
