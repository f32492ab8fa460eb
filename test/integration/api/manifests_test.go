package api

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	assert.Equal(t, 11, kinds["CustomResourceDefinition"], "Berth's six CRDs, llm-d's VariantAutoscaling, llmaz's four kinds")
	assert.Equal(t, 3, kinds["Deployment"], "berth-scheduler, berth-controller and berth-router")
	assert.Equal(t, 1, kinds["ConfigMap"], "the scheduler's configuration")
	assert.Equal(t, 3, kinds["ClusterRole"], "one per component")
	assert.Equal(t, 1, kinds["Service"], "the router's")
}
