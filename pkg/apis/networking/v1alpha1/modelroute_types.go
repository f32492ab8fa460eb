package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// ModelRouteSpec defines the desired state of ModelRoute.
//
// +kubebuilder:validation:XValidation:rule="(has(self.modelName) && size(self.modelName) > 0) || (has(self.loraAdapters) && size(self.loraAdapters) > 0)",message="modelName and loraAdapters cannot both be empty",fieldPath=".modelName"
// +kubebuilder:validation:XValidation:rule="!has(self.loraAdapters) || size(self.loraAdapters) == 0 || !has(self.rules) || self.rules.all(r, !has(r.targetModels) || r.targetModels.all(t, !has(t.externalModelProviderName)))",message="a route with loraAdapters must target ModelServers only: an external provider cannot serve a LoRA adapter",fieldPath=".rules"
type ModelRouteSpec struct {
	// model in the LLM request, it could be a base model name, lora adapter name or even a virtual model name.
	// This field is used to match scenarios other than model adapter name and this field could be empty,
	// but it and ModelAdapters can't both be empty.
	// +optional
	ModelName string `json:"modelName,omitempty"`

	// model in the LLM request could be lora adapter name, here is a list of Lora Adapter Names to match.
	// +optional
	// +kubebuilder:validation:MaxItems=10
	// +listType=atomic
	LoraAdapters []string `json:"loraAdapters,omitempty"`

	// ParentRefs binds the route to Gateways (Gateway API ParentReference, as Kthena's
	// ModelRoute has it): a route with parentRefs is served only on the listeners of those
	// Gateways (of a GatewayClass berth-router implements); without, berth-router serves it
	// on its own port, as before.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	ParentRefs []gatewayv1.ParentReference `json:"parentRefs,omitempty"`

	// An ordered list of route rules for LLM traffic. The first rule matching an incoming request will be used.
	// If no rule is matched, an HTTP 404 status code MUST be returned.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Rules []Rule `json:"rules,omitempty"`

	// Rate limit for the LLM request based on prompt tokens or output tokens.
	// There is no limitation if this field is not set.
	// +optional
	RateLimit *RateLimit `json:"rateLimit,omitempty"`
}

// Rule is one route rule: a match and the weighted targets it sends traffic to.
type Rule struct {
	// Name is the name of the rule.
	// +optional
	Name string `json:"name,omitempty"`

	// Match conditions to be satisfied for the rule to be activated.
	// Empty modelMatch means matching all requests.
	// +optional
	ModelMatch *ModelMatch `json:"modelMatch,omitempty"`

	// TargetModels are the ModelServers and ExternalModelProviders that receive the traffic, by weight.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	TargetModels []TargetModel `json:"targetModels,omitempty"`
}

// ModelMatch defines the predicate used to match LLM inference requests to a given
// TargetModels. Multiple match conditions are ANDed together, i.e. the match will evaluate
// to true only if all conditions are satisfied.
type ModelMatch struct {
	// Header to match: prefix, exact, regex
	// If unset, any header will be matched.
	// +optional
	Headers map[string]StringMatch `json:"headers,omitempty"`

	// URI to match: prefix, exact, regex
	// If this field is not specified, a default prefix match on the "/" path is provided.
	// +optional
	URI *StringMatch `json:"uri,omitempty"`

	// Body contains conditions to match request body content
	// +optional
	Body *BodyMatch `json:"body,omitempty"`
}

// StringMatch defines the matching conditions for string fields. Only one of the fields may be set.
//
// +kubebuilder:validation:XValidation:rule="(has(self.exact) ? 1 : 0) + (has(self.prefix) ? 1 : 0) + (has(self.regex) ? 1 : 0) == 1",message="exactly one of exact, prefix or regex must be set"
type StringMatch struct {
	// +optional
	Exact *string `json:"exact,omitempty"`
	// +optional
	Prefix *string `json:"prefix,omitempty"`
	// +optional
	Regex *string `json:"regex,omitempty"`
}

// BodyMatch defines the predicate used to match request body content
type BodyMatch struct {
	// Model is the name of the model or lora adapter to match.
	// If this field is not specified, any model or lora adapter will be matched.
	// +optional
	Model *string `json:"model,omitempty"`
}

// TargetModel is an LLM inference traffic target: a ModelServer (seed 001) or, as Kthena
// writes it since v1.0, an ExternalModelProvider of the route's namespace.
//
// +kubebuilder:validation:XValidation:rule="has(self.modelServerName) != has(self.externalModelProviderName)",message="exactly one of modelServerName or externalModelProviderName must be set"
type TargetModel struct {
	// ModelServerName is used to specify the correlated modelServer within the same namespace.
	// It is mutually exclusive with ExternalModelProviderName.
	// +optional
	// +kubebuilder:validation:MinLength=1
	ModelServerName string `json:"modelServerName,omitempty"`

	// ExternalModelProviderName names an ExternalModelProvider in the same namespace.
	// It is mutually exclusive with ModelServerName.
	// +optional
	// +kubebuilder:validation:MinLength=1
	ExternalModelProviderName string `json:"externalModelProviderName,omitempty"`

	// Weight is used to specify the percentage of traffic should be sent to the target model.
	// The value should be in the range of [0, 100].
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Weight *uint32 `json:"weight,omitempty"`
}

// RateLimitUnit is the time unit of a rate limit.
// +kubebuilder:validation:Enum=second;minute;hour;day;month
type RateLimitUnit string

const (
	// Second is a rate-limit window of one second.
	Second RateLimitUnit = "second"
	// Minute is a rate-limit window of one minute.
	Minute RateLimitUnit = "minute"
	// Hour is a rate-limit window of one hour.
	Hour RateLimitUnit = "hour"
	// Day is a rate-limit window of one day.
	Day RateLimitUnit = "day"
	// Month is a rate-limit window of one month.
	Month RateLimitUnit = "month"
)

// RateLimit limits input and output tokens per unit of time.
type RateLimit struct {
	// InputTokensPerUnit is the maximum number of input tokens allowed per unit of time.
	// If this field is not set, there is no limit on input tokens.
	// +optional
	// +kubebuilder:validation:Minimum=1
	InputTokensPerUnit *uint32 `json:"inputTokensPerUnit,omitempty"`

	// OutputTokensPerUnit is the maximum number of output tokens allowed per unit of time.
	// If this field is not set, there is no limit on output tokens.
	// +optional
	// +kubebuilder:validation:Minimum=1
	OutputTokensPerUnit *uint32 `json:"outputTokensPerUnit,omitempty"`

	// Unit is the time unit for the rate limit.
	// +optional
	// +kubebuilder:default=second
	Unit RateLimitUnit `json:"unit,omitempty"`

	// Global contains configuration for global rate limiting using distributed storage.
	// If this field is set, global rate limiting will be used; otherwise, local rate limiting will be used.
	// +optional
	Global *GlobalRateLimit `json:"global,omitempty"`
}

// GlobalRateLimit contains configuration for global rate limiting
type GlobalRateLimit struct {
	// Redis contains configuration for Redis-based global rate limiting.
	// +optional
	Redis *RedisConfig `json:"redis,omitempty"`
}

// RedisConfig contains Redis connection configuration
type RedisConfig struct {
	// Address is the Redis server address in the format "host:port".
	// +kubebuilder:validation:MinLength=1
	Address string `json:"address"`
}

// ModelRouteStatus defines the observed state of ModelRoute.
type ModelRouteStatus struct {
	// ObservedGeneration is the most recent generation the router's controller acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions say whether the route is accepted and its targets resolve.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ModelRoute is the Schema for the Modelroutes API.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=mr
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.modelName`
// +kubebuilder:printcolumn:name="LoRA",type=string,JSONPath=`.spec.loraAdapters`,priority=1
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Resolved",type=string,JSONPath=`.status.conditions[?(@.type=="ResolvedRefs")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ModelRoute struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ModelRouteSpec   `json:"spec,omitempty"`
	Status ModelRouteStatus `json:"status,omitempty"`
}

// ModelRouteList contains a list of ModelRoute.
//
// +kubebuilder:object:root=true
type ModelRouteList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ModelRoute `json:"items"`
}
