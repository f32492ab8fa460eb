package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/sandbox"
)

// sandboxWorkers is how many plain workers the sandbox gets (docs/kind.md's cluster has 4).
const sandboxWorkers = 4

// TestMain runs the suite against the cluster KUBECONFIG names when BERTH_E2E=1 (kind, see
// docs/kind.md). Otherwise, as in `make test`, it starts the sandbox with plain workers
// (no GPUs, no network tiers: the suite adds both, as on kind) and runs the same tests
// against it, through nothing but the kubeconfig the sandbox writes.
func TestMain(m *testing.M) {
	if os.Getenv(enableEnv) == "1" {
		os.Exit(m.Run())
	}
	os.Exit(runOnSandbox(m))
}

func runOnSandbox(m *testing.M) int {
	sandbox.ConfigureLogging(0)
	dir, err := os.MkdirTemp("", "berth-e2e-sandbox-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	examples := filepath.Join(dir, "examples") // the suite creates its own objects
	if err := os.Mkdir(examples, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	o := sandbox.Options{
		PlainNodes:    sandboxWorkers,
		ExamplesDir:   examples,
		Kubeconfig:    filepath.Join(dir, "kubeconfig"),
		Timeout:       time.Hour,
		PodStartDelay: 200 * time.Millisecond,
		RouterAddr:    "127.0.0.1:0",
		OnReady:       func(kubeconfig string) { ready <- kubeconfig },
	}
	go func() { done <- sandbox.Run(ctx, o, io.Discard) }()
	defer func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "e2e: sandbox:", err)
		}
	}()
	select {
	case kubeconfig := <-ready:
		fmt.Fprintf(os.Stderr, "e2e: running against the sandbox (%d plain workers), kubeconfig %s\n", sandboxWorkers, kubeconfig)
		os.Setenv("KUBECONFIG", kubeconfig)
		os.Setenv(enableEnv, "1")
		startedSandbox = true
	case err := <-done:
		fmt.Fprintln(os.Stderr, "e2e: the sandbox did not start:", err)
		return 1
	case <-time.After(10 * time.Minute):
		fmt.Fprintln(os.Stderr, "e2e: the sandbox did not start within 10 minutes")
		return 1
	}
	return m.Run()
}
