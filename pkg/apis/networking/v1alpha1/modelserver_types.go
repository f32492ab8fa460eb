package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ModelServerSpec defines the desired state of ModelServer.
type ModelServerSpec struct {
	// The real model that the modelServers are running.
	// If the model in LLM inference request is different from this field, it should be overwritten by this field.
	// Otherwise, the model in LLM inference request will not be mutated.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Model *string `json:"model,omitempty"`

	// The inference engine used to serve the model.
	InferenceEngine InferenceEngine `json:"inferenceEngine"`

	// WorkloadSelector is used to match the model serving instances.
	// Currently, they must be pods within the same namespace as modelServer object.
	WorkloadSelector *WorkloadSelector `json:"workloadSelector"`

	// WorkloadPort defines the port and protocol configuration for the model server.
	// Optional, as in the specification and Kthena v1.0.0 (later Kthena releases require it):
	// without it the router uses the pod's first TCP container port, else 8000, over http.
	// +optional
	WorkloadPort *WorkloadPort `json:"workloadPort,omitempty"`

	// Traffic Policy for accessing the model server instance.
	// +optional
	TrafficPolicy *TrafficPolicy `json:"trafficPolicy,omitempty"`

	// KVConnector specifies the KV connector configuration for PD disaggregated routing
	// +optional
	KVConnector *KVConnectorSpec `json:"kvConnector,omitempty"`
}

// InferenceEngine defines the inference framework used by the modelServer to serve LLM requests.
// +kubebuilder:validation:Enum=vLLM;SGLang
type InferenceEngine string

const (
	// VLLM is https://github.com/vllm-project/vllm
	VLLM InferenceEngine = "vLLM"
	// SGLang is https://github.com/sgl-project/sglang
	SGLang InferenceEngine = "SGLang"
)

// WorkloadSelector is used to match the model serving instances.
type WorkloadSelector struct {
	// The base labels to match the model serving instances. All serving instances must match these labels.
	// +optional
	MatchLabels map[string]string `json:"matchLabels,omitempty"`

	// PDGroup is used to further match different roles of the model serving instances,
	// mainly used in case like PD disaggregation.
	// +optional
	PDGroup *PDGroup `json:"pdGroup,omitempty"`
}

// PDGroup is used to specify the group key of PD instances.
// Also, the labels to match the model serving instances for prefill and decode.
type PDGroup struct {
	// GroupKey is the key to distinguish different PD groups.
	// Only PD instances with the same group key and value could be paired.
	// +kubebuilder:validation:MinLength=1
	GroupKey string `json:"groupKey"`

	// The labels to match the model serving instances for prefill.
	// +optional
	PrefillLabels map[string]string `json:"prefillLabels,omitempty"`

	// The labels to match the model serving instances for decode.
	// +optional
	DecodeLabels map[string]string `json:"decodeLabels,omitempty"`
}

// WorkloadPort defines the port and protocol configuration for the model server.
type WorkloadPort struct {
	// The port of the model server. The number must be between 1 and 65535.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`

	// The protocol of the model server. Supported values are "http" and "https".
	// +optional
	// +kubebuilder:default=http
	// +kubebuilder:validation:Enum=http;https
	Protocol string `json:"protocol,omitempty"`
}

// TrafficPolicy holds timeout and retry settings for requests to the model server.
type TrafficPolicy struct {
	// The request timeout for the inference request. By default, there is no timeout.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// The retry policy for the inference request.
	// +optional
	Retry *Retry `json:"retry,omitempty"`
}

// Retry says how often and how fast a failed inference request is retried.
type Retry struct {
	// The maximum number of times an individual inference request to a model server should be retried.
	// If the maximum number of retries has been done without a successful response, the request will be considered failed.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Attempts int32 `json:"attempts,omitempty"`

	// RetryInterval is the interval between retries.
	// +optional
	// +kubebuilder:default="100ms"
	RetryInterval *metav1.Duration `json:"retryInterval,omitempty"`
}

// KVConnectorType names how prefill hands its KV cache to decode.
// +kubebuilder:validation:Enum=http;lmcache;nixl;mooncake
type KVConnectorType string

const (
	// ConnectorTypeHTTP passes KV state over plain HTTP.
	ConnectorTypeHTTP KVConnectorType = "http"
	// ConnectorTypeLMCache uses LMCache.
	ConnectorTypeLMCache KVConnectorType = "lmcache"
	// ConnectorTypeNIXL uses NVIDIA NIXL.
	ConnectorTypeNIXL KVConnectorType = "nixl"
	// ConnectorTypeMoonCake uses Mooncake.
	ConnectorTypeMoonCake KVConnectorType = "mooncake"
)

// KVConnectorSpec defines KV connector configuration for PD disaggregated routing
type KVConnectorSpec struct {
	// Type specifies the connector type. If you do not know which type to use, please use "http" as default.
	// +optional
	// +kubebuilder:default=http
	Type KVConnectorType `json:"type,omitempty"`
}

// ModelServerStatus defines the observed state of ModelServer.
type ModelServerStatus struct {
	// ObservedGeneration is the most recent generation the router's controller acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions say whether the server's workloads were found.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ModelServer is the Schema for the modelservers API.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=msvr
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.model`
// +kubebuilder:printcolumn:name="Engine",type=string,JSONPath=`.spec.inferenceEngine`
// +kubebuilder:printcolumn:name="Port",type=integer,JSONPath=`.spec.workloadPort.port`
// +kubebuilder:printcolumn:name="Workloads",type=string,JSONPath=`.status.conditions[?(@.type=="WorkloadsFound")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="WorkloadsFound")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ModelServer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ModelServerSpec   `json:"spec,omitempty"`
	Status ModelServerStatus `json:"status,omitempty"`
}

// ModelServerList contains a list of ModelServer.
//
// +kubebuilder:object:root=true
type ModelServerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ModelServer `json:"items"`
}
