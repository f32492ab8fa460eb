package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// fieldManager owns the fields the sandbox applies, as kubectl's would.
const fieldManager = "berth-sandbox"

// manifest is one YAML document of an examples file.
type manifest struct {
	file string
	obj  *unstructured.Unstructured
}

// applied is an object the sandbox applied, as the apiserver returned it.
type applied struct {
	kind, namespace, name string
	uid                   types.UID
	file                  string
}

// readManifests reads every document of every *.yaml, *.yml and *.json file directly in dir,
// in file name order.
func readManifests(dir string) ([]manifest, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("examples: %w", err)
	}
	var out []manifest
	for _, e := range entries {
		ext := strings.ToLower(filepath.Ext(e.Name()))
		if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		docs, err := splitDocuments(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for i, doc := range docs {
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
				return nil, fmt.Errorf("%s: document %d: %w", path, i+1, err)
			}
			if len(obj.Object) == 0 {
				continue // only comments
			}
			if obj.GetAPIVersion() == "" || obj.GetKind() == "" || obj.GetName() == "" {
				return nil, fmt.Errorf("%s: document %d has no apiVersion, kind or metadata.name", path, i+1)
			}
			out = append(out, manifest{file: path, obj: obj})
		}
	}
	return out, nil
}

func splitDocuments(raw []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, doc)
	}
}

// applier server-side applies arbitrary kinds: the RESTMapper finds each kind's resource
// from discovery, so any installed CRD works, whether or not a controller acts on it.
type applier struct {
	dyn    dynamic.Interface
	kube   kubernetes.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
	nsSeen map[string]bool
}

func newApplier(cfg *rest.Config, kube kubernetes.Interface) (*applier, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &applier{dyn: dyn, kube: kube, nsSeen: map[string]bool{},
		mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

func (a *applier) apply(ctx context.Context, m manifest) (applied, error) {
	obj := m.obj.DeepCopy()
	gvk := obj.GroupVersionKind()
	mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.mapper.Reset() // a CRD installed after discovery was cached
		mapping, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return applied{}, fmt.Errorf("%s: %s %s: %w", m.file, gvk.Kind, obj.GetName(), err)
	}
	var res dynamic.ResourceInterface = a.dyn.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if obj.GetNamespace() == "" {
			obj.SetNamespace(metav1.NamespaceDefault)
		}
		if err := a.ensureNamespace(ctx, obj.GetNamespace()); err != nil {
			return applied{}, err
		}
		res = a.dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
	}
	got, err := res.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	if err != nil {
		return applied{}, fmt.Errorf("%s: %s %s: %w", m.file, gvk.Kind, obj.GetName(), err)
	}
	return applied{kind: got.GetKind(), namespace: got.GetNamespace(), name: got.GetName(), uid: got.GetUID(), file: m.file}, nil
}

func (a *applier) ensureNamespace(ctx context.Context, ns string) error {
	if a.nsSeen[ns] {
		return nil
	}
	_, err := a.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	a.nsSeen[ns] = true
	return nil
}

func (x applied) String() string {
	if x.namespace == "" {
		return x.kind + " " + x.name
	}
	return x.kind + " " + x.namespace + "/" + x.name
}
