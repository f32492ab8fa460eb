// Command berth-controller runs Berth's reconcilers: ModelServing groups, roles, rollout
// and recovery. It never picks a node; berth-scheduler (or Volcano) does.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/version"
)

// flags is berth-controller's command line.
type flags struct {
	opts        controller.Options
	showVersion *bool
	// placementAware is --placement-aware-scaling; Options holds its negation (BlindScaling)
	// so that a zero Options keeps the default.
	placementAware *bool
	zap            zap.Options
}

// bindFlags defines the command line on fs; docs/flags.md is generated from it.
func bindFlags(fs *flag.FlagSet) *flags {
	f := &flags{}
	o := &f.opts
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8443", "address of the Prometheus /metrics endpoint (\"0\" disables it)")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", true, "serve /metrics over HTTPS to callers the apiserver authenticates and authorizes for GET /metrics (false: plain HTTP to anyone)")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.BoolVar(&o.LeaderElection, "leader-elect", true, "run one active controller, elected through the lease berth-controller")
	fs.DurationVar(&o.AutoscaleSyncPeriod, "autoscale-sync-period", 5*time.Second, "how often each AutoscalingPolicyBinding reads its metrics and decides")
	f.placementAware = fs.Bool("placement-aware-scaling", true, "cap each scale-up of a ModelServing placed by berth-scheduler at the whole groups the scheduler publishes as fitting the cluster (annotation scheduling.berth.sh/groups-that-fit), so the optimizer's overflow goes to the next-cheapest target that can land; false scales blind, leaving groups that cannot land pending")
	fs.DurationVar(&o.VariantSyncPeriod, "variant-sync-period", 30*time.Second, "how often each VariantAutoscaling reads its load and is sized")
	fs.StringVar(&o.VariantActuation, "variant-actuation", "scale", `who applies a VariantAutoscaling's desired replicas: "scale" (berth-controller, through the ModelServing's scale subresource) or "metric" (only export inferno_desired_replicas for an HPA or KEDA)`)
	fs.StringVar(&o.VariantCostsConfigMap, "variant-costs-configmap", "berth-system/accelerator-unit-costs", "namespace/name of the accelerator unit costs a VariantAutoscaling reads when its namespace has no accelerator-unit-costs ConfigMap")
	fs.StringVar(&o.Manage, "manage", "all", `which objects to act on: "all" (every ModelServing, ModelBooster, ModelRoute, ModelServer, autoscaling policy and binding, VariantAutoscaling and llmaz Playground/Service/BackendRuntime: Berth is their only controller) or "berth" (ModelServings whose pods ask for berth-scheduler, and objects labelled serving.berth.sh/managed=true: beside Kthena's, llmaz's or llm-d's controllers)`)
	fs.IntVar(&o.ModelServingWorkers, "concurrent-modelserving-syncs", controller.DefaultModelServingWorkers, "how many ModelServings are reconciled at once (a pass waits on API round trips, not on CPU; kube-controller-manager's counterpart is --concurrent-deployment-syncs)")
	fs.StringVar(&o.LeaderElectionNS, "leader-election-namespace", "berth-system", "namespace of the leader-election lease")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a standby waits after the leader's last renewal before it takes over")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before it stops leading")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "how often a standby tries to acquire, and the leader to renew, the lease")
	f.showVersion = version.Flag(fs)
	f.zap.BindFlags(fs)
	config.RegisterFlags(fs) // --kubeconfig, as controller-runtime registers it
	return f
}

func main() {
	f := bindFlags(flag.CommandLine)
	flag.Parse()
	o := f.opts
	o.BlindScaling = !*f.placementAware
	if *f.showVersion {
		fmt.Println(version.Line("berth-controller"))
		return
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&f.zap)))
	ctrl.Log.Info("starting berth-controller", version.Get().KeysAndValues()...)

	mgr, err := controller.NewManager(ctrl.GetConfigOrDie(), o)
	if err != nil {
		ctrl.Log.Error(err, "setup failed")
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		ctrl.Log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
