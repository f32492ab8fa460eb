package inprocess

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"sigs.k8s.io/yaml"

	schedulermanifests "github.com/berth-sh/berth/manifests/scheduler"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/plugins/gang"
	"github.com/berth-sh/berth/pkg/scheduler"
)

// SchedulerOptions adapt the shipped berth-scheduler configuration
// (manifests/scheduler/config.yaml) to run in this process.
type SchedulerOptions struct {
	// GangArgs, when not nil, replace the gang plugin's args (for example a short
	// permitWaitingTimeSeconds in a test).
	GangArgs map[string]any
	// LeaderElection, when not nil, replaces the configuration's leaderElection (off by
	// default: one instance).
	LeaderElection map[string]any
	// Rate is the client rate (zero: BenchRate).
	Rate ClientRate
	// CapacityPeriod is --capacity-publish-period (0: its default; negative: off).
	CapacityPeriod time.Duration
}

// ClientRate is a scheduler's client QPS and burst toward the apiserver.
type ClientRate struct {
	QPS   float32
	Burst int
}

// The client rates the in-process schedulers run with. berth-scheduler runs at BenchRate in
// the sandbox, the tests and the benchmarks; kube-scheduler's default profile at ClusterRate
// beside it in the sandbox and at whichever rate a benchmark names (bench/README.md says
// which).
var (
	BenchRate   = ClientRate{QPS: 5000, Burst: 5000}
	ClusterRate = ClientRate{QPS: 200, Burst: 400}
)

// ShippedRate is the client rate of the shipped configuration
// (manifests/scheduler/config.yaml): what a user's berth-scheduler runs at, and what a
// benchmark gives both schedulers when it compares them at equal settings.
func ShippedRate() (ClientRate, error) {
	var cfg struct {
		ClientConnection struct {
			QPS   float32 `json:"qps"`
			Burst int     `json:"burst"`
		} `json:"clientConnection"`
	}
	if err := yaml.Unmarshal(schedulermanifests.Config, &cfg); err != nil {
		return ClientRate{}, fmt.Errorf("shipped scheduler config: %w", err)
	}
	r := ClientRate{QPS: cfg.ClientConnection.QPS, Burst: cfg.ClientConnection.Burst}
	if r.QPS <= 0 || r.Burst <= 0 {
		return ClientRate{}, fmt.Errorf("shipped scheduler config: clientConnection qps %g, burst %d: both must be set", r.QPS, r.Burst)
	}
	return r, nil
}

func (r ClientRate) orBench() ClientRate {
	if r == (ClientRate{}) {
		return BenchRate
	}
	return r
}

// SchedulerConfig is the shipped configuration adapted to run inside another process against
// kubeconfig: leader election off (unless o says otherwise), o's client rate, and the
// gang plugin's args replaced when o.GangArgs is not nil.
func SchedulerConfig(kubeconfig string, o SchedulerOptions) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(schedulermanifests.Config, &cfg); err != nil {
		return nil, fmt.Errorf("shipped scheduler config: %w", err)
	}
	rate := o.Rate.orBench()
	cfg["clientConnection"] = map[string]any{"kubeconfig": kubeconfig, "qps": rate.QPS, "burst": rate.Burst}
	cfg["leaderElection"] = map[string]any{"leaderElect": false}
	if o.LeaderElection != nil {
		cfg["leaderElection"] = o.LeaderElection
	}
	if o.GangArgs != nil {
		profiles, _ := cfg["profiles"].([]any)
		for _, p := range profiles {
			pluginConfig, _ := p.(map[string]any)["pluginConfig"].([]any)
			for _, pc := range pluginConfig {
				if pc := pc.(map[string]any); pc["name"] == gang.Name {
					pc["args"] = o.GangArgs
				}
			}
		}
	}
	return yaml.Marshal(cfg)
}

// configs numbers the configuration files written into a shared directory.
var configs atomic.Int64

// RunScheduler writes the in-process configuration into dir and runs berth-scheduler until
// ctx ends, exactly as the binary would with --config.
func RunScheduler(ctx context.Context, dir, kubeconfig string, o SchedulerOptions) error {
	cfg, err := SchedulerConfig(kubeconfig, o)
	if err != nil {
		return err
	}
	return runConfig(ctx, dir, workloadv1alpha1.BerthSchedulerName, cfg, o.CapacityPeriod)
}

// DefaultSchedulerConfig is kube-scheduler's own default profile (schedulerName
// default-scheduler, none of Berth's plugins) against kubeconfig at rate (zero: BenchRate),
// leader election off.
func DefaultSchedulerConfig(kubeconfig string, rate ClientRate) ([]byte, error) {
	rate = rate.orBench()
	return yaml.Marshal(map[string]any{
		"apiVersion":       "kubescheduler.config.k8s.io/v1",
		"kind":             "KubeSchedulerConfiguration",
		"clientConnection": map[string]any{"kubeconfig": kubeconfig, "qps": rate.QPS, "burst": rate.Burst},
		"leaderElection":   map[string]any{"leaderElect": false},
	})
}

// RunDefaultScheduler runs kube-scheduler's default profile until ctx ends: what a cluster
// runs beside berth-scheduler, so plain Deployments' pods are placed too.
func RunDefaultScheduler(ctx context.Context, dir, kubeconfig string, rate ClientRate) error {
	cfg, err := DefaultSchedulerConfig(kubeconfig, rate)
	if err != nil {
		return err
	}
	return runConfig(ctx, dir, "default-scheduler", cfg, 0)
}

func runConfig(ctx context.Context, dir, name string, cfg []byte, capacityPeriod time.Duration) error {
	path := filepath.Join(dir, fmt.Sprintf("%s-%d.yaml", name, configs.Add(1)))
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		return err
	}
	return scheduler.Run(ctx, scheduler.Options{ConfigFile: path, CapacityPeriod: capacityPeriod})
}
