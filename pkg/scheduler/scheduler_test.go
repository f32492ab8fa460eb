package scheduler_test

import (
	"bytes"
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
	"github.com/berth-sh/berth/pkg/version"
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

// --version prints Berth's version and the kube-scheduler release it embeds, and returns
// without starting anything (kube-scheduler's own handling would print the unstamped
// k8s.io/component-base version and exit the process).
func TestVersionFlag(t *testing.T) {
	for _, arg := range []string{"--version", "--version=true", "--version=raw"} {
		t.Run(arg, func(t *testing.T) {
			cmd := scheduler.NewCommand()
			// verflag's value is process-wide: leave it off for whatever runs next.
			defer func() { _ = cmd.Flags().Set("version", "false") }()
			var out bytes.Buffer
			cmd.SetOut(&out)
			cmd.SetArgs([]string{arg})
			require.NoError(t, cmd.Execute())
			if arg == "--version=raw" {
				assert.Contains(t, out.String(), `version.Info{Version:"`+version.Dev+`"`)
				assert.Contains(t, out.String(), `version.Info{Major:`, "and k8s.io/component-base's")
				return
			}
			assert.Equal(t, "berth-scheduler "+version.Get().String()+"\nkube-scheduler "+scheduler.KubeSchedulerVersion()+"\n", out.String())
			assert.Regexp(t, `^v1\.\d+`, scheduler.KubeSchedulerVersion())
		})
	}
}
