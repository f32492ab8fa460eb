package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AutoscalingPolicySpec defines the desired state of AutoscalingPolicy.
//
// It has two shapes. The spec's (Kthena 0.1): metrics named by metricName and behavior, applied
// to targets by an AutoscalingPolicyBinding. Kthena 1.0's: the policy names its own target in
// one of homogeneousTarget, heterogeneousTarget or disaggregatedTarget, its metrics are named
// by name, and each target says where each metric is read (metricSources). A policy with its
// own target scales it itself; a binding naming such a policy is refused.
//
// +kubebuilder:validation:XValidation:rule="(has(self.homogeneousTarget) ? 1 : 0) + (has(self.heterogeneousTarget) ? 1 : 0) + (has(self.disaggregatedTarget) ? 1 : 0) <= 1",message="set at most one of homogeneousTarget, heterogeneousTarget and disaggregatedTarget"
// +kubebuilder:validation:XValidation:rule="has(self.metrics) || has(self.disaggregatedTarget)",message="metrics is required (only a disaggregatedTarget may give its roles their own metrics instead)",fieldPath=".metrics",reason=FieldValueRequired
type AutoscalingPolicySpec struct {
	// TolerancePercent is the percentage of deviation tolerated before scaling actions are triggered.
	// The current number of instances is current_replicas, and the expected number of instances inferred from monitoring metrics is target_replicas.
	// The scaling operation will only be actually performed when |current_replicas - target_replicas| >= current_replicas * TolerancePercent.
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	TolerancePercent *int32 `json:"tolerancePercent,omitempty"`

	// Metrics is the list of metrics used to evaluate scaling decisions. It is required
	// except with a disaggregatedTarget whose every scaled role lists its own metrics.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Metrics []AutoscalingPolicyMetric `json:"metrics,omitempty"`

	// Behavior defines the scaling behavior for both scale up and scale down.
	// It defaults to an empty object so that every nested default below is applied.
	// +optional
	// +kubebuilder:default={}
	Behavior *AutoscalingPolicyBehavior `json:"behavior,omitempty"`

	// HomogeneousTarget (Kthena 1.0) scales one target on the metrics, between its bounds,
	// exactly as an AutoscalingPolicyBinding's scalingConfiguration does.
	// +optional
	HomogeneousTarget *ScalingConfiguration `json:"homogeneousTarget,omitempty"`

	// HeterogeneousTarget (Kthena 1.0) spreads one demand over several targets of one model by
	// cost (params, costExpansionRatePercent), exactly as an AutoscalingPolicyBinding's
	// optimizerConfiguration does.
	// +optional
	HeterogeneousTarget *OptimizerConfiguration `json:"heterogeneousTarget,omitempty"`

	// DisaggregatedTarget (Kthena 1.0) scales the roles of one ModelServing (for example
	// prefill and decode) each on its own metrics and bounds, keeping the ratio of two roles'
	// replicas within ratioConstraint.
	// +optional
	DisaggregatedTarget *DisaggregatedTarget `json:"disaggregatedTarget,omitempty"`
}

// AutoscalingPolicyMetric defines a metric and its target value for scaling.
//
// +kubebuilder:validation:XValidation:rule="has(self.metricName) != has(self.name)",message="set exactly one of metricName (Kthena 0.1) and name (Kthena 1.0)"
type AutoscalingPolicyMetric struct {
	// MetricName is the name of the metric to monitor (the spec's, Kthena 0.1): the name the
	// pods expose it under.
	// +optional
	// +kubebuilder:validation:MinLength=1
	MetricName string `json:"metricName,omitempty"`

	// Name is the metric's key (Kthena 1.0). A target's metricSources say where the metric
	// with this key is read; without an entry for it, the pods are scraped for a metric of
	// this name at the default endpoint (:8100/metrics).
	// +optional
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name,omitempty"`

	// TargetValue is the target value for the metric to trigger scaling.
	TargetValue resource.Quantity `json:"targetValue"`
}

// Key is the metric's name in whichever shape it was written.
func (m AutoscalingPolicyMetric) Key() string {
	if m.Name != "" {
		return m.Name
	}
	return m.MetricName
}

// HasTarget says whether the policy names its own target (Kthena 1.0's shape).
func (s *AutoscalingPolicySpec) HasTarget() bool {
	return s.HomogeneousTarget != nil || s.HeterogeneousTarget != nil || s.DisaggregatedTarget != nil
}

// DisaggregatedTarget scales the roles of one ModelServing together.
//
// +kubebuilder:validation:XValidation:rule="!has(self.ratioConstraint) || size(self.roles) >= 2",message="roles must contain at least two entries when ratioConstraint is configured"
// +kubebuilder:validation:XValidation:rule="!has(self.ratioConstraint) || (self.ratioConstraint.numeratorRole in self.roles && self.ratioConstraint.denominatorRole in self.roles)",message="ratioConstraint.numeratorRole and denominatorRole must be keys of roles",fieldPath=".ratioConstraint"
type DisaggregatedTarget struct {
	// TargetRef references the ModelServing whose roles are scaled (kind ModelServing; the
	// namespace is the policy's).
	TargetRef corev1.ObjectReference `json:"targetRef"`

	// Roles are the scaled roles by name (ModelServing.spec.template.roles[].name) with their
	// bounds and metrics. Each role's replicas is the replica count of that role in every
	// ServingGroup. A role whose minReplicas equals its maxReplicas is held at that size and
	// needs no metrics.
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=2
	Roles map[string]RoleScalingParam `json:"roles"`

	// RatioConstraint keeps replicas[numeratorRole] / replicas[denominatorRole] within
	// [minRatio, maxRatio] whenever the denominator role has replicas.
	// +optional
	RatioConstraint *RoleRatioConstraint `json:"ratioConstraint,omitempty"`
}

// RoleScalingParam is one role's bounds and metrics.
//
// +kubebuilder:validation:XValidation:rule="self.minReplicas <= self.maxReplicas",message="minReplicas cannot exceed maxReplicas",fieldPath=".minReplicas"
type RoleScalingParam struct {
	// MinReplicas is the fewest replicas of the role.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	MinReplicas int32 `json:"minReplicas"`

	// MaxReplicas is the most replicas of the role.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	MaxReplicas int32 `json:"maxReplicas"`

	// Metrics, when set, replace spec.metrics for this role.
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Metrics []AutoscalingPolicyMetric `json:"metrics,omitempty"`

	// MetricSources say where each of the role's metrics is read, by metric name. Pod
	// sources read only this role's entry pods.
	// +optional
	MetricSources map[string]MetricSource `json:"metricSources,omitempty"`
}

// RoleRatioConstraint bounds the ratio of two roles' replicas.
//
// +kubebuilder:validation:XValidation:rule="self.numeratorRole != self.denominatorRole",message="numeratorRole and denominatorRole must differ"
type RoleRatioConstraint struct {
	// NumeratorRole is the role on the numerator side of the ratio (for example prefill).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	NumeratorRole string `json:"numeratorRole"`

	// DenominatorRole is the role on the denominator side of the ratio (for example decode).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	DenominatorRole string `json:"denominatorRole"`

	// MinRatio is the least replicas[numeratorRole] / replicas[denominatorRole].
	MinRatio resource.Quantity `json:"minRatio"`

	// MaxRatio is the most replicas[numeratorRole] / replicas[denominatorRole].
	MaxRatio resource.Quantity `json:"maxRatio"`
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

	// Conditions explain what the autoscaler did with this policy: Valid (whether it can be
	// used), and for a policy with its own target Ready (the last decision and why) and, for
	// a disaggregatedTarget with a ratioConstraint, RatioConstraintViolated.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// HomogeneousStatus is the homogeneousTarget's replicas at the last decision.
	// +optional
	HomogeneousStatus *TargetScalingStatus `json:"homogeneousStatus,omitempty"`

	// HeterogeneousStatus is each heterogeneousTarget param's replicas at the last decision.
	// +optional
	// +listType=atomic
	HeterogeneousStatus []TargetScalingStatus `json:"heterogeneousStatus,omitempty"`

	// DisaggregatedStatus is each role's replicas and the ratio at the last decision.
	// +optional
	DisaggregatedStatus *DisaggregatedScalingStatus `json:"disaggregatedStatus,omitempty"`
}

// TargetScalingStatus is one scaled unit (a target, or a role of a disaggregatedTarget) at
// the autoscaler's last decision.
type TargetScalingStatus struct {
	// Name is the target's name (or the role's); empty in homogeneousStatus.
	// +optional
	Name string `json:"name,omitempty"`

	// CurrentReplicas is the unit's replicas before the decision.
	CurrentReplicas int32 `json:"currentReplicas"`

	// DesiredReplicas is what the unit's metrics and the policy's behavior decided for it
	// (for a role, before the ratio constraint; for a heterogeneousTarget param, its share).
	DesiredReplicas int32 `json:"desiredReplicas"`

	// Mode is Stable, or Panic while the panic policy governs scale-up.
	// +optional
	Mode string `json:"mode,omitempty"`

	// LastScaleTime is when the autoscaler last changed the unit's replicas.
	// +optional
	LastScaleTime *metav1.Time `json:"lastScaleTime,omitempty"`
}

// DisaggregatedScalingStatus is a disaggregatedTarget at the last decision.
type DisaggregatedScalingStatus struct {
	// Roles are the scaled roles, sorted by name.
	// +listType=atomic
	Roles []TargetScalingStatus `json:"roles"`

	// RatioStatus is the ratio of the replicas applied, when a ratioConstraint is set.
	// +optional
	RatioStatus *RoleRatioStatus `json:"ratioStatus,omitempty"`

	// RatioAdjusted is true when the ratio constraint changed what the roles' own metrics
	// decided at the last decision.
	// +optional
	RatioAdjusted bool `json:"ratioAdjusted,omitempty"`
}

// RoleRatioStatus is the observed ratio of a ratioConstraint's roles.
type RoleRatioStatus struct {
	NumeratorRole   string `json:"numeratorRole"`
	DenominatorRole string `json:"denominatorRole"`
	// CurrentRatio is replicas[numeratorRole] / replicas[denominatorRole] as applied (empty
	// while the denominator role has no replicas).
	// +optional
	CurrentRatio string `json:"currentRatio,omitempty"`
}

// AutoscalingPolicy is the Schema for the autoscalingpolicies API.
//
// The rules that look through lists are on the kind rather than on AutoscalingPolicySpec: a
// ModelBooster embeds that spec in a list of backends, where their cost would exceed the
// apiserver's CEL budget.
//
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.metrics) || !(has(self.spec.homogeneousTarget) || has(self.spec.heterogeneousTarget) || has(self.spec.disaggregatedTarget)) || self.spec.metrics.all(m, has(m.name))",message="a policy with its own target is Kthena 1.0's shape: name its metrics with name, not metricName",fieldPath=".spec.metrics"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.disaggregatedTarget) || self.spec.disaggregatedTarget.roles.all(r, !has(self.spec.disaggregatedTarget.roles[r].metrics) || self.spec.disaggregatedTarget.roles[r].metrics.all(m, has(m.name)))",message="a role's metrics are Kthena 1.0's shape: name them with name, not metricName",fieldPath=".spec.disaggregatedTarget.roles"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.disaggregatedTarget) || !has(self.spec.disaggregatedTarget.ratioConstraint) || quantity(string(self.spec.disaggregatedTarget.ratioConstraint.minRatio)).compareTo(quantity(string(self.spec.disaggregatedTarget.ratioConstraint.maxRatio))) <= 0",message="minRatio cannot exceed maxRatio",fieldPath=".spec.disaggregatedTarget.ratioConstraint.minRatio"
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.disaggregatedTarget) || !has(self.spec.disaggregatedTarget.ratioConstraint) || quantity(string(self.spec.disaggregatedTarget.ratioConstraint.maxRatio)).isGreaterThan(quantity('0'))",message="maxRatio must be greater than 0",fieldPath=".spec.disaggregatedTarget.ratioConstraint.maxRatio"
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=asp
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Tolerance",type=integer,JSONPath=`.spec.tolerancePercent`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
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
