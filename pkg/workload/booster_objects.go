package workload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// This file is the pure half of the ModelBooster controller: what one ModelBooster compiles
// to (ModelServings, ModelServers, a ModelRoute, autoscaling policies and bindings), with no
// API calls. docs/modelbooster.md describes every mapping; keep the two in step.

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

	modelCacheVolume    = "model-cache"
	modelCacheMountPath = "/model-cache"
	modelSourceVolume   = "model-source"
	modelSourceMount    = "/model-source"

	// Multi-node vLLM runs over a Ray cluster whose head is the entry pod.
	rayPort = 6379
	// sglangDistPort is where SGLang's ranks meet when one replica spans several pods.
	sglangDistPort = 5000

	// vllmRuntimeLoRAEnv enables vLLM's load/unload adapter endpoints.
	vllmRuntimeLoRAEnv = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
)

// boosterEngine is how one backend type runs: its container, default image, the port its
// OpenAI API listens on, and the engine the ModelServer names.
type boosterEngine struct {
	container       string
	image           string
	port            int32
	inferenceEngine networkingv1alpha1.InferenceEngine
	disaggregated   bool
	// healthPath is the readiness probe's path ("" for none: MindIE's health API is not
	// on the inference port).
	healthPath string
}

var boosterEngines = map[workloadv1alpha1.ModelBackendType]boosterEngine{
	workloadv1alpha1.ModelBackendTypeVLLM: {
		container: "vllm", image: "vllm/vllm-openai:latest", port: 8000,
		inferenceEngine: networkingv1alpha1.VLLM, healthPath: "/health",
	},
	workloadv1alpha1.ModelBackendTypeVLLMDisaggregated: {
		container: "vllm", image: "vllm/vllm-openai:latest", port: 8000,
		inferenceEngine: networkingv1alpha1.VLLM, healthPath: "/health", disaggregated: true,
	},
	workloadv1alpha1.ModelBackendTypeSGLang: {
		container: "sglang", image: "lmsysorg/sglang:latest", port: 30000,
		inferenceEngine: networkingv1alpha1.SGLang, healthPath: "/health",
	},
	// MindIE serves an OpenAI-compatible API the router talks to as it talks to vLLM
	// (ModelServer's inferenceEngine has no MindIE value).
	workloadv1alpha1.ModelBackendTypeMindIE: {
		container: "mindie", image: "swr.cn-south-1.myhuaweicloud.com/ascendhub/mindie:latest", port: 1025,
		inferenceEngine: networkingv1alpha1.VLLM,
	},
	workloadv1alpha1.ModelBackendTypeMindIEDisaggregated: {
		container: "mindie", image: "swr.cn-south-1.myhuaweicloud.com/ascendhub/mindie:latest", port: 1025,
		inferenceEngine: networkingv1alpha1.VLLM, disaggregated: true,
	},
}

// EnginePort is the port a backend's engine serves its OpenAI API and metrics on (0 for an
// unknown type).
func EnginePort(t workloadv1alpha1.ModelBackendType) int32 { return boosterEngines[t].port }

// BoosterObjectName is the name of every per-backend object: "<booster>-<backend>".
func BoosterObjectName(booster, backend string) string { return booster + "-" + backend }

// ServedModelName is the model name clients ask for: spec.name, else metadata.name.
func ServedModelName(mb *workloadv1alpha1.ModelBooster) string {
	if mb.Spec.Name != "" {
		return mb.Spec.Name
	}
	return mb.Name
}

// BackendAutoscaled says whether an autoscaler owns the backend's replica count: it has a
// policy of its own, or the model's policy applies to it.
func BackendAutoscaled(mb *workloadv1alpha1.ModelBooster, b *workloadv1alpha1.ModelBackend) bool {
	return b.AutoscalingPolicy != nil || mb.Spec.AutoscalingPolicy != nil
}

// BackendReplicas is the ModelServing replica count the controller writes: minReplicas for
// an autoscaled backend (only at creation: the autoscaler owns it afterwards), else at
// least one.
func BackendReplicas(mb *workloadv1alpha1.ModelBooster, b *workloadv1alpha1.ModelBackend) int32 {
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

// BoosterObjects is everything one ModelBooster compiles to.
type BoosterObjects struct {
	ModelServings []*workloadv1alpha1.ModelServing
	ModelServers  []*networkingv1alpha1.ModelServer
	ModelRoute    *networkingv1alpha1.ModelRoute
	Policies      []*workloadv1alpha1.AutoscalingPolicy
	Bindings      []*workloadv1alpha1.AutoscalingPolicyBinding
}

// BuildBoosterObjects validates mb and compiles it. The error is the aggregated
// ValidateBooster list when the spec is invalid; nothing is built then.
func BuildBoosterObjects(mb *workloadv1alpha1.ModelBooster) (*BoosterObjects, error) {
	if errs := ValidateBooster(mb); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	out := &BoosterObjects{}
	for i := range mb.Spec.Backends {
		b := &mb.Spec.Backends[i]
		ms, err := buildBoosterServing(mb, b)
		if err != nil { // ValidateBooster checked everything that can fail here
			return nil, field.InternalError(field.NewPath("spec", "backends").Index(i), err)
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

// ValidateBooster finds what the CRD schema cannot reject but the translation needs, with
// the path of each offending field. Every error is collected, not just the first.
func ValidateBooster(mb *workloadv1alpha1.ModelBooster) field.ErrorList {
	var errs field.ErrorList
	backends := field.NewPath("spec", "backends")
	if len(mb.Spec.Backends) == 0 {
		errs = append(errs, field.Required(backends, "at least one backend is required"))
	}
	if len(mb.Spec.Backends) > maxRouteTargets {
		errs = append(errs, field.TooMany(backends, len(mb.Spec.Backends), maxRouteTargets))
	}
	served := ServedModelName(mb)
	names := map[string]bool{}
	adapterURL := map[string]string{} // adapter name -> artifactURL, across backends
	adapterWhere := map[string]string{}
	for i := range mb.Spec.Backends {
		b := &mb.Spec.Backends[i]
		p := backends.Index(i)
		if names[b.Name] {
			errs = append(errs, field.Duplicate(p.Child("name"), b.Name))
		}
		names[b.Name] = true
		errs = append(errs, validateBackendName(mb, b, p)...)
		eng, ok := boosterEngines[b.Type]
		if !ok {
			errs = append(errs, field.NotSupported(p.Child("type"), b.Type, supportedBackendTypes()))
			continue
		}
		if b.ModelURI == "" {
			errs = append(errs, field.Required(p.Child("modelURI"), "the engine needs a model to serve (hf://, s3:// or pvc://)"))
		} else if !hasAnyPrefix(b.ModelURI, "hf://", "s3://", "pvc://") || len(uriPath(b.ModelURI)) == 0 {
			errs = append(errs, field.Invalid(p.Child("modelURI"), b.ModelURI, "must be hf://<repo>, s3://<bucket>/<path> or pvc://<claim>[/<path>]"))
		}
		if b.CacheURI != "" && (!hasAnyPrefix(b.CacheURI, "hostpath://", "pvc://") || strings.Trim(uriPath(b.CacheURI), "/") == "") {
			errs = append(errs, field.Invalid(p.Child("cacheURI"), b.CacheURI, "must be hostpath://<path> or pvc://<claim>[/<path>]"))
		}
		errs = append(errs, validateWorkers(b, eng, p)...)
		seen := map[string]bool{}
		for j, a := range b.LoraAdapters {
			ap := p.Child("loraAdapters").Index(j)
			if seen[a.Name] {
				errs = append(errs, field.Duplicate(ap.Child("name"), a.Name))
			}
			seen[a.Name] = true
			if a.Name == served {
				errs = append(errs, field.Invalid(ap.Child("name"), a.Name, "an adapter cannot have the served model's name"))
			}
			if url, ok := adapterURL[a.Name]; ok && url != a.ArtifactURL {
				errs = append(errs, field.Invalid(ap.Child("artifactURL"), a.ArtifactURL,
					fmt.Sprintf("adapter %q is %s in backend %s: one name must mean one adapter, since the route sends it to every backend that has it", a.Name, url, adapterWhere[a.Name])))
			} else if !ok {
				adapterURL[a.Name], adapterWhere[a.Name] = a.ArtifactURL, b.Name
			}
		}
	}
	if len(adapterURL) > maxRouteAdapters {
		errs = append(errs, field.TooMany(backends.Child("loraAdapters"), len(adapterURL), maxRouteAdapters))
	}
	return errs
}

func supportedBackendTypes() []string {
	out := make([]string, 0, len(boosterEngines))
	for t := range boosterEngines {
		out = append(out, string(t))
	}
	sort.Strings(out)
	return out
}

// validateBackendName checks that the names derived from the backend fit where they go:
// the ModelServing name is the value of its pods' modelserving.volcano.sh/name label, and
// "<name>-<group>" the value of their group-name label (63 characters at most each).
func validateBackendName(mb *workloadv1alpha1.ModelBooster, b *workloadv1alpha1.ModelBackend, p *field.Path) field.ErrorList {
	groups := max(b.MaxReplicas, b.MinReplicas, 1)
	longest := GroupName(BoosterObjectName(mb.Name, b.Name), int(groups-1))
	if msgs := validation.IsValidLabelValue(longest); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(p.Child("name"), b.Name,
			fmt.Sprintf("ServingGroup name %q (ModelBooster name, backend name and group index) is not a valid label value: %s", longest, strings.Join(msgs, "; ")))}
	}
	return nil
}

// validateWorkers checks that the backend's workers are the roles its type runs: one
// server for an aggregated engine; one prefill and one decode (plus at most one controller
// and one coordinator) for a disaggregated one.
func validateWorkers(b *workloadv1alpha1.ModelBackend, eng boosterEngine, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	wp := p.Child("workers")
	allowed := []workloadv1alpha1.ModelWorkerType{workloadv1alpha1.ModelWorkerTypeServer}
	required := allowed
	if eng.disaggregated {
		required = []workloadv1alpha1.ModelWorkerType{workloadv1alpha1.ModelWorkerTypePrefill, workloadv1alpha1.ModelWorkerTypeDecode}
		allowed = append(slices.Clone(required), workloadv1alpha1.ModelWorkerTypeController, workloadv1alpha1.ModelWorkerTypeCoordinator)
	}
	seen := map[workloadv1alpha1.ModelWorkerType]bool{}
	for j := range b.Workers {
		w := &b.Workers[j]
		t := workerType(w)
		if !slices.Contains(allowed, t) {
			errs = append(errs, field.NotSupported(wp.Index(j).Child("type"), t, workerTypeStrings(allowed)))
			continue
		}
		if seen[t] {
			errs = append(errs, field.Duplicate(wp.Index(j).Child("type"), t))
		}
		seen[t] = true
		if _, err := configArgs(w.Config); err != nil {
			errs = append(errs, field.Invalid(wp.Index(j).Child("config"), string(w.Config.Raw), err.Error()))
		} else {
			for _, key := range reservedConfigKeys(b, t) {
				if hasConfigKey(w.Config, key) {
					errs = append(errs, field.Forbidden(wp.Index(j).Child("config").Key(key), "set by the ModelBooster controller (from spec.name, modelURI, cacheURI and the backend type)"))
				}
			}
		}
	}
	for _, t := range required {
		if !seen[t] {
			errs = append(errs, field.Required(wp, fmt.Sprintf("a %s backend needs a worker of type %s", b.Type, t)))
		}
	}
	return errs
}

func workerTypeStrings(ts []workloadv1alpha1.ModelWorkerType) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = string(t)
	}
	return out
}

// workerType is the worker's type with the CRD default (server) applied.
func workerType(w *workloadv1alpha1.ModelWorker) workloadv1alpha1.ModelWorkerType {
	if w.Type == "" {
		return workloadv1alpha1.ModelWorkerTypeServer
	}
	return w.Type
}

// servesModel says whether a role runs the inference engine (and so gets the model, LoRA
// adapters and the ModelServer's traffic); controller and coordinator pods run whatever
// their image does with their config.
func servesModel(t workloadv1alpha1.ModelWorkerType) bool {
	return t == workloadv1alpha1.ModelWorkerTypeServer || t == workloadv1alpha1.ModelWorkerTypePrefill || t == workloadv1alpha1.ModelWorkerTypeDecode
}

// reservedConfigKeys are engine flags the controller sets itself: changing them in config
// would make the engine disagree with the ModelServer and the ModelRoute.
func reservedConfigKeys(b *workloadv1alpha1.ModelBackend, t workloadv1alpha1.ModelWorkerType) []string {
	if !servesModel(t) {
		return nil
	}
	keys := []string{"model", "model-path", "served-model-name", "port"}
	if b.CacheURI != "" {
		keys = append(keys, "download-dir")
	}
	return keys
}

// normalizeFlag is a config key as a flag name without dashes, "_" read as "-" (vLLM and
// SGLang accept both spellings).
func normalizeFlag(key string) string {
	return strings.ReplaceAll(strings.TrimLeft(key, "-"), "_", "-")
}

func hasConfigKey(cfg *apiextensionsv1.JSON, key string) bool {
	m, _ := decodeConfig(cfg)
	for k := range m {
		if normalizeFlag(k) == key {
			return true
		}
	}
	return false
}

func decodeConfig(cfg *apiextensionsv1.JSON) (map[string]any, error) {
	if cfg == nil || len(bytes.TrimSpace(cfg.Raw)) == 0 || string(bytes.TrimSpace(cfg.Raw)) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(cfg.Raw))
	dec.UseNumber() // 0.9 stays "0.9" and 32768 stays "32768" on the command line
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("must be a JSON object of engine arguments, not %T", v)
	}
	return m, nil
}

// configArgs turns a worker's config into engine command-line arguments, keys sorted (the
// apiserver does not keep a JSON object's key order anyway): "--key value"; a true boolean
// is a bare "--key" and a false one or null is left out (the engine's default applies);
// arrays and objects are passed as compact JSON, as vLLM's and SGLang's JSON-valued flags
// expect.
func configArgs(cfg *apiextensionsv1.JSON) ([]string, error) {
	m, err := decodeConfig(cfg)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var args []string
	for _, k := range keys {
		flag := "--" + strings.TrimLeft(k, "-")
		if flag == "--" {
			return nil, fmt.Errorf("empty argument name")
		}
		switch v := m[k].(type) {
		case nil:
		case bool:
			if v {
				args = append(args, flag)
			}
		case string:
			args = append(args, flag, v)
		case json.Number:
			args = append(args, flag, v.String())
		default:
			raw, err := json.Marshal(v)
			if err != nil {
				return nil, err
			}
			args = append(args, flag, string(raw))
		}
	}
	return args, nil
}

func hasAnyPrefix(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// uriPath is what follows "<scheme>://".
func uriPath(uri string) string {
	_, rest, _ := strings.Cut(uri, "://")
	return rest
}

// boosterLabels are the labels of every object generated for backend (none: the objects
// shared by all backends).
func boosterLabels(mb *workloadv1alpha1.ModelBooster, backend string) map[string]string {
	l := map[string]string{workloadv1alpha1.ModelBoosterNameLabel: mb.Name}
	if backend != "" {
		l[workloadv1alpha1.ModelBoosterBackendLabel] = backend
	}
	return l
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

// buildBoosterServing is the backend's ModelServing: one role per worker, scheduled by
// berth-scheduler.
func buildBoosterServing(mb *workloadv1alpha1.ModelBooster, b *workloadv1alpha1.ModelBackend) (*workloadv1alpha1.ModelServing, error) {
	eng := boosterEngines[b.Type]
	name := BoosterObjectName(mb.Name, b.Name)
	ms := &workloadv1alpha1.ModelServing{
		ObjectMeta: boosterMeta(mb, name, b.Name),
		Spec: workloadv1alpha1.ModelServingSpec{
			Replicas:      ptr.To(BackendReplicas(mb, b)),
			SchedulerName: berthScheduler,
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
				Containers:    []corev1.Container{c},
				Volumes:       volumes,
				Affinity:      w.Affinity.DeepCopy(),
				SchedulerName: berthScheduler,
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

// boosterContainers are the entry and worker containers of a role.
func boosterContainers(mb *workloadv1alpha1.ModelBooster, b *workloadv1alpha1.ModelBackend, eng boosterEngine, w *workloadv1alpha1.ModelWorker, pods int32) (entry, worker corev1.Container, err error) {
	t := workerType(w)
	config, err := configArgs(w.Config)
	if err != nil {
		return entry, worker, err
	}
	image := w.Image
	if image == "" {
		image = eng.image
	}
	entry = corev1.Container{
		Name:      eng.container,
		Image:     image,
		Env:       slices.Clone(b.Env),
		EnvFrom:   slices.Clone(b.EnvFrom),
		Resources: *w.Resources.DeepCopy(),
		Ports:     []corev1.ContainerPort{{Name: "http", ContainerPort: eng.port, Protocol: corev1.ProtocolTCP}},
	}
	for i := range entry.Env {
		entry.Env[i] = *entry.Env[i].DeepCopy()
	}
	for i := range entry.EnvFrom {
		entry.EnvFrom[i] = *entry.EnvFrom[i].DeepCopy()
	}
	entry.VolumeMounts = boosterVolumeMounts(b)
	if !servesModel(t) {
		// Controller and coordinator pods (MindIE's PD control plane) run their image's own
		// entrypoint with their config; they serve no model.
		entry.Args = config
		return entry, *entry.DeepCopy(), nil
	}
	if eng.healthPath != "" {
		entry.ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: eng.healthPath, Port: intstr.FromString("http")}},
			PeriodSeconds: 5, FailureThreshold: 3,
		}
	}
	if len(b.LoraAdapters) > 0 && isVLLM(b.Type) && !slices.ContainsFunc(entry.Env, func(e corev1.EnvVar) bool { return e.Name == vllmRuntimeLoRAEnv }) {
		// vLLM serves /v1/load_lora_adapter only when runtime LoRA updates are allowed.
		entry.Env = append(entry.Env, corev1.EnvVar{Name: vllmRuntimeLoRAEnv, Value: "True"})
	}
	args := engineArgs(mb, b, t)
	worker = *entry.DeepCopy()
	worker.ReadinessProbe = nil // only the entry pod serves the API
	switch {
	case isVLLM(b.Type):
		if pods == 1 {
			entry.Command = []string{"vllm", "serve"}
			entry.Args = append(args, config...)
			break
		}
		// One replica over several pods: vLLM shards over a Ray cluster whose head is the
		// entry pod; the workers join it at ENTRY_ADDRESS (set by the ModelServing
		// controller, expanded by the kubelet).
		args = append(append(args, "--distributed-executor-backend", "ray"), config...)
		entry.Command = []string{"/bin/sh", "-c"}
		entry.Args = []string{fmt.Sprintf("ray start --head --port=%d && exec vllm serve %s", rayPort, shellJoin(args))}
		worker.Command = []string{"/bin/sh", "-c"}
		worker.Args = []string{fmt.Sprintf("ray start --block --address=$(%s):%d", workloadv1alpha1.EntryAddressEnv, rayPort)}
		worker.Ports = nil
	case b.Type == workloadv1alpha1.ModelBackendTypeSGLang:
		entry.Command = []string{"python3", "-m", "sglang.launch_server"}
		if pods > 1 {
			// SGLang's own multi-node mode: every pod runs the server with its rank.
			args = append(args, "--nnodes", strconv.Itoa(int(pods)),
				"--node-rank", "$("+workloadv1alpha1.WorkerIndexEnv+")",
				"--dist-init-addr", fmt.Sprintf("$(%s):%d", workloadv1alpha1.EntryAddressEnv, sglangDistPort))
		}
		entry.Args = append(args, config...)
		worker.Command, worker.Args = entry.Command, slices.Clone(entry.Args)
	default: // MindIE: the image's entrypoint takes the same flags
		entry.Args = append(args, config...)
		worker.Args = slices.Clone(entry.Args)
	}
	return entry, worker, nil
}

func isVLLM(t workloadv1alpha1.ModelBackendType) bool {
	return t == workloadv1alpha1.ModelBackendTypeVLLM || t == workloadv1alpha1.ModelBackendTypeVLLMDisaggregated
}

// engineArgs is the start of the engine's command line after the program: the model, the
// served name, the port, the download directory, LoRA and the PD connector. Multi-pod flags
// and then the worker's config follow.
func engineArgs(mb *workloadv1alpha1.ModelBooster, b *workloadv1alpha1.ModelBackend, t workloadv1alpha1.ModelWorkerType) []string {
	eng := boosterEngines[b.Type]
	model := modelArg(b.ModelURI)
	var args []string
	switch b.Type {
	case workloadv1alpha1.ModelBackendTypeVLLM, workloadv1alpha1.ModelBackendTypeVLLMDisaggregated:
		args = []string{model} // `vllm serve <model>`
	case workloadv1alpha1.ModelBackendTypeSGLang:
		args = []string{"--model-path", model, "--host", "0.0.0.0"}
	default:
		args = []string{"--model", model}
	}
	args = append(args, "--served-model-name", ServedModelName(mb), "--port", strconv.Itoa(int(eng.port)))
	if b.CacheURI != "" {
		args = append(args, "--download-dir", modelCacheMountPath)
	}
	if len(b.LoraAdapters) > 0 {
		args = append(args, "--enable-lora")
	}
	if b.Type == workloadv1alpha1.ModelBackendTypeVLLMDisaggregated && !workerHasConfigKey(b, t, "kv-transfer-config") {
		// NIXL moves the KV cache from the prefill to the decode engine; kv_both lets
		// either side of a pair take either part, as vLLM's PD examples do.
		args = append(args, "--kv-transfer-config", `{"kv_connector":"NixlConnector","kv_role":"kv_both"}`)
	}
	return args
}

func workerHasConfigKey(b *workloadv1alpha1.ModelBackend, t workloadv1alpha1.ModelWorkerType, key string) bool {
	for i := range b.Workers {
		if workerType(&b.Workers[i]) == t && hasConfigKey(b.Workers[i].Config, key) {
			return true
		}
	}
	return false
}

// modelArg is what the engine is told to load: the Hugging Face repo id of hf://, the
// mounted path of pvc://, and s3:// as is (vLLM's Run:ai streamer and SGLang read it).
func modelArg(uri string) string {
	switch {
	case strings.HasPrefix(uri, "hf://"):
		return strings.TrimPrefix(uri, "hf://")
	case strings.HasPrefix(uri, "pvc://"):
		_, sub, _ := strings.Cut(uriPath(uri), "/")
		return strings.TrimSuffix(modelSourceMount+"/"+sub, "/")
	default:
		return uri
	}
}

// boosterVolumes mounts the model's PVC (pvc:// modelURI) and the download cache
// (cacheURI: a host directory or a PVC).
func boosterVolumes(b *workloadv1alpha1.ModelBackend) []corev1.Volume {
	var vols []corev1.Volume
	if strings.HasPrefix(b.ModelURI, "pvc://") {
		claim, _, _ := strings.Cut(uriPath(b.ModelURI), "/")
		vols = append(vols, corev1.Volume{Name: modelSourceVolume, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim, ReadOnly: true}}})
	}
	switch {
	case strings.HasPrefix(b.CacheURI, "hostpath://"):
		vols = append(vols, corev1.Volume{Name: modelCacheVolume, VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: "/" + strings.Trim(uriPath(b.CacheURI), "/"), Type: ptr.To(corev1.HostPathDirectoryOrCreate)}}})
	case strings.HasPrefix(b.CacheURI, "pvc://"):
		claim, _, _ := strings.Cut(uriPath(b.CacheURI), "/")
		vols = append(vols, corev1.Volume{Name: modelCacheVolume, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	}
	return vols
}

func boosterVolumeMounts(b *workloadv1alpha1.ModelBackend) []corev1.VolumeMount {
	var mounts []corev1.VolumeMount
	if strings.HasPrefix(b.ModelURI, "pvc://") {
		mounts = append(mounts, corev1.VolumeMount{Name: modelSourceVolume, MountPath: modelSourceMount, ReadOnly: true})
	}
	if b.CacheURI != "" {
		m := corev1.VolumeMount{Name: modelCacheVolume, MountPath: modelCacheMountPath}
		if strings.HasPrefix(b.CacheURI, "pvc://") {
			_, m.SubPath, _ = strings.Cut(uriPath(b.CacheURI), "/")
			m.SubPath = strings.Trim(m.SubPath, "/")
		}
		mounts = append(mounts, m)
	}
	return mounts
}

// shellJoin quotes words for /bin/sh -c where they need it.
func shellJoin(words []string) string {
	out := make([]string, len(words))
	for i, w := range words {
		if w != "" && strings.IndexFunc(w, func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=,@%+", r))
		}) < 0 {
			out[i] = w
			continue
		}
		out[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// buildBoosterServer is the backend's ModelServer: the entry pods of its ModelServing (worker
// pods of a multi-pod replica serve no API), and for PD the prefill/decode roles paired
// within a ServingGroup.
func buildBoosterServer(mb *workloadv1alpha1.ModelBooster, b *workloadv1alpha1.ModelBackend) *networkingv1alpha1.ModelServer {
	eng := boosterEngines[b.Type]
	name := BoosterObjectName(mb.Name, b.Name)
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

// kvConnectorOf is how the router hands a request from prefill to decode, from the vLLM
// connector the prefill engine runs (NIXL unless its config names another). MindIE moves
// the KV itself, keyed by request id: the http flow.
func kvConnectorOf(b *workloadv1alpha1.ModelBackend) networkingv1alpha1.KVConnectorType {
	if b.Type != workloadv1alpha1.ModelBackendTypeVLLMDisaggregated {
		return networkingv1alpha1.ConnectorTypeHTTP
	}
	for i := range b.Workers {
		if workerType(&b.Workers[i]) != workloadv1alpha1.ModelWorkerTypePrefill {
			continue
		}
		m, _ := decodeConfig(b.Workers[i].Config)
		for k, v := range m {
			if normalizeFlag(k) != "kv-transfer-config" {
				continue
			}
			var kv struct {
				Connector string `json:"kv_connector"`
			}
			switch v := v.(type) {
			case string:
				_ = json.Unmarshal([]byte(v), &kv)
			case map[string]any:
				kv.Connector, _ = v["kv_connector"].(string)
			}
			c := strings.ToLower(kv.Connector)
			switch {
			case strings.Contains(c, "nixl"):
				return networkingv1alpha1.ConnectorTypeNIXL
			case strings.Contains(c, "lmcache"):
				return networkingv1alpha1.ConnectorTypeLMCache
			case strings.Contains(c, "mooncake"):
				return networkingv1alpha1.ConnectorTypeMoonCake
			default:
				return networkingv1alpha1.ConnectorTypeHTTP
			}
		}
	}
	return networkingv1alpha1.ConnectorTypeNIXL
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
		return networkingv1alpha1.TargetModel{ModelServerName: BoosterObjectName(mb.Name, b.Name), Weight: &w}
	}
	var all []networkingv1alpha1.TargetModel
	holders := map[string][]networkingv1alpha1.TargetModel{}
	for i := range mb.Spec.Backends {
		b := &mb.Spec.Backends[i]
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
			Name:       BoosterObjectName(mb.Name, b.Name),
		},
		MetricEndpoint: &workloadv1alpha1.MetricEndpoint{URI: defaultMetricsPath, Port: EnginePort(b.Type)},
	}
}

// buildBackendAutoscaling is the policy and scaling binding of a backend with its own
// autoscalingPolicy.
func buildBackendAutoscaling(mb *workloadv1alpha1.ModelBooster, b *workloadv1alpha1.ModelBackend) (*workloadv1alpha1.AutoscalingPolicy, *workloadv1alpha1.AutoscalingPolicyBinding) {
	name := BoosterObjectName(mb.Name, b.Name)
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
// demand over every backend without a policy of its own, cheapest first (nil, nil when the
// model has no policy or every backend has its own).
func buildModelAutoscaling(mb *workloadv1alpha1.ModelBooster) (*workloadv1alpha1.AutoscalingPolicy, *workloadv1alpha1.AutoscalingPolicyBinding) {
	if mb.Spec.AutoscalingPolicy == nil {
		return nil, nil
	}
	var params []workloadv1alpha1.OptimizerParam
	for i := range mb.Spec.Backends {
		b := &mb.Spec.Backends[i]
		if b.AutoscalingPolicy != nil {
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

// LoRAAdapterPath is the lora_path the engines are given for an adapter: the Hugging Face
// repo id of hf:// (vLLM downloads it), other URIs as they are.
func LoRAAdapterPath(artifactURL string) string {
	if strings.HasPrefix(artifactURL, "hf://") {
		return strings.TrimPrefix(artifactURL, "hf://")
	}
	return artifactURL
}
