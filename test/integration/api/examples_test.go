package api

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestExamplesApply applies every manifest under examples/ and reads each object back: the
// apiserver must accept it and keep every field the user wrote, unchanged (defaults may be
// added around them, nothing may be dropped or altered).
func TestExamplesApply(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "examples", "*.yaml"))
	require.NoError(t, err)
	// Examples for one sandbox fabric (examples/nvl72 for --nvl72) sit a directory down.
	nested, err := filepath.Glob(filepath.Join("..", "..", "..", "examples", "*", "*.yaml"))
	require.NoError(t, err)
	files = append(files, nested...)
	require.NotEmpty(t, files, "examples/ holds no manifest")

	c := newClient(t)
	ctx := context.Background()
	kinds := map[string]bool{}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			raw, err := os.ReadFile(file)
			require.NoError(t, err)
			ns := newNamespace(t, c)
			objs := decodeYAML(t, string(raw))
			require.NotEmpty(t, objs)
			for _, obj := range objs {
				kinds[obj.GetKind()] = true
				want := obj.DeepCopy()
				obj.SetNamespace(ns)
				require.NoError(t, c.Create(ctx, obj), "%s %s", obj.GetKind(), obj.GetName())

				got := &unstructured.Unstructured{}
				got.SetGroupVersionKind(obj.GroupVersionKind())
				require.NoError(t, c.Get(ctx, keyOf(obj), got))
				if diffs := missingFrom(want.Object["spec"], got.Object["spec"], "spec"); len(diffs) > 0 {
					t.Errorf("%s %s did not read back as written:\n%s", obj.GetKind(), obj.GetName(), joinLines(diffs))
				}
			}
		})
	}
	// The examples cover every kind of the API, so a user has a starting point for each.
	for _, kind := range []string{"ModelServing", "ModelBooster", "AutoscalingPolicy", "AutoscalingPolicyBinding", "ModelRoute", "ModelServer",
		"OpenModel", "BackendRuntime", "Playground", "Service", "VariantAutoscaling"} {
		require.True(t, kinds[kind], "no example of %s", kind)
	}
}

// missingFrom lists every value of want that got lacks or holds differently. Maps compare
// key by key (got may have more keys: defaults); lists and scalars must match exactly.
func missingFrom(want, got any, path string) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: want an object, got %v", path, got)}
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var out []string
		for _, k := range keys {
			out = append(out, missingFrom(w[k], g[k], path+"."+k)...)
		}
		return out
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return []string{fmt.Sprintf("%s: want %d items, got %v", path, len(w), got)}
		}
		var out []string
		for i := range w {
			out = append(out, missingFrom(w[i], g[i], fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	default:
		if !reflect.DeepEqual(want, got) {
			return []string{fmt.Sprintf("%s: want %v (%T), got %v (%T)", path, want, want, got, got)}
		}
		return nil
	}
}

func joinLines(lines []string) string {
	out := ""
	for _, l := range lines {
		out += "  " + l + "\n"
	}
	return out
}
