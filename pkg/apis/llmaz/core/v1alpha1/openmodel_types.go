package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// ModelFamilyNameLabelKey carries an OpenModel's familyName (llmaz's label).
	ModelFamilyNameLabelKey = "llmaz.io/model-family-name"
	// ModelNameLabelKey carries the main model's name on a Playground and what it creates.
	ModelNameLabelKey = "llmaz.io/model-name"

	// HuggingFace and ModelScope are the model hubs a ModelHub may name.
	HuggingFace = "Huggingface"
	ModelScope  = "ModelScope"
)

// ModelHub represents the model registry for model downloads.
//
// +kubebuilder:validation:XValidation:rule="!has(self.filename) || !has(self.name) || self.name != 'ModelScope'",message="filename can only be set when the modelHub is Huggingface"
// +kubebuilder:validation:XValidation:rule="!has(self.filename) || (!has(self.allowPatterns) && !has(self.ignorePatterns))",message="once filename is set, allowPatterns and ignorePatterns must be unset"
type ModelHub struct {
	// Name refers to the model registry, such as huggingface.
	// +kubebuilder:default=Huggingface
	// +kubebuilder:validation:Enum={Huggingface,ModelScope}
	// +optional
	Name *string `json:"name,omitempty"`

	// ModelID refers to the model identifier on model hub,
	// such as meta-llama/Meta-Llama-3-8B.
	// +optional
	ModelID string `json:"modelID,omitempty"`

	// Filename refers to a specified model file rather than the whole repo.
	// Note: once filename is set, allowPatterns and ignorePatterns should be left unset.
	// +optional
	Filename *string `json:"filename,omitempty"`

	// Revision refers to a Git revision id which can be a branch name, a tag, or a commit hash.
	// +kubebuilder:default=main
	// +optional
	Revision *string `json:"revision,omitempty"`

	// AllowPatterns refers to files matched with at least one pattern will be downloaded.
	// +optional
	AllowPatterns []string `json:"allowPatterns,omitempty"`

	// IgnorePatterns refers to files matched with any of the patterns will not be downloaded.
	// +optional
	IgnorePatterns []string `json:"ignorePatterns,omitempty"`
}

// URIProtocol represents the protocol of the URI.
type URIProtocol string

// ModelSource represents the source of the model.
// Only one model source will be used.
//
// +kubebuilder:validation:XValidation:rule="has(self.modelHub) || has(self.uri)",message="set modelHub or uri: a model needs a source"
type ModelSource struct {
	// ModelHub represents the model registry for model downloads.
	// +optional
	ModelHub *ModelHub `json:"modelHub,omitempty"`

	// URI represents a various kinds of model sources following the uri protocol, protocol://<address>, e.g.
	// - oss://<bucket>.<endpoint>/<path-to-your-model>
	// - s3://<bucket>/<path-to-your-model>, gcs://<bucket>/<path-to-your-model>
	// - ollama://llama3.3
	// - host://<path-to-your-model>
	//
	// +kubebuilder:validation:XValidation:rule="self.matches('^(?i)(oss|s3|gcs|ollama|host)://.+$')",message="uri must be protocol://address with protocol oss, s3, gcs, ollama or host"
	// +optional
	URI *URIProtocol `json:"uri,omitempty"`
}

// FlavorName names one of a model's inference flavors.
type FlavorName string

// Flavor defines the accelerator requirements for a model: the accelerators each replica
// needs (limits) and where they are (nodeSelector). Flavors are tried in order.
type Flavor struct {
	// Name represents the flavor name, which will be used in model claim.
	Name FlavorName `json:"name"`

	// Limits defines the required accelerators to serve the model for each replica,
	// like <nvidia.com/gpu: 8>. For multi-hosts cases, the limits here indicates
	// the resource requirements for each replica, usually equals to the TP size.
	// +optional
	Limits corev1.ResourceList `json:"limits,omitempty"`

	// NodeSelector represents the node candidates for Pod placements; empty means every
	// node is a candidate.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// Params stores other useful parameters such as model parallelism (TP, PP) or the
	// instance type a cluster autoscaler should add.
	// +optional
	Params map[string]string `json:"params,omitempty"`
}

// InferenceConfig represents the inference configurations for the model.
type InferenceConfig struct {
	// Flavors represents the accelerator requirements to serve the model.
	// Flavors are fungible following the priority represented by the slice order.
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Flavors []Flavor `json:"flavors,omitempty"`
}

// ModelName is the name of an OpenModel.
type ModelName string

// ModelClaim represents claiming for one model.
type ModelClaim struct {
	// ModelName represents the name of the Model.
	// +optional
	ModelName ModelName `json:"modelName,omitempty"`

	// InferenceFlavors represents a list of flavors with fungibility support
	// to serve the model. If set, the flavor names should be a subset of the model's
	// flavors; if not set, the model's flavors are used.
	// +optional
	InferenceFlavors []FlavorName `json:"inferenceFlavors,omitempty"`
}

// ModelRole is what a claimed model does in a multi-model deployment.
type ModelRole string

const (
	// MainRole represents the main model; only one is allowed.
	MainRole ModelRole = "main"
	// DraftRole represents the draft model in speculative decoding.
	DraftRole ModelRole = "draft"
	// LoraRole represents a LoRA adapter served on top of the main model.
	LoraRole ModelRole = "lora"
)

// ModelRef refers to a created Model with its role.
type ModelRef struct {
	// Name represents the model name.
	Name ModelName `json:"name"`

	// Role represents the model role once more than one model is required.
	// +kubebuilder:validation:Enum={main,draft,lora}
	// +kubebuilder:default=main
	// +optional
	Role *ModelRole `json:"role,omitempty"`
}

// ModelClaims represents multiple claims for different models.
//
// +kubebuilder:validation:XValidation:rule="!has(self.models) || self.models.filter(m, !has(m.role) || m.role == 'main').size() <= 1",message="only one main model is allowed"
// +kubebuilder:validation:XValidation:rule="!has(self.models) || !self.models.exists(m, has(m.role) && m.role == 'draft') || (self.models.size() == 2 && self.models.exists(m, !has(m.role) || m.role == 'main'))",message="speculative decoding takes exactly two models: one main and one draft"
type ModelClaims struct {
	// Models represents a list of models with roles specified, for example a main
	// (target) model and a draft model for speculative decoding.
	// +kubebuilder:validation:MinItems=1
	// +optional
	Models []ModelRef `json:"models,omitempty"`

	// InferenceFlavors represents a list of flavor names with fungibility supported
	// to serve the model. If not set, the models' flavors are used; if set, the names are
	// looked up following the model order.
	// +optional
	InferenceFlavors []FlavorName `json:"inferenceFlavors,omitempty"`
}

// ModelSpec defines the desired state of Model.
type ModelSpec struct {
	// FamilyName represents the model type, like llama2, which will be auto injected
	// to the labels with the key of `llmaz.io/model-family-name`.
	FamilyName ModelName `json:"familyName"`

	// Source represents the source of the model, there're several ways to load
	// the model such as loading from huggingface, OCI registry, s3, host path and so on.
	Source ModelSource `json:"source"`

	// InferenceConfig represents the inference configurations for the model.
	// +optional
	InferenceConfig *InferenceConfig `json:"inferenceConfig,omitempty"`
}

const (
	// ModelPending means the model is waiting for its download.
	ModelPending = "Pending"
	// ModelReady means the model can be served.
	ModelReady = "Ready"
)

// ModelStatus defines the observed state of Model.
type ModelStatus struct {
	// Conditions represents the Inference condition.
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=om,scope=Cluster
// +kubebuilder:printcolumn:name="Family",type=string,JSONPath=`.spec.familyName`
// +kubebuilder:printcolumn:name="ModelHub",type=string,JSONPath=`.spec.source.modelHub.name`
// +kubebuilder:printcolumn:name="ModelID",type=string,JSONPath=`.spec.source.modelHub.modelID`
// +kubebuilder:printcolumn:name="URI",type=string,JSONPath=`.spec.source.uri`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`

// OpenModel is the Schema for the open models API.
type OpenModel struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ModelSpec   `json:"spec,omitempty"`
	Status ModelStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// OpenModelList contains a list of OpenModel.
type OpenModelList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []OpenModel `json:"items"`
}
