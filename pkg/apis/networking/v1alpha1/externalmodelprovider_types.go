package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ExternalProviderType selects the API an external provider speaks.
// +kubebuilder:validation:Enum=OpenAI;Anthropic
type ExternalProviderType string

const (
	// OpenAI is an OpenAI-compatible API (/v1/chat/completions, /v1/completions).
	OpenAI ExternalProviderType = "OpenAI"
	// Anthropic is an Anthropic-compatible Messages API (/v1/messages).
	Anthropic ExternalProviderType = "Anthropic"
)

// ProviderAuthScheme says how a provider credential is sent upstream.
// +kubebuilder:validation:Enum=Bearer;APIKey
type ProviderAuthScheme string

const (
	// ProviderAuthSchemeBearer sends "Authorization: Bearer <credential>" (OpenAI's default).
	ProviderAuthSchemeBearer ProviderAuthScheme = "Bearer"
	// ProviderAuthSchemeAPIKey sends "x-api-key: <credential>" (Anthropic's default).
	ProviderAuthSchemeAPIKey ProviderAuthScheme = "APIKey"
)

// ExternalModelProviderCredentialLabel must be "true" on a Secret an ExternalModelProvider
// reads its credential from, as in Kthena: a provider names its own baseURL, so whoever may
// write one could otherwise have the router send any Secret of the namespace there. Only
// Secrets an administrator labelled for it can be used.
const ExternalModelProviderCredentialLabel = "networking.serving.volcano.sh/external-model-provider-credential"

// The headers rule below looks the reserved names up in lower, canonical and upper case: a
// lookup per name is cheap, where lower-casing every key (of unbounded length) would exceed
// CEL's cost budget. berth-router drops those headers in any spelling anyway.

// ExternalModelProviderSpec defines the desired state of ExternalModelProvider.
//
// +kubebuilder:validation:XValidation:rule="!has(self.headers) || ['authorization', 'Authorization', 'AUTHORIZATION', 'proxy-authorization', 'Proxy-Authorization', 'PROXY-AUTHORIZATION', 'cookie', 'Cookie', 'COOKIE', 'x-api-key', 'X-Api-Key', 'X-API-KEY', 'host', 'Host', 'HOST', 'content-length', 'Content-Length', 'CONTENT-LENGTH', 'connection', 'Connection', 'CONNECTION', 'keep-alive', 'Keep-Alive', 'KEEP-ALIVE', 'proxy-connection', 'Proxy-Connection', 'PROXY-CONNECTION', 'transfer-encoding', 'Transfer-Encoding', 'TRANSFER-ENCODING', 'upgrade', 'Upgrade', 'UPGRADE', 'trailer', 'Trailer', 'TRAILER', 'te', 'Te', 'TE', 'X-API-Key'].all(h, !(h in self.headers))",message="headers must not set credentials (Authorization, Proxy-Authorization, Cookie, x-api-key: use auth.secretRef), Host, Content-Length or hop-by-hop headers",fieldPath=".headers"
type ExternalModelProviderSpec struct {
	// ProviderType selects the API the provider speaks: OpenAI (chat and text completions)
	// or Anthropic (the Messages API).
	// +optional
	// +kubebuilder:default=OpenAI
	ProviderType ExternalProviderType `json:"providerType,omitempty"`

	// Model is the provider's name for the model. When set, it replaces the model in the
	// request, as ModelServer's model does; unset, the request's model is sent.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Model *string `json:"model,omitempty"`

	// BaseURL is the provider's API root, https only, with no user info, query or fragment
	// (e.g. https://api.openai.com/v1 or https://api.anthropic.com).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https://.+`
	// +kubebuilder:validation:XValidation:rule="!self.startsWith('https://') || (!self.contains('?') && !self.contains('#') && !self.substring(8).split('/')[0].contains('@'))",message="baseURL must not contain user info, a query or a fragment"
	BaseURL string `json:"baseURL"`

	// InsecureSkipVerify turns off the verification of the provider's certificate chain and
	// host name. The connection stays TLS; plain HTTP is never allowed.
	// +optional
	// +kubebuilder:default=false
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`

	// Auth names the Secret (in the provider's namespace) holding the credential sent to
	// the provider. Without it, no credential is sent.
	// +optional
	Auth *ProviderAuth `json:"auth,omitempty"`

	// Headers are non-sensitive headers added to every request to the provider (e.g.
	// anthropic-version). Credentials belong in auth.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Headers map[string]string `json:"headers,omitempty"`

	// TrafficPolicy bounds and retries requests to the provider, as a ModelServer's does.
	// Berth's addition: Kthena sends a provider request once, with no timeout.
	// +optional
	TrafficPolicy *TrafficPolicy `json:"trafficPolicy,omitempty"`
}

// ProviderAuth says where a provider credential is and how it is sent.
//
// +kubebuilder:validation:XValidation:rule="!has(self.secretRef.optional) || !self.secretRef.optional",message="secretRef.optional must be false or unset"
type ProviderAuth struct {
	// Scheme overrides the provider type's way of sending the credential: Bearer for OpenAI,
	// APIKey (x-api-key) for Anthropic.
	// +optional
	Scheme ProviderAuthScheme `json:"scheme,omitempty"`

	// SecretRef is the Secret key holding the credential, in the provider's namespace. The
	// Secret must be labelled networking.serving.volcano.sh/external-model-provider-credential: "true".
	// +kubebuilder:validation:XValidation:rule="has(self.name) && size(self.name) > 0",message="secretRef.name is required"
	SecretRef corev1.SecretKeySelector `json:"secretRef"`
}

// Condition types an ExternalModelProvider's status carries (Kthena's).
const (
	// ExternalModelProviderConditionReady: the router can send requests to the provider.
	ExternalModelProviderConditionReady = "Ready"
	// ExternalModelProviderConditionCredentialsResolved: the credential Secret and key exist.
	ExternalModelProviderConditionCredentialsResolved = "CredentialsResolved"
)

// ExternalModelProviderStatus defines the observed state of ExternalModelProvider.
type ExternalModelProviderStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ExternalModelProvider is a model served outside the cluster (an OpenAI-compatible or
// Anthropic-compatible API) that a ModelRoute can send traffic to beside its ModelServers
// (targetModels[].externalModelProviderName). It is Kthena's kind from after v1.0.0
// (volcano-sh/kthena pkg/apis/networking/v1alpha1/externalmodelprovider_types.go): the
// fields, defaults and validation are Kthena's, checked here by the schema and CEL where
// Kthena uses its admission webhook; spec.trafficPolicy is Berth's addition.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=emp
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.providerType`
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.model`
// +kubebuilder:printcolumn:name="Base URL",type=string,JSONPath=`.spec.baseURL`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ExternalModelProvider struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ExternalModelProviderSpec   `json:"spec,omitempty"`
	Status ExternalModelProviderStatus `json:"status,omitempty"`
}

// ExternalModelProviderList contains a list of ExternalModelProvider.
//
// +kubebuilder:object:root=true
type ExternalModelProviderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ExternalModelProvider `json:"items"`
}
