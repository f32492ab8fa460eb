package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
)

// ModelBoosterSpec defines the desired state of ModelBooster.
//
// Two shapes are accepted: the spec's (Kthena v0.1) list of backends, each sized between
// minReplicas and maxReplicas and optionally autoscaled, and Kthena 1.0's single backend
// with a fixed replica count. Exactly one of backends and backend is set.
//
// +kubebuilder:validation:XValidation:rule="has(self.backends) || has(self.backend)",message="set spec.backends (a list of backends) or spec.backend (one backend with fixed replicas, as Kthena 1.0 writes it)",fieldPath=".backends",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="!has(self.backends) || !has(self.backend)",message="spec.backend and spec.backends are mutually exclusive: set one",fieldPath=".backend",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.backend) || has(self.backend.replicas)",message="spec.backend needs replicas: the single backend runs a fixed number of replicas",fieldPath=".backend.replicas",reason=FieldValueRequired
// +kubebuilder:validation:XValidation:rule="!has(self.backend) || !has(self.autoscalingPolicy)",message="spec.autoscalingPolicy scales spec.backends; spec.backend has fixed replicas",fieldPath=".autoscalingPolicy",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.backend) || !has(self.costExpansionRatePercent)",message="spec.costExpansionRatePercent applies to autoscaled spec.backends; spec.backend has fixed replicas",fieldPath=".costExpansionRatePercent",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.autoscalingPolicy) || !has(self.autoscalingPolicy.homogeneousTarget)",message="spec.autoscalingPolicy.homogeneousTarget is refused: an AutoscalingPolicy embedded in a ModelBooster scales the ModelServings the booster generates, so it names no target of its own (size the backends with minReplicas and maxReplicas)",fieldPath=".autoscalingPolicy.homogeneousTarget",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.autoscalingPolicy) || !has(self.autoscalingPolicy.heterogeneousTarget)",message="spec.autoscalingPolicy.heterogeneousTarget is refused: an AutoscalingPolicy embedded in a ModelBooster scales the ModelServings the booster generates, so it names no target of its own (size the backends with minReplicas and maxReplicas)",fieldPath=".autoscalingPolicy.heterogeneousTarget",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.autoscalingPolicy) || !has(self.autoscalingPolicy.disaggregatedTarget)",message="spec.autoscalingPolicy.disaggregatedTarget is refused: an AutoscalingPolicy embedded in a ModelBooster scales the ModelServings the booster generates, so it names no target of its own (size the backends with minReplicas and maxReplicas)",fieldPath=".autoscalingPolicy.disaggregatedTarget",reason=FieldValueForbidden
type ModelBoosterSpec struct {
	// Name is the name of the model. ModelBooster CR name is restricted by kubernetes, for example, can't contain uppercase letters.
	// So we use this field to specify the ModelBooster name.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name,omitempty"`

	// Owner is the owner of the model.
	// +optional
	Owner string `json:"owner,omitempty"`

	// Backends is the list of model backends associated with this model. A ModelBooster CR at lease has one ModelBackend.
	// ModelBackend is the minimum unit of inference instance. It can be vLLM, SGLang, MindIE or other types.
	// Backend names are unique: the list is keyed by name, so the apiserver itself rejects a
	// duplicate (a CEL rule over an unbounded list would not pass the cost budget).
	// Exactly one of backends and backend is set.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +listType=map
	// +listMapKey=name
	Backends []ModelBackend `json:"backends,omitempty"`

	// Backend is the model's one backend as Kthena 1.0 writes it: replicas (required here) is
	// its fixed number of replicas, and nothing autoscales it (minReplicas, maxReplicas,
	// scalingCost, scaleToZeroGracePeriod and autoscalingPolicy are refused, here and in
	// spec.autoscalingPolicy / costExpansionRatePercent). Berth runs it as a list of one.
	// Exactly one of backends and backend is set.
	// +optional
	Backend *ModelBackend `json:"backend,omitempty"`

	// AutoscalingPolicy references the autoscaling policy to be used for this model.
	// +optional
	AutoscalingPolicy *AutoscalingPolicySpec `json:"autoscalingPolicy,omitempty"`

	// CostExpansionRatePercent is the percentage rate at which the cost expands.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	CostExpansionRatePercent *int32 `json:"costExpansionRatePercent,omitempty"`

	// ModelMatch defines the predicate used to match LLM inference requests to a given
	// TargetModels. Multiple match conditions are ANDed together, i.e. the match will
	// evaluate to true only if all conditions are satisfied.
	// +optional
	ModelMatch *networkingv1alpha1.ModelMatch `json:"modelMatch,omitempty"`
}

// ModelBackendType defines the type of model backend.
// +kubebuilder:validation:Enum=vLLM;vLLMDisaggregated;SGLang;MindIE;MindIEDisaggregated
type ModelBackendType string

const (
	// ModelBackendTypeVLLM represents a vLLM backend.
	ModelBackendTypeVLLM ModelBackendType = "vLLM"
	// ModelBackendTypeVLLMDisaggregated represents a disaggregated vLLM backend.
	ModelBackendTypeVLLMDisaggregated ModelBackendType = "vLLMDisaggregated"
	// ModelBackendTypeSGLang represents an SGLang backend.
	ModelBackendTypeSGLang ModelBackendType = "SGLang"
	// ModelBackendTypeMindIE represents a MindIE backend.
	ModelBackendTypeMindIE ModelBackendType = "MindIE"
	// ModelBackendTypeMindIEDisaggregated represents a disaggregated MindIE backend.
	ModelBackendTypeMindIEDisaggregated ModelBackendType = "MindIEDisaggregated"
)

// ModelBackend defines the configuration for a model backend.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",message="minReplicas cannot exceed maxReplicas",fieldPath=".minReplicas"
// +kubebuilder:validation:XValidation:rule="!has(self.replicas) || !(has(self.minReplicas) || has(self.maxReplicas) || has(self.scalingCost) || has(self.scaleToZeroGracePeriod) || has(self.autoscalingPolicy))",message="replicas fixes the backend's size (Kthena 1.0); minReplicas, maxReplicas, scalingCost, scaleToZeroGracePeriod and autoscalingPolicy size an autoscaled one: set one or the other",fieldPath=".replicas"
// +kubebuilder:validation:XValidation:rule="!has(self.autoscalingPolicy) || !has(self.autoscalingPolicy.homogeneousTarget)",message="a backend's autoscalingPolicy.homogeneousTarget is refused: an AutoscalingPolicy embedded in a ModelBooster scales the ModelServings the booster generates, so it names no target of its own (size the backends with minReplicas and maxReplicas)",fieldPath=".autoscalingPolicy.homogeneousTarget",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.autoscalingPolicy) || !has(self.autoscalingPolicy.heterogeneousTarget)",message="a backend's autoscalingPolicy.heterogeneousTarget is refused: an AutoscalingPolicy embedded in a ModelBooster scales the ModelServings the booster generates, so it names no target of its own (size the backends with minReplicas and maxReplicas)",fieldPath=".autoscalingPolicy.heterogeneousTarget",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(self.autoscalingPolicy) || !has(self.autoscalingPolicy.disaggregatedTarget)",message="a backend's autoscalingPolicy.disaggregatedTarget is refused: an AutoscalingPolicy embedded in a ModelBooster scales the ModelServings the booster generates, so it names no target of its own (size the backends with minReplicas and maxReplicas)",fieldPath=".autoscalingPolicy.disaggregatedTarget",reason=FieldValueForbidden
type ModelBackend struct {
	// Name is the name of the backend. Can't duplicate with other ModelBackend name in the same ModelBooster CR.
	// Note: update name will cause the old modelInfer deletion and a new modelInfer creation.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// Type is the type of the backend.
	Type ModelBackendType `json:"type"`

	// ModelURI is the URI where you download the model. Support hf://, s3://, pvc://, and
	// ms:// (ModelScope, Kthena 1.0).
	// +optional
	// +kubebuilder:validation:Pattern=`^(hf://|s3://|pvc://|ms://).+`
	ModelURI string `json:"modelURI,omitempty"`

	// CacheURI is the URI where the downloaded model stored. Support hostpath://, pvc://.
	// +optional
	// +kubebuilder:validation:Pattern=`^(hostpath://|pvc://).+`
	CacheURI string `json:"cacheURI,omitempty"`

	// List of sources to populate environment variables in the container.
	// +optional
	// +listType=atomic
	EnvFrom []corev1.EnvFromSource `json:"envFrom,omitempty"`

	// List of environment variables to set in the container.
	// Supported names: ENDPOINT, RUNTIME_URL, RUNTIME_PORT, RUNTIME_METRICS_PATH, HF_ENDPOINT.
	// +optional
	// +listType=atomic
	Env []corev1.EnvVar `json:"env,omitempty"`

	// Replicas is the fixed number of replicas for the backend (Kthena 1.0; required in
	// spec.backend). A backend with replicas is never autoscaled.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	Replicas *int32 `json:"replicas,omitempty"`

	// MinReplicas is the minimum number of replicas for the backend.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	MinReplicas int32 `json:"minReplicas,omitempty"`

	// MaxReplicas is the maximum number of replicas for the backend.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	MaxReplicas int32 `json:"maxReplicas,omitempty"`

	// ScalingCost is the cost associated with running this backend.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ScalingCost int32 `json:"scalingCost,omitempty"`

	// RouteWeight is used to specify the percentage of traffic should be sent to the target backend.
	// It's used to create model route.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	RouteWeight *int32 `json:"routeWeight,omitempty"`

	// ScaleToZeroGracePeriod is the duration to wait before scaling to zero.
	// +optional
	ScaleToZeroGracePeriod *metav1.Duration `json:"scaleToZeroGracePeriod,omitempty"`

	// Workers is the list of workers associated with this backend.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=1000
	// +listType=atomic
	Workers []ModelWorker `json:"workers"`

	// LoraAdapter is a list of LoRA adapters.
	// +optional
	// +listType=atomic
	LoraAdapters []LoraAdapter `json:"loraAdapters,omitempty"`

	// AutoscalingPolicyRef references the autoscaling policy for this backend.
	// +optional
	AutoscalingPolicy *AutoscalingPolicySpec `json:"autoscalingPolicy,omitempty"`

	// SchedulerName is the scheduler of the backend's ModelServing and pods (Kthena 1.0).
	// Default berth-scheduler.
	// +optional
	SchedulerName string `json:"schedulerName,omitempty"`

	// RuntimeClassName refers to a RuntimeClass object in the node.k8s.io group, which
	// should be used to run pods generated for this backend (Kthena 1.0).
	// +optional
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`
}

// ModelWorkerType defines the type of model worker.
// +kubebuilder:validation:Enum=server;prefill;decode;controller;coordinator
type ModelWorkerType string

const (
	// ModelWorkerTypeServer represents a server worker.
	ModelWorkerTypeServer ModelWorkerType = "server"
	// ModelWorkerTypePrefill represents a prefill worker.
	ModelWorkerTypePrefill ModelWorkerType = "prefill"
	// ModelWorkerTypeDecode represents a decode worker.
	ModelWorkerTypeDecode ModelWorkerType = "decode"
	// ModelWorkerTypeController represents a controller worker.
	ModelWorkerTypeController ModelWorkerType = "controller"
	// ModelWorkerTypeCoordinator represents a coordinator worker.
	ModelWorkerTypeCoordinator ModelWorkerType = "coordinator"
)

// ModelWorker defines the model worker configuration.
type ModelWorker struct {
	// Type is the type of the model worker.
	// +optional
	// +kubebuilder:default=server
	Type ModelWorkerType `json:"type,omitempty"`

	// Image is the container image for the worker.
	// +optional
	Image string `json:"image,omitempty"`

	// Replicas is the number of replicas for the worker.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	Replicas int32 `json:"replicas,omitempty"`

	// Pods is the number of pods for the worker.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	Pods int32 `json:"pods,omitempty"`

	// Resources specifies the resource requirements for the worker.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`

	// Affinity specifies the affinity rules for scheduling the worker pods.
	// +optional
	Affinity *corev1.Affinity `json:"affinity,omitempty"`

	// Tolerations specifies the tolerations for scheduling the worker pods (Kthena 1.0).
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// Config contains worker-specific configuration in JSON format.
	// You can find vLLM config here https://docs.vllm.ai/en/stable/configuration/engine_args.html
	// +optional
	Config *apiextensionsv1.JSON `json:"config,omitempty"`
}

// LoraAdapter defines a LoRA (Low-Rank Adaptation) adapter configuration.
type LoraAdapter struct {
	// Name is the name of the LoRA adapter.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// ArtifactURL is the URL where the LoRA adapter artifact is stored.
	// +kubebuilder:validation:Pattern=`^(hf://|s3://|pvc://).+`
	ArtifactURL string `json:"artifactURL"`
}

// ModelStatus defines the observed state of ModelBooster.
type ModelStatus struct {
	// Conditions represents the latest available observations of the model's state.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// BackendStatuses contains the status of each backend.
	// +optional
	// +listType=atomic
	BackendStatuses []ModelBackendStatus `json:"backendStatuses,omitempty"`

	// ObservedGeneration track of generation
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// ModelBackendStatus defines the status of a model backend.
type ModelBackendStatus struct {
	// Name is the name of the backend.
	Name string `json:"name"`

	// Replicas is the number of replicas currently running for the backend.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
}

// ModelBooster is the Schema for the models API.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=mb
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.name`
// +kubebuilder:printcolumn:name="Owner",type=string,JSONPath=`.spec.owner`,priority=1
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ModelBooster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ModelBoosterSpec `json:"spec,omitempty"`
	Status ModelStatus      `json:"status,omitempty"`
}

// ModelBoosterList contains a list of ModelBooster.
//
// +kubebuilder:object:root=true
type ModelBoosterList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ModelBooster `json:"items"`
}
