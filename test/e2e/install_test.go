package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// The kind overlay (test/e2e/kind, what docs/kind.md installs) is manifests/ with only the
// image tags changed to the locally loaded e2e images, pulled only if not present. It needs
// no cluster, so it runs everywhere.
func TestKindOverlayIsManifestsWithLocalImages(t *testing.T) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	base, err := k.Run(filesys.MakeFsOnDisk(), "../../manifests")
	require.NoError(t, err, "kustomize build manifests")
	overlay, err := k.Run(filesys.MakeFsOnDisk(), "kind")
	require.NoError(t, err, "kustomize build test/e2e/kind")
	require.Equal(t, len(base.Resources()), len(overlay.Resources()), "the overlay adds or drops objects")

	images := map[string]string{}
	for _, r := range overlay.Resources() {
		if r.GetKind() != "Deployment" {
			continue
		}
		containers := containersOf(t, r)
		require.Len(t, containers, 1, r.GetName())
		c := containers[0]
		images[r.GetName()], _ = c["image"].(string)
		if policy, ok := c["imagePullPolicy"]; ok {
			assert.Equal(t, "IfNotPresent", policy, "%s must not pull the kind-loaded image", r.GetName())
		}
	}
	assert.Equal(t, map[string]string{
		"berth-scheduler":  "ghcr.io/berth-sh/berth-scheduler:e2e",
		"berth-controller": "ghcr.io/berth-sh/berth-controller:e2e",
		"berth-router":     "ghcr.io/berth-sh/berth-router:e2e",
	}, images, "docs/kind.md builds and loads these tags")
}

func containersOf(t *testing.T, r *resource.Resource) []map[string]any {
	t.Helper()
	m, err := r.Map()
	require.NoError(t, err)
	spec, _ := m["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	podSpec, _ := tmpl["spec"].(map[string]any)
	list, _ := podSpec["containers"].([]any)
	var out []map[string]any
	for _, c := range list {
		if cm, ok := c.(map[string]any); ok {
			out = append(out, cm)
		}
	}
	return out
}
