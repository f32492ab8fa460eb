package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// BackendName names a BackendRuntime, e.g. vllm.
type BackendName string

// DefaultBackend is the BackendRuntime a Playground uses when it names none.
const DefaultBackend BackendName = "vllm"

// BackendRuntimeConfig is a Playground's choice of backend and what it changes of it.
type BackendRuntimeConfig struct {
	// BackendName represents the inference backend under the hood, e.g. vLLM.
	// +kubebuilder:default=vllm
	// +optional
	BackendName *BackendName `json:"backendName,omitempty"`

	// Version represents the backend version if you want a different one
	// from the default version.
	// +optional
	Version *string `json:"version,omitempty"`

	// Envs represents the environments set to the container.
	// +optional
	Envs []corev1.EnvVar `json:"envs,omitempty"`

	// ConfigName represents the recommended configuration name for the backend,
	// It will be inferred from the models in the runtime if not specified, e.g. default,
	// speculative-decoding.
	// +optional
	ConfigName *string `json:"configName,omitempty"`

	// Args defined here will "append" the args defined in the recommendedConfig,
	// either explicitly configured in configName or inferred in the runtime.
	// +optional
	Args []string `json:"args,omitempty"`

	// Resources represents the resource requirements for backend, like cpu/mem,
	// accelerators like GPU should not be defined here, but at the model flavors,
	// or the values here will be overwritten.
	// Resources defined here will "overwrite" the resources in the recommendedConfig.
	// +optional
	Resources *ResourceRequirements `json:"resources,omitempty"`

	// SharedMemorySize represents the size of /dev/shm required in the runtime of
	// inference workload.
	// SharedMemorySize defined here will "overwrite" the sharedMemorySize in the recommendedConfig.
	// +optional
	SharedMemorySize *resource.Quantity `json:"sharedMemorySize,omitempty"`
}

// ResourceRequirements are a container's limits and requests (no DRA claims yet).
// A limit below its request is reported by the Playground reconciler (llmaz's webhook
// refuses it): as a CEL rule, parsing unbounded quantity strings exceeds the apiserver's
// cost budget.
type ResourceRequirements struct {
	// Limits describes the maximum amount of compute resources allowed.
	// More info: https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/
	// +optional
	Limits corev1.ResourceList `json:"limits,omitempty"`

	// Requests describes the minimum amount of compute resources required.
	// If Requests is omitted for a container, it defaults to Limits if that is explicitly specified,
	// otherwise to an implementation-defined value. Requests cannot exceed Limits.
	// More info: https://kubernetes.io/docs/concepts/configuration/manage-resources-containers/
	// +optional
	Requests corev1.ResourceList `json:"requests,omitempty"`
}
