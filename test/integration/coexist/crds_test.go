package coexist

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	leaderworkerset "sigs.k8s.io/lws/api/leaderworkerset/v1"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/pkg/apicheck"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/scope"
)

// A cluster with Kthena's CRDs and Volcano's but not llmaz's or llm-d's (Kthena alone, with
// manifests/crds left out of the overlay as docs/install.md says to beside it): berth-controller
// reconciles every kind whatever --manage says, so it does not start, and says at once which
// CRDs it lacks and where they are. Before this check it started, logged "if kind is a CRD, it
// should be installed before calling Start" every 10 s and stopped two minutes later with
// "timed out waiting for cache to be synced for kind source: *v1alpha1.VariantAutoscaling".
// berth-router, which reads only ModelRoutes, ModelServers and pods, starts there. The
// LeaderWorkerSet CRD is optional: without it berth-controller starts and runs, and a restart
// after it is installed takes LeaderWorkerSets over.
func TestMissingCRDsStopTheControllerStart(t *testing.T) {
	crds, err := controlplane.DefaultCRDDir()
	require.NoError(t, err)
	kthena := t.TempDir()
	entries, err := os.ReadDir(crds)
	require.NoError(t, err)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "workload.serving.volcano.sh_") || strings.HasPrefix(e.Name(), "networking.serving.volcano.sh_") {
			b, err := os.ReadFile(filepath.Join(crds, e.Name()))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(kthena, e.Name()), b, 0o600))
		}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kthenaOnly, err := controlplane.Start(ctx, controlplane.Options{
		CRDDirs:       []string{kthena, filepath.Join(crds, "volcano")},
		NoControllers: true,
	})
	require.NoError(t, err)
	defer kthenaOnly.Stop()
	t.Logf("second control plane (Kthena's and Volcano's CRDs only) started in %s", time.Since(start).Round(time.Millisecond))
	cfg := kthenaOnly.RESTConfig()
	// InProcessRestart: the package's other test builds a manager in this process too.
	opts := controller.Options{Manage: string(scope.Berth), MetricsAddr: "0", LeaderElection: true, LeaderElectionNS: "berth-system", InProcessRestart: true}

	start = time.Now()
	_, err = controller.NewManager(cfg, opts)
	var missing *apicheck.MissingError
	require.ErrorAs(t, err, &missing)
	t.Logf("NewManager failed after %s: %v", time.Since(start).Round(time.Millisecond), err)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Equal(t, "berth-controller needs APIs that the apiserver (v1.37) does not serve: "+
		"the CRDs variantautoscalings.llmd.ai (llmd.ai/v1alpha1), playgrounds.inference.llmaz.io (inference.llmaz.io/v1alpha1), "+
		"services.inference.llmaz.io (inference.llmaz.io/v1alpha1), backendruntimes.inference.llmaz.io (inference.llmaz.io/v1alpha1) "+
		"and openmodels.llmaz.io (llmaz.io/v1alpha1): "+
		"install from manifests/crds: kubectl apply --server-side -f manifests/crds/<group>_<resource>.yaml, or -k manifests/crds for all of Berth's",
		err.Error())

	_, err = router.New(cfg, router.Options{Addr: "127.0.0.1:0"}, logr.Discard())
	assert.NoError(t, err, "berth-router needs none of them")

	// With Berth's CRDs installed (not the optional LeaderWorkerSet one), the next start
	// passes the check.
	berth := t.TempDir()
	for _, e := range entries {
		if !e.IsDir() && e.Name() != "kustomization.yaml" {
			b, err := os.ReadFile(filepath.Join(crds, e.Name()))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(berth, e.Name()), b, 0o600))
		}
	}
	require.NoError(t, kthenaOnly.InstallCRDs(ctx, berth))
	// Run without leader election: this control plane has no berth-system namespace.
	opts.LeaderElection = false
	mgr, err := controller.NewManager(cfg, opts)
	require.NoError(t, err)

	// It runs without LeaderWorkerSets: the take-over is decided at start, so a CRD installed
	// afterwards changes nothing until a restart (and a reconciler registered for an unserved
	// kind would have failed the start instead).
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(runCtx) }()
	require.NoError(t, kthenaOnly.InstallCRDs(ctx, filepath.Join(crds, "lws")))
	cl, err := client.New(cfg, client.Options{Scheme: controller.Scheme()})
	require.NoError(t, err)
	require.NoError(t, cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "lws-later"}}))
	// The Go type sends startupPolicy and the rollout type even when unset: set them.
	l := &leaderworkerset.LeaderWorkerSet{ObjectMeta: metav1.ObjectMeta{Namespace: "lws-later", Name: "later"}, Spec: leaderworkerset.LeaderWorkerSetSpec{
		StartupPolicy:   leaderworkerset.LeaderCreatedStartupPolicy,
		RolloutStrategy: leaderworkerset.RolloutStrategy{Type: leaderworkerset.RollingUpdateStrategyType},
		LeaderWorkerTemplate: leaderworkerset.LeaderWorkerTemplate{WorkerTemplate: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			SchedulerName: "berth-scheduler", Containers: []corev1.Container{{Name: "engine", Image: "vllm"}}}}}}}
	require.NoError(t, cl.Create(ctx, l))
	var ms workloadv1alpha1.ModelServing
	key := client.ObjectKeyFromObject(l)
	for range 20 {
		time.Sleep(100 * time.Millisecond)
		require.True(t, apierrors.IsNotFound(cl.Get(ctx, key, &ms)), "a ModelServing for a LeaderWorkerSet whose CRD came after the start")
	}
	stop()
	require.NoError(t, <-done, "berth-controller ran without the LeaderWorkerSet CRD")

	// Restarted, it finds LeaderWorkerSets and runs the one waiting.
	mgr, err = controller.NewManager(cfg, opts)
	require.NoError(t, err)
	runCtx, stop = context.WithCancel(ctx)
	defer stop()
	go func() { done <- mgr.Start(runCtx) }()
	require.NoError(t, wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return cl.Get(ctx, key, &ms) == nil, nil
	}), "the restarted berth-controller runs the LeaderWorkerSet")
	assert.Equal(t, "berth-scheduler", ms.Spec.SchedulerName)
}
