package modelbooster

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

func TestSyncSpecIgnoresServerDefaultsButNotRealChanges(t *testing.T) {
	mb := parseBooster(t, boosterManifest)
	want := build(t, mb).ModelServings[0]
	// As the apiserver returns it: defaults filled in, someone else's label, a resourceVersion.
	have := want.DeepCopy()
	have.ResourceVersion = "7"
	have.Labels["team"] = "infra"
	have.Spec.RecoveryPolicy = workloadv1alpha1.RoleRecreate
	have.Spec.RolloutStrategy = &workloadv1alpha1.RolloutStrategy{Type: workloadv1alpha1.ServingGroupRollingUpdate}
	have.Spec.Template.RestartGracePeriodSeconds = ptr.To[int64](0)
	have.Spec.Template.Roles[0].EntryTemplate.Spec.Containers[0].Ports[0].Protocol = corev1.ProtocolTCP
	assert.False(t, syncServing(mb, have, want, ""), "server defaults alone cause no write")
	assert.Equal(t, "infra", have.Labels["team"])

	// Someone edited a generated field: it is put back.
	have.Spec.Template.Roles[0].EntryTemplate.Spec.Containers[0].Image = "other"
	assert.True(t, syncServing(mb, have, want, ""))
	assert.Equal(t, "vllm/vllm-openai:v0.11.0", have.Spec.Template.Roles[0].EntryTemplate.Spec.Containers[0].Image)
	assert.Equal(t, "infra", have.Labels["team"], "others' labels are kept")

	// The ModelBooster dropped a field (affinity): the hash changes, the spec is replaced.
	mb.Spec.Backends[0].Workers[0].Affinity = nil
	want = build(t, mb).ModelServings[0]
	assert.True(t, syncServing(mb, have, want, ""))
	assert.Nil(t, have.Spec.Template.Roles[0].EntryTemplate.Spec.Affinity)

	// Not autoscaled: replicas are put back to max(minReplicas, 1).
	have.Spec.Replicas = ptr.To[int32](5)
	assert.True(t, syncServing(mb, have, want, ""))
	assert.Equal(t, int32(2), *have.Spec.Replicas)
	// ... unless an autoscaler outside the ModelBooster scales the ModelServing: its count stays.
	have.Spec.Replicas = ptr.To[int32](5)
	assert.False(t, syncServing(mb, have, want, "AutoscalingPolicy mine"))
	assert.Equal(t, int32(5), *have.Spec.Replicas)

	// Autoscaled: the autoscaler's count stays, even when the template changes.
	mb.Spec.AutoscalingPolicy = &workloadv1alpha1.AutoscalingPolicySpec{}
	mb.Spec.Backends[0].Workers[0].Image = "vllm/vllm-openai:v0.12.0"
	want = build(t, mb).ModelServings[0]
	have.Spec.Replicas = ptr.To[int32](5)
	assert.True(t, syncServing(mb, have, want, ""))
	assert.Equal(t, int32(5), *have.Spec.Replicas)
	assert.Equal(t, "vllm/vllm-openai:v0.12.0", have.Spec.Template.Roles[0].EntryTemplate.Spec.Containers[0].Image)
	assert.False(t, syncServing(mb, have, want, ""))

	// The scale-to-zero annotation follows the spec both ways.
	mb.Spec.Backends[0].ScaleToZeroGracePeriod = &metav1.Duration{Duration: 90 * time.Second}
	assert.True(t, syncServing(mb, have, build(t, mb).ModelServings[0], ""))
	assert.Equal(t, "1m30s", have.Annotations[workloadv1alpha1.ScaleToZeroGracePeriodAnnotation])
	mb.Spec.Backends[0].ScaleToZeroGracePeriod = nil
	assert.True(t, syncServing(mb, have, build(t, mb).ModelServings[0], ""))
	assert.NotContains(t, have.Annotations, workloadv1alpha1.ScaleToZeroGracePeriodAnnotation)
}

func testScheme(t *testing.T) *runtime.Scheme {
	s := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(s))
	require.NoError(t, workloadv1alpha1.AddToScheme(s))
	require.NoError(t, networkingv1alpha1.AddToScheme(s))
	return s
}

// The reconciler against a fake client: autoscaled replicas survive, autoscaling turned
// off removes its policy and binding, an invalid spec changes nothing, and a name taken by
// someone else's object is reported rather than overwritten.
func TestBoosterReconcilerOwnsWhatItGenerates(t *testing.T) {
	ctx := context.Background()
	mb := parseBooster(t, boosterManifest)
	mb.Spec.Backends[1].LoraAdapters = nil // no engines to call here
	mb.Spec.AutoscalingPolicy = &workloadv1alpha1.AutoscalingPolicySpec{Metrics: []workloadv1alpha1.AutoscalingPolicyMetric{{MetricName: "m"}}}
	mb.Generation = 1
	cl := fake.NewClientBuilder().WithScheme(testScheme(t)).WithStatusSubresource(&workloadv1alpha1.ModelBooster{}).WithObjects(mb).Build()
	r := &Reconciler{Client: cl}
	reconcile := func() {
		t.Helper()
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(mb)})
		require.NoError(t, err)
		require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(mb), mb))
	}
	reconcile()
	ms := &workloadv1alpha1.ModelServing{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "llama-h100"}, ms))
	assert.Equal(t, int32(2), *ms.Spec.Replicas)
	binding := &workloadv1alpha1.AutoscalingPolicyBinding{}
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "llama"}, binding))
	ready := meta.FindStatusCondition(mb.Status.Conditions, ConditionReady)
	require.NotNil(t, ready)
	assert.Equal(t, ReasonBackendsNotReady, ready.Reason)
	assert.Contains(t, ready.Message, "backend h100: 0 of 2 ServingGroups available")
	assert.Equal(t, []workloadv1alpha1.ModelBackendStatus{{Name: "h100"}, {Name: "a100"}}, mb.Status.BackendStatuses)
	assert.Equal(t, int64(1), mb.Status.ObservedGeneration)

	// The autoscaler scales h100 to 5; the controller leaves it.
	ms.Spec.Replicas = ptr.To[int32](5)
	require.NoError(t, cl.Update(ctx, ms))
	reconcile()
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(ms), ms))
	assert.Equal(t, int32(5), *ms.Spec.Replicas)

	// Autoscaling off: the policy and binding go, replicas return to max(minReplicas, 1).
	mb.Spec.AutoscalingPolicy = nil
	require.NoError(t, cl.Update(ctx, mb))
	reconcile()
	assert.True(t, apierrors.IsNotFound(cl.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "llama"}, binding)))
	assert.True(t, apierrors.IsNotFound(cl.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "llama"}, &workloadv1alpha1.AutoscalingPolicy{})))
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(ms), ms))
	assert.Equal(t, int32(2), *ms.Spec.Replicas)

	// An invalid spec: reported, nothing changed or deleted.
	before := ms.ResourceVersion
	mb.Spec.Backends[0].Workers[0].Type = workloadv1alpha1.ModelWorkerTypePrefill
	mb.Spec.Backends[1].Name = "renamed"
	require.NoError(t, cl.Update(ctx, mb))
	reconcile()
	ready = meta.FindStatusCondition(mb.Status.Conditions, ConditionReady)
	assert.Equal(t, ReasonInvalidSpec, ready.Reason)
	assert.Contains(t, ready.Message, "spec.backends[0].workers[0].type")
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(ms), ms))
	assert.Equal(t, before, ms.ResourceVersion)
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "llama-a100"}, ms), "a100 is not deleted while the spec is invalid")

	// Valid again with a100 renamed: its objects go, the new backend's come.
	mb.Spec.Backends[0].Workers[0].Type = workloadv1alpha1.ModelWorkerTypeServer
	require.NoError(t, cl.Update(ctx, mb))
	reconcile()
	assert.True(t, apierrors.IsNotFound(cl.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "llama-a100"}, &workloadv1alpha1.ModelServing{})))
	assert.True(t, apierrors.IsNotFound(cl.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "llama-a100"}, &networkingv1alpha1.ModelServer{})))
	require.NoError(t, cl.Get(ctx, client.ObjectKey{Namespace: "ns", Name: "llama-renamed"}, &workloadv1alpha1.ModelServing{}))

	// Someone else's ModelServer holds a generated name: reported, left alone.
	foreign := &networkingv1alpha1.ModelServer{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "llama-extra"},
		Spec: networkingv1alpha1.ModelServerSpec{InferenceEngine: networkingv1alpha1.SGLang}}
	require.NoError(t, cl.Create(ctx, foreign))
	extra := mb.Spec.Backends[1].DeepCopy()
	extra.Name = "extra"
	mb.Spec.Backends = append(mb.Spec.Backends, *extra)
	require.NoError(t, cl.Update(ctx, mb))
	reconcile()
	ready = meta.FindStatusCondition(mb.Status.Conditions, ConditionReady)
	assert.Equal(t, ReasonNameConflict, ready.Reason)
	assert.Contains(t, ready.Message, "ModelServer llama-extra exists and is not controlled by any object")
	require.NoError(t, cl.Get(ctx, client.ObjectKeyFromObject(foreign), foreign))
	assert.Equal(t, networkingv1alpha1.SGLang, foreign.Spec.InferenceEngine)
	assert.Empty(t, foreign.OwnerReferences)
}
