package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	coreapi "github.com/berth-sh/berth/pkg/apis/llmaz/core/v1alpha1"
)

// PlaygroundSpec defines the desired state of Playground.
//
// +kubebuilder:validation:XValidation:rule="has(self.modelClaim) != has(self.modelClaims)",message="set exactly one of modelClaim and modelClaims"
type PlaygroundSpec struct {
	// Replicas represents the replica number of inference workloads.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// ModelClaim represents claiming for one model, it's a simplified use case
	// of modelClaims. Most of the time, modelClaim is enough.
	// ModelClaim and modelClaims are exclusive configured.
	// +optional
	ModelClaim *coreapi.ModelClaim `json:"modelClaim,omitempty"`

	// ModelClaims represents claiming for multiple models for more complicated
	// use cases like speculative-decoding.
	// ModelClaims and modelClaim are exclusive configured.
	// +optional
	ModelClaims *coreapi.ModelClaims `json:"modelClaims,omitempty"`

	// BackendRuntimeConfig represents the inference backendRuntime configuration
	// under the hood, e.g. vLLM, which is the default backendRuntime.
	// +optional
	BackendRuntimeConfig *BackendRuntimeConfig `json:"backendRuntimeConfig,omitempty"`

	// ElasticConfig defines the configuration for elastic usage,
	// e.g. the max/min replicas.
	// +optional
	ElasticConfig *ElasticConfig `json:"elasticConfig,omitempty"`
}

// ElasticConfig bounds a Playground's replicas and says what scales it.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || self.minReplicas < self.maxReplicas",message="minReplicas must be less than maxReplicas"
type ElasticConfig struct {
	// MinReplicas indicates the minimum number of inference workloads based on the traffic.
	// Default to 1.
	// MinReplicas couldn't be 0 now, will support serverless in the future.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +optional
	MinReplicas *int32 `json:"minReplicas,omitempty"`

	// MaxReplicas indicates the maximum number of inference workloads based on the traffic.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:Minimum:=1
	MaxReplicas int32 `json:"maxReplicas,omitempty"`

	// ScaleTrigger defines the rules to scale the workloads.
	// Only one trigger cloud work at a time, mostly used in Playground.
	// ScaleTrigger defined here will "overwrite" the scaleTrigger in the recommendedConfig.
	// +optional
	ScaleTrigger *ScaleTrigger `json:"scaleTrigger,omitempty"`
}

const (
	// PlaygroundProgressing means the Playground is progressing now, such as waiting for the
	// inference service creation, rolling update or scaling up and down.
	PlaygroundProgressing = "Progressing"
	// PlaygroundAvailable indicates the corresponding inference service is available now.
	PlaygroundAvailable = "Available"
)

// PlaygroundStatus defines the observed state of Playground.
type PlaygroundStatus struct {
	// Conditions represents the Inference condition.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Replicas track the replicas that have been created, whether ready or not.
	Replicas int32 `json:"replicas"`

	// Selector points to the string form of a label selector which will be used by HPA.
	// +optional
	Selector string `json:"selector,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName={pl}
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.modelClaim.modelName`
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=`.spec.backendRuntimeConfig.backendName`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Available",type=string,JSONPath=`.status.conditions[?(@.type=="Available")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Progressing")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// Playground is the Schema for the playgrounds API: one model (or a main model with a draft
// or LoRA adapters) served by a BackendRuntime. Berth turns it into a Service, as llmaz does.
type Playground struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PlaygroundSpec   `json:"spec,omitempty"`
	Status PlaygroundStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// PlaygroundList contains a list of Playground.
type PlaygroundList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Playground `json:"items"`
}
