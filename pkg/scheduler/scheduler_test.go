package scheduler_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sversion "k8s.io/apimachinery/pkg/version"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	fakediscovery "k8s.io/client-go/discovery/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/component-base/cli"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	"github.com/berth-sh/berth/internal/cmdtest"
	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/inprocess"
	"github.com/berth-sh/berth/pkg/apicheck"
	"github.com/berth-sh/berth/pkg/scheduler"
	"github.com/berth-sh/berth/pkg/version"
)

// The plugins start informers against an apiserver when they are built, and kube-scheduler
// builds a profile's plugins in no fixed order: without one, a plugin that cannot reach it
// could fail first and hide the error under test.
var cp *controlplane.ControlPlane

// The test binary is also berth-scheduler, as cmd/scheduler runs it (cmdtest.Run starts it
// so).
func TestMain(m *testing.M) {
	cmdtest.AsCommand(func() { os.Exit(cli.Run(scheduler.NewCommand())) })
	cptest.Main(m, &cp)
}

func kubeconfig(t *testing.T) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	path = filepath.Join(dir, "kubeconfig")
	require.NoError(t, cp.WriteKubeconfig(path))
	return dir, path
}

// shippedConfig writes the shipped configuration, adapted to run against kubeconfig kc, into
// dir and returns its path.
func shippedConfig(t *testing.T, dir, kc string) string {
	t.Helper()
	cfg, err := inprocess.SchedulerConfig(kc, inprocess.SchedulerOptions{})
	require.NoError(t, err)
	path := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(path, cfg, 0o600))
	return path
}

// The shipped configuration (manifests/scheduler/config.yaml) builds every plugin: its
// args are valid under strict decoding.
func TestShippedConfigBuilds(t *testing.T) {
	dir, kc := kubeconfig(t)
	path := shippedConfig(t, dir, kc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, scheduler.Build(ctx, scheduler.Options{ConfigFile: path}))
}

// The startup preflight asks for every API kube-scheduler's framework starts an informer
// for with the shipped configuration, so none of them can be missing unnoticed: a
// kube-scheduler upgrade that watches something new fails here until the list names it.
func TestRequiredAPIsCoverInformers(t *testing.T) {
	dir, kc := kubeconfig(t)
	path := shippedConfig(t, dir, kc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	informers, err := scheduler.Informers(ctx, scheduler.Options{ConfigFile: path})
	require.NoError(t, err)
	require.NotEmpty(t, informers)

	cfg, err := options.LoadConfigFromFile(klog.Background(), path)
	require.NoError(t, err)
	required := map[string]bool{}
	for _, a := range scheduler.RequiredAPIs(cfg.Profiles, utilfeature.DefaultFeatureGate) {
		required[a.GroupVersion+" "+a.Resource] = true
	}
	for _, gvr := range informers {
		assert.True(t, required[gvr.GroupVersion().String()+" "+gvr.Resource], "kube-scheduler watches %s, which the preflight does not ask for", gvr)
	}
	// And Berth's plugins' own informers: Volcano's PodGroups and HyperNodes, ModelServings.
	for _, need := range []string{"scheduling.volcano.sh/v1beta1 podgroups", "topology.volcano.sh/v1alpha1 hypernodes", "workload.serving.volcano.sh/v1alpha1 modelservings"} {
		assert.True(t, required[need], need)
	}
	// Optional: read when served at start.
	for _, optional := range []string{"scheduling.x-k8s.io/v1alpha1 podgroups", "scheduling.k8s.io/v1beta1 podgroups"} {
		assert.False(t, required[optional], optional)
	}
}

// What berth-scheduler says on releases before 1.37, whose apiservers serve everything else
// it needs (its list, with discovery that leaves out what those releases lack).
func TestOlderReleases(t *testing.T) {
	dir, kc := kubeconfig(t)
	cfg, err := options.LoadConfigFromFile(klog.Background(), shippedConfig(t, dir, kc))
	require.NoError(t, err)
	required := scheduler.RequiredAPIs(cfg.Profiles, utilfeature.DefaultFeatureGate)
	for _, tc := range []struct {
		gitVersion, minor string
		lacks             func(apicheck.API) bool
		want              string
	}{{
		gitVersion: "v1.33.5", minor: "33",
		lacks: func(a apicheck.API) bool { return a.GroupVersion == "resource.k8s.io/v1" },
		want: "berth-scheduler needs APIs that the apiserver (v1.33.5) does not serve: " +
			"resource.k8s.io/v1 resourceclaims, resourceclaimtemplates, resourceslices, deviceclasses and devicetaintrules (Kubernetes 1.37 or later)",
	}, {
		gitVersion: "v1.36.1", minor: "36",
		lacks: func(a apicheck.API) bool { return a.Resource == "devicetaintrules" },
		want:  "berth-scheduler needs an API that the apiserver (v1.36.1) does not serve: resource.k8s.io/v1 devicetaintrules (Kubernetes 1.37 or later)",
	}} {
		t.Run(tc.gitVersion, func(t *testing.T) {
			lists := map[string]*metav1.APIResourceList{}
			var served []*metav1.APIResourceList
			for _, a := range required {
				if tc.lacks(a) {
					continue
				}
				if lists[a.GroupVersion] == nil {
					lists[a.GroupVersion] = &metav1.APIResourceList{GroupVersion: a.GroupVersion}
					served = append(served, lists[a.GroupVersion])
				}
				lists[a.GroupVersion].APIResources = append(lists[a.GroupVersion].APIResources, metav1.APIResource{Name: a.Resource})
			}
			d := &fakediscovery.FakeDiscovery{Fake: &clienttesting.Fake{Resources: served},
				FakedServerVersion: &k8sversion.Info{Major: "1", Minor: tc.minor, GitVersion: tc.gitVersion}}
			err := apicheck.CheckServer(d, "berth-scheduler", required)
			require.Error(t, err)
			assert.Equal(t, tc.want, err.Error())
		})
	}
}

// berthCRDs is a directory with Berth's CRDs (manifests/crds) but not Volcano's or
// scheduler-plugins' (its subdirectories): a cluster without Volcano.
func berthCRDs(t *testing.T) string {
	t.Helper()
	src, err := controlplane.DefaultCRDDir()
	require.NoError(t, err)
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range entries {
		if e.IsDir() || e.Name() == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, e.Name()), b, 0o600))
	}
	return dir
}

// An apiserver without APIs berth-scheduler needs stops it at once, with one error naming
// each and what provides it: here resource.k8s.io/v1, which kube-scheduler 1.37 watches for
// DRA (turned off, as on a release before 1.34), and Volcano's CRDs. Without the preflight it
// hung building its profiles, logging "Failed to watch ... podgroups.scheduling.volcano.sh"
// every few seconds, and without DRA it never left the wait for its informers to sync.
func TestMissingAPIsStopTheStart(t *testing.T) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lacking, err := controlplane.Start(ctx, controlplane.Options{
		CRDDirs:        []string{berthCRDs(t)},
		APIServerFlags: append(controlplane.DefaultAPIServerFlags(), "--runtime-config=resource.k8s.io/v1=false"),
		NoControllers:  true,
	})
	require.NoError(t, err)
	defer lacking.Stop()
	t.Logf("second control plane (no resource.k8s.io/v1, no Volcano CRDs) started in %s", time.Since(start).Round(time.Millisecond))
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	require.NoError(t, lacking.WriteKubeconfig(kc))
	path := shippedConfig(t, dir, kc)

	const want = "berth-scheduler needs APIs that the apiserver (v1.37) does not serve: " +
		"resource.k8s.io/v1 resourceclaims, resourceclaimtemplates, resourceslices, deviceclasses and devicetaintrules (turned off on this apiserver: see its --runtime-config); " +
		"the CRDs podgroups.scheduling.volcano.sh (scheduling.volcano.sh/v1beta1) and hypernodes.topology.volcano.sh (topology.volcano.sh/v1alpha1): " +
		"install Volcano, or kubectl apply --server-side -f manifests/crds/volcano/"

	// The command, as a user runs it: it exits 1 and its last line is the error.
	start = time.Now()
	out, code := cmdtest.Run(t, time.Minute, "--config="+path, "--secure-port=0")
	took := time.Since(start)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	t.Logf("berth-scheduler exited %d after %s; its last line:\n%s", code, took.Round(time.Millisecond), last)
	assert.Equal(t, 1, code)
	assert.Contains(t, last, `"command failed" err="`+want+`"`)
	assert.Less(t, took, 30*time.Second)

	// In-process, as the sandbox and the tests run it: the same error.
	start = time.Now()
	err = inprocess.RunScheduler(ctx, dir, kc, inprocess.SchedulerOptions{})
	var missing *apicheck.MissingError
	require.ErrorAs(t, err, &missing)
	assert.Equal(t, want, missing.Error())
	assert.Less(t, time.Since(start), 10*time.Second)
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
