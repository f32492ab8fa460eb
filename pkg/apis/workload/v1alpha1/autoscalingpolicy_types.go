package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AutoscalingPolicySpec defines the desired state of AutoscalingPolicy.
type AutoscalingPolicySpec struct {
	// TolerancePercent is the percentage of deviation tolerated before scaling actions are triggered.
	// The current number of instances is current_replicas, and the expected number of instances inferred from monitoring metrics is target_replicas.
	// The scaling operation will only be actually performed when |current_replicas - target_replicas| >= current_replicas * TolerancePercent.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	TolerancePercent *int32 `json:"tolerancePercent,omitempty"`

	// Metrics is the list of metrics used to evaluate scaling decisions.
	// +kubebuilder:validation:MinItems=1
	// +listType=atomic
	Metrics []AutoscalingPolicyMetric `json:"metrics"`

	// Behavior defines the scaling behavior for both scale up and scale down.
	// It defaults to an empty object so that every nested default below is applied.
	// +optional
	// +kubebuilder:default={}
	Behavior *AutoscalingPolicyBehavior `json:"behavior,omitempty"`
}

// AutoscalingPolicyMetric defines a metric and its target value for scaling.
type AutoscalingPolicyMetric struct {
	// MetricName is the name of the metric to monitor.
	// +kubebuilder:validation:MinLength=1
	MetricName string `json:"metricName"`

	// TargetValue is the target value for the metric to trigger scaling.
	TargetValue resource.Quantity `json:"targetValue"`
}

// AutoscalingPolicyBehavior defines the scaling behaviors for up and down actions.
type AutoscalingPolicyBehavior struct {
	// ScaleUp defines the policy for scaling up (increasing replicas).
	// +optional
	// +kubebuilder:default={}
	ScaleUp *AutoscalingPolicyScaleUpPolicy `json:"scaleUp,omitempty"`

	// ScaleDown defines the policy for scaling down (decreasing replicas).
	// +optional
	// +kubebuilder:default={}
	ScaleDown *AutoscalingPolicyStablePolicy `json:"scaleDown,omitempty"`
}

// AutoscalingPolicyScaleUpPolicy combines the stable and panic policies for scaling up.
type AutoscalingPolicyScaleUpPolicy struct {
	// Stable policy usually makes decisions based on the average value of metrics calculated over the past few minutes and introduces a scaling-down cool-down period/delay.
	// This mechanism is relatively stable, as it can smooth out short-term small fluctuations and avoid overly frequent and unnecessary Pod scaling.
	// +optional
	// +kubebuilder:default={}
	StablePolicy *AutoscalingPolicyStablePolicy `json:"stablePolicy,omitempty"`

	// When the load surges sharply within a short period, using the average value over a long time window
	// to calculate the required number of replicas will cause significant lag; the panic policy scales out fast.
	// +optional
	// +kubebuilder:default={}
	PanicPolicy *AutoscalingPolicyPanicPolicy `json:"panicPolicy,omitempty"`
}

// SelectPolicyType defines the type of select policy.
// +kubebuilder:validation:Enum=Or;And
type SelectPolicyType string

const (
	// SelectPolicyOr scales as long as either the Percent or the Instances requirement is met.
	SelectPolicyOr SelectPolicyType = "Or"
	// SelectPolicyAnd scales only when both the Percent and the Instances requirements are met.
	SelectPolicyAnd SelectPolicyType = "And"
)

// AutoscalingPolicyStablePolicy defines the policy for stable scaling up or scaling down.
type AutoscalingPolicyStablePolicy struct {
	// Instances is the maximum number of instances to scale.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	Instances *int32 `json:"instances,omitempty"`

	// Percent is the maximum percentage of instances to scaling.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Percent *int32 `json:"percent,omitempty"`

	// Period is the duration over which scaling is evaluated.
	// +optional
	// +kubebuilder:default="15s"
	Period *metav1.Duration `json:"period,omitempty"`

	// SelectPolicy determines the selection strategy for scaling up (e.g., Or, And).
	// 'Or' represents the scaling operation will be performed as long as either the Percent requirement or the Instances requirement is met.
	// 'And' represents the scaling operation will be performed as long as both the Percent requirement and the Instances requirement is met.
	// +optional
	// +kubebuilder:default=Or
	SelectPolicy SelectPolicyType `json:"selectPolicy,omitempty"`

	// StabilizationWindow is the time window to stabilize scaling up actions.
	// +optional
	StabilizationWindow *metav1.Duration `json:"stabilizationWindow,omitempty"`
}

// AutoscalingPolicyPanicPolicy defines the policy for panic scaling up.
type AutoscalingPolicyPanicPolicy struct {
	// Percent is the maximum percentage of instances to scale up.
	// +optional
	// +kubebuilder:default=1000
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	Percent *int32 `json:"percent,omitempty"`

	// Period is the duration over which scaling down is evaluated.
	// +optional
	Period *metav1.Duration `json:"period,omitempty"`

	// PanicThresholdPercent is the threshold percent to enter panic mode.
	// +optional
	// +kubebuilder:default=200
	// +kubebuilder:validation:Minimum=110
	// +kubebuilder:validation:Maximum=1000
	PanicThresholdPercent *int32 `json:"panicThresholdPercent,omitempty"`

	// PanicModeHold is the duration to hold in panic mode before returning to normal.
	// +optional
	// +kubebuilder:default="60s"
	PanicModeHold *metav1.Duration `json:"panicModeHold,omitempty"`
}

// AutoscalingPolicyStatus defines the observed state of AutoscalingPolicy.
type AutoscalingPolicyStatus struct {
	// ObservedGeneration is the most recent generation the autoscaler acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions explain what the autoscaler did with this policy.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// AutoscalingPolicy is the Schema for the autoscalingpolicies API.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=asp
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Tolerance",type=integer,JSONPath=`.spec.tolerancePercent`
// +kubebuilder:printcolumn:name="Valid",type=string,JSONPath=`.status.conditions[?(@.type=="Valid")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AutoscalingPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   AutoscalingPolicySpec   `json:"spec,omitempty"`
	Status AutoscalingPolicyStatus `json:"status,omitempty"`
}

// AutoscalingPolicyList contains a list of AutoscalingPolicy.
//
// +kubebuilder:object:root=true
type AutoscalingPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AutoscalingPolicy `json:"items"`
}
