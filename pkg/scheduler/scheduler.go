// Package scheduler assembles berth-scheduler: kube-scheduler 1.37 with Berth's plugins
// registered. cmd/scheduler, the sandbox and the integration tests all start it through
// this package, so they run the same code.
package scheduler

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/configz"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedulerconfig "k8s.io/kubernetes/cmd/kube-scheduler/app/config"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	kubescheduler "k8s.io/kubernetes/pkg/scheduler"

	"sigs.k8s.io/yaml"

	schedulermanifests "github.com/berth-sh/berth/manifests/scheduler"
	"github.com/berth-sh/berth/pkg/plugins/gang"
)

// SchedulerName is the profile name pods and ModelServings ask for.
const SchedulerName = "berth-scheduler"

// NewCommand is the berth-scheduler command line: kube-scheduler's, with our plugins.
func NewCommand() *cobra.Command {
	cmd := app.NewSchedulerCommand(Plugins()...)
	cmd.Use = "berth-scheduler"
	cmd.Short = "berth-scheduler places LLM serving groups: gangs, network topology and accelerators"
	return cmd
}

// Options start an in-process berth-scheduler.
type Options struct {
	// ConfigFile is a KubeSchedulerConfiguration; its clientConnection.kubeconfig says
	// which apiserver to use.
	ConfigFile string
	// SecurePort serves /metrics and /healthz when non-zero.
	SecurePort int
}

var instances atomic.Int64

// Run runs berth-scheduler until ctx ends, exactly as the binary would with --config.
func Run(ctx context.Context, o Options) error {
	cc, sched, release, err := setup(ctx, o)
	if err != nil {
		return err
	}
	defer release()
	// kube-scheduler registers its config under a process-wide configz key and fails if
	// the key exists, so a second scheduler in the same process (a restart in a test, the
	// sandbox's default scheduler beside berth-scheduler, a standby) must find it free. Two
	// starting at once can still both find it taken between one's Delete and its Run; the
	// registration is the first thing Run does, before it starts anything, so retrying is
	// safe.
	defer configz.Delete("componentconfig")
	for {
		configz.Delete("componentconfig")
		err := app.Run(ctx, cc, sched)
		if err == nil || !strings.Contains(err.Error(), "unable to register configz") || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// setup reads the configuration and builds the scheduler with every plugin of its profiles,
// as app.Setup does for the binary; nothing is scheduled until app.Run. release frees the
// scheduler's informer name once it has stopped.
func setup(ctx context.Context, o Options) (*schedulerconfig.CompletedConfig, *kubescheduler.Scheduler, func(), error) {
	opts := options.NewOptions()
	opts.ConfigFile = o.ConfigFile
	opts.SecureServing.BindPort = o.SecurePort
	// Informer names are unique per process; tests and the sandbox may run several
	// schedulers one after another (or side by side) in one process.
	name, err := cache.NewInformerName(fmt.Sprintf("berth-scheduler-%d", instances.Add(1)))
	if err != nil {
		return nil, nil, nil, err
	}
	opts.InformerName = name
	cc, sched, err := app.Setup(ctx, opts, Plugins()...)
	if err != nil {
		name.Release()
		return nil, nil, nil, fmt.Errorf("berth-scheduler setup: %w", err)
	}
	return cc, sched, name.Release, nil
}

// RunDefaultInProcess runs kube-scheduler's own default profile (schedulerName
// default-scheduler, none of Berth's plugins) against kubeconfig until ctx ends: what a
// cluster runs beside berth-scheduler, so the sandbox's plain Deployments are placed too.
func RunDefaultInProcess(ctx context.Context, dir, kubeconfig string) error {
	cfg, err := yaml.Marshal(map[string]any{
		"apiVersion":       "kubescheduler.config.k8s.io/v1",
		"kind":             "KubeSchedulerConfiguration",
		"clientConnection": map[string]any{"kubeconfig": kubeconfig, "qps": 200, "burst": 400},
		"leaderElection":   map[string]any{"leaderElect": false},
	})
	if err != nil {
		return err
	}
	path := filepath.Join(dir, fmt.Sprintf("default-scheduler-%d.yaml", instances.Load()+1))
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		return err
	}
	return Run(ctx, Options{ConfigFile: path})
}

// InProcessConfig adapts the shipped configuration (manifests/scheduler/config.yaml) to run
// inside another process against kubeconfig: leader election off (one instance), a client
// rate fit for a benchmark, and the gang plugin's args replaced when gangArgs is not nil.
func InProcessConfig(kubeconfig string, gangArgs map[string]any) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(schedulermanifests.Config, &cfg); err != nil {
		return nil, fmt.Errorf("shipped scheduler config: %w", err)
	}
	cfg["clientConnection"] = map[string]any{"kubeconfig": kubeconfig, "qps": 5000, "burst": 5000}
	cfg["leaderElection"] = map[string]any{"leaderElect": false}
	if gangArgs != nil {
		profiles, _ := cfg["profiles"].([]any)
		for _, p := range profiles {
			pluginConfig, _ := p.(map[string]any)["pluginConfig"].([]any)
			for _, pc := range pluginConfig {
				if pc := pc.(map[string]any); pc["name"] == gang.Name {
					pc["args"] = gangArgs
				}
			}
		}
	}
	return yaml.Marshal(cfg)
}

// RunInProcess writes the in-process configuration into dir and runs berth-scheduler until
// ctx ends. It is how the sandbox, the tests and the benchmarks start it.
func RunInProcess(ctx context.Context, dir, kubeconfig string, gangArgs map[string]any) error {
	cfg, err := InProcessConfig(kubeconfig, gangArgs)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, fmt.Sprintf("berth-scheduler-%d.yaml", instances.Load()+1))
	if err := os.WriteFile(path, cfg, 0o600); err != nil {
		return err
	}
	return Run(ctx, Options{ConfigFile: path})
}
