package modelbooster

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/scope"
)

// This file, engine.go and validation.go are the pure half of the ModelBooster controller:
// what one ModelBooster compiles to (ModelServings, ModelServers, a ModelRoute, autoscaling
// policies and bindings), with no API calls. docs/modelbooster.md describes every mapping;
// keep the two in step.

const (
	// boosterSpecHashAnnotation on a generated object is the hash of the spec the controller
	// last wrote. The apiserver fills in defaults the controller never set, so comparing
	// specs field by field cannot tell "the ModelBooster asks for something else" (a field
	// was removed) from "the server defaulted it"; the hash can.
	boosterSpecHashAnnotation = "modelbooster.volcano.sh/spec-hash"

	// defaultRouteWeight is a backend's share of traffic when routeWeight is unset (the
	// CRD default, repeated for objects that were never defaulted, such as in unit tests).
	defaultRouteWeight = 100
	// defaultCostExpansionRatePercent is OptimizerConfiguration's CRD default.
	defaultCostExpansionRatePercent = 200
	// defaultMetricsPath is where vLLM, SGLang and MindIE serve Prometheus metrics.
	defaultMetricsPath = "/metrics"

	// maxRouteTargets and maxRouteAdapters are ModelRoute's list limits (targetModels,
	// loraAdapters): a ModelBooster beyond them could never get its route created.
	maxRouteTargets  = 16
	maxRouteAdapters = 10
)

// Objects is everything one ModelBooster compiles to.
type Objects struct {
	ModelServings []*workloadv1alpha1.ModelServing
	ModelServers  []*networkingv1alpha1.ModelServer
	ModelRoute    *networkingv1alpha1.ModelRoute
	Policies      []*workloadv1alpha1.AutoscalingPolicy
	Bindings      []*workloadv1alpha1.AutoscalingPolicyBinding
}

// BuildObjects validates mb and compiles it. The error is Validate's aggregated list when
// the spec is invalid; nothing is built then.
func BuildObjects(mb *workloadv1alpha1.ModelBooster) (*Objects, error) {
	if errs := Validate(mb); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	out := &Objects{}
	for i, b := range Backends(mb) {
		ms, err := buildBoosterServing(mb, b)
		if err != nil { // Validate checked everything that can fail here
			return nil, field.InternalError(BackendPath(mb, i), err)
		}
		out.ModelServings = append(out.ModelServings, ms)
		out.ModelServers = append(out.ModelServers, buildBoosterServer(mb, b))
		if b.AutoscalingPolicy != nil {
			p, bd := buildBackendAutoscaling(mb, b)
			out.Policies = append(out.Policies, p)
			out.Bindings = append(out.Bindings, bd)
		}
	}
	out.ModelRoute = buildBoosterRoute(mb)
	if p, bd := buildModelAutoscaling(mb); p != nil {
		out.Policies = append(out.Policies, p)
		out.Bindings = append(out.Bindings, bd)
	}
	return out, nil
}

// Backends are the ModelBooster's backends, whichever shape it is written in: the spec's
// list (spec.backends), or Kthena 1.0's single backend (spec.backend) as a list of one.
// The pointers are into mb.
func Backends(mb *workloadv1alpha1.ModelBooster) []*workloadv1alpha1.ModelBackend {
	if mb.Spec.Backend != nil {
		return []*workloadv1alpha1.ModelBackend{mb.Spec.Backend}
	}
	out := make([]*workloadv1alpha1.ModelBackend, len(mb.Spec.Backends))
	for i := range mb.Spec.Backends {
		out[i] = &mb.Spec.Backends[i]
	}
	return out
}

// BackendPath is the field path of Backends(mb)[i]: spec.backends[i], or spec.backend.
func BackendPath(mb *workloadv1alpha1.ModelBooster, i int) *field.Path {
	if mb.Spec.Backend != nil {
		return field.NewPath("spec", "backend")
	}
	return field.NewPath("spec", "backends").Index(i)
}

// ObjectName is the name of every per-backend object: "<booster>-<backend>".
func ObjectName(booster, backend string) string { return booster + "-" + backend }

// ServedModelName is the model name clients ask for, the engines serve, the ModelServer
// names and the ModelRoute matches: a serving worker's config served-model-name (Kthena
// 1.0's quick start sets it and then asks for that name), else spec.name, else
// metadata.name. Validate makes every worker that sets it agree.
func ServedModelName(mb *workloadv1alpha1.ModelBooster) string {
	if name, _ := configServedName(mb); name != "" {
		return name
	}
	if mb.Spec.Name != "" {
		return mb.Spec.Name
	}
	return mb.Name
}

// configServedName is the first served-model-name a serving worker's config sets, in
// backend and worker order, with its field path ("" and nil when none does).
func configServedName(mb *workloadv1alpha1.ModelBooster) (string, *field.Path) {
	for i, b := range Backends(mb) {
		for j := range b.Workers {
			w := &b.Workers[j]
			if !servesModel(workerType(w)) {
				continue
			}
			if key, v, ok := configValue(w.Config, servedModelNameKey); ok {
				if s, isString := v.(string); isString && s != "" {
					return s, BackendPath(mb, i).Child("workers").Index(j).Child("config").Key(key)
				}
			}
		}
	}
	return "", nil
}

// BackendAutoscaled says whether an autoscaler owns the backend's replica count: it has a
// policy of its own, or the model's policy applies to it; and it does not fix its count
// with replicas (Kthena 1.0).
func BackendAutoscaled(mb *workloadv1alpha1.ModelBooster, b *workloadv1alpha1.ModelBackend) bool {
	return b.Replicas == nil && (b.AutoscalingPolicy != nil || mb.Spec.AutoscalingPolicy != nil)
}

// BackendReplicas is the ModelServing replica count the controller writes: replicas when
// the backend fixes it (Kthena 1.0), minReplicas for an autoscaled backend (only at
// creation: the autoscaler owns it afterwards), else at least one.
func BackendReplicas(mb *workloadv1alpha1.ModelBooster, b *workloadv1alpha1.ModelBackend) int32 {
	if b.Replicas != nil {
		return *b.Replicas
	}
	if BackendAutoscaled(mb, b) {
		return b.MinReplicas
	}
	return max(b.MinReplicas, 1)
}

// backendMaxReplicas is the autoscaler's upper bound: maxReplicas, or max(minReplicas, 1)
// when unset (the binding's maxReplicas is required and at least 1).
func backendMaxReplicas(b *workloadv1alpha1.ModelBackend) int32 {
	if b.MaxReplicas > 0 {
		return b.MaxReplicas
	}
	return max(b.MinReplicas, 1)
}

// boosterLabels are the labels of every object generated for backend (none: the objects
// shared by all backends) and of its pods: Berth's, and Kthena's with the values Kthena's
// controller gives them (its backend-name is "" on shared objects).
func boosterLabels(mb *workloadv1alpha1.ModelBooster, backend string) map[string]string {
	l := map[string]string{
		workloadv1alpha1.ModelBoosterNameLabel:  mb.Name,
		workloadv1alpha1.KthenaModelNameLabel:   mb.Name,
		workloadv1alpha1.KthenaBackendNameLabel: backend,
		workloadv1alpha1.KthenaManagedByLabel:   workloadv1alpha1.KthenaManagedByValue,
	}
	if backend != "" {
		l[workloadv1alpha1.ModelBoosterBackendLabel] = backend
	}
	// What an opted-in ModelBooster generates is Berth's too (--manage=berth).
	return scope.Inherit(mb, l)
}

func boosterOwnerRef(mb *workloadv1alpha1.ModelBooster) metav1.OwnerReference {
	// NewControllerRef sets controller and blockOwnerDeletion.
	return *metav1.NewControllerRef(mb, workloadv1alpha1.SchemeGroupVersion.WithKind("ModelBooster"))
}

func boosterMeta(mb *workloadv1alpha1.ModelBooster, name, backend string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Namespace: mb.Namespace, Name: name,
		Labels:          boosterLabels(mb, backend),
		Annotations:     map[string]string{},
		OwnerReferences: []metav1.OwnerReference{boosterOwnerRef(mb)},
	}
}

// specHash is a short stable hash of a generated spec.
func specHash(spec any) string {
	raw, err := json.Marshal(spec)
	if err != nil {
		panic(fmt.Sprintf("hash of a generated spec: %v", err)) // only plain API structs get here
	}
	h := fnv.New64a()
	_, _ = h.Write(raw)
	return rand.SafeEncodeString(strconv.FormatUint(h.Sum64(), 36))
}

// backendScheduler is the scheduler of the backend's ModelServing and pods:
// schedulerName, else berth-scheduler.
func backendScheduler(b *workloadv1alpha1.ModelBackend) string {
	if b.SchedulerName != "" {
		return b.SchedulerName
	}
	return workloadv1alpha1.BerthSchedulerName
}

// buildBoosterServing is the backend's ModelServing: one role per worker, scheduled by
// berth-scheduler unless the backend names another scheduler.
func buildBoosterServing(mb *workloadv1alpha1.ModelBooster, b *workloadv1alpha1.ModelBackend) (*workloadv1alpha1.ModelServing, error) {
	eng := boosterEngines[b.Type]
	name := ObjectName(mb.Name, b.Name)
	ms := &workloadv1alpha1.ModelServing{
		ObjectMeta: boosterMeta(mb, name, b.Name),
		Spec: workloadv1alpha1.ModelServingSpec{
			Replicas:      ptr.To(BackendReplicas(mb, b)),
			SchedulerName: backendScheduler(b),
		},
	}
	// Roles in a fixed order, whatever the workers' order: reordering the list in the
	// ModelBooster must not roll every ServingGroup.
	order := []workloadv1alpha1.ModelWorkerType{
		workloadv1alpha1.ModelWorkerTypeServer, workloadv1alpha1.ModelWorkerTypePrefill, workloadv1alpha1.ModelWorkerTypeDecode,
		workloadv1alpha1.ModelWorkerTypeController, workloadv1alpha1.ModelWorkerTypeCoordinator,
	}
	for _, t := range order {
		for i := range b.Workers {
			w := &b.Workers[i]
			if workerType(w) != t {
				continue
			}
			role, err := buildBoosterRole(mb, b, eng, w)
			if err != nil {
				return nil, err
			}
			ms.Spec.Template.Roles = append(ms.Spec.Template.Roles, role)
		}
	}
	if eng.disaggregated {
		// A ServingGroup is useless until both its prefill and its decode replicas run:
		// place them all or nothing.
		gang := map[string]int32{}
		for _, r := range ms.Spec.Template.Roles {
			if servesModel(workloadv1alpha1.ModelWorkerType(r.Name)) {
				gang[r.Name] = *r.Replicas
			}
		}
		ms.Spec.Template.GangPolicy = &workloadv1alpha1.GangPolicy{MinRoleReplicas: gang}
	}
	if b.ScaleToZeroGracePeriod != nil {
		ms.Annotations[workloadv1alpha1.ScaleToZeroGracePeriodAnnotation] = b.ScaleToZeroGracePeriod.Duration.String()
	}
	// Replicas are left out of the hash: for an autoscaled backend they are the
	// autoscaler's, and otherwise the controller compares them directly.
	hashed := ms.Spec.DeepCopy()
	hashed.Replicas = nil
	ms.Annotations[boosterSpecHashAnnotation] = specHash(hashed)
	return ms, nil
}

// buildBoosterRole is the role of one worker: worker.replicas role replicas of worker.pods
// pods each (the entry pod and pods-1 worker pods).
func buildBoosterRole(mb *workloadv1alpha1.ModelBooster, b *workloadv1alpha1.ModelBackend, eng boosterEngine, w *workloadv1alpha1.ModelWorker) (workloadv1alpha1.Role, error) {
	t := workerType(w)
	pods := max(w.Pods, 1)
	entry, worker, err := boosterContainers(mb, b, eng, w, pods)
	if err != nil {
		return workloadv1alpha1.Role{}, err
	}
	volumes := boosterVolumes(b)
	template := func(c corev1.Container) workloadv1alpha1.PodTemplateSpec {
		return workloadv1alpha1.PodTemplateSpec{
			Metadata: &workloadv1alpha1.Metadata{Labels: boosterLabels(mb, b.Name)},
			Spec: corev1.PodSpec{
				Containers:       []corev1.Container{c},
				Volumes:          volumes,
				Affinity:         w.Affinity.DeepCopy(),
				Tolerations:      tolerations(w),
				RuntimeClassName: b.RuntimeClassName,
				SchedulerName:    backendScheduler(b),
			},
		}
	}
	role := workloadv1alpha1.Role{
		Name:          string(t),
		Replicas:      ptr.To(max(w.Replicas, 1)),
		EntryTemplate: template(entry),
	}
	if pods > 1 {
		wt := template(worker)
		role.WorkerReplicas = pods - 1
		role.WorkerTemplate = &wt
	}
	return role, nil
}

// buildBoosterServer is the backend's ModelServer: the entry pods of its ModelServing (worker
// pods of a multi-pod replica serve no API), and for PD the prefill/decode roles paired
// within a ServingGroup.
func buildBoosterServer(mb *workloadv1alpha1.ModelBooster, b *workloadv1alpha1.ModelBackend) *networkingv1alpha1.ModelServer {
	eng := boosterEngines[b.Type]
	name := ObjectName(mb.Name, b.Name)
	srv := &networkingv1alpha1.ModelServer{
		ObjectMeta: boosterMeta(mb, name, b.Name),
		Spec: networkingv1alpha1.ModelServerSpec{
			Model:           ptr.To(ServedModelName(mb)),
			InferenceEngine: eng.inferenceEngine,
			WorkloadSelector: &networkingv1alpha1.WorkloadSelector{MatchLabels: map[string]string{
				workloadv1alpha1.ModelServingNameLabel: name,
				workloadv1alpha1.EntryLabel:            "true",
			}},
			WorkloadPort: &networkingv1alpha1.WorkloadPort{Port: eng.port, Protocol: "http"},
		},
	}
	if eng.disaggregated {
		srv.Spec.WorkloadSelector.PDGroup = &networkingv1alpha1.PDGroup{
			GroupKey:      workloadv1alpha1.GroupNameLabel,
			PrefillLabels: map[string]string{workloadv1alpha1.RoleLabel: string(workloadv1alpha1.ModelWorkerTypePrefill)},
			DecodeLabels:  map[string]string{workloadv1alpha1.RoleLabel: string(workloadv1alpha1.ModelWorkerTypeDecode)},
		}
		srv.Spec.KVConnector = &networkingv1alpha1.KVConnectorSpec{Type: kvConnectorOf(b)}
	}
	srv.Annotations[boosterSpecHashAnnotation] = specHash(srv.Spec)
	return srv
}

// buildBoosterRoute is the model's one ModelRoute. Its default rule (the ModelBooster's
// modelMatch) sends the model and every adapter all backends have to all backends by
// routeWeight; an adapter only some backends load gets a rule of its own, first, that
// matches it by body.model and sends it only to those backends, so no request for it
// reaches an engine that does not have it.
func buildBoosterRoute(mb *workloadv1alpha1.ModelBooster) *networkingv1alpha1.ModelRoute {
	route := &networkingv1alpha1.ModelRoute{
		ObjectMeta: boosterMeta(mb, mb.Name, ""),
		Spec:       networkingv1alpha1.ModelRouteSpec{ModelName: ServedModelName(mb)},
	}
	target := func(b *workloadv1alpha1.ModelBackend) networkingv1alpha1.TargetModel {
		w := uint32(defaultRouteWeight)
		if b.RouteWeight != nil {
			w = uint32(*b.RouteWeight)
		}
		return networkingv1alpha1.TargetModel{ModelServerName: ObjectName(mb.Name, b.Name), Weight: &w}
	}
	var all []networkingv1alpha1.TargetModel
	holders := map[string][]networkingv1alpha1.TargetModel{}
	for _, b := range Backends(mb) {
		all = append(all, target(b))
		for _, a := range b.LoraAdapters {
			if _, ok := holders[a.Name]; !ok {
				route.Spec.LoraAdapters = append(route.Spec.LoraAdapters, a.Name)
			}
			holders[a.Name] = append(holders[a.Name], target(b))
		}
	}
	for _, a := range route.Spec.LoraAdapters {
		if len(holders[a]) == len(all) {
			continue
		}
		match := &networkingv1alpha1.ModelMatch{}
		if mb.Spec.ModelMatch != nil {
			match = mb.Spec.ModelMatch.DeepCopy()
		}
		match.Body = &networkingv1alpha1.BodyMatch{Model: ptr.To(a)}
		route.Spec.Rules = append(route.Spec.Rules, networkingv1alpha1.Rule{Name: "lora-" + a, ModelMatch: match, TargetModels: holders[a]})
	}
	def := networkingv1alpha1.Rule{Name: "default", TargetModels: all}
	if mb.Spec.ModelMatch != nil {
		def.ModelMatch = mb.Spec.ModelMatch.DeepCopy()
	}
	route.Spec.Rules = append(route.Spec.Rules, def)
	route.Annotations[boosterSpecHashAnnotation] = specHash(route.Spec)
	return route
}

// boosterTarget is the autoscaling target of a backend: its ModelServing, metrics read from
// the engine's own port.
func boosterTarget(mb *workloadv1alpha1.ModelBooster, b *workloadv1alpha1.ModelBackend) workloadv1alpha1.Target {
	return workloadv1alpha1.Target{
		TargetRef: corev1.ObjectReference{
			APIVersion: workloadv1alpha1.SchemeGroupVersion.String(),
			Kind:       "ModelServing",
			Name:       ObjectName(mb.Name, b.Name),
		},
		MetricEndpoint: &workloadv1alpha1.MetricEndpoint{URI: defaultMetricsPath, Port: EnginePort(b.Type)},
	}
}

// buildBackendAutoscaling is the policy and scaling binding of a backend with its own
// autoscalingPolicy.
func buildBackendAutoscaling(mb *workloadv1alpha1.ModelBooster, b *workloadv1alpha1.ModelBackend) (*workloadv1alpha1.AutoscalingPolicy, *workloadv1alpha1.AutoscalingPolicyBinding) {
	name := ObjectName(mb.Name, b.Name)
	policy := &workloadv1alpha1.AutoscalingPolicy{ObjectMeta: boosterMeta(mb, name, b.Name), Spec: *b.AutoscalingPolicy.DeepCopy()}
	policy.Annotations[boosterSpecHashAnnotation] = specHash(policy.Spec)
	binding := &workloadv1alpha1.AutoscalingPolicyBinding{
		ObjectMeta: boosterMeta(mb, name, b.Name),
		Spec: workloadv1alpha1.AutoscalingPolicyBindingSpec{
			PolicyRef: corev1.LocalObjectReference{Name: name},
			ScalingConfiguration: &workloadv1alpha1.ScalingConfiguration{
				Target:      boosterTarget(mb, b),
				MinReplicas: b.MinReplicas,
				MaxReplicas: backendMaxReplicas(b),
			},
		},
	}
	binding.Annotations[boosterSpecHashAnnotation] = specHash(binding.Spec)
	return policy, binding
}

// buildModelAutoscaling is the model's policy and the optimizer binding that spreads one
// demand over every backend without a policy of its own or a fixed replica count,
// cheapest first (nil, nil when the model has no policy or no backend is left for it).
func buildModelAutoscaling(mb *workloadv1alpha1.ModelBooster) (*workloadv1alpha1.AutoscalingPolicy, *workloadv1alpha1.AutoscalingPolicyBinding) {
	if mb.Spec.AutoscalingPolicy == nil {
		return nil, nil
	}
	var params []workloadv1alpha1.OptimizerParam
	for _, b := range Backends(mb) {
		if b.AutoscalingPolicy != nil || b.Replicas != nil {
			continue
		}
		params = append(params, workloadv1alpha1.OptimizerParam{
			Target:      boosterTarget(mb, b),
			Cost:        b.ScalingCost,
			MinReplicas: b.MinReplicas,
			MaxReplicas: backendMaxReplicas(b),
		})
	}
	if len(params) == 0 {
		return nil, nil
	}
	rate := ptr.Deref(mb.Spec.CostExpansionRatePercent, defaultCostExpansionRatePercent)
	policy := &workloadv1alpha1.AutoscalingPolicy{ObjectMeta: boosterMeta(mb, mb.Name, ""), Spec: *mb.Spec.AutoscalingPolicy.DeepCopy()}
	policy.Annotations[boosterSpecHashAnnotation] = specHash(policy.Spec)
	binding := &workloadv1alpha1.AutoscalingPolicyBinding{
		ObjectMeta: boosterMeta(mb, mb.Name, ""),
		Spec: workloadv1alpha1.AutoscalingPolicyBindingSpec{
			PolicyRef: corev1.LocalObjectReference{Name: mb.Name},
			OptimizerConfiguration: &workloadv1alpha1.OptimizerConfiguration{
				Params:                   params,
				CostExpansionRatePercent: ptr.To(rate),
			},
		},
	}
	binding.Annotations[boosterSpecHashAnnotation] = specHash(binding.Spec)
	return policy, binding
}

// tolerations are the worker's tolerations for its pods (nil when none, so a spec without
// them hashes as before).
func tolerations(w *workloadv1alpha1.ModelWorker) []corev1.Toleration {
	if len(w.Tolerations) == 0 {
		return nil
	}
	out := make([]corev1.Toleration, len(w.Tolerations))
	for i := range w.Tolerations {
		out[i] = *w.Tolerations[i].DeepCopy()
	}
	return out
}

// LoRAAdapterPath is the lora_path the engines are given for an adapter: the Hugging Face
// repo id of hf:// (vLLM downloads it), other URIs as they are.
func LoRAAdapterPath(artifactURL string) string {
	if strings.HasPrefix(artifactURL, "hf://") {
		return strings.TrimPrefix(artifactURL, "hf://")
	}
	return artifactURL
}
