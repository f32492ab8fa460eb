package scheduler

import (
	"fmt"
	"slices"

	"github.com/spf13/pflag"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/featuregate"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	"k8s.io/kubernetes/pkg/features"
	schedulerapi "k8s.io/kubernetes/pkg/scheduler/apis/config"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/berth-sh/berth/pkg/apicheck"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/plugins/gang"
	"github.com/berth-sh/berth/pkg/plugins/topology"
)

// kubeSchedulerAPIs are the APIs kube-scheduler 1.37's framework lists and watches with its
// informers (TestRequiredAPIsCoverInformers checks the list against the informers it starts),
// the lease of leader election and the events it writes, with gate's feature gates.
//
// kube-scheduler must not be newer than the apiserver (Kubernetes' version skew policy);
// concretely, its DRADeviceTaintRules gate (on by default from 1.37) watches
// resource.k8s.io/v1 DeviceTaintRules, which no release before 1.37 serves.
func kubeSchedulerAPIs(gate featuregate.FeatureGate) []apicheck.API {
	apis := slices.Concat(
		apicheck.Builtin("", "v1", "pods", "nodes", "namespaces", "services", "replicationcontrollers", "persistentvolumes", "persistentvolumeclaims"),
		apicheck.Builtin("1.9", "apps/v1", "replicasets", "statefulsets"),
		apicheck.Builtin("1.14", "scheduling.k8s.io/v1", "priorityclasses"),
		apicheck.Builtin("1.21", "policy/v1", "poddisruptionbudgets"),
		apicheck.Builtin("1.13", "storage.k8s.io/v1", "storageclasses", "volumeattachments"),
		apicheck.Builtin("1.18", "storage.k8s.io/v1", "csinodes", "csidrivers"),
		apicheck.Builtin("1.24", "storage.k8s.io/v1", "csistoragecapacities"),
		apicheck.Builtin("1.14", "coordination.k8s.io/v1", "leases"),
		apicheck.Builtin("1.19", "events.k8s.io/v1", "events"),
	)
	if gate.Enabled(features.DynamicResourceAllocation) { // locked on since 1.35
		// resourceclaimtemplates: Berth's plans read a pod's template before its claim exists.
		apis = append(apis, apicheck.Builtin("1.34", "resource.k8s.io/v1", "resourceclaims", "resourceclaimtemplates", "resourceslices", "deviceclasses")...)
		if gate.Enabled(features.DRADeviceTaintRules) {
			apis = append(apis, apicheck.Builtin("1.37", "resource.k8s.io/v1", "devicetaintrules")...)
		}
	}
	// Off by default; a beta (GenericWorkload) and an alpha API the apiserver serves only
	// when told to.
	if gate.Enabled(features.GenericWorkload) {
		apis = append(apis, apicheck.Builtin("1.37", "scheduling.k8s.io/v1beta1", "podgroups")...)
	}
	if gate.Enabled(features.CompositePodGroup) {
		apis = append(apis, apicheck.Builtin("1.37", "scheduling.k8s.io/v1alpha3", "compositepodgroups")...)
	}
	return apis
}

// pluginAPIs are the APIs each of Berth's plugins reads with informers of its own, which it
// waits for while the scheduler is built. Beside them the gang rules read scheduler-plugins'
// PodGroups (scheduling.x-k8s.io/v1alpha1) and kube-scheduler's native ones
// (scheduling.k8s.io/v1beta1) when the apiserver serves them at start: those are optional.
var pluginAPIs = map[string][]apicheck.API{
	gang.Name: apicheck.CRDs(apicheck.Volcano, "scheduling.volcano.sh/v1beta1", "podgroups"),
	topology.Name: slices.Concat(
		apicheck.CRDs(apicheck.Volcano, "scheduling.volcano.sh/v1beta1", "podgroups"),
		apicheck.CRDs(apicheck.Volcano, "topology.volcano.sh/v1alpha1", "hypernodes"),
		apicheck.CRDs(apicheck.Berth, workloadv1alpha1.SchemeGroupVersion.String(), "modelservings"),
	),
}

// requiredAPIs are the APIs a scheduler with these profiles needs the apiserver to serve:
// kube-scheduler's with gate's feature gates, and those of the Berth plugins the profiles
// enable.
func requiredAPIs(profiles []schedulerapi.KubeSchedulerProfile, gate featuregate.FeatureGate) []apicheck.API {
	apis := kubeSchedulerAPIs(gate)
	seen := map[apicheck.API]bool{}
	for _, a := range apis {
		seen[a] = true
	}
	for _, p := range profiles {
		names := p.Plugins.Names()
		if p.Plugins != nil {
			for _, pl := range p.Plugins.MultiPoint.Enabled {
				names = append(names, pl.Name)
			}
		}
		for _, n := range names {
			for _, a := range pluginAPIs[n] {
				if !seen[a] {
					seen[a] = true
					apis = append(apis, a)
				}
			}
		}
	}
	return apis
}

// apiCheck is the preflight as a registry option: those run inside kube-scheduler's setup
// after it has read its configuration and applied its logging flags, and before it builds
// the profiles, whose plugins would wait for their informers to sync. src says where the
// configuration comes from.
func apiCheck(src func() configSource) app.Option {
	return func(frameworkruntime.Registry) error { return checkAPIs(src()) }
}

// configSource is what kube-scheduler builds its client from: --config, or without it the
// deprecated --kubeconfig, and --master.
type configSource struct {
	configFile, kubeconfig, master string
}

// flagSource reads the configSource from the command's parsed flags.
func flagSource(fs *pflag.FlagSet) configSource {
	value := func(name string) string {
		if f := fs.Lookup(name); f != nil {
			return f.Value.String()
		}
		return ""
	}
	src := configSource{configFile: value("config"), master: value("master")}
	if src.configFile == "" {
		src.kubeconfig = value("kubeconfig")
	}
	return src
}

// checkAPIs asks the apiserver of src's configuration whether it serves every API the
// scheduler needs (requiredAPIs with the process's feature gates).
func checkAPIs(src configSource) error {
	var profiles []schedulerapi.KubeSchedulerProfile
	kubeconfig := src.kubeconfig
	if src.configFile != "" {
		cfg, err := options.LoadConfigFromFile(klog.Background(), src.configFile)
		if err != nil {
			return fmt.Errorf("%s: %w", workloadv1alpha1.BerthSchedulerName, err)
		}
		profiles, kubeconfig = cfg.Profiles, cfg.ClientConnection.Kubeconfig
	}
	cfg, err := clientcmd.BuildConfigFromFlags(src.master, kubeconfig)
	if err != nil {
		return fmt.Errorf("%s: %w", workloadv1alpha1.BerthSchedulerName, err)
	}
	return apicheck.Check(cfg, workloadv1alpha1.BerthSchedulerName, requiredAPIs(profiles, utilfeature.DefaultFeatureGate))
}
