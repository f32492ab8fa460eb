// Package controller assembles berth-controller: a controller-runtime manager with the
// ModelServing, ModelBooster, ModelRoute and ModelServer status, autoscaling (AutoscalingPolicyBinding and llm-d's
// VariantAutoscaling) and llmaz reconcilers, and the LeaderWorkerSet one when the apiserver serves LeaderWorkerSets.
// cmd/controller, the sandbox and the tests start it through here.
package controller

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/scale"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	leaderworkerset "sigs.k8s.io/lws/api/leaderworkerset/v1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/pkg/apicheck"
	llmazcorev1alpha1 "github.com/berth-sh/berth/pkg/apis/llmaz/core/v1alpha1"
	llmazinferencev1alpha1 "github.com/berth-sh/berth/pkg/apis/llmaz/inference/v1alpha1"
	llmdv1alpha1 "github.com/berth-sh/berth/pkg/apis/llmd/v1alpha1"
	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale/binding"
	"github.com/berth-sh/berth/pkg/autoscale/managedscalers"
	"github.com/berth-sh/berth/pkg/autoscale/modelvariants"
	"github.com/berth-sh/berth/pkg/autoscale/variantscaler"
	"github.com/berth-sh/berth/pkg/llmazserving"
	"github.com/berth-sh/berth/pkg/lwsserving"
	"github.com/berth-sh/berth/pkg/modelbooster"
	"github.com/berth-sh/berth/pkg/routestatus"
	"github.com/berth-sh/berth/pkg/scope"
	"github.com/berth-sh/berth/pkg/workload"
)

// Options configure the manager.
type Options struct {
	MetricsAddr string // "0" disables the metrics server
	// MetricsSecure serves /metrics over HTTPS (a self-signed certificate) and only to
	// callers the apiserver authenticates (TokenReview) and authorizes for GET /metrics
	// (SubjectAccessReview): the series name ModelServings of every namespace.
	MetricsSecure    bool
	ProbeAddr        string // "" or "0" disables health probes
	LeaderElection   bool
	LeaderElectionNS string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election (0: controller-runtime's
	// 15 s, 10 s and 2 s). A standby takes over at most LeaseDuration + RetryPeriod after the
	// leader last renewed; a leader that cannot renew within RenewDeadline stops.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// InProcessRestart allows a second manager in the same process after the first stopped
	// (tests that kill and restart the controller); controller-runtime otherwise refuses to
	// register a controller name twice.
	InProcessRestart bool
	// AutoscaleSyncPeriod is how often each AutoscalingPolicyBinding decides (default 5 s).
	AutoscaleSyncPeriod time.Duration
	// BlindScaling turns placement-aware scale-up off (--placement-aware-scaling=false): the
	// autoscaler ignores berth-scheduler's groups-that-fit counts.
	BlindScaling bool
	// VariantSyncPeriod is how often each VariantAutoscaling is sized (default 30 s).
	VariantSyncPeriod time.Duration
	// VariantActuation is who applies a VariantAutoscaling's desired replicas: "scale"
	// (berth-controller, the default) or "metric" (an HPA or KEDA reading
	// inferno_desired_replicas).
	VariantActuation string
	// VariantCostsConfigMap is namespace/name of the accelerator unit costs a variant reads
	// when its namespace has no accelerator-unit-costs ConfigMap.
	VariantCostsConfigMap string
	// ModelServingWorkers is how many ModelServings are reconciled at once (0:
	// workload.DefaultWorkers; --concurrent-modelserving-syncs).
	ModelServingWorkers int
	// Manage is which objects the reconcilers act on: "all" (or "", every object of their
	// kinds) or "berth" (ModelServings on berth-scheduler and objects labelled
	// serving.berth.sh/managed=true), beside Kthena's, llmaz's or llm-d's controllers.
	Manage string
}

// DefaultModelServingWorkers is --concurrent-modelserving-syncs' default.
const DefaultModelServingWorkers = workload.DefaultWorkers

// Scheme knows every kind the controller reads or writes.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, workloadv1alpha1.AddToScheme, networkingv1alpha1.AddToScheme, volcanov1beta1.AddToScheme,
		llmdv1alpha1.AddToScheme, llmazcorev1alpha1.AddToScheme, llmazinferencev1alpha1.AddToScheme, leaderworkerset.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}

// RBAC the manager itself needs. Events from every reconciler's recorder (mgr.GetEventRecorder
// writes events.k8s.io/v1; core events stay granted as before). /metrics is served only to
// callers the apiserver authenticates and authorizes for GET /metrics (bind
// berth-metrics-reader to your Prometheus): it asks with a TokenReview and a
// SubjectAccessReview. Leader election holds the lease berth-controller in the
// leader-election namespace (berth-system in manifests/) and records its events there.
//
// +kubebuilder:rbac:groups="";events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=berth-system,roleName=berth-controller-leader-election,resources=leases,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="";events.k8s.io,namespace=berth-system,roleName=berth-controller-leader-election,resources=events,verbs=create;patch

// LeaseName is the Lease (in Options.LeaderElectionNS) berth-controller replicas elect their
// leader through.
const LeaseName = "berth-controller"

// NewManager builds the manager with every reconciler registered. It first checks that the
// apiserver serves every API they need (requiredAPIs) and returns an *apicheck.MissingError
// naming those it does not: a missing CRD would otherwise surface two minutes after Start, as
// a cache-sync timeout.
func NewManager(cfg *rest.Config, o Options) (ctrl.Manager, error) {
	manage, err := scope.Parse(o.Manage)
	if err != nil {
		return nil, err
	}
	if err := apicheck.Check(cfg, "berth-controller", requiredAPIs(o)); err != nil {
		return nil, err
	}
	// Volcano's types are JSON only; controller-runtime negotiates per type, but keep the
	// default content type JSON so CRD kinds and core kinds share one client setup.
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = ""
	metrics := metricsserver.Options{BindAddress: o.MetricsAddr}
	if o.MetricsSecure {
		metrics.SecureServing, metrics.FilterProvider = true, filters.WithAuthenticationAndAuthorization
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  Scheme(),
		Metrics:                 metrics,
		HealthProbeBindAddress:  o.ProbeAddr,
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        LeaseName,
		LeaderElectionNamespace: o.LeaderElectionNS,
		// Release the lease on shutdown so a restarted controller takes over at once.
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 nonZero(o.LeaseDuration),
		RenewDeadline:                 nonZero(o.RenewDeadline),
		RetryPeriod:                   nonZero(o.RetryPeriod),
		Controller:                    config.Controller{SkipNameValidation: ptr.To(o.InProcessRestart)},
	})
	if err != nil {
		return nil, fmt.Errorf("berth-controller manager: %w", err)
	}
	if o.ProbeAddr != "" && o.ProbeAddr != "0" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			return nil, err
		}
		if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
			return nil, err
		}
	}
	if err := (&workload.Reconciler{
		Scope:    manage,
		Client:   mgr.GetClient(),
		Scheme:   mgr.GetScheme(),
		Recorder: mgr.GetEventRecorder("berth-controller"),
		Workers:  o.ModelServingWorkers,
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("ModelServing reconciler: %w", err)
	}
	if err := (&modelbooster.Reconciler{
		Scope:    manage,
		Client:   mgr.GetClient(),
		Recorder: mgr.GetEventRecorder("berth-controller"),
	}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("ModelBooster reconciler: %w", err)
	}
	if err := (&routestatus.RouteReconciler{Scope: manage, Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("berth-controller")}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("ModelRoute status reconciler: %w", err)
	}
	if err := (&routestatus.ServerReconciler{Scope: manage, Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("berth-controller")}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("ModelServer status reconciler: %w", err)
	}
	if err := addAutoscaler(mgr, cfg, o, manage); err != nil {
		return nil, err
	}
	if err := llmazserving.Setup(mgr, manage); err != nil {
		return nil, err
	}
	if err := addLeaderWorkerSets(mgr, cfg); err != nil {
		return nil, err
	}
	return mgr, nil
}

// addLeaderWorkerSets registers the LeaderWorkerSet reconciler when the apiserver serves
// LeaderWorkerSets, as Kthena's controller does: their CRD is optional (crds.lws in the
// chart, manifests/crds/lws), and watching a kind the apiserver does not serve would fail
// the cache sync. It is asked once, at start: a CRD installed later is seen after a restart.
// Whatever --manage says, only LeaderWorkerSets whose pod templates name berth-scheduler are
// run (the rest are LWS's controller's).
func addLeaderWorkerSets(mgr ctrl.Manager, cfg *rest.Config) error {
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("LeaderWorkerSet discovery: %w", err)
	}
	if !serves(disc, leaderworkerset.GroupVersion.WithKind("LeaderWorkerSet")) {
		mgr.GetLogger().Info("LeaderWorkerSets are not served (no CRD leaderworkersets.leaderworkerset.x-k8s.io): LeaderWorkerSet take-over is off until a restart finds them")
		return nil
	}
	if err := (&lwsserving.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("berth-lws"),
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("LeaderWorkerSet reconciler: %w", err)
	}
	return nil
}

// addAutoscaler registers the AutoscalingPolicy and AutoscalingPolicyBinding reconcilers.
// The binding reconciler scales through the scale subresource of whatever kind a binding
// names, so it resolves kinds with discovery (cached; refreshed when a kind is unknown, as
// CRDs come and go).
func addAutoscaler(mgr ctrl.Manager, cfg *rest.Config, o Options, manage scope.Mode) error {
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("autoscaler discovery: %w", err)
	}
	cached := memory.NewMemCacheClient(disc)
	scales, err := scale.NewForConfig(cfg, mgr.GetRESTMapper(), dynamic.LegacyAPIPathResolverFunc, refreshingScaleKindResolver{scale.NewDiscoveryScaleKindResolver(cached), cached})
	if err != nil {
		return fmt.Errorf("autoscaler scale client: %w", err)
	}
	if err := (&binding.Reconciler{
		Scope:        manage,
		Client:       mgr.GetClient(),
		APIReader:    mgr.GetAPIReader(),
		Scales:       scales,
		Mapper:       mgr.GetRESTMapper(),
		Recorder:     mgr.GetEventRecorder("berth-autoscaler"),
		SyncPeriod:   o.AutoscaleSyncPeriod,
		BlindScaling: o.BlindScaling,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("AutoscalingPolicy and AutoscalingPolicyBinding reconcilers: %w", err)
	}
	actuation := variantscaler.Actuation(o.VariantActuation)
	switch actuation {
	case "", variantscaler.ActuateScale, variantscaler.ActuateMetric:
	default:
		return fmt.Errorf("variant actuation %q: want %q or %q", o.VariantActuation, variantscaler.ActuateScale, variantscaler.ActuateMetric)
	}
	var costs types.NamespacedName
	if o.VariantCostsConfigMap != "" {
		ns, name, ok := strings.Cut(o.VariantCostsConfigMap, "/")
		if !ok || ns == "" || name == "" {
			return fmt.Errorf("variant costs ConfigMap %q: want namespace/name", o.VariantCostsConfigMap)
		}
		costs = types.NamespacedName{Namespace: ns, Name: name}
	}
	// llm-d v0.5's variants (VariantAutoscalings in its shape, annotated HPAs and
	// ScaledObjects) are sized together per model by one Sizer. Each run sizes on a
	// replica's highest reading since the previous run, as llm-d sizes on max_over_time
	// over its interval.
	variantSync := o.VariantSyncPeriod
	if variantSync <= 0 {
		variantSync = 30 * time.Second
	}
	// KEDA is optional: asked once, at start; a KEDA installed later is seen after a restart.
	keda := serves(cached, modelvariants.ScaledObjectGVK)
	sizer := &modelvariants.Sizer{
		Client: mgr.GetClient(), Scales: scales, Mapper: mgr.GetRESTMapper(), Scope: manage,
		ScaledObjects: keda, PeakWindow: variantSync, BlindScaling: o.BlindScaling,
	}
	if err := (&variantscaler.Reconciler{
		Scope:          manage,
		Client:         mgr.GetClient(),
		Scales:         scales,
		Recorder:       mgr.GetEventRecorder("berth-variant-autoscaler"),
		SyncPeriod:     o.VariantSyncPeriod,
		Actuation:      actuation,
		CostsConfigMap: costs,
		Variants:       sizer,
		BlindScaling:   o.BlindScaling,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("VariantAutoscaling reconciler: %w", err)
	}
	if err := (&managedscalers.Reconciler{
		Scope:         manage,
		Client:        mgr.GetClient(),
		Recorder:      mgr.GetEventRecorder("berth-variant-autoscaler"),
		Sizer:         sizer,
		ScaledObjects: keda,
		SyncPeriod:    variantSync,
	}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("llm-d annotated HPA/ScaledObject reconciler: %w", err)
	}
	return nil
}

// serves asks discovery whether the apiserver serves a kind, for the optional APIs (KEDA's
// ScaledObject, LeaderWorkerSet): watching a kind it does not serve would fail the cache sync.
func serves(disc discovery.DiscoveryInterface, gvk schema.GroupVersionKind) bool {
	list, err := disc.ServerResourcesForGroupVersion(gvk.GroupVersion().String())
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Kind == gvk.Kind {
			return true
		}
	}
	return false
}

// refreshingScaleKindResolver forgets cached discovery and asks again once when a kind's
// scale subresource is not known: a CRD installed after the controller started.
type refreshingScaleKindResolver struct {
	scale.ScaleKindResolver
	cache discovery.CachedDiscoveryInterface
}

func (r refreshingScaleKindResolver) ScaleForResource(gvr schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	gvk, err := r.ScaleKindResolver.ScaleForResource(gvr)
	if err != nil {
		r.cache.Invalidate()
		return r.ScaleKindResolver.ScaleForResource(gvr)
	}
	return gvk, nil
}

// nonZero is d, or nil (the default) when d is 0.
func nonZero(d time.Duration) *time.Duration {
	if d == 0 {
		return nil
	}
	return &d
}
