// Package manifests_test checks the kustomize base as an operator installs it.
package manifests_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Every image the shipped manifests name is one of Berth's, tagged with the release in the
// VERSION file: the tag the image build (make images) gives it. Never :latest, which is not a
// release and which the kubelet pulls on every start.
func TestImagesCarryTheVersion(t *testing.T) {
	raw, err := os.ReadFile("../VERSION")
	require.NoError(t, err)
	version := strings.TrimSpace(string(raw))

	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), ".")
	require.NoError(t, err, "kustomize build manifests/")
	images := map[string][]string{}
	for _, r := range res.Resources() {
		m, err := r.Map()
		require.NoError(t, err)
		for _, image := range podImages(m) {
			assert.NotContains(t, image, ":latest", "%s %s", r.GetKind(), r.GetName())
			assert.NotContains(t, image, "@", "%s %s: images are named by tag", r.GetKind(), r.GetName())
			images[r.GetKind()+"/"+r.GetName()] = append(images[r.GetKind()+"/"+r.GetName()], image)
		}
	}
	assert.Equal(t, map[string][]string{
		"Deployment/berth-scheduler":  {"ghcr.io/berth-sh/berth-scheduler:" + version},
		"Deployment/berth-controller": {"ghcr.io/berth-sh/berth-controller:" + version},
		"Deployment/berth-router":     {"ghcr.io/berth-sh/berth-router:" + version},
	}, images, "every image of the base, tagged with VERSION (%s)", version)
}

// podImages are the images of an object's pod template (a Deployment's, a DaemonSet's, ...)
// or of a Pod: its containers and init containers.
func podImages(obj map[string]any) []string {
	spec, _ := obj["spec"].(map[string]any)
	if tmpl, ok := spec["template"].(map[string]any); ok {
		spec, _ = tmpl["spec"].(map[string]any)
	}
	var out []string
	for _, field := range []string{"initContainers", "containers"} {
		list, _ := spec[field].([]any)
		for _, c := range list {
			if cm, ok := c.(map[string]any); ok {
				image, _ := cm["image"].(string)
				out = append(out, image)
			}
		}
	}
	return out
}
