// Package cptest runs one shared control plane per test package:
//
//	var cp *controlplane.ControlPlane
//
//	func TestMain(m *testing.M) { cptest.Main(m, &cp) }
//
// Starting the apiserver costs seconds, so tests share it and isolate
// themselves by namespace (or unique object names) instead.
package cptest

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/berth-sh/berth/internal/controlplane"
)

// startTimeout covers building etcd on a cold cache, which on a small
// machine can take minutes, plus the apiserver start.
const startTimeout = 10 * time.Minute

// Main starts a control plane with default options (the repository's CRDs),
// stores it in *cp, runs the tests, stops it and exits with the tests'
// status. Call it from TestMain; it does not return.
func Main(m *testing.M, cp **controlplane.ControlPlane) {
	MainWithOptions(m, cp, controlplane.Options{})
}

// MainWithOptions is Main with explicit control plane options.
func MainWithOptions(m *testing.M, cp **controlplane.ControlPlane, opts controlplane.Options) {
	os.Exit(run(m, cp, opts))
}

func run(m *testing.M, cp **controlplane.ControlPlane, opts controlplane.Options) int {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := controlplane.Start(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cptest: starting control plane: %v\n", err)
		return 1
	}
	*cp = c
	// os.Exit skips deferred calls, so Stop must run before run returns.
	defer c.Stop()

	// On Ctrl-C, stop cleanly (removing temp dirs) instead of dying with
	// the tests half done; etcd would be killed anyway via Pdeathsig.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "cptest: %v, stopping control plane\n", s)
		c.Stop()
		os.Exit(1)
	}()

	code := m.Run()
	runBeforeStop()
	return code
}

var (
	beforeStopMu sync.Mutex
	beforeStop   []func()
)

// BeforeStop registers f to run after the tests and before the control plane stops. Tests
// that start long-running clients (a scheduler, a controller manager) stop them here: the
// apiserver otherwise waits a minute for their open watches before it shuts down.
func BeforeStop(f func()) {
	beforeStopMu.Lock()
	defer beforeStopMu.Unlock()
	beforeStop = append(beforeStop, f)
}

func runBeforeStop() {
	beforeStopMu.Lock()
	fs := beforeStop
	beforeStop = nil
	beforeStopMu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}
