package llmazserving

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	lws "sigs.k8s.io/lws/api/leaderworkerset/v1"

	coreapi "github.com/berth-sh/berth/pkg/apis/llmaz/core/v1alpha1"
	inferenceapi "github.com/berth-sh/berth/pkg/apis/llmaz/inference/v1alpha1"
	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/scope"
)

// llmaz's names, kept so manifests and tools written for llmaz see what they expect.
const (
	// ModelRunnerContainer is the engine container of a Playground's pods.
	ModelRunnerContainer = "model-runner"
	// ModelLoaderContainer is the init container that downloads a model (llmaz's image).
	ModelLoaderContainer = "model-loader"
	ModelLoaderImage     = "inftyai/model-loader:v0.0.10"
	modelVolume          = "model-volume"
	containerModelPath   = "/workspace/models/"
	// DefaultBackendPort is where llmaz's BackendRuntimes serve (their --port 8080).
	DefaultBackendPort = 8080
	// SkipModelLoaderAnnotation "true" lets the engine load the model itself: the model
	// path is then the hub's model ID or the object store URI.
	SkipModelLoaderAnnotation = "llmaz.io/skip-model-loader"
	// PlaygroundLabel names the Playground a Service, ModelServing or pod belongs to.
	PlaygroundLabel = "inference.llmaz.io/playground"

	defaultConfigName     = "default"
	speculativeConfigName = "speculative-decoding"
	// Berth's ModelServing role that holds an llmaz Service's leader and workers.
	roleName = "server"
)

// Models are the OpenModels a Playground or Service claims, main model first, with roles.
type Models struct {
	Main   *coreapi.OpenModel
	Draft  *coreapi.OpenModel
	LoRAs  []*coreapi.OpenModel
	Claims []coreapi.ModelRef // as written, main first
	// Flavors are the claim's inferenceFlavors (empty: the main model's, in its order).
	Flavors []coreapi.FlavorName
}

// All is every claimed model in the order llmaz injects loaders: main, draft, LoRAs.
func (m *Models) All() []*coreapi.OpenModel {
	out := []*coreapi.OpenModel{m.Main}
	if m.Draft != nil {
		out = append(out, m.Draft)
	}
	return append(out, m.LoRAs...)
}

// Claims are a Playground's model references, main first, and its flavor names.
func Claims(pg *inferenceapi.Playground) ([]coreapi.ModelRef, []coreapi.FlavorName) {
	if c := pg.Spec.ModelClaim; c != nil {
		return []coreapi.ModelRef{{Name: c.ModelName, Role: ptr.To(coreapi.MainRole)}}, c.InferenceFlavors
	}
	if c := pg.Spec.ModelClaims; c != nil {
		return sortedRefs(c.Models), c.InferenceFlavors
	}
	return nil, nil
}

// sortedRefs puts the main model first, then the draft, then LoRAs, keeping their order.
func sortedRefs(refs []coreapi.ModelRef) []coreapi.ModelRef {
	rank := func(r coreapi.ModelRef) int {
		switch roleOf(r) {
		case coreapi.MainRole:
			return 0
		case coreapi.DraftRole:
			return 1
		}
		return 2
	}
	out := slices.Clone(refs)
	slices.SortStableFunc(out, func(a, b coreapi.ModelRef) int { return rank(a) - rank(b) })
	return out
}

func roleOf(r coreapi.ModelRef) coreapi.ModelRole {
	if r.Role == nil {
		return coreapi.MainRole
	}
	return *r.Role
}

// ConfigName is the recommended config a Playground uses: configName, else inferred as
// llmaz does: "speculative-decoding" with a draft model, else "default".
func ConfigName(pg *inferenceapi.Playground, m *Models) string {
	if c := pg.Spec.BackendRuntimeConfig; c != nil && c.ConfigName != nil && *c.ConfigName != "" {
		return *c.ConfigName
	}
	if m.Draft != nil {
		return speculativeConfigName
	}
	return defaultConfigName
}

// BackendName is the BackendRuntime a Playground names (default vllm).
func BackendName(pg *inferenceapi.Playground) string {
	if c := pg.Spec.BackendRuntimeConfig; c != nil && c.BackendName != nil && *c.BackendName != "" {
		return string(*c.BackendName)
	}
	return string(inferenceapi.DefaultBackend)
}

// ModelPath is where the engine finds a model, as llmaz computes it: under
// /workspace/models/ where the model loader puts it, the host path of a host:// URI, or (with
// the loader skipped) the hub's model ID or the object store URI.
func ModelPath(m *coreapi.OpenModel, skipLoader bool) string {
	src := m.Spec.Source
	if hub := src.ModelHub; hub != nil {
		switch {
		case skipLoader:
			return hub.ModelID
		case hub.Filename != nil:
			return containerModelPath + *hub.Filename
		}
		return containerModelPath + "models--" + strings.ReplaceAll(hub.ModelID, "/", "--")
	}
	if src.URI == nil {
		return ""
	}
	uri := string(*src.URI)
	protocol, address, _ := strings.Cut(uri, "://")
	switch strings.ToLower(protocol) {
	case "host":
		return address
	case "ollama":
		return address
	}
	if skipLoader {
		return uri
	}
	parts := strings.Split(address, "/")
	last := parts[len(parts)-1]
	if strings.Contains(address, ".gguf") {
		return containerModelPath + last
	}
	return containerModelPath + "models--" + last
}

// ModelName is what `{{ .ModelName }}` renders to, the name the engine serves the model
// by: the OpenModel's name, except for an ollama:// model, whose name is Ollama's own (the
// URI's address, e.g. qwen2:0.5b for ollama://qwen2:0.5b), the name Ollama pulls and serves,
// as llmaz renders it.
func ModelName(m *coreapi.OpenModel) string {
	if u := m.Spec.Source.URI; u != nil {
		if protocol, address, ok := strings.Cut(string(*u), "://"); ok && strings.EqualFold(protocol, "ollama") {
			return address
		}
	}
	return m.Name
}

var templateVar = regexp.MustCompile(`\{\{\s*\.(\w+)\s*\}\}`)

// RenderArgs fills llmaz's `{{ .Name }}` placeholders; an unknown or empty one is an error
// naming the argument, as in llmaz.
func RenderArgs(args []string, vars map[string]string) ([]string, error) {
	out := make([]string, 0, len(args))
	for _, a := range args {
		var missing string
		v := templateVar.ReplaceAllStringFunc(a, func(m string) string {
			key := templateVar.FindStringSubmatch(m)[1]
			val, ok := vars[key]
			if !ok || val == "" {
				missing = key
			}
			return val
		})
		if missing != "" {
			return nil, fmt.Errorf("argument %q: {{ .%s }} has no value (known: %s)", a, missing, strings.Join(slices.Sorted(maps.Keys(vars)), ", "))
		}
		out = append(out, v)
	}
	return out, nil
}

// BuildService is the llmaz Service of a Playground, as llmaz's Playground controller builds
// it: one pod per replica (LWS size 1) running the BackendRuntime's command with the
// recommended config's rendered arguments plus the Playground's, its image at the chosen
// version, the merged envs and resources, /dev/shm, probes and lifecycle.
func BuildService(pg *inferenceapi.Playground, m *Models, br *inferenceapi.BackendRuntime, cfg *inferenceapi.RecommendedConfig) (*inferenceapi.Service, error) {
	skip := pg.Annotations[SkipModelLoaderAnnotation] == "true"
	vars := map[string]string{"ModelPath": ModelPath(m.Main, skip), "ModelName": ModelName(m.Main)}
	if m.Draft != nil {
		vars["DraftModelPath"] = ModelPath(m.Draft, skip)
		vars["DraftModelName"] = ModelName(m.Draft)
	}
	args, err := RenderArgs(cfg.Args, vars)
	if err != nil {
		return nil, fmt.Errorf("BackendRuntime %s recommendedConfigs %s: %w", br.Name, cfg.Name, err)
	}
	bc := pg.Spec.BackendRuntimeConfig
	if bc == nil {
		bc = &inferenceapi.BackendRuntimeConfig{}
	}
	args = append(args, bc.Args...)

	envs := mergeEnvs(br.Spec.Envs, bc.Envs)
	version := br.Spec.Version
	if bc.Version != nil && *bc.Version != "" {
		version = *bc.Version
	}
	resources := corev1.ResourceRequirements{}
	if cfg.Resources != nil {
		resources.Limits, resources.Requests = cfg.Resources.Limits.DeepCopy(), cfg.Resources.Requests.DeepCopy()
	}
	if r := bc.Resources; r != nil {
		resources.Limits = mergeResources(resources.Limits, r.Limits)
		resources.Requests = mergeResources(resources.Requests, r.Requests)
		// A request raised above the recommended limit raises the limit with it (llmaz).
		for k, v := range resources.Requests {
			if l, ok := resources.Limits[k]; ok && v.Cmp(l) > 0 {
				resources.Limits[k] = v
			}
		}
	}
	port := int32(DefaultBackendPort)
	if p, ok := flagValue(args, "--port"); ok {
		if n, err := strconv.Atoi(p); err == nil && n > 0 && n < 65536 {
			port = int32(n)
		}
	}
	podLabels := map[string]string{PlaygroundLabel: pg.Name}
	tmpl := corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: podLabels},
		Spec: corev1.PodSpec{
			// llmaz's: long enough for in-flight requests to finish.
			TerminationGracePeriodSeconds: ptr.To[int64](130),
			Containers: []corev1.Container{{
				Name:           ModelRunnerContainer,
				Image:          br.Spec.Image + ":" + version,
				Command:        slices.Clone(br.Spec.Command),
				Args:           args,
				Env:            envs,
				Resources:      resources,
				Lifecycle:      br.Spec.Lifecycle.DeepCopy(),
				Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: port, Protocol: corev1.ProtocolTCP}},
				StartupProbe:   br.Spec.StartupProbe.DeepCopy(),
				LivenessProbe:  br.Spec.LivenessProbe.DeepCopy(),
				ReadinessProbe: br.Spec.ReadinessProbe.DeepCopy(),
			}},
		},
	}
	shm := cfg.SharedMemorySize
	if bc.SharedMemorySize != nil {
		shm = bc.SharedMemorySize
	}
	if shm != nil {
		tmpl.Spec.Volumes = append(tmpl.Spec.Volumes, corev1.Volume{Name: "dshm", VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: ptr.To(shm.DeepCopy())}}})
		tmpl.Spec.Containers[0].VolumeMounts = append(tmpl.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "dshm", MountPath: "/dev/shm"})
	}
	claims := coreapi.ModelClaims{Models: m.Claims, InferenceFlavors: m.Flavors}
	annotations := map[string]string{}
	if skip {
		annotations[SkipModelLoaderAnnotation] = "true"
	}
	return &inferenceapi.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: pg.Name, Namespace: pg.Namespace, Annotations: annotations,
			Labels: scope.Inherit(pg, map[string]string{coreapi.ModelNameLabelKey: m.Main.Name, PlaygroundLabel: pg.Name}),
		},
		Spec: inferenceapi.ServiceSpec{
			ModelClaims:      claims,
			Replicas:         ptr.To(ptr.Deref(pg.Spec.Replicas, 1)),
			WorkloadTemplate: lws.LeaderWorkerTemplate{WorkerTemplate: tmpl, Size: ptr.To[int32](1), RestartPolicy: lws.RecreateGroupOnPodRestart},
		},
	}, nil
}

// Port is the port a Service's leader (or only) pod serves on: its first container port,
// else llmaz's 8080.
func Port(svc *inferenceapi.Service) int32 {
	t := entryTemplate(svc)
	for _, c := range t.Spec.Containers {
		for _, p := range c.Ports {
			if p.ContainerPort > 0 {
				return p.ContainerPort
			}
		}
	}
	return DefaultBackendPort
}

func entryTemplate(svc *inferenceapi.Service) *corev1.PodTemplateSpec {
	if t := svc.Spec.WorkloadTemplate.LeaderTemplate; t != nil {
		return t
	}
	return &svc.Spec.WorkloadTemplate.WorkerTemplate
}

// flagValue finds "--flag value" or "--flag=value" in args.
func flagValue(args []string, flag string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
		if a == flag && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

// mergeEnvs is base with override's variables replacing those of the same name.
func mergeEnvs(base, override []corev1.EnvVar) []corev1.EnvVar {
	out := slices.Clone(base)
	for _, e := range override {
		if i := slices.IndexFunc(out, func(b corev1.EnvVar) bool { return b.Name == e.Name }); i >= 0 {
			out[i] = e
		} else {
			out = append(out, e)
		}
	}
	return out
}

// mergeResources is base with override's quantities replacing those of the same resource.
func mergeResources(base, override corev1.ResourceList) corev1.ResourceList {
	if len(base) == 0 && len(override) == 0 {
		return nil
	}
	out := base.DeepCopy()
	if out == nil {
		out = corev1.ResourceList{}
	}
	for k, v := range override {
		out[k] = v.DeepCopy()
	}
	return out
}

// Flavors are the main model's inference flavors a workload may run on, in order: the
// claim's names (each must be one of the model's), else all of the model's.
func Flavors(m *Models) ([]coreapi.Flavor, error) {
	var all []coreapi.Flavor
	if ic := m.Main.Spec.InferenceConfig; ic != nil {
		all = ic.Flavors
	}
	if len(m.Flavors) == 0 {
		return all, nil
	}
	var out []coreapi.Flavor
	for _, name := range m.Flavors {
		i := slices.IndexFunc(all, func(f coreapi.Flavor) bool { return f.Name == name })
		if i < 0 {
			names := make([]string, len(all))
			for j, f := range all {
				names[j] = string(f.Name)
			}
			return nil, fmt.Errorf("flavor %q is not one of OpenModel %s's flavors [%s]", name, m.Main.Name, strings.Join(names, ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// BuildModelServing is the ModelServing of an llmaz Service: one role whose entry pod is the
// LeaderWorkerSet template's leader (the worker template when it has none, as LWS does) and
// whose workers are its workers (size − 1), the Service's replicas and rolling update, the
// claimed models' loaders, and the main model's flavors expressed to berth-scheduler (see
// applyFlavors). Its pods get LWS's environment and labels.
func BuildModelServing(svc *inferenceapi.Service, m *Models, flavors []coreapi.Flavor) *workloadv1alpha1.ModelServing {
	wt := svc.Spec.WorkloadTemplate
	size := ptr.Deref(wt.Size, 1)
	entry := entryTemplate(svc).DeepCopy()
	var worker *corev1.PodTemplateSpec
	if size > 1 {
		worker = wt.WorkerTemplate.DeepCopy()
	}
	skip := svc.Annotations[SkipModelLoaderAnnotation] == "true"
	for _, t := range []*corev1.PodTemplateSpec{entry, worker} {
		if t == nil {
			continue
		}
		if !skip {
			injectModelLoaders(t, m.All())
		}
		applyFlavors(t, flavors)
		if t.Labels == nil {
			t.Labels = map[string]string{}
		}
		t.Labels[coreapi.ModelNameLabelKey] = m.Main.Name
		t.Labels[coreapi.ModelFamilyNameLabelKey] = string(m.Main.Spec.FamilyName)
	}
	role := workloadv1alpha1.Role{Name: roleName, Replicas: ptr.To[int32](1), EntryTemplate: toTemplate(entry), WorkerReplicas: size - 1}
	if worker != nil {
		role.WorkerTemplate = ptr.To(toTemplate(worker))
	}
	ms := &workloadv1alpha1.ModelServing{
		ObjectMeta: metav1.ObjectMeta{
			Name: svc.Name, Namespace: svc.Namespace,
			Labels:      map[string]string{coreapi.ModelNameLabelKey: m.Main.Name},
			Annotations: map[string]string{workloadv1alpha1.LeaderWorkerSetCompatAnnotation: "true"},
		},
		Spec: workloadv1alpha1.ModelServingSpec{
			Replicas:       ptr.To(ptr.Deref(svc.Spec.Replicas, 1)),
			SchedulerName:  workloadv1alpha1.BerthSchedulerName,
			RecoveryPolicy: recoveryPolicy(wt.RestartPolicy),
			Template:       workloadv1alpha1.ServingGroup{Roles: []workloadv1alpha1.Role{role}},
		},
	}
	if names := flavorNames(flavors); names != "" {
		ms.Annotations[inferenceapi.InferenceServiceFlavorsAnnoKey] = names
	}
	if rs := svc.Spec.RolloutStrategy; rs != nil && rs.RollingUpdateConfiguration != nil {
		ru := rs.RollingUpdateConfiguration
		mu, msurge := ru.MaxUnavailable, ru.MaxSurge
		ms.Spec.RolloutStrategy = &workloadv1alpha1.RolloutStrategy{
			Type:                       workloadv1alpha1.ServingGroupRollingUpdate,
			RollingUpdateConfiguration: &workloadv1alpha1.RollingUpdateConfiguration{MaxUnavailable: &mu, MaxSurge: &msurge},
		}
		if mu == intstr.FromInt32(0) && msurge == intstr.FromInt32(0) {
			ms.Spec.RolloutStrategy.RollingUpdateConfiguration.MaxUnavailable = ptr.To(intstr.FromInt32(1))
		}
	}
	return ms
}

// recoveryPolicy maps LWS's restart policy: a failed pod recreates its whole group
// (RecreateGroupOnPodRestart, RecreateGroupAfterStart) or nothing else (None, Default).
func recoveryPolicy(p lws.RestartPolicyType) workloadv1alpha1.RecoveryPolicy {
	switch p {
	case lws.NoneRestartPolicy, lws.DeprecatedDefaultRestartPolicy:
		return workloadv1alpha1.NoneRestartPolicy
	}
	return workloadv1alpha1.ServingGroupRecreate
}

func toTemplate(t *corev1.PodTemplateSpec) workloadv1alpha1.PodTemplateSpec {
	out := workloadv1alpha1.PodTemplateSpec{Spec: t.Spec}
	if len(t.Labels) > 0 || len(t.Annotations) > 0 {
		out.Metadata = &workloadv1alpha1.Metadata{Labels: t.Labels, Annotations: t.Annotations}
	}
	return out
}

// applyFlavors expresses the flavors to berth-scheduler: the first flavor's accelerator
// limits on the model runner (llmaz overwrites the container's with them; requests too),
// and a node affinity that requires one of the flavors' node selectors and prefers them in
// order (llmaz's scheduler plugin tries them in order). A flavor without a node selector
// allows every node.
func applyFlavors(t *corev1.PodTemplateSpec, flavors []coreapi.Flavor) {
	if len(flavors) == 0 {
		return
	}
	c := &t.Spec.Containers[0]
	for i := range t.Spec.Containers {
		if t.Spec.Containers[i].Name == ModelRunnerContainer {
			c = &t.Spec.Containers[i]
		}
	}
	for k, v := range flavors[0].Limits {
		if c.Resources.Limits == nil {
			c.Resources.Limits = corev1.ResourceList{}
		}
		if c.Resources.Requests == nil {
			c.Resources.Requests = corev1.ResourceList{}
		}
		c.Resources.Limits[k], c.Resources.Requests[k] = v.DeepCopy(), v.DeepCopy()
	}
	var required []corev1.NodeSelectorTerm
	var preferred []corev1.PreferredSchedulingTerm
	for i, f := range flavors {
		if len(f.NodeSelector) == 0 {
			required = nil // one flavor may run anywhere: nothing to require
			break
		}
		term := selectorTerm(f.NodeSelector)
		required = append(required, term)
		preferred = append(preferred, corev1.PreferredSchedulingTerm{Weight: int32(max(100-10*i, 1)), Preference: term})
	}
	if len(required) == 0 && len(preferred) == 0 {
		return
	}
	if t.Spec.Affinity == nil {
		t.Spec.Affinity = &corev1.Affinity{}
	}
	if t.Spec.Affinity.NodeAffinity == nil {
		t.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := t.Spec.Affinity.NodeAffinity
	if len(required) > 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: required}
	}
	if len(flavors) > 1 {
		na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution, preferred...)
	}
}

func selectorTerm(sel map[string]string) corev1.NodeSelectorTerm {
	var term corev1.NodeSelectorTerm
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		term.MatchExpressions = append(term.MatchExpressions, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{sel[k]}})
	}
	return term
}

func flavorNames(flavors []coreapi.Flavor) string {
	names := make([]string, len(flavors))
	for i, f := range flavors {
		names[i] = string(f.Name)
	}
	return strings.Join(names, ",")
}

// injectModelLoaders adds llmaz's model-loader init container per model that needs one and
// mounts the shared model volume into the model runner, as llmaz's Service controller does.
// Models from host:// are mounted from the host instead; ollama:// models load in the engine.
func injectModelLoaders(t *corev1.PodTemplateSpec, models []*coreapi.OpenModel) {
	needVolume := false
	for i, m := range models {
		name := ModelLoaderContainer
		if i > 0 {
			name += "-" + strconv.Itoa(i)
		}
		src := m.Spec.Source
		var env []corev1.EnvVar
		switch {
		case src.ModelHub != nil:
			hub := src.ModelHub
			env = []corev1.EnvVar{{Name: "MODEL_SOURCE_TYPE", Value: "modelhub"}, {Name: "MODEL_ID", Value: hub.ModelID},
				{Name: "MODEL_HUB_NAME", Value: ptr.Deref(hub.Name, coreapi.HuggingFace)}}
			if hub.Filename != nil {
				env = append(env, corev1.EnvVar{Name: "MODEL_FILENAME", Value: *hub.Filename})
			}
			if hub.Revision != nil {
				env = append(env, corev1.EnvVar{Name: "REVISION", Value: *hub.Revision})
			}
			env = append(env, corev1.EnvVar{Name: "HUGGING_FACE_HUB_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "modelhub-secret"}, Key: "HF_TOKEN", Optional: ptr.To(true)}}})
		case src.URI != nil:
			protocol, address, _ := strings.Cut(string(*src.URI), "://")
			switch strings.ToLower(protocol) {
			case "ollama":
				continue
			case "host":
				vol := "model-host-" + strconv.Itoa(i)
				t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: vol, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: address}}})
				mountAll(t, corev1.VolumeMount{Name: vol, MountPath: address, ReadOnly: true})
				continue
			}
			env = []corev1.EnvVar{{Name: "MODEL_SOURCE_TYPE", Value: "objstore"}, {Name: "PROVIDER", Value: strings.ToUpper(protocol)}, {Name: "MODEL_URI", Value: string(*src.URI)}}
		default:
			continue
		}
		needVolume = true
		t.Spec.InitContainers = append(t.Spec.InitContainers, corev1.Container{
			Name: name, Image: ModelLoaderImage, Env: env,
			VolumeMounts: []corev1.VolumeMount{{Name: modelVolume, MountPath: containerModelPath}},
		})
	}
	if needVolume {
		t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: modelVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		mountAll(t, corev1.VolumeMount{Name: modelVolume, MountPath: containerModelPath, ReadOnly: true})
	}
}

func mountAll(t *corev1.PodTemplateSpec, m corev1.VolumeMount) {
	for i := range t.Spec.Containers {
		if t.Spec.Containers[i].Name == ModelRunnerContainer || len(t.Spec.Containers) == 1 {
			t.Spec.Containers[i].VolumeMounts = append(t.Spec.Containers[i].VolumeMounts, m)
		}
	}
}

// EngineOf is the ModelServer engine of a BackendRuntime: SGLang for sglang, else vLLM (the
// router speaks the OpenAI API to both; only the metric names differ).
func EngineOf(backend string) networkingv1alpha1.InferenceEngine {
	if strings.Contains(strings.ToLower(backend), "sglang") {
		return networkingv1alpha1.SGLang
	}
	return networkingv1alpha1.VLLM
}

// BuildModelServer is the ModelServer of a Playground: its ModelServing's entry pods (the
// pods that serve the API) on the engine's port, serving model, the name the engine serves
// (ModelName; berth-router rewrites a request's model to it).
func BuildModelServer(pg *inferenceapi.Playground, model string, engine networkingv1alpha1.InferenceEngine, port int32) *networkingv1alpha1.ModelServer {
	return &networkingv1alpha1.ModelServer{
		ObjectMeta: metav1.ObjectMeta{Name: pg.Name, Namespace: pg.Namespace, Labels: scope.Inherit(pg, map[string]string{PlaygroundLabel: pg.Name})},
		Spec: networkingv1alpha1.ModelServerSpec{
			Model:           ptr.To(model),
			InferenceEngine: engine,
			WorkloadSelector: &networkingv1alpha1.WorkloadSelector{MatchLabels: map[string]string{
				workloadv1alpha1.ModelServingNameLabel: pg.Name,
				workloadv1alpha1.EntryLabel:            "true",
			}},
			WorkloadPort: &networkingv1alpha1.WorkloadPort{Port: port},
		},
	}
}

// BuildModelRoute routes the model's name (and its LoRA adapters' names) to the Playground's
// ModelServer.
func BuildModelRoute(pg *inferenceapi.Playground, model string, loras []string) *networkingv1alpha1.ModelRoute {
	return &networkingv1alpha1.ModelRoute{
		ObjectMeta: metav1.ObjectMeta{Name: pg.Name, Namespace: pg.Namespace, Labels: scope.Inherit(pg, map[string]string{PlaygroundLabel: pg.Name})},
		Spec: networkingv1alpha1.ModelRouteSpec{
			ModelName:    model,
			LoraAdapters: loras,
			Rules: []networkingv1alpha1.Rule{{
				Name:         "default",
				TargetModels: []networkingv1alpha1.TargetModel{{ModelServerName: pg.Name}},
			}},
		},
	}
}

// ScaleTrigger is what scales a Playground: elasticConfig's trigger, else the recommended
// config's (llmaz's order); nil without an elasticConfig.
func ScaleTrigger(pg *inferenceapi.Playground, cfg *inferenceapi.RecommendedConfig) *inferenceapi.ScaleTrigger {
	ec := pg.Spec.ElasticConfig
	if ec == nil {
		return nil
	}
	if ec.ScaleTrigger != nil {
		return ec.ScaleTrigger
	}
	if cfg != nil {
		return cfg.ScaleTrigger
	}
	return nil
}

// BuildHPA is the HorizontalPodAutoscaler llmaz creates for a Playground's elasticConfig:
// it scales the Playground through its scale subresource.
func BuildHPA(pg *inferenceapi.Playground, trigger *inferenceapi.ScaleTrigger) *autoscalingv2.HorizontalPodAutoscaler {
	ec := pg.Spec.ElasticConfig
	hpa := &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: pg.Name, Namespace: pg.Namespace, Labels: scope.Inherit(pg, map[string]string{PlaygroundLabel: pg.Name})},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: inferenceapi.SchemeGroupVersion.String(), Kind: "Playground", Name: pg.Name},
			MinReplicas:    ptr.To(ptr.Deref(ec.MinReplicas, 1)),
			MaxReplicas:    ec.MaxReplicas,
		},
	}
	if trigger != nil && trigger.HPA != nil {
		hpa.Spec.Metrics = trigger.HPA.Metrics
		hpa.Spec.Behavior = trigger.HPA.Behavior
	}
	return hpa
}

// LimitsBelowRequests names resources whose limit is below the request (llmaz's webhook
// refuses them; the schema cannot say it within the apiserver's CEL budget).
func LimitsBelowRequests(r *inferenceapi.ResourceRequirements) []string {
	if r == nil {
		return nil
	}
	var out []string
	for k, req := range r.Requests {
		if lim, ok := r.Limits[k]; ok && lim.Cmp(req) < 0 {
			out = append(out, fmt.Sprintf("%s: limit %s < request %s", k, lim.String(), req.String()))
		}
	}
	slices.Sort(out)
	return out
}
