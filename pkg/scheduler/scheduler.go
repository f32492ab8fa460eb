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
	k8sversion "k8s.io/component-base/version"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	schedulerconfig "k8s.io/kubernetes/cmd/kube-scheduler/app/config"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	kubescheduler "k8s.io/kubernetes/pkg/scheduler"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/capacity"
	"github.com/berth-sh/berth/pkg/version"
)

// NewCommand is the berth-scheduler command line: kube-scheduler's, with our plugins.
// Its --version (kube-scheduler's flag) prints Berth's version and the kube-scheduler
// release it embeds; --version=vX.Y.Z keeps kube-scheduler's meaning (the Kubernetes
// version to report) and starts the scheduler.
//
// Before it builds the profiles, it checks that the apiserver serves every API it needs
// (requiredAPIs) and exits naming those it does not.
func NewCommand() *cobra.Command {
	var cmd *cobra.Command
	period := capacity.DefaultPeriod
	cmd = app.NewSchedulerCommand(append(plugins(&period), logVersion, apiCheck(func() configSource { return flagSource(cmd.Flags()) }))...)
	cmd.Use = workloadv1alpha1.BerthSchedulerName
	cmd.Short = "berth-scheduler places LLM serving groups: gangs, network topology and accelerators"
	cmd.Flags().DurationVar(&period, "capacity-publish-period", period,
		"How often berth-scheduler counts, for each ModelServing it places, how many more whole ServingGroups fit the cluster and publishes the count on it (annotation "+
			workloadv1alpha1.GroupsThatFitAnnotation+"); 0 publishes nothing and the autoscaler scales blind.")
	run := cmd.RunE
	cmd.RunE = func(c *cobra.Command, args []string) error {
		// kube-scheduler's own handling (component-base's verflag, first thing in its
		// RunE) would print k8s.io/component-base/version, which this build leaves
		// unstamped: kube-scheduler derives its binary and emulation versions and its
		// feature-gate defaults from it, so it must not carry Berth's version.
		if f := c.Flags().Lookup("version"); f != nil {
			switch f.Value.String() {
			case "true":
				fmt.Fprintln(c.OutOrStdout(), version.Line(workloadv1alpha1.BerthSchedulerName))
				fmt.Fprintln(c.OutOrStdout(), "kube-scheduler "+KubeSchedulerVersion())
				return nil
			case "raw":
				fmt.Fprintf(c.OutOrStdout(), "%#v\n%#v\n", version.Get(), k8sversion.Get())
				return nil
			}
		}
		return run(c, args)
	}
	return cmd
}

// KubeSchedulerVersion is the kube-scheduler release berth-scheduler embeds: the
// k8s.io/kubernetes module it was built with ("v1.37.1"), or the Kubernetes minor version
// component-base declares when the binary carries no module list.
func KubeSchedulerVersion() string {
	if v := version.Dependency("k8s.io/kubernetes"); v != "" {
		return v
	}
	return "v" + k8sversion.DefaultKubeBinaryVersion
}

// logVersion logs Berth's version when berth-scheduler starts. It is a registry option only
// because those run after kube-scheduler has applied its logging flags, so the line comes
// in the configured format, just before kube-scheduler's "Starting Kubernetes Scheduler".
func logVersion(frameworkruntime.Registry) error {
	klog.Background().Info("Starting berth-scheduler", append(version.Get().KeysAndValues(), "kubeScheduler", KubeSchedulerVersion())...)
	return nil
}

// Options start an in-process berth-scheduler.
type Options struct {
	// ConfigFile is a KubeSchedulerConfiguration; its clientConnection.kubeconfig says
	// which apiserver to use.
	ConfigFile string
	// SecurePort serves /metrics and /healthz when non-zero.
	SecurePort int
	// CapacityPeriod is --capacity-publish-period: 0 is its default, negative publishes
	// nothing.
	CapacityPeriod time.Duration
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

// setup reads the configuration, checks that the apiserver serves every API the scheduler
// needs, and builds the scheduler with every plugin of its profiles, as app.Setup does for the
// binary; nothing is scheduled until app.Run. release frees the scheduler's informer name
// once it has stopped.
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
	period := o.CapacityPeriod
	if period == 0 {
		period = capacity.DefaultPeriod
	}
	cc, sched, err := app.Setup(ctx, opts, append(plugins(&period), apiCheck(func() configSource { return configSource{configFile: o.ConfigFile} }))...)
	if err != nil {
		name.Release()
		return nil, nil, nil, fmt.Errorf("berth-scheduler setup: %w", err)
	}
	return cc, sched, name.Release, nil
}
