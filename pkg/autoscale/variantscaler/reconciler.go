// Package variantscaler is berth-controller's reconciler for llm-d's VariantAutoscaling: it
// reads the variant's load from its pods, the SLO from the ConfigMap key in sloClassRef and
// the accelerator unit costs, sizes the variant with pkg/autoscale/variant (llm-d's queueing
// model and optimizer), writes currentAlloc, desiredOptimizedAlloc and actuation to status,
// exports the desired replicas under llm-d's metric names and, unless the actuation is left
// to an external HPA or KEDA, scales the variant's ModelServing through its scale subresource.
//
// A variant is the ModelServing of the same name and namespace (llm-d sizes the Deployment
// of the same name).
package variantscaler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/scale"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	llmdv1alpha1 "github.com/berth-sh/berth/pkg/apis/llmd/v1alpha1"
	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale"
	"github.com/berth-sh/berth/pkg/autoscale/modelvariants"
	"github.com/berth-sh/berth/pkg/autoscale/podmetrics"
	"github.com/berth-sh/berth/pkg/autoscale/variant"
	"github.com/berth-sh/berth/pkg/scope"
)

// Actuation says who applies a variant's desired replicas.
type Actuation string

const (
	// ActuateScale: berth-controller scales the ModelServing through its scale subresource
	// (and exports the metric too).
	ActuateScale Actuation = "scale"
	// ActuateMetric: berth-controller only exports inferno_desired_replicas; an HPA or KEDA
	// reading it scales the ModelServing.
	ActuateMetric Actuation = "metric"
)

// Condition types and reasons on a VariantAutoscaling.
const (
	// ConditionReady is True when the last run sized the variant; its reason says what it
	// did (Optimized) or why it could not.
	ConditionReady = "Ready"

	ReasonOptimized             = "Optimized"
	ReasonWaitingForMetrics     = "WaitingForMetrics"
	ReasonSLOConfigNotFound     = "SLOConfigMapNotFound"
	ReasonSLOClassNotFound      = "SLOClassNotFound"
	ReasonInvalidSLOClass       = "InvalidSLOClass"
	ReasonCostsNotFound         = "AcceleratorCostsNotFound"
	ReasonInvalidCosts          = "InvalidAcceleratorCosts"
	ReasonTargetNotFound        = "ModelServingNotFound"
	ReasonInvalidProfile        = "InvalidModelProfile"
	ReasonInfeasible            = "SLOInfeasible"
	ReasonUnknownMetric         = "UnknownMetric"
	ReasonScaleFailed           = "ScaleFailed"
	defaultSyncPeriod           = 30 * time.Second
	defaultMetricPort           = 8000
	defaultMetricPath           = "/metrics"
	defaultMetricReadTimeout    = 2 * time.Second
	defaultCostsConfigMapName   = "accelerator-unit-costs"
	defaultClassesConfigMapName = "service-classes-config"
)

var modelServingGR = schema.GroupResource{Group: "workload.serving.volcano.sh", Resource: "modelservings"}

// Reconciler sizes VariantAutoscalings.
type Reconciler struct {
	// Scope is which objects it acts on (scope.All when zero).
	Scope    scope.Mode
	Client   client.Client
	Scales   scale.ScalesGetter
	Recorder events.EventRecorder
	// SyncPeriod is how often each variant is sized (default 30 s; llm-d's default is 60 s).
	SyncPeriod time.Duration
	// Actuation picks who applies the desired replicas (default ActuateScale).
	Actuation Actuation
	// CostsConfigMap is where accelerator unit costs are read when the variant's namespace
	// has no ConfigMap named accelerator-unit-costs (default berth-system/accelerator-unit-costs).
	CostsConfigMap types.NamespacedName
	// ClassesConfigMap is llm-d's global service-class ConfigMap, read when a variant's
	// sloClassRef names no existing ConfigMap key and its namespace has no
	// service-classes-config (default berth-system/service-classes-config).
	ClassesConfigMap types.NamespacedName
	// Variants sizes VariantAutoscalings written in llm-d v0.5's shape, with the annotated
	// HPAs and ScaledObjects of the same model (shared with pkg/autoscale/managedscalers).
	Variants *modelvariants.Sizer
	// BlindScaling turns placement-aware scale-up off (--placement-aware-scaling=false): a
	// scale-up is made whatever berth-scheduler's published count says.
	BlindScaling bool
	// Now is the clock.
	Now func() time.Time

	mu      sync.Mutex
	readers map[types.NamespacedName]*podmetrics.Reader
}

// RBAC: llm-d's VariantAutoscaling: read the variant, its SLO class and accelerator cost
// ConfigMaps, its ModelServing's pods and ModelServers, write its status; it scales the
// ModelServing of its name through its scale subresource.
//
// +kubebuilder:rbac:groups=llmd.ai,resources=variantautoscalings,verbs=get;list;watch
// +kubebuilder:rbac:groups=llmd.ai,resources=variantautoscalings/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=configmaps;pods,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.serving.volcano.sh,resources=modelservers,verbs=get;list;watch
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=modelservings/scale,verbs=get;update;patch
// +kubebuilder:rbac:groups=workload.serving.volcano.sh,resources=modelservings,verbs=get;list;watch

// SetupWithManager registers the reconciler: variants drive it and requeue themselves each
// sync period; a change of a ConfigMap they read reaches them at once.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.SyncPeriod <= 0 {
		r.SyncPeriod = defaultSyncPeriod
	}
	if r.Actuation == "" {
		r.Actuation = ActuateScale
	}
	if r.CostsConfigMap.Name == "" {
		r.CostsConfigMap = types.NamespacedName{Namespace: "berth-system", Name: defaultCostsConfigMapName}
	}
	if r.ClassesConfigMap.Name == "" {
		r.ClassesConfigMap = types.NamespacedName{Namespace: r.CostsConfigMap.Namespace, Name: defaultClassesConfigMapName}
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	r.readers = map[types.NamespacedName]*podmetrics.Reader{}
	return ctrl.NewControllerManagedBy(mgr).
		Named("variantautoscaling").
		For(&llmdv1alpha1.VariantAutoscaling{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(r.variantsReading)).
		Complete(r)
}

// variantsReading maps a ConfigMap to the variants that read it: by sloClassRef in its
// namespace, and every variant for a cost or shared service-class ConfigMap.
func (r *Reconciler) variantsReading(ctx context.Context, obj client.Object) []reconcile.Request {
	costs := obj.GetName() == defaultCostsConfigMapName || obj.GetName() == defaultClassesConfigMapName ||
		obj.GetName() == r.CostsConfigMap.Name || obj.GetName() == r.ClassesConfigMap.Name
	var list llmdv1alpha1.VariantAutoscalingList
	opts := []client.ListOption{}
	if !costs {
		opts = append(opts, client.InNamespace(obj.GetNamespace()))
	}
	if err := r.Client.List(ctx, &list, opts...); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, va := range list.Items {
		if costs || (va.Spec.SLOClassRef != nil && va.Spec.SLOClassRef.Name == obj.GetName()) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: va.Namespace, Name: va.Name}})
		}
	}
	return out
}

// problem is a reason a run cannot size or actuate the variant.
type problem struct{ reason, message string }

func (p *problem) Error() string { return p.message }

func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var va llmdv1alpha1.VariantAutoscaling
	if err := r.Client.Get(ctx, req.NamespacedName, &va); err != nil {
		if apierrors.IsNotFound(err) {
			r.drop(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	logger := log.FromContext(ctx).WithValues("variantautoscaling", klog.KObj(&va))
	ctx = ctrl.LoggerInto(ctx, logger)
	if !r.Scope.Manages(&va) {
		// Another project's controller acts on it (--manage=berth). It may have been Berth's
		// until its label was removed: drop what Berth kept for it (its metrics reader and
		// series), or /metrics keeps publishing Berth's last inferno_desired_replicas for it
		// beside llm-d's, and an HPA reading that series sees both.
		r.drop(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if !va.DeletionTimestamp.IsZero() {
		r.drop(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	now := r.Now()
	status := va.Status.DeepCopy()
	status.ObservedGeneration = va.Generation
	var err error
	if va.Spec.IsV05() {
		forget(va.Namespace, va.Name) // the spec shape's series, if the object changed shape
		err = r.runV05(ctx, &va, status, now)
	} else {
		err = r.run(ctx, &va, status, now)
	}
	var p *problem
	switch {
	case errors.As(err, &p):
		runErrors.WithLabelValues(p.reason).Inc()
		status.Actuation.Applied = false
		if !hasReason(va.Status.Conditions, p.reason) && p.reason != ReasonWaitingForMetrics {
			r.Recorder.Eventf(&va, nil, corev1.EventTypeWarning, p.reason, actionSize, "%s", p.message)
		}
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: ConditionReady, Status: metav1.ConditionFalse,
			Reason: p.reason, Message: p.message, ObservedGeneration: va.Generation})
		if va.Spec.IsV05() {
			setLLMDConditions(status, va.Generation, p.reason, p.message)
		}
		logger.Info("variant not sized", "reason", p.reason, "message", p.message)
	case err != nil:
		runErrors.WithLabelValues("Error").Inc()
		return ctrl.Result{}, err
	}
	orig := va.DeepCopy()
	va.Status = *status
	// Optimistic lock: a merge patch computed against a stale cached object leaves out the
	// fields this run did not change from that stale copy, so the apiserver would keep a newer
	// run's values beside this run's (a desired count beside a load it was not computed from).
	// A stale base is refused instead, and the next run reads afresh.
	if perr := r.Client.Status().Patch(ctx, &va, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); perr != nil {
		switch {
		case apierrors.IsNotFound(perr):
		case apierrors.IsConflict(perr):
			return ctrl.Result{Requeue: true}, nil
		default:
			return ctrl.Result{}, perr
		}
	}
	return ctrl.Result{RequeueAfter: r.SyncPeriod}, nil
}

// run does one sizing of va and writes what it found into status.
func (r *Reconciler) run(ctx context.Context, va *llmdv1alpha1.VariantAutoscaling, status *llmdv1alpha1.VariantAutoscalingStatus, now time.Time) error {
	slo, class, err := r.slo(ctx, va)
	if err != nil {
		return err
	}
	costs, costsFrom, err := r.costs(ctx, va.Namespace)
	if err != nil {
		return err
	}
	profiles, err := profilesOf(va)
	if err != nil {
		return err
	}

	sc, err := r.Scales.Scales(va.Namespace).Get(ctx, modelServingGR, va.Name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return &problem{ReasonTargetNotFound, fmt.Sprintf("ModelServing %s not found in namespace %s: a VariantAutoscaling sizes the ModelServing of its own name", va.Name, va.Namespace)}
		}
		return err
	}
	pods, ep, err := r.podsOf(ctx, va.Namespace, va.Name, sc)
	if err != nil {
		return err
	}
	// A ModelServing with no pods (scaled to zero) has no load to read: it is sized for no
	// load, which is one replica, so a variant never leaves its model unserved.
	var ld load
	if len(pods) > 0 {
		ld, err = readLoad(ctx, r.reader(types.NamespacedName{Namespace: va.Namespace, Name: va.Name}), pods, ep, now)
	}
	if err != nil {
		var nr errNoReading
		if errors.As(err, &nr) {
			return &problem{ReasonWaitingForMetrics, nr.msg}
		}
		return &problem{ReasonUnknownMetric, err.Error()}
	}
	current := sc.Spec.Replicas

	// The accelerator the ModelServing runs on: llm-d's label, else the only profile.
	acc := va.Labels[llmdv1alpha1.AcceleratorNameLabel]
	if acc == "" && len(profiles) == 1 {
		acc = profiles[0].Acc
	}
	in := variant.OptimizeInput{
		Load:               variant.Load{ArrivalRate: ld.RatePerMinute, AvgOutputTokens: ld.AvgOutput, AvgInputTokens: ld.AvgInput},
		SLO:                slo,
		Profiles:           profiles,
		UnitCosts:          costs,
		CurrentAccelerator: acc,
		KeepAccelerator:    va.Labels[llmdv1alpha1.AcceleratorNameLabel] != "",
	}
	if in.Load.ArrivalRate > 0 && in.Load.AvgOutputTokens == 0 {
		// Requests completed but the token counter did not move: treat as no reading.
		return &problem{ReasonWaitingForMetrics, "requests completed but no generated tokens were counted yet"}
	}
	alloc, err := variant.Optimize(in)
	if err != nil {
		var nf *variant.NoFeasibleError
		if errors.As(err, &nf) {
			return &problem{ReasonInfeasible, fmt.Sprintf("service class %s for model %s (slo-tpot %g ms, slo-ttft %g ms): %v", class, va.Spec.ModelID, slo.TPOT, slo.TTFT, err)}
		}
		return &problem{ReasonInvalidProfile, err.Error()}
	}

	// currentAlloc: what runs now, with the latencies measured over the last interval.
	curAcc := acc
	if curAcc == "" {
		curAcc = alloc.Accelerator
	}
	curProfile := profiles[0]
	for _, p := range profiles {
		if p.Acc == curAcc {
			curProfile = p
		}
	}
	status.CurrentAlloc = &llmdv1alpha1.Allocation{
		Accelerator: curAcc,
		NumReplicas: current,
		MaxBatch:    int32(curProfile.MaxBatchSize),
		VariantCost: variant.FormatDecimal(float64(int(current)*curProfile.AccCount) * costs[curAcc]),
		ITLAverage:  variant.FormatDecimal(ld.ITL),
		WaitAverage: variant.FormatDecimal(ld.TTFT),
		Load: llmdv1alpha1.LoadProfile{
			ArrivalRate: variant.FormatDecimal(ld.RatePerMinute),
			AvgLength:   variant.FormatDecimal(ld.AvgOutput),
		},
	}
	desired := int32(alloc.Replicas)
	limited := ""
	if desired > current && !r.BlindScaling {
		desired, limited = r.capToWhatLands(ctx, va, current, desired, now)
	}
	status.DesiredOptimizedAlloc = &llmdv1alpha1.OptimizedAlloc{LastRunTime: metav1.Time{Time: now}, Accelerator: alloc.Accelerator, NumReplicas: desired}
	desiredReplicas.WithLabelValues(va.Name, va.Namespace, alloc.Accelerator).Set(float64(desired))
	currentReplicas.WithLabelValues(va.Name, va.Namespace, curAcc).Set(float64(current))

	msg := fmt.Sprintf("%s × %d for %.2f req/min of %.1f input and %.1f output tokens (class %s: slo-tpot %g ms, slo-ttft %g ms; at that load a replica sees ITL %.2f ms, wait %.2f ms, TTFT %.2f ms, and serves up to %.2f req/min within the SLO; costs from %s)",
		alloc.Accelerator, desired, ld.RatePerMinute, ld.AvgInput, ld.AvgOutput, class, slo.TPOT, slo.TTFT, alloc.ITLAverage, alloc.WaitAverage, alloc.TTFTAverage, alloc.MaxRatePerReplica, costsFrom)
	if limited != "" {
		msg += "; " + limited
		r.Recorder.Eventf(va, nil, corev1.EventTypeNormal, ReasonCapacityLimited, actionSize, "ModelServing %s: %s", va.Name, limited)
	}
	if r.Actuation == ActuateMetric {
		status.Actuation.Applied = true
		setReady(status, va.Generation, ReasonOptimized, msg+"; exported as inferno_desired_replicas for an external autoscaler")
		return nil
	}
	if desired != current {
		s := sc.DeepCopy()
		s.Spec.Replicas = desired
		if _, err := r.Scales.Scales(va.Namespace).Update(ctx, modelServingGR, s, metav1.UpdateOptions{}); err != nil {
			return &problem{ReasonScaleFailed, fmt.Sprintf("scale ModelServing %s from %d to %d: %v", va.Name, current, desired, err)}
		}
		dir, reason := "scale_up", "load_increase"
		if desired < current {
			dir, reason = "scale_down", "load_decrease"
		}
		replicaScaling.WithLabelValues(va.Name, va.Namespace, dir, reason).Inc()
		r.Recorder.Eventf(va, nil, corev1.EventTypeNormal, ReasonScaled, actionScale, "ModelServing %s: %d -> %d replicas: %s", va.Name, current, desired, msg)
	}
	status.Actuation.Applied = true
	setReady(status, va.Generation, ReasonOptimized, msg)
	return nil
}

// capToWhatLands lowers a scale-up of the variant's ModelServing to the replicas that can
// land now, by the count berth-scheduler publishes on it; without a fresh count (another
// scheduler, one that stopped publishing) desired stands. limited says what was held back.
func (r *Reconciler) capToWhatLands(ctx context.Context, va *llmdv1alpha1.VariantAutoscaling, current, desired int32, now time.Time) (int32, string) {
	var ms workloadv1alpha1.ModelServing
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: va.Namespace, Name: va.Name}, &ms); err != nil {
		return desired, ""
	}
	fits, base, ok := autoscale.GroupsThatFit(ms.Annotations, now)
	if !ok {
		return desired, ""
	}
	land := autoscale.ReplicasThatLand(fits, base, current)
	if desired <= land {
		return desired, ""
	}
	noun, verb := "groups", "fit"
	if fits == 1 {
		noun, verb = "group", "fits"
	}
	return land, fmt.Sprintf("capacity-limited: %d more %s of %s %s now, so %d replicas instead of %d", fits, noun, va.Name, verb, land, desired)
}

// slo finds the variant's SLO. First the service class its sloClassRef names (the ConfigMap
// key in the variant's namespace, as the CRD documents it). When that ConfigMap or key does
// not exist, llm-d's own lookup: the most important class (lowest priority) listing the
// model in a ConfigMap named service-classes-config, in the variant's namespace or the
// controller's. llm-d's samples rely on the latter (their sloClassRef names no real key).
func (r *Reconciler) slo(ctx context.Context, va *llmdv1alpha1.VariantAutoscaling) (variant.SLO, string, error) {
	if va.Spec.SLOClassRef == nil {
		return variant.SLO{}, "", &problem{ReasonSLOConfigNotFound, "spec.sloClassRef: Required value"}
	}
	ref := *va.Spec.SLOClassRef
	var cm corev1.ConfigMap
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: va.Namespace, Name: ref.Name}, &cm)
	if err != nil && !apierrors.IsNotFound(err) {
		return variant.SLO{}, "", err
	}
	raw, found := cm.Data[ref.Key]
	if err == nil && found {
		class, err := variant.ParseServiceClass(ref.Key, raw)
		if err != nil {
			return variant.SLO{}, "", &problem{ReasonInvalidSLOClass, fmt.Sprintf("ConfigMap %s: %v", ref.Name, err)}
		}
		slo, err := variant.SLOFor([]variant.ServiceClass{class}, ref.Key, va.Spec.ModelID)
		if err != nil {
			return variant.SLO{}, "", &problem{ReasonSLOClassNotFound, fmt.Sprintf("spec.modelID: ConfigMap %s key %s: %v", ref.Name, ref.Key, err)}
		}
		return slo, class.Name, nil
	}
	// llm-d's lookup.
	for _, key := range []types.NamespacedName{{Namespace: va.Namespace, Name: defaultClassesConfigMapName}, r.ClassesConfigMap} {
		var all corev1.ConfigMap
		if err := r.Client.Get(ctx, key, &all); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return variant.SLO{}, "", err
		}
		classes, perr := variant.ParseServiceClasses(all.Data)
		slices.SortStableFunc(classes, func(a, b variant.ServiceClass) int { return a.Priority - b.Priority })
		for _, c := range classes {
			if slo, err := variant.SLOFor([]variant.ServiceClass{c}, c.Key, va.Spec.ModelID); err == nil {
				return slo, c.Name, nil
			}
		}
		msg := fmt.Sprintf("spec.modelID: no service class in ConfigMap %s lists model %q", key, va.Spec.ModelID)
		if perr != nil {
			msg += fmt.Sprintf(" (%v)", perr)
		}
		return variant.SLO{}, "", &problem{ReasonSLOClassNotFound, msg}
	}
	if err == nil {
		return variant.SLO{}, "", &problem{ReasonSLOClassNotFound, fmt.Sprintf("spec.sloClassRef.key: ConfigMap %s has no key %q (keys: %s), and no ConfigMap %s exists in namespace %s or as %s",
			ref.Name, ref.Key, strings.Join(keysOf(cm.Data), ", "), defaultClassesConfigMapName, va.Namespace, r.ClassesConfigMap)}
	}
	return variant.SLO{}, "", &problem{ReasonSLOConfigNotFound, fmt.Sprintf("spec.sloClassRef.name: ConfigMap %q not found in namespace %s, and no ConfigMap %s exists there or as %s",
		ref.Name, va.Namespace, defaultClassesConfigMapName, r.ClassesConfigMap)}
}

// costs reads accelerator unit costs: the variant namespace's accelerator-unit-costs, else
// the controller's.
func (r *Reconciler) costs(ctx context.Context, ns string) (map[string]float64, string, error) {
	var cm corev1.ConfigMap
	key := types.NamespacedName{Namespace: ns, Name: defaultCostsConfigMapName}
	err := r.Client.Get(ctx, key, &cm)
	if apierrors.IsNotFound(err) {
		key = r.CostsConfigMap
		err = r.Client.Get(ctx, key, &cm)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", &problem{ReasonCostsNotFound, fmt.Sprintf("no ConfigMap %s in namespace %s nor %s: it lists each accelerator's unit cost", defaultCostsConfigMapName, ns, r.CostsConfigMap)}
		}
		return nil, "", err
	}
	costs, err := variant.ParseAcceleratorCosts(cm.Data)
	if err != nil {
		return nil, "", &problem{ReasonInvalidCosts, fmt.Sprintf("ConfigMap %s: %v", key, err)}
	}
	return costs, key.String(), nil
}

func profilesOf(va *llmdv1alpha1.VariantAutoscaling) ([]variant.Profile, error) {
	if va.Spec.ModelProfile == nil {
		return nil, &problem{ReasonInvalidProfile, "spec.modelProfile: Required value"}
	}
	var out []variant.Profile
	for i, a := range va.Spec.ModelProfile.Accelerators {
		alpha, err1 := strconv.ParseFloat(a.Alpha, 64)
		beta, err2 := strconv.ParseFloat(a.Beta, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, &problem{ReasonInvalidProfile, fmt.Sprintf("spec.modelProfile.accelerators[%d]: %v", i, err)}
		}
		out = append(out, variant.Profile{Acc: a.Acc, AccCount: int(a.AccCount), Alpha: alpha, Beta: beta, MaxBatchSize: int(a.MaxBatchSize)})
	}
	return out, nil
}

// podsOf lists the ModelServing's serving pods (the entry pod of every role replica; its
// scale selector, once it reports one, holds only one pod per ServingGroup, for HPA) and
// where they serve metrics: the port of a ModelServer selecting them, else 8000.
func (r *Reconciler) podsOf(ctx context.Context, ns, name string, sc *autoscalingv1.Scale) ([]podmetrics.Pod, podmetrics.Endpoint, error) {
	ep := podmetrics.Endpoint{Port: defaultMetricPort, Path: defaultMetricPath}
	if sel, err := labels.Parse(sc.Status.Selector); err != nil || sel.Empty() {
		return nil, ep, nil // not reconciled yet
	}
	sel := workloadv1alpha1.EntryPodsSelector(name)
	var list corev1.PodList
	if err := r.Client.List(ctx, &list, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, ep, err
	}
	pods := podmetrics.FromPods(list.Items)
	if len(list.Items) > 0 {
		var servers networkingv1alpha1.ModelServerList
		if err := r.Client.List(ctx, &servers, client.InNamespace(ns)); err != nil {
			return nil, ep, err
		}
		podLabels := labels.Set(list.Items[0].Labels)
		for _, s := range servers.Items {
			if s.Spec.WorkloadSelector == nil || len(s.Spec.WorkloadSelector.MatchLabels) == 0 {
				continue
			}
			if labels.SelectorFromSet(s.Spec.WorkloadSelector.MatchLabels).Matches(podLabels) && s.Spec.WorkloadPort != nil && s.Spec.WorkloadPort.Port != 0 {
				ep.Port = s.Spec.WorkloadPort.Port
				break
			}
		}
	}
	return pods, ep, nil
}

func (r *Reconciler) reader(key types.NamespacedName) *podmetrics.Reader {
	r.mu.Lock()
	defer r.mu.Unlock()
	rd := r.readers[key]
	if rd == nil {
		rd = podmetrics.NewReader(defaultMetricReadTimeout)
		r.readers[key] = rd
	}
	return rd
}

func (r *Reconciler) drop(key types.NamespacedName) {
	r.mu.Lock()
	if rd := r.readers[key]; rd != nil {
		rd.Close()
		delete(r.readers, key)
	}
	r.mu.Unlock()
	forget(key.Namespace, key.Name)
	modelvariants.Forget(key.Namespace, key.Name)
	if r.Variants != nil {
		r.Variants.Forget(modelvariants.Variant{Source: modelvariants.SourceVariantAutoscaling, Namespace: key.Namespace, Name: key.Name})
	}
}

func setReady(st *llmdv1alpha1.VariantAutoscalingStatus, gen int64, reason, msg string) {
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: gen})
}

func hasReason(conds []metav1.Condition, reason string) bool {
	c := meta.FindStatusCondition(conds, ConditionReady)
	return c != nil && c.Reason == reason
}

func keysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
