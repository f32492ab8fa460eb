package api

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// TestInstallManifestsApply renders the kustomize base an operator installs
// (`kubectl apply --server-side -k manifests/`) and applies every object with a server-side
// dry run: the apiserver validates the CRDs, RBAC, ConfigMap and Deployments as it would on
// a real cluster, and stores nothing.
func TestInstallManifestsApply(t *testing.T) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resources, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join("..", "..", "..", "manifests"))
	require.NoError(t, err, "kustomize build manifests/")
	raw, err := resources.AsYaml()
	require.NoError(t, err)
	objs := decodeYAML(t, string(raw))

	c := newClient(t)
	ctx := context.Background()
	// Namespaced objects need their namespace to exist, even for a dry run.
	for _, ns := range []string{"berth-system", "kube-system"} {
		err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
		if !apierrors.IsAlreadyExists(err) {
			require.NoError(t, err)
		}
	}
	kinds := map[string]int{}
	for _, obj := range objs {
		kinds[obj.GetKind()]++
		err := c.Patch(ctx, obj, client.Apply, client.FieldOwner("berth-install-test"), client.ForceOwnership, client.DryRunAll)
		assert.NoError(t, err, "%s %s/%s", obj.GetKind(), obj.GetNamespace(), obj.GetName())
	}
	assert.Equal(t, 12, kinds["CustomResourceDefinition"], "Kthena's seven kinds, llm-d's VariantAutoscaling, llmaz's four kinds")
	assert.Equal(t, 3, kinds["Deployment"], "berth-scheduler, berth-controller and berth-router")
	assert.Equal(t, 1, kinds["ConfigMap"], "the scheduler's configuration")
	assert.Equal(t, 6, kinds["ClusterRole"], "one per component, berth-metrics-reader, berth-edit and berth-view")
	assert.Equal(t, 3, kinds["Service"], "the router's and the scheduler's and controller's metrics Services")
	assert.Equal(t, 3, kinds["PodDisruptionBudget"], "one per two-replica Deployment")
	assert.Equal(t, 1, kinds["ResourceQuota"], "the quota that admits system-cluster-critical pods on GKE")

	// Least privilege in the pods, as shipped: every Deployment runs two replicas as a
	// non-root user, and every container has a read-only root file system, cannot gain
	// privileges and drops every capability, adding none.
	for _, obj := range objs {
		if obj.GetKind() != "Deployment" {
			continue
		}
		var d appsv1.Deployment
		require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d))
		assert.Equal(t, int32(2), ptr.Deref(d.Spec.Replicas, 1), "%s: two replicas (one leads or both serve)", d.Name)
		pod := d.Spec.Template.Spec
		require.NotNil(t, pod.SecurityContext, "%s: pod securityContext", d.Name)
		assert.True(t, ptr.Deref(pod.SecurityContext.RunAsNonRoot, false), "%s: runAsNonRoot", d.Name)
		assert.False(t, pod.HostNetwork || pod.HostPID || pod.HostIPC, "%s: no host namespaces", d.Name)
		for _, c := range append(pod.InitContainers, pod.Containers...) {
			sc := c.SecurityContext
			require.NotNil(t, sc, "%s/%s: container securityContext", d.Name, c.Name)
			assert.True(t, ptr.Deref(sc.ReadOnlyRootFilesystem, false), "%s/%s: readOnlyRootFilesystem", d.Name, c.Name)
			assert.False(t, ptr.Deref(sc.AllowPrivilegeEscalation, true), "%s/%s: allowPrivilegeEscalation false", d.Name, c.Name)
			assert.False(t, ptr.Deref(sc.Privileged, false), "%s/%s: not privileged", d.Name, c.Name)
			require.NotNil(t, sc.Capabilities, "%s/%s: capabilities", d.Name, c.Name)
			assert.Empty(t, sc.Capabilities.Add, "%s/%s: no added capabilities", d.Name, c.Name)
			assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop, "%s/%s: drops ALL", d.Name, c.Name)
		}
	}
}
