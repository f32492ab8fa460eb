package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AutoscalingPolicyBindingSpec defines the desired state of AutoscalingPolicyBinding.
//
// A binding either scales one target on its metrics or optimizes several targets together;
// with neither it would do nothing and with both its meaning would be ambiguous.
// +kubebuilder:validation:XValidation:rule="has(self.optimizerConfiguration) != has(self.scalingConfiguration)",message="set exactly one of optimizerConfiguration and scalingConfiguration"
type AutoscalingPolicyBindingSpec struct {
	// PolicyRef references the autoscaling policy to be optimized scaling base on multiple targets.
	PolicyRef corev1.LocalObjectReference `json:"policyRef"`

	// It dynamically adjusts replicas across different ModelServing objects based on overall computing power requirements - referred to as "optimize" behavior in the code.
	// For example, with ModelServings on heterogeneous hardware (e.g., H100/A100), the optimizer adjusts
	// the deployment ratio of H100/A100 instances based on real-time computing power demands.
	// +optional
	OptimizerConfiguration *OptimizerConfiguration `json:"optimizerConfiguration,omitempty"`

	// Adjust the number of related instances based on specified monitoring metrics and their target values.
	// +optional
	ScalingConfiguration *ScalingConfiguration `json:"scalingConfiguration,omitempty"`
}

// OptimizerConfiguration spreads one demand over several targets by cost.
type OptimizerConfiguration struct {
	// Parameters of multiple Model Serving Groups to be optimized.
	// +kubebuilder:validation:MinItems=1
	// +listType=atomic
	Params []OptimizerParam `json:"params"`

	// CostExpansionRatePercent is the percentage rate at which the cost expands.
	// +optional
	// +kubebuilder:default=200
	// +kubebuilder:validation:Minimum=0
	CostExpansionRatePercent *int32 `json:"costExpansionRatePercent,omitempty"`
}

// OptimizerParam is one target of the optimizer with its cost and bounds.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",message="minReplicas cannot exceed maxReplicas",fieldPath=".minReplicas"
type OptimizerParam struct {
	// The scaling instance configuration
	Target Target `json:"target"`

	// Cost is the cost associated with running this backend.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Cost int32 `json:"cost,omitempty"`

	// MinReplicas is the minimum number of replicas for the backend.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	MinReplicas int32 `json:"minReplicas,omitempty"`

	// MaxReplicas is the maximum number of replicas for the backend.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	MaxReplicas int32 `json:"maxReplicas"`
}

// ScalingConfiguration scales one target on its metrics.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",message="minReplicas cannot exceed maxReplicas",fieldPath=".minReplicas"
type ScalingConfiguration struct {
	// Target represents the objects be monitored and scaled.
	Target Target `json:"target"`

	// MinReplicas is the minimum number of replicas.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	MinReplicas int32 `json:"minReplicas,omitempty"`

	// MaxReplicas is the maximum number of replicas.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	MaxReplicas int32 `json:"maxReplicas"`
}

// Target names the object that is watched and scaled, and where its metrics are read:
// either the spec's one endpoint for every metric (metricEndpoint, additionalMatchLabels),
// or Kthena 1.0's source per metric (metricSources), not both.
//
// +kubebuilder:validation:XValidation:rule="!has(self.metricSources) || (!has(self.metricEndpoint) && !has(self.additionalMatchLabels))",message="metricSources (Kthena 1.0) cannot be combined with metricEndpoint or additionalMatchLabels (Kthena 0.1): give each pod source its port, uri and labelSelector"
type Target struct {
	// TargetRef references the target object.
	TargetRef corev1.ObjectReference `json:"targetRef"`

	// AdditionalMatchLabels is the additional labels to match the target object.
	// +optional
	AdditionalMatchLabels map[string]string `json:"additionalMatchLabels,omitempty"`

	// MetricEndpoint is the metric source: where the target's pods serve every metric of the
	// policy. Without it (and without metricSources) they are read at :8100/metrics.
	// +optional
	MetricEndpoint *MetricEndpoint `json:"metricEndpoint,omitempty"`

	// MetricSources (Kthena 1.0) say where each metric is read, keyed by the policy metric's
	// name: scraped from the target's pods (pod) or queried from a Prometheus server
	// (prometheus). A policy metric without an entry is scraped from the pods under its own
	// name at :8100/metrics.
	// +optional
	MetricSources map[string]MetricSource `json:"metricSources,omitempty"`
}

// MetricEndpoint is where the pods of a target expose their metrics.
type MetricEndpoint struct {
	// The metric uri, e.g. /metrics
	// +optional
	// +kubebuilder:default="/metrics"
	URI string `json:"uri,omitempty"`

	// The port of pods exposing metric endpoints
	// +optional
	// +kubebuilder:default=8100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
}

// MetricSource says where one metric is read: exactly one of pod and prometheus.
//
// +kubebuilder:validation:XValidation:rule="has(self.pod) || has(self.prometheus)",message="one metric source backend config is required"
// +kubebuilder:validation:XValidation:rule="!(has(self.pod) && has(self.prometheus))",message="pod and prometheus configs are mutually exclusive"
type MetricSource struct {
	// Pod scrapes the metric from each of the target's ready pods.
	// +optional
	Pod *PodMetricSource `json:"pod,omitempty"`

	// Prometheus reads the metric from a Prometheus server's instant query.
	// +optional
	Prometheus *PrometheusMetricSource `json:"prometheus,omitempty"`
}

// PodMetricSource scrapes a metric from the target's pods, in the Prometheus text format.
type PodMetricSource struct {
	// Name is the metric's name in the pods' output; the policy metric's name when empty.
	// +optional
	Name string `json:"name,omitempty"`

	// Uri is the path the pods serve their metrics at.
	// +optional
	// +kubebuilder:default="/metrics"
	// +kubebuilder:validation:Pattern=`^/`
	Uri string `json:"uri,omitempty"`

	// Port is the port the pods serve their metrics on.
	// +optional
	// +kubebuilder:default=8100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`

	// LabelSelector narrows the target's pods to those scraped.
	// +optional
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
}

// PrometheusMetricSource reads a metric from a Prometheus server (or anything serving the
// Prometheus HTTP API, such as Thanos or VictoriaMetrics). The query is an instant query
// that must return a scalar or a vector of one sample: the metric's value for the whole
// target (for example a sum over its pods), which asks for ceil(value / targetValue)
// replicas.
type PrometheusMetricSource struct {
	// ServerURL is the base URL of the Prometheus HTTP API (http or https), e.g.
	// http://prometheus.monitoring.svc:9090.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Format=uri
	ServerURL string `json:"serverURL"`

	// Query is a PromQL instant query evaluating to a scalar or a one-sample vector.
	// +kubebuilder:validation:MinLength=1
	Query string `json:"query"`

	// Auth is how berth-controller authenticates to the server. Kthena 1.0 defines it as an
	// empty object and ignores it; Berth reads the fields of Kthena's Prometheus metric
	// source proposal.
	// +optional
	Auth *PrometheusAuth `json:"auth,omitempty"`
}

// PrometheusAuth authenticates berth-controller to a Prometheus server. Secrets are read
// from the namespace of the policy (or binding) that names them.
type PrometheusAuth struct {
	// BearerTokenSecret is a key of a Secret whose value is sent as the bearer token
	// (Authorization: Bearer <token>).
	// +optional
	BearerTokenSecret *corev1.SecretKeySelector `json:"bearerTokenSecret,omitempty"`

	// TLSConfig verifies an https server.
	// +optional
	TLSConfig *PrometheusTLSConfig `json:"tlsConfig,omitempty"`
}

// PrometheusTLSConfig is how an https Prometheus server's certificate is verified.
type PrometheusTLSConfig struct {
	// InsecureSkipVerify accepts any certificate. For development only.
	// +optional
	InsecureSkipVerify bool `json:"insecureSkipVerify,omitempty"`

	// CASecret is a key of a Secret holding the PEM CA bundle the server's certificate must
	// chain to (instead of the system's roots).
	// +optional
	CASecret *corev1.SecretKeySelector `json:"caSecret,omitempty"`
}

// AutoscalingPolicyBindingStatus defines the status of a autoscaling policy binding.
// It reports the autoscaler's last decision: what the metrics asked for, what it applied and
// why the two differ (tolerance, stabilization, rate limits, bounds, panic mode).
type AutoscalingPolicyBindingStatus struct {
	// ObservedGeneration is the most recent generation the autoscaler acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// CurrentReplicas is the replica count of the target (the sum over an optimizer's
	// targets) when the autoscaler last decided.
	// +optional
	CurrentReplicas int32 `json:"currentReplicas"`

	// RecommendedReplicas is what the metrics asked for at the last decision, before
	// stabilization, rate limits and panic mode; absent when no metric could be read.
	// +optional
	RecommendedReplicas *int32 `json:"recommendedReplicas,omitempty"`

	// DesiredReplicas is the replica count the autoscaler applied (the sum over an
	// optimizer's targets) at the last decision.
	// +optional
	DesiredReplicas *int32 `json:"desiredReplicas,omitempty"`

	// PanicMode is true while the panic policy governs scale-up.
	// +optional
	PanicMode bool `json:"panicMode,omitempty"`

	// PanicUntil is when panic mode ends unless a new burst extends it.
	// +optional
	PanicUntil *metav1.Time `json:"panicUntil,omitempty"`

	// LastScaleTime is when the autoscaler last changed a target's replicas.
	// +optional
	LastScaleTime *metav1.Time `json:"lastScaleTime,omitempty"`

	// LastDecisionTime is when the autoscaler last read the metrics and decided.
	// +optional
	LastDecisionTime *metav1.Time `json:"lastDecisionTime,omitempty"`

	// Metrics are the values read at the last decision, one per policy metric.
	// +optional
	// +listType=map
	// +listMapKey=name
	Metrics []AutoscalingMetricStatus `json:"metrics,omitempty"`

	// Targets are the replicas of each scaled object at the last decision.
	// +optional
	// +listType=map
	// +listMapKey=name
	Targets []AutoscalingTargetStatus `json:"targets,omitempty"`

	// Conditions explain the autoscaler's last decision for this binding.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// AutoscalingMetricStatus is one metric as the autoscaler read it.
type AutoscalingMetricStatus struct {
	// Name is the policy's metricName.
	Name string `json:"name"`
	// Current is the value per ready pod (a gauge's average, a counter's rate per second).
	// +optional
	Current *resource.Quantity `json:"current,omitempty"`
	// Target is the policy's targetValue.
	Target resource.Quantity `json:"target"`
	// Pods is how many ready pods reported the metric.
	// +optional
	Pods int32 `json:"pods"`
	// DesiredReplicas is what this metric alone asks for.
	// +optional
	DesiredReplicas *int32 `json:"desiredReplicas,omitempty"`
}

// AutoscalingTargetStatus is one scaled object's replicas.
type AutoscalingTargetStatus struct {
	// Name is the target's name (namespace/name when it is in another namespace).
	Name string `json:"name"`
	// Kind is the target's kind.
	// +optional
	Kind string `json:"kind,omitempty"`
	// CurrentReplicas is the target's scale.spec.replicas before the decision.
	// +optional
	CurrentReplicas int32 `json:"currentReplicas"`
	// DesiredReplicas is what the autoscaler set.
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas"`
}

// AutoscalingPolicyBinding is the Schema for the autoscalingpolicybindings API.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=aspb
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.policyRef.name`
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=`.spec.scalingConfiguration.target.targetRef.name`
// +kubebuilder:printcolumn:name="Current",type=integer,JSONPath=`.status.currentReplicas`
// +kubebuilder:printcolumn:name="Recommended",type=integer,JSONPath=`.status.recommendedReplicas`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.status.desiredReplicas`
// +kubebuilder:printcolumn:name="Panic",type=boolean,JSONPath=`.status.panicMode`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AutoscalingPolicyBinding struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AutoscalingPolicyBindingSpec   `json:"spec,omitempty"`
	Status AutoscalingPolicyBindingStatus `json:"status,omitempty"`
}

// AutoscalingPolicyBindingList contains a list of AutoscalingPolicyBinding.
//
// +kubebuilder:object:root=true
type AutoscalingPolicyBindingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AutoscalingPolicyBinding `json:"items"`
}
