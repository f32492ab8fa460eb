package llmaz

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/berth-sh/berth/internal/systemtest"
	coreapi "github.com/berth-sh/berth/pkg/apis/llmaz/core/v1alpha1"
	inferenceapi "github.com/berth-sh/berth/pkg/apis/llmaz/inference/v1alpha1"
	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

const repoRoot = "../../.."

// defaultRuntimes are the BackendRuntimes llmaz's install ships, by the names Playgrounds
// use.
var defaultRuntimes = []string{"llamacpp", "ollama", "sglang", "tgi", "vllm"}

// documentedOverlay is the overlay docs/install.md tells an llmaz user to write, read from
// its section "llmaz users: default BackendRuntimes" so the page and this test cannot drift.
func documentedOverlay(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "docs", "install.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(raw), "\n## llmaz users: default BackendRuntimes\n")
	require.True(t, ok, "docs/install.md has the section")
	m := regexp.MustCompile(`(?s)cat > my-berth/kustomization\.yaml <<'YAML'\n(.*?)\nYAML\n`).FindStringSubmatch(section)
	require.NotNil(t, m, "the section writes my-berth/kustomization.yaml")
	return m[1]
}

// kustomize builds dir of the repository's manifests/ (copied into memory under
// /berth/manifests) beside an overlay /berth/my-berth holding overlay, as an operator's
// checkout would have them, with kustomize's own library (what `kubectl apply -k` runs).
func kustomize(t *testing.T, overlay, dir string) []*unstructured.Unstructured {
	t.Helper()
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(filepath.Join(repoRoot, "manifests"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(repoRoot, path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return mem.WriteFile(filepath.Join("/berth", rel), data)
	})
	require.NoError(t, err)
	require.NoError(t, mem.WriteFile("/berth/my-berth/kustomization.yaml", []byte(overlay)))
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(mem, dir)
	require.NoError(t, err, "kustomize build %s", dir)
	var out []*unstructured.Unstructured
	for _, r := range res.Resources() {
		m, err := r.Map()
		require.NoError(t, err)
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out
}

func objectKey(u *unstructured.Unstructured) string {
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

// installDefaultRuntimes builds the documented overlay (the base plus the component), checks
// it adds the default BackendRuntimes and nothing else, and applies them server-side, as
// `kubectl apply --server-side -k my-berth` would. The rest of the overlay is the base the
// test system already runs in-process (its CRDs are installed from the same files). The
// runtimes are removed when the test ends.
func installDefaultRuntimes(t *testing.T, w *world) map[string]*inferenceapi.BackendRuntime {
	t.Helper()
	base := map[string]*unstructured.Unstructured{}
	for _, u := range kustomize(t, documentedOverlay(t), "/berth/manifests") {
		base[objectKey(u)] = u
	}
	runtimes := map[string]*inferenceapi.BackendRuntime{}
	var applied []*unstructured.Unstructured
	for _, u := range kustomize(t, documentedOverlay(t), "/berth/my-berth") {
		if b, ok := base[objectKey(u)]; ok {
			assert.Equal(t, b.Object, u.Object, "%s: the component leaves the base's objects as they are", objectKey(u))
			delete(base, objectKey(u))
			continue
		}
		require.Equal(t, "BackendRuntime", u.GetKind(), "%s: the component adds BackendRuntimes only", objectKey(u))
		assert.Empty(t, u.GetNamespace(), "%s: BackendRuntimes are cluster-scoped", objectKey(u))
		raw, err := u.MarshalJSON()
		require.NoError(t, err)
		obj, err := systemtest.Decode(string(raw)) // strictly: a misspelt field fails here
		require.NoError(t, err, objectKey(u))
		runtimes[u.GetName()] = obj.(*inferenceapi.BackendRuntime)
		applied = append(applied, u)
	}
	assert.Empty(t, base, "the overlay keeps every object of the base")
	names := slices.Sorted(maps.Keys(runtimes))
	assert.Equal(t, defaultRuntimes, names, "the component ships llmaz's default runtimes, %s (a Playground's default) among them", inferenceapi.DefaultBackend)

	for _, u := range applied {
		err := cl.Apply(w.ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("kubectl"), client.ForceOwnership)
		require.NoError(t, err, "server-side apply %s", objectKey(u))
		t.Cleanup(func() { _ = cl.Delete(context.Background(), u) })
	}
	return runtimes
}

// llmazDocPlayground is one of llmaz's documented Playgrounds (docs/examples/<runtime>),
// written here in its shape: an OpenModel and a Playground with replicas and a modelClaim,
// naming a runtime only when it is not the default. Model names differ where llmaz's
// examples reuse one (OpenModels are cluster-scoped and these run side by side).
type llmazDocPlayground struct {
	backend  string // "" for a Playground that names none
	name     string // Playground and OpenModel
	source   string // the OpenModel's spec.source
	flavors  bool   // the OpenModel has llmaz's one-GPU "t4" flavor
	wantArgs []string
	served   string // the model name the engine serves (the ModelServer's model)
}

func (p llmazDocPlayground) runtime() string {
	if p.backend == "" {
		return string(inferenceapi.DefaultBackend)
	}
	return p.backend
}

func (p llmazDocPlayground) manifests() []string {
	model := fmt.Sprintf(`
apiVersion: llmaz.io/v1alpha1
kind: OpenModel
metadata:
  name: %s
spec:
  familyName: qwen2
  source:
%s`, p.name, p.source)
	if p.flavors {
		model += `
  inferenceConfig:
    flavors:
      - name: t4
        limits:
          nvidia.com/gpu: 1
`
	}
	pg := fmt.Sprintf(`
apiVersion: inference.llmaz.io/v1alpha1
kind: Playground
metadata:
  name: %s
spec:
  replicas: 1
  modelClaim:
    modelName: %s
`, p.name, p.name)
	if p.backend != "" {
		pg += "  backendRuntimeConfig:\n    backendName: " + p.backend + "\n"
	}
	return []string{model, pg}
}

var llmazDocPlaygrounds = []llmazDocPlayground{
	{
		name:    "opt-125m",
		source:  "    modelHub:\n      modelID: facebook/opt-125m\n",
		flavors: true,
		wantArgs: []string{"--model", "/workspace/models/models--facebook--opt-125m", "--served-model-name", "opt-125m",
			"--host", "0.0.0.0", "--port", "8080"},
		served: "opt-125m",
	},
	{
		backend: "sglang",
		name:    "qwen2-0--5b",
		source:  "    modelHub:\n      modelID: Qwen/Qwen2-0.5B-Instruct\n",
		flavors: true,
		wantArgs: []string{"--model-path", "/workspace/models/models--Qwen--Qwen2-0.5B-Instruct", "--served-model-name", "qwen2-0--5b",
			"--host", "0.0.0.0", "--port", "8080", "--enable-metrics"},
		served: "qwen2-0--5b",
	},
	{
		backend: "llamacpp",
		name:    "qwen2-0--5b-gguf",
		source:  "    modelHub:\n      modelID: Qwen/Qwen2-0.5B-Instruct-GGUF\n      filename: qwen2-0_5b-instruct-q5_k_m.gguf\n",
		wantArgs: []string{"-m", "/workspace/models/qwen2-0_5b-instruct-q5_k_m.gguf", "--alias", "qwen2-0--5b-gguf",
			"--host", "0.0.0.0", "--port", "8080", "--metrics"},
		served: "qwen2-0--5b-gguf",
	},
	{
		backend:  "tgi",
		name:     "qwen2-1--5b",
		source:   "    modelHub:\n      modelID: Qwen/Qwen2-1.5B-Instruct\n",
		flavors:  true,
		wantArgs: []string{"--model-id", "/workspace/models/models--Qwen--Qwen2-1.5B-Instruct", "--hostname", "0.0.0.0", "--port", "8080"},
		served:   "qwen2-1--5b",
	},
	{
		backend: "ollama",
		name:    "qwen2-0--5b-ollama",
		source:  "    uri: ollama://qwen2:0.5b\n",
		// Ollama pulls and serves the model by its own name; berth-router takes requests for
		// the OpenModel's name and rewrites them to it.
		served: "qwen2:0.5b",
	},
}

// llmaz's default BackendRuntimes, shipped as the kustomize component
// manifests/components/llmaz-backendruntimes. On a fresh cluster (no BackendRuntime), a
// Playground of each runtime, written as llmaz's documentation writes it, reports
// BackendRuntimeNotFound naming its runtime and creates nothing. With only the component
// added (the overlay docs/install.md documents, built with kustomize and applied
// server-side), every runtime is Valid and every Playground, untouched, comes up: its
// Service runs the runtime's image and command with llmaz's placeholders rendered, its pod
// is Running and Ready, and it answers a chat completion through berth-router by the model's
// name.
func TestDefaultBackendRuntimesComponent(t *testing.T) {
	w := newWorld(t, 1)
	for _, name := range defaultRuntimes {
		err := cl.Get(w.ctx, client.ObjectKey{Name: name}, &inferenceapi.BackendRuntime{})
		require.True(t, apierrors.IsNotFound(err), "a fresh cluster has no BackendRuntime %s (%v)", name, err)
	}
	for _, p := range llmazDocPlaygrounds {
		w.apply(p.manifests()...)
	}

	// Without the component: each Playground waits for its runtime.
	for _, p := range llmazDocPlaygrounds {
		w.eventually(p.name+" reports BackendRuntimeNotFound", func() bool {
			s, reason, msg := condition(w.playground(p.name).Status.Conditions, "Available")
			return s == "False" && reason == "BackendRuntimeNotFound" && strings.Contains(msg, fmt.Sprintf("BackendRuntime %q not found", p.runtime()))
		})
		err := cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: p.name}, &inferenceapi.Service{})
		assert.True(t, apierrors.IsNotFound(err), "%s: no Service without its runtime", p.name)
	}

	// With the component.
	runtimes := installDefaultRuntimes(t, w)
	for name := range runtimes {
		w.eventually("BackendRuntime "+name+" Valid", func() bool {
			var br inferenceapi.BackendRuntime
			if err := cl.Get(w.ctx, client.ObjectKey{Name: name}, &br); err != nil {
				return false
			}
			s, _, _ := condition(br.Status.Conditions, "Valid")
			return s == "True"
		})
	}
	for _, p := range llmazDocPlaygrounds {
		t.Run(p.runtime(), func(t *testing.T) {
			w := &world{t: t, ctx: w.ctx, ns: w.ns}
			pg := w.waitPlaygroundAvailable(p.name)
			br := runtimes[p.runtime()]
			require.NotNil(t, br, "the component has no BackendRuntime %q", p.runtime())
			_, reason, _ := condition(pg.Status.Conditions, "Available")
			assert.Equal(t, "Available", reason)
			assert.Equal(t, int32(1), pg.Status.Replicas)

			c := w.service(p.name).Spec.WorkloadTemplate.WorkerTemplate.Spec.Containers[0]
			assert.Equal(t, br.Spec.Image+":"+br.Spec.Version, c.Image)
			assert.Equal(t, br.Spec.Command, c.Command)
			if p.wantArgs != nil {
				assert.Equal(t, p.wantArgs, c.Args, "the runtime's default config, rendered")
			} else {
				require.Len(t, c.Args, 1)
				assert.Contains(t, c.Args[0], "ollama pull "+p.served+" ", "the runtime's default config, rendered")
			}
			assert.Equal(t, int32(8080), c.Ports[0].ContainerPort)

			var ms networkingv1alpha1.ModelServer
			require.NoError(t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: p.name}, &ms))
			assert.Equal(t, p.served, *ms.Spec.Model)

			var pods corev1.PodList
			require.NoError(t, cl.List(w.ctx, &pods, client.InNamespace(w.ns), client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: p.name}))
			require.Len(t, pods.Items, 1, "one pod for one replica")
			pod := pods.Items[0]
			assert.Equal(t, corev1.PodRunning, pod.Status.Phase, pod.Name)
			assert.True(t, slices.ContainsFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool {
				return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
			}), "%s is Ready", pod.Name)
			assert.Equal(t, p.name, pod.Labels[coreapi.ModelNameLabelKey])

			assert.NotEmpty(t, w.chat(p.name), "a chat completion for %s through berth-router", p.name)
		})
	}
}
