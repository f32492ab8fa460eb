package modelserving

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/workload"
)

var computeDomainGVK = schema.GroupVersionKind{Group: "resource.nvidia.com", Version: "v1beta1", Kind: "ComputeDomain"}

// nvl is a ModelServing whose groups are one entry and one worker (two pods, two
// containers each), with the ComputeDomain annotation set to value.
func nvl(name, value string, replicas int) string {
	pod := `{spec: {containers: [{name: vllm, image: vllm, resources: {limits: {nvidia.com/gpu: "4"}}}, {name: sidecar, image: proxy}]}}`
	return fmt.Sprintf(`
metadata: {name: %s, annotations: {berth.sh/compute-domain: %q}}
spec:
  replicas: %d
  schedulerName: berth-scheduler
  template:
    roles:
    - name: server
      workerReplicas: 1
      entryTemplate: %s
      workerTemplate: %s
`, name, value, replicas, pod, pod)
}

func (w *world) computeDomain(name string) (*unstructured.Unstructured, error) {
	cd := &unstructured.Unstructured{}
	cd.SetGroupVersionKind(computeDomainGVK)
	return cd, cl.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: name}, cd)
}

func (w *world) computeDomainCondition(name string) *metav1.Condition {
	ms := w.get(name)
	if ms.Status.ObservedGeneration != ms.Generation {
		return nil
	}
	return meta.FindStatusCondition(ms.Status.Conditions, workload.ModelServingComputeDomainsReady)
}

// issue 27: a ModelServing annotated berth.sh/compute-domain: "true" gets one NVIDIA
// ComputeDomain per ServingGroup, before the group's pods, which claim its channel; a
// group's domain goes with the group, after its pods. Without the CRD (or with a bad value)
// the condition says why and nothing is created; installing the CRD later is enough.
//
// It must run before any test of the package installs the CRD (tests run in source order;
// TestComputeDomainFollowsGroupRecreate is after it in this file).
func TestComputeDomainPerServingGroup(t *testing.T) {
	w := newWorld(t, 2)
	sel := map[string]string{workloadv1alpha1.ModelServingNameLabel: "nvl"}
	created0, _ := metricValue(t, "berth_modelserving_compute_domains_total", map[string]string{"operation": "create"})
	deleted0, _ := metricValue(t, "berth_modelserving_compute_domains_total", map[string]string{"operation": "delete"})

	// No CRD yet: refused, naming the CRD; no pod and no PodGroup.
	w.apply(nvl("nvl", "true", 2))
	var cond *metav1.Condition
	w.eventually("the condition names the missing CRD", 30*time.Second, func() bool {
		cond = w.computeDomainCondition("nvl")
		return cond != nil && cond.Status == metav1.ConditionFalse
	})
	assert.Equal(t, workload.ReasonComputeDomainCRDMissing, cond.Reason)
	assert.Contains(t, cond.Message, "computedomains.resource.nvidia.com")
	t.Logf("condition as a user sees it: %s: %s", cond.Reason, cond.Message)
	w.expectEvent("nvl", "Warning", workload.ReasonComputeDomainCRDMissing, "computedomains.resource.nvidia.com")

	// A value that is neither "true" nor "false" is refused the same way, naming it.
	w.apply(nvl("bad", "yes", 1))
	w.eventually("the condition names the bad value", 30*time.Second, func() bool {
		cond = w.computeDomainCondition("bad")
		return cond != nil && cond.Status == metav1.ConditionFalse
	})
	assert.Equal(t, workload.ReasonInvalidComputeDomainAnnotation, cond.Reason)
	assert.Contains(t, cond.Message, `berth.sh/compute-domain`)
	assert.Contains(t, cond.Message, `"yes"`)
	w.expectEvent("bad", "Warning", workload.ReasonInvalidComputeDomainAnnotation, `"yes"`)

	assert.Empty(t, w.pods(sel), "no pod is created while the CRD is missing")
	assert.Empty(t, w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "bad"}), "no pod is created with a bad value")
	var pgs volcanov1beta1.PodGroupList
	require.NoError(t, cl.List(w.ctx, &pgs, client.InNamespace(w.ns)))
	assert.Empty(t, pgs.Items, "nothing else is created either")

	// "false" turns it off: the group comes up without a domain, and the condition goes.
	w.change("bad", func(ms *workloadv1alpha1.ModelServing) { ms.Annotations[workload.ComputeDomainAnnotation] = "false" })
	w.eventually("the group is created without a domain", 30*time.Second, func() bool {
		return len(w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "bad"})) == 2 && w.computeDomainCondition("bad") == nil
	})
	for _, p := range w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "bad"}) {
		assert.Empty(t, p.Spec.ResourceClaims, "pod %s claims nothing", p.Name)
	}

	// The CRD appears: the next reconcile proceeds, without a restart.
	dir, err := filepath.Abs(filepath.Join("testdata", "computedomain"))
	require.NoError(t, err)
	require.NoError(t, cp.InstallCRDs(w.ctx, dir))
	w.eventually("both groups' pods exist", 60*time.Second, func() bool { return len(w.pods(sel)) == 4 })
	w.eventually("the condition is true", 30*time.Second, func() bool {
		cond = w.computeDomainCondition("nvl")
		return cond != nil && cond.Status == metav1.ConditionTrue
	})

	created, _ := metricValue(t, "berth_modelserving_compute_domains_total", map[string]string{"operation": "create"})
	assert.Equal(t, created0+2, created, "berth_modelserving_compute_domains_total{operation=create} counts both domains")

	ms := w.get("nvl")
	for i := 0; i < 2; i++ {
		group := fmt.Sprintf("nvl-%d", i)
		cd, err := w.computeDomain(group)
		require.NoError(t, err, "ServingGroup %s has its ComputeDomain", group)
		assert.True(t, metav1.IsControlledBy(cd, ms), "the ModelServing owns %s", group)
		assert.Equal(t, "nvl", cd.GetLabels()[workloadv1alpha1.ModelServingNameLabel])
		assert.Equal(t, group, cd.GetLabels()[workloadv1alpha1.GroupNameLabel])
		tmpl, _, _ := unstructured.NestedString(cd.Object, "spec", "channel", "resourceClaimTemplate", "name")
		assert.Equal(t, group+"-channel", tmpl)
		mode, _, _ := unstructured.NestedString(cd.Object, "spec", "channel", "allocationMode")
		assert.Equal(t, "Single", mode)
		nodes, found, _ := unstructured.NestedInt64(cd.Object, "spec", "numNodes")
		assert.True(t, found)
		assert.Equal(t, int64(0), nodes)
		w.expectEvent("nvl", "Normal", workload.ReasonCreateComputeDomain, "ComputeDomain "+group+" ")

		for _, p := range w.pods(map[string]string{workloadv1alpha1.GroupNameLabel: group}) {
			assert.False(t, p.CreationTimestamp.Before(ptr.To(cd.GetCreationTimestamp())), "pod %s is not older than its domain", p.Name)
			require.Len(t, p.Spec.ResourceClaims, 1, "pod %s", p.Name)
			assert.Equal(t, workload.ComputeDomainClaimName, p.Spec.ResourceClaims[0].Name)
			assert.Equal(t, group+"-channel", ptr.Deref(p.Spec.ResourceClaims[0].ResourceClaimTemplateName, ""), "pod %s claims its own group's channel", p.Name)
			for _, c := range p.Spec.Containers {
				assert.Equal(t, []corev1.ResourceClaim{{Name: workload.ComputeDomainClaimName}}, c.Resources.Claims, "container %s of pod %s", c.Name, p.Name)
			}
		}
	}

	// Scale down to 1: group nvl-1 goes, and its domain once its pods are gone. A finalizer
	// holds one of its pods terminating, as a slow engine shutdown would.
	held := "nvl-1-server-0-1"
	patch := []byte(`{"metadata":{"finalizers":["berth.test/hold"]}}`)
	_, err = kube.CoreV1().Pods(w.ns).Patch(w.ctx, held, types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(t, err)
	w.change("nvl", func(ms *workloadv1alpha1.ModelServing) { ms.Spec.Replicas = ptr.To[int32](1) })
	w.eventually("the held pod is terminating", 30*time.Second, func() bool {
		p, err := kube.CoreV1().Pods(w.ns).Get(w.ctx, held, metav1.GetOptions{})
		return err == nil && p.DeletionTimestamp != nil
	})
	time.Sleep(3 * time.Second) // a few passes of the controller
	cd, err := w.computeDomain("nvl-1")
	require.NoError(t, err, "the domain stays while a pod of its group is still there")
	assert.Nil(t, cd.GetDeletionTimestamp())

	_, err = kube.CoreV1().Pods(w.ns).Patch(w.ctx, held, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	w.eventually("nvl-1's domain is deleted with its group", 30*time.Second, func() bool {
		_, err := w.computeDomain("nvl-1")
		return apierrors.IsNotFound(err)
	})
	w.expectEvent("nvl", "Normal", workload.ReasonDeleteComputeDomain, "ComputeDomain nvl-1:")
	deleted, _ := metricValue(t, "berth_modelserving_compute_domains_total", map[string]string{"operation": "delete"})
	assert.Equal(t, deleted0+1, deleted, "berth_modelserving_compute_domains_total{operation=delete} counts the deletion")
	_, err = w.computeDomain("nvl-0")
	require.NoError(t, err, "the kept group keeps its domain")
	assert.Len(t, w.pods(sel), 2)

	// A rolling update replaces group nvl-0 under its ordinal: the new pods wait for a fresh
	// domain, created once the old one went with the old pods.
	old, err := w.computeDomain("nvl-0")
	require.NoError(t, err)
	oldPods := w.pods(sel)
	w.change("nvl", func(ms *workloadv1alpha1.ModelServing) {
		ms.Spec.Template.Roles[0].EntryTemplate.Spec.Containers[0].Image = "vllm:v2"
	})
	w.eventually("nvl-0 is back on the new template with a new domain", 60*time.Second, func() bool { return w.replacedWithNewDomain("nvl-0", old, sel, oldPods) })
	w.expectEvent("nvl", "Normal", workload.ReasonDeleteComputeDomain, "ComputeDomain nvl-0:")
	cd, err = w.computeDomain("nvl-0")
	require.NoError(t, err)
	assert.Empty(t, cd.GetLabels()["berth.sh/compute-domain-retired"], "the new domain is not the retired one")
	for _, p := range w.pods(sel) {
		assert.False(t, p.CreationTimestamp.Before(ptr.To(cd.GetCreationTimestamp())), "pod %s is not older than its new domain", p.Name)
		require.Len(t, p.Spec.ResourceClaims, 1)
		assert.Equal(t, "nvl-0-channel", ptr.Deref(p.Spec.ResourceClaims[0].ResourceClaimTemplateName, ""))
	}
}

// ServingGroupRecreate restarts a group whole: the group's new pods get a fresh domain, the
// old one deleted once the old pods are gone; pods never claim a retired domain.
func TestComputeDomainFollowsGroupRecreate(t *testing.T) {
	w := newWorld(t, 2)
	dir, err := filepath.Abs(filepath.Join("testdata", "computedomain"))
	require.NoError(t, err)
	require.NoError(t, cp.InstallCRDs(w.ctx, dir))
	sel := map[string]string{workloadv1alpha1.ModelServingNameLabel: "rec"}
	manifest := strings.Replace(nvl("rec", "true", 1), "  replicas: 1\n", "  replicas: 1\n  recoveryPolicy: ServingGroupRecreate\n", 1)
	w.apply(manifest)
	w.eventually("the group's pods exist", 60*time.Second, func() bool { return len(w.pods(sel)) == 2 })
	old, err := w.computeDomain("rec-0")
	require.NoError(t, err)
	before := w.pods(sel)

	require.NoError(t, kubelet.FailPod(w.ctx, w.ns, "rec-0-server-0-1"))
	w.eventually("the group is recreated with a new domain", 60*time.Second, func() bool { return w.replacedWithNewDomain("rec-0", old, sel, before) })
	w.expectEvent("rec", "Warning", workload.ReasonRecreateGroup, "rec-0")
	w.expectEvent("rec", "Normal", workload.ReasonDeleteComputeDomain, "ComputeDomain rec-0: the group it served was recreated")
	cd, err := w.computeDomain("rec-0")
	require.NoError(t, err)
	for _, p := range w.pods(sel) {
		assert.False(t, p.CreationTimestamp.Before(ptr.To(cd.GetCreationTimestamp())), "pod %s is not older than the new domain", p.Name)
		assert.Equal(t, "rec-0-channel", ptr.Deref(p.Spec.ResourceClaims[0].ResourceClaimTemplateName, ""))
	}
}

// replacedWithNewDomain: the group's ComputeDomain is another object than old, and the
// group's two pods are all new (none of before).
func (w *world) replacedWithNewDomain(name string, old *unstructured.Unstructured, sel map[string]string, before []corev1.Pod) bool {
	cd, err := w.computeDomain(name)
	if err != nil || cd.GetUID() == old.GetUID() {
		return false
	}
	pods := w.pods(sel)
	if len(pods) != 2 {
		return false
	}
	for _, p := range pods {
		for _, o := range before {
			if p.UID == o.UID {
				return false
			}
		}
	}
	return true
}
