package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

var (
	nsCounter atomic.Int32
	nonDNS    = regexp.MustCompile(`[^a-z0-9-]+`)
)

// newClient returns a typed client that knows Berth's kinds, so a test can create objects
// from YAML (unstructured) and read them back into the Go types users of the API get.
func newClient(t *testing.T) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	require.NoError(t, clientgoscheme.AddToScheme(scheme))
	require.NoError(t, workloadv1alpha1.AddToScheme(scheme))
	require.NoError(t, networkingv1alpha1.AddToScheme(scheme))
	c, err := client.New(cp.RESTConfig(), client.Options{Scheme: scheme})
	require.NoError(t, err)
	return c
}

// newNamespace creates a namespace for one test so tests never see each other's objects.
func newNamespace(t *testing.T, c client.Client) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", nonDNS.ReplaceAllString(strings.ToLower(t.Name()), "-"), nsCounter.Add(1))
	if len(name) > 63 {
		name = fmt.Sprintf("api-test-%d", nsCounter.Add(1))
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	require.NoError(t, c.Create(context.Background(), ns))
	t.Cleanup(func() { _ = c.Delete(context.Background(), ns) })
	return name
}

// decodeYAML turns a (multi-document) YAML manifest into objects.
func decodeYAML(t *testing.T, manifest string) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var out []*unstructured.Unstructured
	for {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return out
			}
			require.NoError(t, err)
		}
		if len(raw.Raw) == 0 || string(raw.Raw) == "null" {
			continue
		}
		// Through the unstructured JSON decoder, so integers stay int64 as the apiserver returns them.
		obj := &unstructured.Unstructured{}
		require.NoError(t, obj.UnmarshalJSON(raw.Raw))
		out = append(out, obj)
	}
}

// clientObject is what createMinimal needs of a Go API type.
type clientObject = client.Object

func keyOf(obj client.Object) client.ObjectKey { return client.ObjectKeyFromObject(obj) }

// dryRunAll asks the apiserver to validate without storing.
var dryRunAll = client.DryRunAll
