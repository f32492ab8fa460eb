package modelbooster

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// How the engines are started: volumes, ports and environment.
const (
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
	// vllmModelScopeEnv and sglangModelScopeEnv make the engines download a model id from
	// ModelScope instead of Hugging Face (an ms:// modelURI).
	vllmModelScopeEnv   = "VLLM_USE_MODELSCOPE"
	sglangModelScopeEnv = "SGLANG_USE_MODELSCOPE"
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
	if strings.HasPrefix(b.ModelURI, "ms://") {
		if env := modelScopeEnv(b.Type); env != "" && !slices.ContainsFunc(entry.Env, func(e corev1.EnvVar) bool { return e.Name == env }) {
			entry.Env = append(entry.Env, corev1.EnvVar{Name: env, Value: "True"})
		}
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

// modelScopeEnv is the variable that points the engine at ModelScope ("" for MindIE,
// whose image reads the model from a path).
func modelScopeEnv(t workloadv1alpha1.ModelBackendType) string {
	switch {
	case isVLLM(t):
		return vllmModelScopeEnv
	case t == workloadv1alpha1.ModelBackendTypeSGLang:
		return sglangModelScopeEnv
	}
	return ""
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

// normalizeFlag is a config key as a flag name without dashes, "_" read as "-" (vLLM and
// SGLang accept both spellings).
func normalizeFlag(key string) string {
	return strings.ReplaceAll(strings.TrimLeft(key, "-"), "_", "-")
}

func hasConfigKey(cfg *apiextensionsv1.JSON, key string) bool {
	_, _, ok := configValue(cfg, key)
	return ok
}

// configValue is the config entry whose flag is key, under the spelling the user wrote.
func configValue(cfg *apiextensionsv1.JSON, key string) (string, any, bool) {
	m, _ := decodeConfig(cfg)
	for k, v := range m {
		if normalizeFlag(k) == key {
			return k, v, true
		}
	}
	return "", nil, false
}

// servedModelNameKey is the one engine-identity flag a worker's config may set (Kthena 1.0
// reads it for the ModelServer's model): the controller writes it once on the command line,
// from ServedModelName, so it is not repeated from the config.
const servedModelNameKey = "served-model-name"

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
		if normalizeFlag(k) == servedModelNameKey {
			continue // engineArgs writes it, from ServedModelName
		}
		switch v := m[k].(type) {
		case nil:
		case bool:
			if v {
				args = append(args, flag)
			}
		case string:
			if v == "" {
				// "enable-prefix-caching: ''" is Kthena's way to write a flag without a
				// value; an empty argument after it would be an unknown positional.
				args = append(args, flag)
				break
			}
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

// modelArg is what the engine is told to load: the Hugging Face repo id of hf://, the
// ModelScope model id of ms://, the mounted path of pvc://, and s3:// as is (vLLM's Run:ai
// streamer and SGLang read it).
func modelArg(uri string) string {
	switch {
	case strings.HasPrefix(uri, "hf://"):
		return strings.TrimPrefix(uri, "hf://")
	case strings.HasPrefix(uri, "ms://"):
		return strings.TrimPrefix(uri, "ms://")
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
