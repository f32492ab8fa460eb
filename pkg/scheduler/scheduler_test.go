package scheduler_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/inprocess"
	"github.com/berth-sh/berth/pkg/scheduler"
)

// The plugins start informers against an apiserver when they are built, and kube-scheduler
// builds a profile's plugins in no fixed order: without one, a plugin that cannot reach it
// could fail first and hide the error under test.
var cp *controlplane.ControlPlane

func TestMain(m *testing.M) { cptest.Main(m, &cp) }

func kubeconfig(t *testing.T) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "kubeconfig")
	require.NoError(t, cp.WriteKubeconfig(path))
	return dir, path
}

// The shipped configuration (manifests/scheduler/config.yaml) builds every plugin: its
// args are valid under strict decoding.
func TestShippedConfigBuilds(t *testing.T) {
	dir, kc := kubeconfig(t)
	cfg, err := inprocess.SchedulerConfig(kc, inprocess.SchedulerOptions{})
	require.NoError(t, err)
	path := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(path, cfg, 0o600))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, scheduler.Build(ctx, scheduler.Options{ConfigFile: path}))
}

// A misspelt plugin arg fails berth-scheduler's start, naming the field, instead of being
// dropped and leaving the plugin on its default.
func TestMisspeltArgFailsStart(t *testing.T) {
	dir, kc := kubeconfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := inprocess.RunScheduler(ctx, dir, kc, inprocess.SchedulerOptions{GangArgs: map[string]any{"permitWaitingTimeSecond": 60, "backoffSeconds": 2}})
	require.Error(t, err, "berth-scheduler started (and ran until the timeout) with a misspelt arg")
	assert.ErrorContains(t, err, `initializing plugin "BerthGang"`)
	assert.ErrorContains(t, err, `unknown field "permitWaitingTimeSecond"`)
}
