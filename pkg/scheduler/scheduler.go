// Package scheduler assembles berth-scheduler: kube-scheduler 1.37 with Berth's plugins
// registered. cmd/scheduler, the sandbox and the integration tests all start it through
// this package, so they run the same code.
package scheduler

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/configz"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"

	"github.com/berth-sh/berth/pkg/plugins/gang"
)

// SchedulerName is the profile name pods and ModelServings ask for.
const SchedulerName = "berth-scheduler"

// Plugins registers Berth's out-of-tree plugins with kube-scheduler.
func Plugins() []app.Option {
	return []app.Option{
		app.WithPlugin(gang.Name, gang.New),
	}
}

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
	opts := options.NewOptions()
	opts.ConfigFile = o.ConfigFile
	opts.SecureServing.BindPort = o.SecurePort
	// Informer names are unique per process; tests and the sandbox may run several
	// schedulers one after another (or side by side) in one process.
	name, err := cache.NewInformerName(fmt.Sprintf("berth-scheduler-%d", instances.Add(1)))
	if err != nil {
		return err
	}
	defer name.Release()
	opts.InformerName = name
	cc, sched, err := app.Setup(ctx, opts, Plugins()...)
	if err != nil {
		return fmt.Errorf("berth-scheduler setup: %w", err)
	}
	// kube-scheduler registers its config under a process-wide configz key and fails if
	// the key exists, so a second scheduler in the same process (a restart in a test, or
	// the sandbox) must find it free.
	configz.Delete("componentconfig")
	defer configz.Delete("componentconfig")
	return app.Run(ctx, cc, sched)
}
