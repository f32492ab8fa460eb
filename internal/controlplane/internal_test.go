package controlplane

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
)

// The cached etcd binary is keyed by etcdVersion; if go.mod moves on and the
// constant does not, every machine would keep running the old etcd.
func TestEtcdVersionMatchesGoMod(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(gomod)) {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "require" {
			f = f[1:]
		}
		if len(f) >= 2 && f[0] == "go.etcd.io/etcd/server/v3" {
			if f[1] != etcdVersion {
				t.Fatalf("go.mod has go.etcd.io/etcd/server/v3 %s, etcdVersion is %s", f[1], etcdVersion)
			}
			return
		}
	}
	t.Fatal("go.etcd.io/etcd/server/v3 not found in go.mod")
}

func TestLoadCRDsErrors(t *testing.T) {
	const crd = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: things.test.berth.dev}
spec:
  group: test.berth.dev
  names: {kind: Thing, plural: things}
  scope: Namespaced
  versions: [{name: v1, served: true, storage: true}]
`
	// Each case names the error it must produce: any error would also pass for a loader
	// that fails for an unrelated reason (an unreadable file, a .yml it no longer reads)
	// before it ever gets to the check under test.
	for name, tc := range map[string]struct {
		files map[string]string
		want  []string // substrings of the error
	}{
		"unknown field": {
			files: map[string]string{"a.yaml": strings.Replace(crd, "scope:", "scoope:", 1)},
			want:  []string{"a.yaml: document 1:", `unknown field "scoope"`},
		},
		"duplicate": {
			files: map[string]string{"a.yaml": crd, "b.yml": crd},
			// WalkDir goes in lexical order: b.yml is the second definition.
			want: []string{"b.yml: CRD things.test.berth.dev is also defined in ", "a.yaml"},
		},
		"not a crd": {
			files: map[string]string{"a.yaml": "apiVersion: v1\nkind: ConfigMap\n"},
			want:  []string{`a.yaml: document 1: want a apiextensions.k8s.io/v1 CustomResourceDefinition, got apiVersion "v1" kind "ConfigMap"`},
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			for f, content := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := loadCRDs([]string{dir})
			if err == nil {
				t.Fatal("loadCRDs succeeded, want error")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("loadCRDs error does not contain %q:\n%v", want, err)
				}
			}
		})
	}

	t.Run("missing dir", func(t *testing.T) {
		_, err := loadCRDs([]string{filepath.Join(t.TempDir(), "nope")})
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("loadCRDs on a missing dir: %v, want an error wrapping fs.ErrNotExist", err)
		}
	})

	t.Run("ok", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("# header\n---\n"+crd+"---\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		crds, err := loadCRDs([]string{dir})
		if err != nil {
			t.Fatal(err)
		}
		if len(crds) != 1 || crds[0].Name != "things.test.berth.dev" {
			t.Fatalf("got %d CRDs", len(crds))
		}
	})
}

// Parallel test binaries on a cold cache must produce one intact binary.
// flock excludes separate opens even within one process, so goroutines
// stand in for processes here.
func TestEtcdBinaryConcurrentBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("links an etcd binary into a temp cache; skipped only with -short, make test runs it")
	}
	t.Setenv(envEtcdBinary, "")
	t.Setenv(envCacheDir, t.TempDir())

	var mu sync.Mutex
	builds := 0
	logger := funcr.New(func(prefix, args string) {
		if strings.Contains(args, `"Built etcd"`) {
			mu.Lock()
			builds++
			mu.Unlock()
		}
	}, funcr.Options{})

	const n = 3
	paths := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { paths[i], errs[i] = etcdBinary(t.Context(), logger) })
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if paths[i] != paths[0] {
			t.Fatalf("different paths: %q vs %q", paths[i], paths[0])
		}
	}
	if builds != 1 {
		t.Errorf("etcd built %d times, want 1", builds)
	}
	out, err := exec.CommandContext(t.Context(), paths[0], "--version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), strings.TrimPrefix(etcdVersion, "v")) {
		t.Fatalf("%s --version: %v\n%s", paths[0], err, out)
	}
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(paths[0]), ".etcd-build-*"))
	if len(leftovers) > 0 {
		t.Errorf("temporary build files left behind: %v", leftovers)
	}
}
