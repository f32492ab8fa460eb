package controlplane_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) {
	// testdata/crds rather than the repository's manifests/crds: this
	// package tests the mechanism, not our API types.
	cptest.MainWithOptions(m, &cp, controlplane.Options{CRDDirs: []string{"testdata/crds"}})
}

func TestStartupTimings(t *testing.T) {
	tm := cp.StartupTimings()
	t.Logf("control plane startup: total %v (etcd binary %v, etcd %v, kube-apiserver %v, CRDs %v, controllers %v)",
		tm.Total.Round(time.Millisecond), tm.EtcdBinary.Round(time.Millisecond), tm.Etcd.Round(time.Millisecond),
		tm.APIServer.Round(time.Millisecond), tm.CRDs.Round(time.Millisecond), tm.Controllers.Round(time.Millisecond))
	// TestMain's control plane installs CRDs and runs the controllers: every phase did
	// work, so every phase must have been measured.
	requireConsistentTimings(t, tm, true, true)

	// The timings are of a start that finished: what each phase waited for is there. The
	// apiserver (and, through its readiness checks, etcd) is ready, and the CRD the CRD
	// phase installed is served.
	cfg := cp.RESTConfig()
	client := kubernetes.NewForConfigOrDie(cfg)
	body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(t.Context())
	if err != nil || string(body) != "ok" {
		t.Fatalf("GET /readyz after startup: %v: %q", err, body)
	}
	resources, err := client.Discovery().ServerResourcesForGroupVersion("test.berth.dev/v1")
	if err != nil {
		t.Fatalf("discovery of the CRD installed at startup: %v", err)
	}
	if !slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "widgets" }) {
		t.Fatalf("test.berth.dev/v1 serves %v, want widgets", resources.APIResources)
	}
}

// requireConsistentTimings checks what StartupTimings promises without judging speed: the
// phases that did work were measured, a phase that did not run reports zero, and the
// phases, which run one after another inside Start, add up to no more than the total.
// crds says whether any CRD was installed (installing none can take no measurable time).
func requireConsistentTimings(t *testing.T, tm controlplane.StartupTimings, crds, controllers bool) {
	t.Helper()
	phases := []struct {
		name string
		d    time.Duration
		ran  bool
	}{
		{"EtcdBinary", tm.EtcdBinary, true},
		{"Etcd", tm.Etcd, true},
		{"APIServer", tm.APIServer, true},
		{"CRDs", tm.CRDs, crds},
		{"Controllers", tm.Controllers, controllers},
	}
	var sum time.Duration
	for _, p := range phases {
		switch {
		case p.d < 0:
			t.Errorf("%s phase took %v: negative", p.name, p.d)
		case p.ran && p.d == 0:
			t.Errorf("%s phase did work but its timing is zero (not recorded): %+v", p.name, tm)
		case p.name == "Controllers" && !p.ran && p.d != 0:
			t.Errorf("no controllers ran, yet their phase took %v: %+v", p.d, tm)
		}
		sum += p.d
	}
	if tm.Total <= 0 {
		t.Errorf("Total is %v: not recorded: %+v", tm.Total, tm)
	}
	if sum > tm.Total {
		t.Errorf("the phases add up to %v, more than Total %v: a phase was counted twice or Total was taken too early: %+v", sum, tm.Total, tm)
	}
}

func TestCoreObjects(t *testing.T) {
	ctx := t.Context()
	client := kubernetes.NewForConfigOrDie(cp.RESTConfig())

	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "core-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	_, err = client.CoreV1().ConfigMaps(ns.Name).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cm"},
		Data:       map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create configmap: %v", err)
	}
	got, err := client.CoreV1().ConfigMaps(ns.Name).Get(ctx, "cm", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get configmap: %v", err)
	}
	if got.Data["k"] != "v" {
		t.Errorf("configmap data = %v, want k=v", got.Data)
	}

	// No controller-manager creates a "default" ServiceAccount; pods must
	// still be accepted (ServiceAccount admission is disabled by default).
	_, err = client.CoreV1().Pods(ns.Name).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
}

func TestCRDFromOptions(t *testing.T) {
	dyn := dynamic.NewForConfigOrDie(cp.RESTConfig())
	gvr := schema.GroupVersionResource{Group: "test.berth.dev", Version: "v1", Resource: "widgets"}
	createCustomObject(t, dyn, gvr, "Widget", "default", map[string]any{"size": int64(3)})
}

func TestInstallCRDsFromTempDir(t *testing.T) {
	dir := t.TempDir()
	// Multi-document, with an empty and a comment-only document, in a
	// subdirectory: all must be handled.
	sub := filepath.Join(dir, "nested")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(sub, "gadgets.yaml"), `
---
# only a comment
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.test.berth.dev
spec:
  group: test.berth.dev
  names: {kind: Gadget, listKind: GadgetList, plural: gadgets, singular: gadget}
  scope: Cluster
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: sprockets.test.berth.dev
spec:
  group: test.berth.dev
  names: {kind: Sprocket, listKind: SprocketList, plural: sprockets}
  scope: Namespaced
  versions:
  - name: v1beta1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`)
	writeFile(t, filepath.Join(dir, "README.md"), "not a manifest, ignored")

	ctx := t.Context()
	if err := cp.InstallCRDs(ctx, dir); err != nil {
		t.Fatalf("InstallCRDs: %v", err)
	}

	// "Installed" must mean immediately usable through a RESTMapper, which
	// is how controller-runtime clients resolve kinds.
	cfg := cp.RESTConfig()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(cfg)))
	m, err := mapper.RESTMapping(schema.GroupKind{Group: "test.berth.dev", Kind: "Gadget"}, "v1alpha1")
	if err != nil {
		t.Fatalf("RESTMapping for Gadget right after InstallCRDs: %v", err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	createCustomObject(t, dyn, m.Resource, "Gadget", "", map[string]any{"anything": "goes"})
	createCustomObject(t, dyn, schema.GroupVersionResource{Group: "test.berth.dev", Version: "v1beta1", Resource: "sprockets"},
		"Sprocket", "default", map[string]any{"teeth": int64(12)})

	// Installing again updates in place.
	if err := cp.InstallCRDs(ctx, dir); err != nil {
		t.Fatalf("InstallCRDs again: %v", err)
	}
}

func TestInstallCRDsRejectsNonCRD(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cm.yaml")
	writeFile(t, path, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
	err := cp.InstallCRDs(t.Context(), dir)
	if err == nil {
		t.Fatal("InstallCRDs accepted a ConfigMap manifest")
	}
	// Refused for what it is, not for any other reason (a missing directory, a parse error):
	// the message names the file, the document and the kind it found.
	want := path + `: document 1: want a apiextensions.k8s.io/v1 CustomResourceDefinition, got apiVersion "v1" kind "ConfigMap"`
	if !strings.Contains(err.Error(), want) {
		t.Errorf("InstallCRDs refused the ConfigMap with %q, want it to say %q", err, want)
	}
}

func TestWriteKubeconfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.WriteKubeconfig(path); err != nil {
		t.Fatal(err)
	}
	// It holds a bearer token: other users of the machine must not read it.
	if fi, err := os.Stat(path); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode is %v, want 0600", fi.Mode().Perm())
	}

	// Both checks run even if the other fails, so a broken file shows in both.
	t.Run("client-go", func(t *testing.T) {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatal(err)
		}
		client := kubernetes.NewForConfigOrDie(cfg)
		if _, err := client.CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
			t.Fatalf("get default namespace via kubeconfig: %v", err)
		}
	})

	// What the sandbox tells its users to do with the file is kubectl get of custom
	// resources; here, as the check this replaces ran it, in all namespaces. A Widget in
	// a namespace of its own must be listed.
	t.Run("kubectl get -A", func(t *testing.T) {
		kube := kubernetes.NewForConfigOrDie(cp.RESTConfig())
		ns, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "kubeconfig-"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gvr := schema.GroupVersionResource{Group: "test.berth.dev", Version: "v1", Resource: "widgets"}
		createCustomObject(t, dynamic.NewForConfigOrDie(cp.RESTConfig()), gvr, "Widget", ns.Name, map[string]any{"size": int64(1)})

		list, err := kubectlGetAllNamespaces(t.Context(), path, "widgets.test.berth.dev")
		if err != nil {
			t.Fatalf("kubectl --kubeconfig %s get widgets.test.berth.dev -A: %v", path, err)
		}
		if !slices.ContainsFunc(list.Items, func(o unstructured.Unstructured) bool {
			return o.GetNamespace() == ns.Name && o.GetName() == "obj1"
		}) {
			t.Fatalf("kubectl get widgets -A does not list %s/obj1; it lists %d widgets", ns.Name, len(list.Items))
		}
	})
}

// kubectlGetAllNamespaces does what `kubectl --kubeconfig <kubeconfig> get <resource> -A`
// does before it prints: it loads the file through the loading rules kubectl's
// --kubeconfig flag sets up (nothing but that file and its current context), resolves the
// resource argument ("plural.group", kubectl's way of naming a custom resource) through
// discovery, shortcuts included, and lists it across all namespaces.
//
// kubectl is not installed on CI, and its command code (k8s.io/kubectl/pkg/cmd) needs
// k8s.io/cli-runtime, which is not in this module's go.sum; these are the client-go
// pieces that code is built from. It shares nothing with the test's own clients, so a
// file that does not work on its own fails here.
func kubectlGetAllNamespaces(ctx context.Context, kubeconfig, resourceArg string) (*unstructured.UnstructuredList, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewShortcutExpander(restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), dc, nil)
	// "a.b.c" may be resource.version.group or resource.group; kubectl tries the former,
	// then the latter.
	var gvk schema.GroupVersionKind
	fullySpecified, groupResource := schema.ParseResourceArg(resourceArg)
	if fullySpecified != nil {
		gvk, _ = mapper.KindFor(*fullySpecified)
	}
	if gvk.Empty() {
		gvk, err = mapper.KindFor(groupResource.WithVersion(""))
		if meta.IsNoMatchError(err) {
			return nil, fmt.Errorf("the server doesn't have a resource type %q: %w", resourceArg, err)
		}
		if err != nil {
			return nil, fmt.Errorf("resolving %q through discovery: %w", resourceArg, err)
		}
	}
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return dyn.Resource(mapping.Resource).List(ctx, metav1.ListOptions{}) // no namespace: all of them
}

// TestStop starts a second, private control plane (the shared one must
// outlive this test) and checks Stop leaves no etcd process or files.
func TestStop(t *testing.T) {
	start := time.Now()
	c, err := controlplane.Start(t.Context(), controlplane.Options{CRDDirs: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second control plane (warm etcd binary, no CRDs) started in %v: %+v",
		time.Since(start).Round(time.Millisecond), c.StartupTimings())
	requireConsistentTimings(t, c.StartupTimings(), false, true)
	pid := c.EtcdPID()
	logPath := c.EtcdLogPath()
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("etcd pid %d not running before Stop: %v", pid, err)
	}

	start = time.Now()
	c.Stop()
	t.Logf("Stop took %v", time.Since(start).Round(time.Millisecond))
	c.Stop() // idempotent

	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("etcd pid %d still exists after Stop (kill -0: %v)", pid, err)
	}
	if _, err := os.Stat(logPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temp files not removed: stat %s: %v", logPath, err)
	}
	client := kubernetes.NewForConfigOrDie(c.RESTConfig())
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{}); err == nil {
		t.Error("apiserver still answers after Stop")
	}
}

func createCustomObject(t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, kind, namespace string, spec map[string]any) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.GroupVersion().String(),
		"kind":       kind,
		"metadata":   map[string]any{"name": "obj1"},
		"spec":       spec,
	}}
	var ri dynamic.ResourceInterface = dyn.Resource(gvr)
	if namespace != "" {
		ri = dyn.Resource(gvr).Namespace(namespace)
	}
	if _, err := ri.Create(t.Context(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create %s: %v", kind, err)
	}
	got, err := ri.Get(t.Context(), "obj1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s: %v", kind, err)
	}
	if got.GetUID() == "" {
		t.Errorf("%s has no UID", kind)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
