package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"
)

// crdReadyTimeout bounds how long installed CRDs may take to become usable;
// normally well under a second.
const crdReadyTimeout = time.Minute

// loadCRDs reads every CustomResourceDefinition in the YAML/JSON files under
// dirs (recursively, multi-document files allowed). Anything that is not a
// v1 CRD is an error: a stray manifest in a CRD directory is a mistake we
// want to hear about, not to skip.
func loadCRDs(dirs []string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var crds []*apiextensionsv1.CustomResourceDefinition
	seen := map[string]string{} // CRD name -> file
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || !isManifest(d.Name()) {
				return nil
			}
			fileCRDs, err := readCRDFile(path)
			if err != nil {
				return err
			}
			for _, crd := range fileCRDs {
				if prev, dup := seen[crd.Name]; dup {
					return fmt.Errorf("%s: CRD %s is also defined in %s", path, crd.Name, prev)
				}
				seen[crd.Name] = path
				crds = append(crds, crd)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("loading CRDs from %s: %w", dir, err)
		}
	}
	return crds, nil
}

func isManifest(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	switch name {
	case "kustomization.yaml", "kustomization.yml":
		return false // kustomize metadata, not a manifest
	}
	switch filepath.Ext(name) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

func readCRDFile(path string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var crds []*apiextensionsv1.CustomResourceDefinition
	reader := utilyaml.NewYAMLReader(bufio.NewReader(f))
	for i := 1; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return crds, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if isEmptyYAML(doc) {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		if tm.APIVersion != apiextensionsv1.SchemeGroupVersion.String() || tm.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("%s: document %d: want a %s CustomResourceDefinition, got apiVersion %q kind %q",
				path, i, apiextensionsv1.SchemeGroupVersion, tm.APIVersion, tm.Kind)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		// Strict: the typed client would silently drop unknown fields, and
		// the CRD would then behave differently here than in a cluster.
		if err := yaml.UnmarshalStrict(doc, crd); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", path, i, err)
		}
		crds = append(crds, crd)
	}
}

// isEmptyYAML reports whether a YAML document holds only comments/blank lines.
func isEmptyYAML(doc []byte) bool {
	for line := range bytes.Lines(doc) {
		line = bytes.TrimSpace(line)
		if len(line) > 0 && line[0] != '#' {
			return false
		}
	}
	return true
}

// installCRDs creates (or updates) crds and waits until clients can use
// them: each CRD is Established and every served version is in discovery,
// so a RESTMapper built afterwards resolves it.
func installCRDs(ctx context.Context, logger klog.Logger, cfg *rest.Config, crds []*apiextensionsv1.CustomResourceDefinition) error {
	if len(crds) == 0 {
		return nil
	}
	client, err := apiextensionsclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crdClient := client.ApiextensionsV1().CustomResourceDefinitions()
	for _, crd := range crds {
		if err := createOrUpdateCRD(ctx, crdClient, crd); err != nil {
			return err
		}
	}

	ctx, cancel := context.WithTimeout(ctx, crdReadyTimeout)
	defer cancel()
	var lastEstablished time.Time
	for _, crd := range crds {
		established, err := waitEstablished(ctx, crdClient, crd.Name)
		if err != nil {
			return err
		}
		if established.After(lastEstablished) {
			lastEstablished = established
		}
	}
	if err := waitDiscoverable(ctx, cfg, crds); err != nil {
		return err
	}
	if err := waitPastCreateDelay(ctx, lastEstablished); err != nil {
		return err
	}
	logger.V(1).Info("Installed CRDs", "count", len(crds))
	return nil
}

// crdCreateDelayWindow mirrors the apiextensions server: a create of a
// custom resource whose CRD became Established less than this long ago
// sleeps 2s first (customresource_handler.go, an HA safeguard). Waiting
// the window out here, once, makes the first create of every kind fast and
// keeps test timings predictable.
const crdCreateDelayWindow = 2 * time.Second

// waitPastCreateDelay waits until established is crdCreateDelayWindow in the
// past. established comes from the Established condition, truncated to whole
// seconds, exactly as the server sees it; the server runs in this process,
// so the clocks agree.
func waitPastCreateDelay(ctx context.Context, established time.Time) error {
	d := time.Until(established.Add(crdCreateDelayWindow + 10*time.Millisecond))
	if d <= 0 {
		return nil
	}
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

type crdInterface interface {
	Create(context.Context, *apiextensionsv1.CustomResourceDefinition, metav1.CreateOptions) (*apiextensionsv1.CustomResourceDefinition, error)
	Update(context.Context, *apiextensionsv1.CustomResourceDefinition, metav1.UpdateOptions) (*apiextensionsv1.CustomResourceDefinition, error)
	Get(context.Context, string, metav1.GetOptions) (*apiextensionsv1.CustomResourceDefinition, error)
}

// createOrUpdateCRD makes InstallCRDs repeatable on a running control plane
// (e.g. a test reinstalling a changed CRD).
func createOrUpdateCRD(ctx context.Context, c crdInterface, crd *apiextensionsv1.CustomResourceDefinition) error {
	crd = crd.DeepCopy()
	crd.ResourceVersion = ""
	_, err := c.Create(ctx, crd, metav1.CreateOptions{})
	if err == nil {
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating CRD %s: %w", crd.Name, err)
	}
	existing, err := c.Get(ctx, crd.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("updating CRD %s: %w", crd.Name, err)
	}
	crd.ResourceVersion = existing.ResourceVersion
	if _, err := c.Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating CRD %s: %w", crd.Name, err)
	}
	return nil
}

// waitEstablished waits for the CRD's Established condition and returns its
// transition time.
func waitEstablished(ctx context.Context, c crdInterface, name string) (time.Time, error) {
	var last *apiextensionsv1.CustomResourceDefinition
	var established time.Time
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		crd, err := c.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil // transient; the timeout reports it
		}
		last = crd
		for _, cond := range crd.Status.Conditions {
			switch {
			case cond.Type == apiextensionsv1.NamesAccepted && cond.Status == apiextensionsv1.ConditionFalse:
				return false, fmt.Errorf("CRD %s: names not accepted: %s", name, cond.Message)
			case cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue:
				established = cond.LastTransitionTime.Time
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		var conds any
		if last != nil {
			conds = last.Status.Conditions
		}
		return time.Time{}, fmt.Errorf("waiting for CRD %s to be established (conditions: %+v): %w", name, conds, err)
	}
	return established, nil
}

// waitDiscoverable polls discovery the way clients (controller-runtime,
// kubectl) consume it, so that "installed" means "resolvable by a
// RESTMapper", not just "stored".
func waitDiscoverable(ctx context.Context, cfg *rest.Config, crds []*apiextensionsv1.CustomResourceDefinition) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	cached := memory.NewMemCacheClient(dc)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(cached)
	var missing error
	err = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		mapper.Reset()
		missing = nil
		for _, crd := range crds {
			gk := schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
			for _, v := range crd.Spec.Versions {
				if !v.Served {
					continue
				}
				m, err := mapper.RESTMapping(gk, v.Name)
				if err != nil {
					missing = fmt.Errorf("%s/%s: %w", gk, v.Name, err)
					return false, nil
				}
				if m.Resource.Resource != crd.Spec.Names.Plural {
					missing = fmt.Errorf("%s/%s maps to resource %q, want %q", gk, v.Name, m.Resource.Resource, crd.Spec.Names.Plural)
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for CRDs to appear in discovery (last: %v): %w", missing, err)
	}
	return nil
}
