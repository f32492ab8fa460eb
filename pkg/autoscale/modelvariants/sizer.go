package modelvariants

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/scale"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	llmdv1alpha1 "github.com/berth-sh/berth/pkg/apis/llmd/v1alpha1"
	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale"
	"github.com/berth-sh/berth/pkg/autoscale/podmetrics"
	"github.com/berth-sh/berth/pkg/autoscale/saturation"
	"github.com/berth-sh/berth/pkg/scope"
)

// The gauges a replica's saturation is read from (vLLM's names; llm-d reads the same).
const (
	MetricKVCacheUsage       = "vllm:kv_cache_usage_perc"
	MetricKVCacheUsageLegacy = "vllm:gpu_cache_usage_perc"
	MetricQueueLength        = "vllm:num_requests_waiting"
)

// Reasons a variant cannot be sized (a Problem's Reason).
const (
	// ReasonTargetNotFound is llm-d's reason for a scale target that does not exist.
	ReasonTargetNotFound = "TargetNotFound"
	// ReasonTargetNotScalable: the kind is not served or has no scale subresource.
	ReasonTargetNotScalable = "TargetNotScalable"
	// ReasonTargetDeclaredTwice: another variant of higher precedence scales the same
	// workload (a VariantAutoscaling over a ScaledObject over an HPA, as llm-d orders them).
	ReasonTargetDeclaredTwice = "TargetDeclaredTwice"
	// ReasonWaitingForMetrics: the workload runs replicas, none of which answered yet.
	ReasonWaitingForMetrics = "WaitingForMetrics"
	// ReasonUnknownMetric: the pods answer but export neither vLLM gauge.
	ReasonUnknownMetric = "UnknownMetric"
)

// Problem is a reason a variant was not sized.
type Problem struct{ Reason, Message string }

func (p *Problem) Error() string { return p.Message }

const (
	defaultPeakWindow  = time.Minute
	defaultMetricPort  = 8000
	defaultMetricPath  = "/metrics"
	metricReadTimeout  = 2 * time.Second
	desiredMemoryLimit = 10000
)

// Sizer sizes variants. One Sizer serves every reconciler that sizes llm-d variants, so
// that their readings and remembered decisions are shared.
type Sizer struct {
	Client client.Client
	Scales scale.ScalesGetter
	Mapper meta.RESTMapper
	// Scope is which objects count as variants (scope.All when zero).
	Scope scope.Mode
	// Config holds the saturation thresholds (llm-d's defaults when zero).
	Config saturation.Config
	// ScaledObjects says KEDA's ScaledObject kind is served, so annotated ScaledObjects
	// are variants too (discovered once at start).
	ScaledObjects bool
	// PeakWindow: a replica's reading is the highest of its reads within this window,
	// as llm-d queries max_over_time[1m] (default one minute).
	PeakWindow time.Duration
	// BlindScaling turns placement-aware scale-up off (--placement-aware-scaling=false):
	// without it, a variant whose ModelServing has no room for another group by
	// berth-scheduler's published count is passed over for the next-cheapest one.
	BlindScaling bool
	// Now is the clock.
	Now func() time.Time

	initOnce sync.Once
	reader   *podmetrics.Reader
	mu       sync.Mutex
	peaks    map[types.UID][]peakRead
	desired  map[string]int32 // Key → last target
}

type peakRead struct {
	at          time.Time
	kv, queue   float64
	hasKV, hasQ bool
}

func (s *Sizer) init() {
	s.initOnce.Do(func() {
		if s.Config == (saturation.Config{}) {
			s.Config = saturation.DefaultConfig()
		}
		if s.PeakWindow <= 0 {
			s.PeakWindow = defaultPeakWindow
		}
		if s.Now == nil {
			s.Now = time.Now
		}
		s.reader = podmetrics.NewReader(metricReadTimeout)
		s.peaks = map[types.UID][]peakRead{}
		s.desired = map[string]int32{}
	})
}

// Result is one sizing of a variant.
type Result struct {
	Variant Variant
	// Current is the replicas the workload has (its scale status, else its spec).
	Current int32
	// Scale is the workload's scale subresource as read, GroupResource its resource.
	Scale         *autoscalingv1.Scale
	GroupResource schema.GroupResource
	// Target is the replicas the model's analysis gives the variant, within its bounds.
	Target int32
	// Accelerator is the variant's accelerator_type (UnresolvedAccelerator when unknown).
	Accelerator string
	// Reporting is how many of its replicas answered with a reading.
	Reporting int
	// Reason says what the model's analysis decided and why; Variants lists the model's
	// variants sized together.
	Reason   string
	Variants []string
	// Analysis is the model's saturation as read.
	Analysis saturation.Analysis
}

// Size sizes self together with every other variant of its model in its namespace and
// returns self's part. The target is remembered as the next run's previous decision (an
// HPA or a ScaledObject keeps none; a VariantAutoscaling's status keeps it across restarts).
func (s *Sizer) Size(ctx context.Context, self Variant) (*Result, error) {
	s.init()
	group, err := s.variantsOf(ctx, self)
	if err != nil {
		return nil, err
	}
	now := s.Now()
	var (
		replicas []saturation.Replica
		states   []saturation.VariantState
		costs    = map[string]float64{}
		mine     *targetReading
		names    []string
	)
	for _, v := range group {
		tr, err := s.read(ctx, v, now)
		if v.Key() == self.Key() {
			if err != nil {
				return nil, err
			}
			mine = tr
		} else if err != nil {
			log.FromContext(ctx).V(1).Info("sibling variant not read", "variant", v.String(), "error", err.Error())
			continue
		}
		id := v.analysisName()
		names = append(names, id)
		costs[id] = v.Cost
		for _, g := range tr.groups {
			replicas = append(replicas, saturation.Replica{Variant: id, KvCacheUsage: g.kv, QueueLength: g.queue})
		}
		// The previous decision: the sizer's own, else (after a restart) what the
		// VariantAutoscaling's status kept. The sizer's is never older than the status,
		// which is written from it, and a cached status may lag the last write.
		desired, ok := s.remembered(v.Key())
		if !ok {
			desired = v.Desired
		}
		states = append(states, saturation.VariantState{Variant: id, Current: int(tr.current), Desired: int(desired), Pending: max(0, int(tr.current)-tr.ready),
			Full: s.full(ctx, v, tr, now)})
	}
	if mine.current > 0 && len(mine.groups) == 0 {
		if mine.answered > 0 {
			return nil, &Problem{ReasonUnknownMetric, fmt.Sprintf("%s %s: %d pods answered at :%d%s but none exports %s or %s",
				self.Target.Kind, self.Target.Name, mine.answered, mine.endpoint.Port, mine.endpoint.Path, MetricKVCacheUsage, MetricQueueLength)}
		}
		msg := fmt.Sprintf("%s %s runs %d replicas, none of which answered at :%d%s yet", self.Target.Kind, self.Target.Name, mine.current, mine.endpoint.Port, mine.endpoint.Path)
		if len(mine.errors) > 0 {
			msg += ": " + strings.Join(mine.errors, "; ")
		}
		return nil, &Problem{ReasonWaitingForMetrics, msg}
	}
	a := saturation.Analyze(replicas, costs, s.Config)
	d := saturation.Targets(a, states)
	target := clamp(int32(d.Targets[self.analysisName()]), self.Min, self.Max)
	s.remember(self.Key(), target)
	acc := self.Accelerator
	if acc == "" {
		acc = UnresolvedAccelerator
	}
	return &Result{
		Variant: self, Current: mine.current, Scale: mine.scale, GroupResource: mine.gr, Target: target, Accelerator: acc,
		Reporting: len(mine.groups), Reason: d.Reason, Variants: names, Analysis: a,
	}, nil
}

// full says berth-scheduler's fresh count on the variant's ModelServing leaves no room for
// one more group; false for other kinds, without a fresh count, or when scaling blind.
func (s *Sizer) full(ctx context.Context, v Variant, tr *targetReading, now time.Time) bool {
	if s.BlindScaling || !v.ScalesModelServing() {
		return false
	}
	var ms workloadv1alpha1.ModelServing
	if err := s.Client.Get(ctx, client.ObjectKey{Namespace: v.Namespace, Name: v.Target.Name}, &ms); err != nil {
		return false
	}
	fits, base, ok := autoscale.GroupsThatFit(ms.Annotations, now)
	return ok && tr.scale.Spec.Replicas >= autoscale.ReplicasThatLand(fits, base, 0)
}

// clamp keeps a target within a variant's bounds, and at one replica or more: a variant
// at zero has no replica to read and would never come back.
func clamp(n, lo, hi int32) int32 {
	n = max(n, lo, 1)
	if hi > 0 {
		n = min(n, hi)
	}
	return n
}

// Forget drops what the sizer remembers of a variant.
func (s *Sizer) Forget(v Variant) {
	s.init()
	s.mu.Lock()
	delete(s.desired, v.Key())
	s.mu.Unlock()
}

func (s *Sizer) remembered(key string) (int32, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.desired[key]
	return n, ok
}

func (s *Sizer) remember(key string, n int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.desired) >= desiredMemoryLimit {
		clear(s.desired) // a leak guard; forgetting only delays decisions by a run
	}
	s.desired[key] = n
}

// variantsOf lists the variants of self's model in self's namespace: llm-d v0.5-shaped
// VariantAutoscalings, annotated HPAs whose workload is a ModelServing (not the HPA KEDA
// generates for a ScaledObject), and annotated ScaledObjects when KEDA is installed. Two
// variants of one workload are one: a VariantAutoscaling wins over a ScaledObject, which
// wins over an HPA (llm-d's order); self losing that is a Problem.
func (s *Sizer) variantsOf(ctx context.Context, self Variant) ([]Variant, error) {
	var all []Variant
	var vas llmdv1alpha1.VariantAutoscalingList
	if err := s.Client.List(ctx, &vas, client.InNamespace(self.Namespace)); err != nil {
		return nil, err
	}
	for i := range vas.Items {
		va := &vas.Items[i]
		if !va.Spec.IsV05() || va.Spec.ModelID != self.ModelID || !va.DeletionTimestamp.IsZero() || !s.Scope.Manages(va) {
			continue
		}
		if v, err := FromVariantAutoscaling(va); err == nil {
			all = append(all, v)
		}
	}
	var hpas autoscalingv2.HorizontalPodAutoscalerList
	if err := s.Client.List(ctx, &hpas, client.InNamespace(self.Namespace)); err != nil {
		return nil, err
	}
	for i := range hpas.Items {
		h := &hpas.Items[i]
		if !IsManaged(h) || ControlledByScaledObject(h) || !h.DeletionTimestamp.IsZero() || !s.Scope.Manages(h) {
			continue
		}
		if v, err := FromHPA(h); err == nil && v.ModelID == self.ModelID && v.ScalesModelServing() {
			all = append(all, v)
		}
	}
	if s.ScaledObjects {
		sos := &unstructured.UnstructuredList{}
		sos.SetGroupVersionKind(ScaledObjectGVK.GroupVersion().WithKind(ScaledObjectGVK.Kind + "List"))
		if err := s.Client.List(ctx, sos, client.InNamespace(self.Namespace)); err != nil && !meta.IsNoMatchError(err) {
			return nil, err
		}
		for i := range sos.Items {
			so := &sos.Items[i]
			if !IsManaged(so) || so.GetDeletionTimestamp() != nil || !s.Scope.Manages(so) {
				continue
			}
			if v, err := FromScaledObject(so); err == nil && v.ModelID == self.ModelID && v.ScalesModelServing() {
				all = append(all, v)
			}
		}
	}
	// self as the caller read it (fresher than the cache), in place of the listed copy.
	all = slices.DeleteFunc(all, func(v Variant) bool { return v.Key() == self.Key() })
	all = append(all, self)

	rank := map[Source]int{SourceVariantAutoscaling: 0, SourceScaledObject: 1, SourceHPA: 2}
	slices.SortStableFunc(all, func(a, b Variant) int {
		if c := rank[a.Source] - rank[b.Source]; c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	var out []Variant
	byTarget := map[string]Variant{}
	for _, v := range all {
		if first, ok := byTarget[v.targetKey()]; ok {
			if v.Key() == self.Key() {
				return nil, &Problem{ReasonTargetDeclaredTwice, fmt.Sprintf("%s %s is also the workload of %s, which takes precedence: this %s is not sized",
					v.Target.Kind, v.Target.Name, first, v.Source)}
			}
			continue
		}
		byTarget[v.targetKey()] = v
		out = append(out, v)
	}
	return out, nil
}

// targetReading is what one variant's workload runs and its replicas' readings.
type targetReading struct {
	gr       schema.GroupResource
	scale    *autoscalingv1.Scale
	current  int32
	ready    int // replicas whose pods are all ready
	answered int // pods that answered
	groups   map[string]groupReading
	endpoint podmetrics.Endpoint
	errors   []string
}

// groupReading is one replica's saturation: the highest of its pods' (a ServingGroup is
// saturated when any of its engines is).
type groupReading struct{ kv, queue float64 }

func (s *Sizer) read(ctx context.Context, v Variant, now time.Time) (*targetReading, error) {
	gv, err := schema.ParseGroupVersion(v.Target.APIVersion)
	if err != nil {
		return nil, &Problem{ReasonTargetNotScalable, fmt.Sprintf("scaleTargetRef.apiVersion: %v", err)}
	}
	mapping, err := s.Mapper.RESTMapping(gv.WithKind(v.Target.Kind).GroupKind(), gv.Version)
	if err != nil {
		return nil, &Problem{ReasonTargetNotScalable, fmt.Sprintf("scaleTargetRef: kind %s in %s is not served by this cluster: %v", v.Target.Kind, v.Target.APIVersion, err)}
	}
	tr := &targetReading{gr: mapping.Resource.GroupResource(), groups: map[string]groupReading{}}
	tr.scale, err = s.Scales.Scales(v.Namespace).Get(ctx, tr.gr, v.Target.Name, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &Problem{ReasonTargetNotFound, fmt.Sprintf("scaleTargetRef: %s %s not found in namespace %s", v.Target.Kind, v.Target.Name, v.Namespace)}
		}
		return nil, &Problem{ReasonTargetNotScalable, fmt.Sprintf("scaleTargetRef: %s %s has no usable scale subresource: %v", v.Target.Kind, v.Target.Name, err)}
	}
	tr.current = tr.scale.Status.Replicas
	if tr.current == 0 {
		tr.current = tr.scale.Spec.Replicas // llm-d: status, else spec
	}
	tr.endpoint = podmetrics.Endpoint{Port: defaultMetricPort, Path: defaultMetricPath}
	sel, err := labels.Parse(tr.scale.Status.Selector)
	if err != nil || sel.Empty() {
		return tr, nil // not reconciled yet: no pods to read
	}
	var list corev1.PodList
	if err := s.Client.List(ctx, &list, client.InNamespace(v.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	pods := podmetrics.FromPods(list.Items)
	if len(pods) == 0 {
		return tr, nil
	}
	if tr.endpoint, err = s.endpointOf(ctx, v.Namespace, list.Items); err != nil {
		return nil, err
	}
	groupOf := map[types.UID]string{}
	notReady := map[string]bool{}
	for _, p := range list.Items {
		g := p.Labels[workloadv1alpha1.GroupNameLabel]
		if g == "" {
			g = p.Name // not a ModelServing's: each pod is a replica
		}
		groupOf[p.UID] = g
		notReady[g] = notReady[g] || !slices.ContainsFunc(pods, func(q podmetrics.Pod) bool { return q.UID == p.UID && q.Ready })
	}
	for _, bad := range notReady {
		if !bad {
			tr.ready++
		}
	}
	results := s.reader.ReadGauges(ctx, pods, tr.endpoint, []string{MetricKVCacheUsage, MetricKVCacheUsageLegacy, MetricQueueLength})
	for _, r := range results {
		if r.Err != nil {
			if len(tr.errors) < 3 {
				tr.errors = append(tr.errors, fmt.Sprintf("pod %s: %v", r.Pod.Name, r.Err))
			}
			continue
		}
		tr.answered++
		kv, hasKV := r.Values[MetricKVCacheUsage]
		if !hasKV {
			kv, hasKV = r.Values[MetricKVCacheUsageLegacy]
		}
		q, hasQ := r.Values[MetricQueueLength]
		if !hasKV && !hasQ {
			continue
		}
		kv, q = s.peak(r.Pod.UID, peakRead{at: now, kv: kv, queue: q, hasKV: hasKV, hasQ: hasQ})
		g := groupOf[r.Pod.UID]
		prev := tr.groups[g]
		tr.groups[g] = groupReading{kv: max(prev.kv, kv), queue: max(prev.queue, q)}
	}
	s.prune(now)
	return tr, nil
}

// peak records a pod's read and returns its highest KV-cache usage and queue within the
// peak window.
func (s *Sizer) peak(uid types.UID, r peakRead) (kv, queue float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	reads := append(s.peaks[uid], r)
	cut := r.at.Add(-s.PeakWindow)
	reads = slices.DeleteFunc(reads, func(p peakRead) bool { return p.at.Before(cut) })
	s.peaks[uid] = reads
	for _, p := range reads {
		if p.hasKV {
			kv = max(kv, p.kv)
		}
		if p.hasQ {
			queue = max(queue, p.queue)
		}
	}
	return kv, queue
}

// prune forgets pods not read within the window.
func (s *Sizer) prune(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cut := now.Add(-s.PeakWindow)
	for uid, reads := range s.peaks {
		if len(reads) == 0 || reads[len(reads)-1].at.Before(cut) {
			delete(s.peaks, uid)
		}
	}
}

// endpointOf is where the pods serve metrics: the port of a ModelServer selecting them,
// else 8000 (vLLM's).
func (s *Sizer) endpointOf(ctx context.Context, ns string, pods []corev1.Pod) (podmetrics.Endpoint, error) {
	ep := podmetrics.Endpoint{Port: defaultMetricPort, Path: defaultMetricPath}
	var servers networkingv1alpha1.ModelServerList
	if err := s.Client.List(ctx, &servers, client.InNamespace(ns)); err != nil {
		if meta.IsNoMatchError(err) {
			return ep, nil
		}
		return ep, err
	}
	podLabels := labels.Set(pods[0].Labels)
	for _, sv := range servers.Items {
		if sv.Spec.WorkloadSelector == nil || len(sv.Spec.WorkloadSelector.MatchLabels) == 0 {
			continue
		}
		if labels.SelectorFromSet(sv.Spec.WorkloadSelector.MatchLabels).Matches(podLabels) && sv.Spec.WorkloadPort != nil && sv.Spec.WorkloadPort.Port != 0 {
			ep.Port = sv.Spec.WorkloadPort.Port
			break
		}
	}
	return ep, nil
}

// AsProblem returns err's Problem, if it is one.
func AsProblem(err error) (*Problem, bool) {
	var p *Problem
	ok := errors.As(err, &p)
	return p, ok
}
