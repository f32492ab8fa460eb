// Package manifests_test checks the kustomize base as an operator installs it.
package manifests_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	inferenceapi "github.com/berth-sh/berth/pkg/apis/llmaz/inference/v1alpha1"
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

// The Helm chart ships the same release: its appVersion (the images' default tag) is VERSION
// and its SemVer version is VERSION without the v.
func TestChartCarriesTheVersion(t *testing.T) {
	raw, err := os.ReadFile("../VERSION")
	require.NoError(t, err)
	version := strings.TrimSpace(string(raw))
	chartYAML, err := os.ReadFile("../charts/berth/Chart.yaml")
	require.NoError(t, err)
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	require.NoError(t, yaml.Unmarshal(chartYAML, &chart))
	assert.Equal(t, version, chart.AppVersion, "charts/berth/Chart.yaml appVersion")
	assert.Equal(t, strings.TrimPrefix(version, "v"), chart.Version, "charts/berth/Chart.yaml version")
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

// The llmaz BackendRuntimes component (components/llmaz-backendruntimes): a kustomize
// Component listing one plain YAML file per default runtime, each a single BackendRuntime
// named after its file, every field one the API has (read strictly), and an image version
// that is a release, never latest. The Helm chart copies these files as they are;
// test/integration/llmaz installs them and serves a Playground of each.
func TestLLMazBackendRuntimesComponent(t *testing.T) {
	dir := filepath.Join("components", "llmaz-backendruntimes")
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(raw, &k))
	assert.Equal(t, "kustomize.config.k8s.io/v1alpha1", k.APIVersion)
	assert.Equal(t, "Component", k.Kind)
	assert.ElementsMatch(t, []string{"vllm.yaml", "sglang.yaml", "llamacpp.yaml", "tgi.yaml", "ollama.yaml"}, k.Resources)

	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name() != "kustomization.yaml" {
			assert.True(t, slices.Contains(k.Resources, e.Name()), "%s is listed in the kustomization", e.Name())
		}
	}
	for _, file := range k.Resources {
		raw, err := os.ReadFile(filepath.Join(dir, file))
		require.NoError(t, err)
		assert.NotContains(t, "\n"+string(raw), "\n---", "%s: one object", file)
		var br inferenceapi.BackendRuntime
		require.NoError(t, yaml.UnmarshalStrict(raw, &br), file)
		assert.Equal(t, "inference.llmaz.io/v1alpha1", br.APIVersion, file)
		assert.Equal(t, "BackendRuntime", br.Kind, file)
		assert.Equal(t, strings.TrimSuffix(file, ".yaml"), br.Name, "%s is named after its file", file)
		assert.Empty(t, br.Namespace, "%s: BackendRuntimes are cluster-scoped", file)
		assert.NotEmpty(t, br.Spec.Image, file)
		assert.NotContains(t, []string{"", "latest"}, br.Spec.Version, "%s: a released version", file)
		assert.True(t, slices.ContainsFunc(br.Spec.RecommendedConfigs, func(c inferenceapi.RecommendedConfig) bool { return c.Name == "default" }),
			"%s: a \"default\" config, the one a Playground without configName uses", file)
	}
}
