package workload

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// The annotation takes "true" or "false"; anything else is refused naming the value, so a
// typo does not silently leave a group without NVLink.
func TestWantsComputeDomains(t *testing.T) {
	for value, want := range map[string]bool{"": false, "true": true, "false": false} {
		ms := &workloadv1alpha1.ModelServing{}
		if value != "" {
			ms.Annotations = map[string]string{ComputeDomainAnnotation: value}
		}
		on, err := wantsComputeDomains(ms)
		assert.NoError(t, err, "value %q", value)
		assert.Equal(t, want, on, "value %q", value)
	}
	for _, bad := range []string{"True", "yes", "1", " true"} {
		ms := &workloadv1alpha1.ModelServing{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{ComputeDomainAnnotation: bad}}}
		on, err := wantsComputeDomains(ms)
		assert.False(t, on)
		if assert.Error(t, err, "value %q", bad) {
			reason, msg := computeDomainRefused(err)
			assert.Equal(t, ReasonInvalidComputeDomainAnnotation, reason)
			assert.Contains(t, msg, ComputeDomainAnnotation)
			assert.Contains(t, msg, `"`+bad+`"`)
		}
	}
}

// Every container claims the group's channel, init containers do not, and a pod whose
// template already names the claim is left as the user wrote it.
func TestWireComputeDomain(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "fetch"}},
		Containers:     []corev1.Container{{Name: "vllm"}, {Name: "sidecar", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
		ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpus")}},
	}}
	wireComputeDomain(pod, "llm", 3)
	assert.Equal(t, []corev1.PodResourceClaim{
		{Name: "gpu", ResourceClaimTemplateName: ptr.To("gpus")},
		{Name: ComputeDomainClaimName, ResourceClaimTemplateName: ptr.To("llm-3-channel")},
	}, pod.Spec.ResourceClaims)
	assert.Equal(t, []corev1.ResourceClaim{{Name: ComputeDomainClaimName}}, pod.Spec.Containers[0].Resources.Claims)
	assert.Equal(t, []corev1.ResourceClaim{{Name: "gpu"}, {Name: ComputeDomainClaimName}}, pod.Spec.Containers[1].Resources.Claims)
	assert.Empty(t, pod.Spec.InitContainers[0].Resources.Claims)
	assert.True(t, hasComputeDomainClaim(pod))

	own := &corev1.Pod{Spec: corev1.PodSpec{
		Containers:     []corev1.Container{{Name: "vllm"}},
		ResourceClaims: []corev1.PodResourceClaim{{Name: ComputeDomainClaimName, ResourceClaimTemplateName: ptr.To("mine")}},
	}}
	wireComputeDomain(own, "llm", 0)
	assert.Equal(t, "mine", *own.Spec.ResourceClaims[0].ResourceClaimTemplateName)
	assert.Len(t, own.Spec.ResourceClaims, 1)
	assert.Empty(t, own.Spec.Containers[0].Resources.Claims, "the user's template decides which containers claim it")
}
