package scheduler_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/component-base/metrics/legacyregistry"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/berth-sh/berth/internal/dashboard"
	"github.com/berth-sh/berth/internal/inprocess"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/scheduler"
)

const dashboardFile = "../../manifests/observability/berth-dashboard.json"

// The Grafana dashboard (manifests/observability/berth-dashboard.json) queries only metrics
// the components export, each as its type wants (internal/dashboard.Check says how). The
// metric families come from the registries the binaries serve /metrics from, after the code
// they run at start has registered into them: berth-scheduler built from the shipped
// configuration (component-base's legacy registry), berth-controller's manager with every
// reconciler (controller-runtime's metrics.Registry), and a berth-router (its own registry).
// A metric renamed in the code, or misspelt in the dashboard, fails here.
//
// It lives in this package because building the scheduler needs an apiserver, which this
// package's tests already run, and its test binary already links the controller and the
// router (through internal/inprocess): no new test binary. That apiserver registers its own
// metrics (apiserver_*, etcd_*) in the same legacy registry, so here the scheduler seems to
// export those too; the dashboard's scheduler rows read none of them.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	dir, kc := kubeconfig(t)
	cfg, err := inprocess.SchedulerConfig(kc, inprocess.SchedulerOptions{})
	require.NoError(t, err)
	path := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(path, cfg, 0o600))
	// The plugins run until ctx ends: the gang plugin's gauges have series (and so a type)
	// only while one runs, as in berth-scheduler.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, scheduler.Build(ctx, scheduler.Options{ConfigFile: path}))

	_, err = controller.NewManager(cp.RESTConfig(), controller.Options{MetricsAddr: "0", InProcessRestart: true})
	require.NoError(t, err)
	r, err := router.New(cp.RESTConfig(), router.Options{}, logr.Discard())
	require.NoError(t, err)

	exported := map[string]dashboard.Families{}
	for component, reg := range map[string]prometheus.Registerer{
		"scheduler":  legacyregistry.Registerer(),
		"controller": ctrlmetrics.Registry,
		"router":     r.MetricsRegistry(),
	} {
		f, err := dashboard.Exported(reg.(dashboard.Registry))
		require.NoError(t, err, component)
		exported[component] = f
	}
	// The registries are the right ones: each holds its component's own families.
	for component, family := range map[string]string{
		"scheduler":  "scheduler_schedule_attempts_total",
		"controller": "controller_runtime_reconcile_total",
		"router":     "berth_router_requests_total",
	} {
		assert.Equal(t, dashboard.Counter, exported[component][family], "berth-%s exports %s", component, family)
	}

	d, err := dashboard.Load(dashboardFile)
	require.NoError(t, err)
	problems, err := dashboard.Check(d, exported)
	require.NoError(t, err)
	if len(problems) > 0 {
		t.Errorf("%s:\n%s", dashboardFile, strings.Join(problems, "\n"))
	}

	// Every row reads its component's metrics, and all three components are covered.
	queries, err := d.Queries()
	require.NoError(t, err)
	read := map[string]bool{}
	for _, q := range queries {
		selectors, err := dashboard.Selectors(q.Expr)
		require.NoError(t, err)
		for _, s := range selectors {
			read[s.Metric] = true
		}
	}
	for _, m := range []string{"scheduler_schedule_attempts_total", "berth_gang_groups_released_total", "berth_placement_plans_total",
		"berth_topology_domains_chosen_total", "controller_runtime_reconcile_total", "berth_modelserving_groups",
		"berth_autoscaler_desired_replicas", "inferno_desired_replicas", "berth_router_requests_total",
		"berth_router_time_to_first_token_seconds_bucket"} {
		assert.True(t, read[m], "the dashboard reads %s", m)
	}
}
