// Package scheduler assembles berth-scheduler: kube-scheduler 1.37 with Berth's plugins
// registered. cmd/scheduler runs its command; the sandbox, the tests and the benchmarks run
// it in-process through Run (internal/inprocess adapts the shipped configuration), so they
// all run the same code.
package scheduler

import (
	"context"
	"fmt"
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

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// NewCommand is the berth-scheduler command line: kube-scheduler's, with our plugins.
func NewCommand() *cobra.Command {
	cmd := app.NewSchedulerCommand(Plugins()...)
	cmd.Use = workloadv1alpha1.BerthSchedulerName
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
