package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sync"

	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/klog/v2"
	apiservertesting "k8s.io/kubernetes/cmd/kube-apiserver/app/testing"
	"k8s.io/kubernetes/test/utils/ktesting"
)

// DefaultAPIServerFlags are the kube-apiserver flags used when
// Options.APIServerFlags is nil.
func DefaultAPIServerFlags() []string {
	return []string{
		// There is no controller-manager, so nothing creates the "default"
		// ServiceAccount in new namespaces; with this plugin enabled every
		// pod create would be rejected after ~1s of retries. Same choice as
		// Kubernetes' own integration test framework.
		// TaintNodesByCondition: it taints every new node not-ready, and no node
		// lifecycle controller runs here to lift the taint once the node is Ready,
		// so simulated nodes would never take a pod.
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
	}
}

// apiServer is an in-process kube-apiserver (with the apiextensions and
// aggregator servers chained in, as in a real cluster).
type apiServer struct {
	server *apiservertesting.TestServer
	tb     *tbAdapter
}

// startAPIServer starts kube-apiserver against etcdURL and waits until
// /healthz is ok and the default namespace exists.
//
// The apiserver lives until stop is called; ctx only provides values (the
// logger). StartTestServer cannot be interrupted half way, its own waits
// are bounded (about 1.5 minutes).
func startAPIServer(ctx context.Context, logger klog.Logger, etcdURL string, flags []string, tempDir string) (s *apiServer, err error) {
	tb := &tbAdapter{logger: logger, tempDir: tempDir}
	// Anything registered via tb.Cleanup must run on failure too.
	defer func() {
		if err != nil {
			tb.runCleanups()
		}
	}()
	// tb.Fatal panics with tbFatal, and StartTestServer parses flags with
	// pflag.PanicOnError; both are startup errors, not crashes.
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(tbFatal); ok {
				err = fmt.Errorf("starting kube-apiserver: %s", f.msg)
			} else {
				err = fmt.Errorf("starting kube-apiserver: panic: %v", r)
			}
		}
	}()

	storage := storagebackend.NewDefaultConfig(storagePrefix(), nil)
	storage.Transport.ServerList = []string{etcdURL}

	// Handing StartTestServer an initialized TContext (rather than a plain
	// TB) skips ktesting.Init, which would install SIGINT/SIGUSR1 handlers
	// and a per-test logger meant for `go test`. The context must outlive
	// Start's ctx: cancelling it shuts the apiserver down.
	tCtx := ktesting.InitCtx(klog.NewContext(context.WithoutCancel(ctx), logger), tb)

	opts := apiservertesting.NewDefaultTestServerOptions()
	// The invariant check scrapes /metrics at teardown and reports metric
	// anomalies as test errors; it slows Stop and is about Kubernetes'
	// own correctness, not ours.
	opts.DisableInvariantChecks = true

	restore, err := workaroundTrimpath(tempDir)
	if err != nil {
		return nil, err
	}
	defer restore()
	server, err := apiservertesting.StartTestServer(tCtx, opts, flags, storage)
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver: %w", err)
	}
	return &apiServer{server: &server, tb: tb}, nil
}

// stop shuts the apiserver down and waits for it to finish. It closes the
// apiserver's etcd connections, so it must run before etcd is stopped.
func (s *apiServer) stop() {
	s.server.TearDownFn()
	s.tb.runCleanups()
}

// StartTestServer reads (and writes) certificate fixtures in a testdata dir
// next to its own source file, and fails if runtime.Caller gives no absolute
// path, which is the case in binaries built with -trimpath (as release builds
// of the sandbox may be). Its only escape hatch is Bazel's environment,
// which it joins in front of the relative path; pointing that into our temp
// dir makes it generate fresh certs there.
var trimpathEnvMu sync.Mutex

// workaroundTrimpath applies the Bazel environment when needed and returns
// a function undoing it.
func workaroundTrimpath(tempDir string) (restore func(), err error) {
	fn := runtime.FuncForPC(reflect.ValueOf(apiservertesting.StartTestServer).Pointer())
	file, _ := fn.FileLine(fn.Entry())
	if filepath.IsAbs(file) {
		return func() {}, nil
	}
	const workspace = "trimpath"
	if err := os.MkdirAll(filepath.Join(tempDir, workspace, filepath.Dir(file), "testdata"), 0o700); err != nil {
		return nil, err
	}
	trimpathEnvMu.Lock()
	prev := map[string]*string{}
	for k, v := range map[string]string{"TEST_SRCDIR": tempDir, "TEST_WORKSPACE": workspace} {
		if old, ok := os.LookupEnv(k); ok {
			prev[k] = &old
		} else {
			prev[k] = nil
		}
		_ = os.Setenv(k, v)
	}
	return func() {
		for k, old := range prev {
			if old != nil {
				_ = os.Setenv(k, *old)
			} else {
				_ = os.Unsetenv(k)
			}
		}
		trimpathEnvMu.Unlock()
	}, nil
}

// storagePrefix returns a random etcd key prefix. Each control plane owns
// its etcd, but a unique prefix keeps that true even if an etcd were ever
// shared, and matches what the Kubernetes test framework does.
func storagePrefix() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "/berth-" + hex.EncodeToString(b) + "/registry"
}

// tbAdapter implements ktesting.TB outside of `go test`, so the upstream
// test server can run in TestMain (no *testing.T exists there) and in the
// sandbox binary. Logs go to a klog.Logger; fatal errors panic with tbFatal,
// which startAPIServer turns into an error.
type tbAdapter struct {
	logger  klog.Logger
	tempDir string // parent for TempDir, removed by the control plane

	mu       sync.Mutex
	failed   bool
	cleanups []func()
	tempN    int
}

var _ ktesting.TB = (*tbAdapter)(nil)

type tbFatal struct{ msg string }

func (t *tbAdapter) Name() string { return "berth-controlplane" }
func (t *tbAdapter) Helper()      {}

func (t *tbAdapter) Attr(key, value string) { t.logger.V(2).Info("Test attribute", key, value) }

func (t *tbAdapter) Log(args ...any) { t.logger.V(1).Info(fmt.Sprint(args...)) }
func (t *tbAdapter) Logf(format string, args ...any) {
	t.logger.V(1).Info(fmt.Sprintf(format, args...))
}

func (t *tbAdapter) Error(args ...any) {
	t.Fail()
	t.logger.Error(nil, fmt.Sprint(args...))
}
func (t *tbAdapter) Errorf(format string, args ...any) {
	t.Fail()
	t.logger.Error(nil, fmt.Sprintf(format, args...))
}

func (t *tbAdapter) Fail() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = true
}
func (t *tbAdapter) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *tbAdapter) FailNow() {
	t.Fail()
	panic(tbFatal{msg: "FailNow called"})
}
func (t *tbAdapter) Fatal(args ...any) {
	t.Fail()
	panic(tbFatal{msg: fmt.Sprint(args...)})
}
func (t *tbAdapter) Fatalf(format string, args ...any) {
	t.Fail()
	panic(tbFatal{msg: fmt.Sprintf(format, args...)})
}

// Skipping has no meaning outside a test; treat it as a failure so it is
// noticed rather than silently ignored.
func (t *tbAdapter) Skip(args ...any) { t.Fatal(append([]any{"skip requested: "}, args...)...) }
func (t *tbAdapter) Skipf(format string, args ...any) {
	t.Fatalf("skip requested: "+format, args...)
}
func (t *tbAdapter) SkipNow()      { t.Fatal("skip requested") }
func (t *tbAdapter) Skipped() bool { return false }

func (t *tbAdapter) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

// runCleanups runs registered cleanups last-in first-out, once.
func (t *tbAdapter) runCleanups() {
	t.mu.Lock()
	cleanups := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
}

func (t *tbAdapter) TempDir() string {
	t.mu.Lock()
	t.tempN++
	n := t.tempN
	t.mu.Unlock()
	dir := filepath.Join(t.tempDir, fmt.Sprintf("tb-%03d", n))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatalf("TempDir: %v", err)
	}
	return dir
}

// Setenv and Chdir change process-wide state, as testing.T's do; the
// previous value is restored on cleanup.
func (t *tbAdapter) Setenv(key, value string) {
	prev, had := os.LookupEnv(key)
	if err := os.Setenv(key, value); err != nil {
		t.Fatalf("Setenv: %v", err)
	}
	t.Cleanup(func() {
		if had {
			_ = os.Setenv(key, prev)
		} else {
			_ = os.Unsetenv(key)
		}
	})
}

func (t *tbAdapter) Chdir(dir string) {
	prev, err := os.Getwd()
	if err != nil {
		t.Fatalf("Chdir: %v", err)
	}
	if err := os.Chdir(dir); err != nil {
		t.Fatalf("Chdir: %v", err)
	}
	t.Cleanup(func() { _ = os.Chdir(prev) })
}
