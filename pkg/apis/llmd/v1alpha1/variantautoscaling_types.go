package v1alpha1

import (
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AcceleratorNameLabel on a VariantAutoscaling names the accelerator its ModelServing runs
// on (llm-d's label). With it the optimizer sizes the variant on that accelerator's profile
// only; without it, it picks the cheapest profile that meets the SLO.
const AcceleratorNameLabel = "inference.optimization/acceleratorName"

// VariantAutoscalingSpec defines the desired state for autoscaling a model variant.
//
// It has two shapes, and an object is written in one of them. The spec's (seed 002):
// modelID, sloClassRef and modelProfile, sized by llm-d's queueing model. llm-d v0.5's:
// modelID, scaleTargetRef and variantCost, sized by llm-d's saturation analyzer. Both are
// optional in the schema; the rules below refuse an object that mixes them or is neither,
// naming the field.
//
// +kubebuilder:validation:XValidation:rule="!has(self.scaleTargetRef) || !(has(self.sloClassRef) || has(self.modelProfile))",messageExpression="'scaleTargetRef (llm-d v0.5) cannot be combined with ' + (has(self.sloClassRef) ? 'sloClassRef' : 'modelProfile') + ' (the spec shape): write a VariantAutoscaling in one shape'",reason=FieldValueForbidden,fieldPath=".scaleTargetRef"
// +kubebuilder:validation:XValidation:rule="!has(self.variantCost) || !(has(self.sloClassRef) || has(self.modelProfile))",messageExpression="'variantCost (llm-d v0.5) cannot be combined with ' + (has(self.sloClassRef) ? 'sloClassRef' : 'modelProfile') + ' (the spec shape): write a VariantAutoscaling in one shape'",reason=FieldValueForbidden,fieldPath=".variantCost"
// +kubebuilder:validation:XValidation:rule="!has(self.modelProfile) || has(self.sloClassRef) || has(self.scaleTargetRef) || has(self.variantCost)",message="the spec shape has sloClassRef beside modelProfile",reason=FieldValueRequired,fieldPath=".sloClassRef"
// +kubebuilder:validation:XValidation:rule="!has(self.sloClassRef) || has(self.modelProfile) || has(self.scaleTargetRef) || has(self.variantCost)",message="the spec shape has modelProfile beside sloClassRef",reason=FieldValueRequired,fieldPath=".modelProfile"
// +kubebuilder:validation:XValidation:rule="!has(self.variantCost) || has(self.scaleTargetRef) || has(self.sloClassRef) || has(self.modelProfile)",message="llm-d v0.5's shape has scaleTargetRef beside variantCost",reason=FieldValueRequired,fieldPath=".scaleTargetRef"
// +kubebuilder:validation:XValidation:rule="has(self.sloClassRef) || has(self.modelProfile) || has(self.scaleTargetRef) || has(self.variantCost)",message="set sloClassRef and modelProfile (the spec shape) or scaleTargetRef (llm-d v0.5)",reason=FieldValueRequired,fieldPath=".sloClassRef"
type VariantAutoscalingSpec struct {
	// ModelID specifies the unique identifier of the model to be autoscaled.
	// (Both shapes.)
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:Required
	ModelID string `json:"modelID"`

	// SLOClassRef references the ConfigMap key containing Service Level Objective (SLO) configuration.
	// (The spec shape: required there.)
	// +optional
	SLOClassRef *ConfigMapKeyRef `json:"sloClassRef,omitempty"`

	// ModelProfile provides resource and performance characteristics for the model variant.
	// (The spec shape: required there.)
	// +optional
	ModelProfile *ModelProfile `json:"modelProfile,omitempty"`

	// ScaleTargetRef references the scalable resource to manage.
	// This follows the same pattern as HorizontalPodAutoscaler.
	// (llm-d v0.5's shape: required there. Berth scales any kind with a scale
	// subresource; apiVersion defaults by kind: workload.serving.volcano.sh/v1alpha1 for
	// a ModelServing, apps/v1 otherwise, as llm-d defaults a Deployment.)
	// +optional
	ScaleTargetRef *autoscalingv1.CrossVersionObjectReference `json:"scaleTargetRef,omitempty"`

	// VariantCost specifies the cost per replica for this variant (used in saturation analysis).
	// (llm-d v0.5's shape. llm-d's CRD defaults it to "10.0"; Berth applies that default
	// when it reads the object instead, since a schema default would write a v0.5 field
	// into every spec-shaped object.)
	// +optional
	// +kubebuilder:validation:Pattern=`^\d+(\.\d+)?$`
	VariantCost string `json:"variantCost,omitempty"`
}

// DefaultVariantCost is llm-d's default variantCost.
const DefaultVariantCost = "10.0"

// IsV05 reports whether spec is written in llm-d v0.5's shape (scaleTargetRef,
// variantCost) rather than the spec's (sloClassRef, modelProfile).
func (s *VariantAutoscalingSpec) IsV05() bool {
	return s.ScaleTargetRef != nil || s.VariantCost != ""
}

// ConfigMapKeyRef references a specific key within a ConfigMap.
type ConfigMapKeyRef struct {
	// Name is the name of the ConfigMap.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`

	// Key is the key within the ConfigMap.
	// +kubebuilder:validation:MinLength=1
	Key string `json:"key"`
}

// ModelProfile provides resource and performance characteristics for the model variant.
type ModelProfile struct {
	// Accelerators is a list of accelerator profiles for the model variant.
	// +kubebuilder:validation:MinItems=1
	Accelerators []AcceleratorProfile `json:"accelerators"`
}

// AcceleratorProfile defines the configuration for an accelerator used in autoscaling.
// It specifies the type and count of accelerator, as well as parameters for scaling behavior.
type AcceleratorProfile struct {
	// Acc specifies the type or name of the accelerator (e.g., GPU type).
	// +kubebuilder:validation:MinLength=1
	Acc string `json:"acc"`

	// AccCount specifies the number of accelerator units to be used.
	// +kubebuilder:validation:Minimum=1
	AccCount int32 `json:"accCount"`

	// Alpha is the alpha parameter for scaling by optimizer, represented as a string matching a decimal pattern.
	// Berth reads it as llm-d does: the inter-token latency in milliseconds of a batch of
	// one is alpha + beta.
	// +kubebuilder:validation:Pattern=`^\d+(\.\d+)?$`
	Alpha string `json:"alpha"`

	// Beta is the beta parameter for scaling by optimizer, represented as a string matching a decimal pattern.
	// It is the milliseconds each further request in the batch adds to a decode step.
	// +kubebuilder:validation:Pattern=`^\d+(\.\d+)?$`
	Beta string `json:"beta"`

	// MaxBatchSize is the maximum batch size supported by the accelerator.
	// +kubebuilder:validation:Minimum=1
	MaxBatchSize int32 `json:"maxBatchSize"`
}

// VariantAutoscalingStatus represents the current status of autoscaling for a variant,
// including the current allocation, desired optimized allocation, and actuation status.
type VariantAutoscalingStatus struct {
	// CurrentAlloc specifies the current resource allocation for the variant.
	// (A pointer so that a status written before the first measurement omits it rather
	// than sending empty strings the schema refuses.)
	// +optional
	CurrentAlloc *Allocation `json:"currentAlloc,omitempty"`

	// DesiredOptimizedAlloc indicates the target optimized allocation based on autoscaling logic.
	// +optional
	DesiredOptimizedAlloc *OptimizedAlloc `json:"desiredOptimizedAlloc,omitempty"`

	// Actuation provides details about the actuation process and its current status.
	// +optional
	Actuation ActuationStatus `json:"actuation,omitempty"`

	// Conditions say why the last optimization did or did not run and whether its result
	// was applied (Berth's addition; llm-d's later versions add the same field).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation the status describes (Berth's addition).
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Allocation describes the current resource allocation for a model variant.
type Allocation struct {
	// Accelerator is the type of accelerator currently allocated.
	// +kubebuilder:validation:MinLength=1
	Accelerator string `json:"accelerator"`

	// NumReplicas is the number of replicas currently allocated.
	// +kubebuilder:validation:Minimum=0
	NumReplicas int32 `json:"numReplicas"`

	// MaxBatch is the maximum batch size currently allocated.
	// +kubebuilder:validation:Minimum=0
	MaxBatch int32 `json:"maxBatch"`

	// VariantCost is the cost associated with the current variant allocation.
	// +kubebuilder:validation:Pattern=`^\d+(\.\d+)?$`
	VariantCost string `json:"variantCost"`

	// ITLAverage is the average inference time latency for the current allocation.
	// +kubebuilder:validation:Pattern=`^\d+(\.\d+)?$`
	ITLAverage string `json:"itlAverage"`

	// WaitAverage is the average wait time for requests in the current allocation.
	// +kubebuilder:validation:Pattern=`^\d+(\.\d+)?$`
	WaitAverage string `json:"waitAverage"`

	// Load describes the workload characteristics for the current allocation.
	Load LoadProfile `json:"load"`
}

// LoadProfile represents the configuration for workload characteristics,
// including the rate of incoming requests (ArrivalRate) and the average
// length of each request (AvgLength). Both fields are specified as strings
// to allow flexible input formats.
type LoadProfile struct {
	// ArrivalRate is the rate of incoming requests in inference server.
	// Berth writes requests per minute, as llm-d does.
	ArrivalRate string `json:"arrivalRate"`

	// AvgLength is the average length of each request in inference server.
	// Berth writes the average number of generated (output) tokens per request.
	AvgLength string `json:"avgLength"`
}

// OptimizedAlloc describes the target optimized allocation for a model variant.
type OptimizedAlloc struct {
	// LastRunTime is the timestamp of the last optimization run.
	// +optional
	LastRunTime metav1.Time `json:"lastRunTime,omitempty"`

	// Accelerator is the type of accelerator for the optimized allocation.
	// +kubebuilder:validation:MinLength=2
	Accelerator string `json:"accelerator"`

	// NumReplicas is the number of replicas for the optimized allocation.
	// +kubebuilder:validation:Minimum=0
	NumReplicas int32 `json:"numReplicas"`
}

// ActuationStatus provides details about the actuation process and its current status.
type ActuationStatus struct {
	// Applied indicates whether the actuation was successfully applied.
	Applied bool `json:"applied"`
}

// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=va
// +kubebuilder:printcolumn:name="Target",type=string,JSONPath=".spec.scaleTargetRef.name"
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=".spec.modelID"
// +kubebuilder:printcolumn:name="Accelerator",type=string,JSONPath=".status.currentAlloc.accelerator"
// +kubebuilder:printcolumn:name="CurrentReplicas",type=integer,JSONPath=".status.currentAlloc.numReplicas"
// +kubebuilder:printcolumn:name="Optimized",type=string,JSONPath=".status.desiredOptimizedAlloc.numReplicas"
// +kubebuilder:printcolumn:name="Applied",type=boolean,JSONPath=".status.actuation.applied"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="MetricsReady",type=string,JSONPath=`.status.conditions[?(@.type=="MetricsAvailable")].status`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"

// VariantAutoscaling is the Schema for the variantautoscalings API.
// It represents the autoscaling configuration and status for a model variant.
// Berth sizes the ModelServing of the same name and namespace (llm-d sizes the Deployment
// of the same name).
type VariantAutoscaling struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec defines the desired state for autoscaling the model variant.
	Spec VariantAutoscalingSpec `json:"spec,omitempty"`

	// Status represents the current status of autoscaling for the model variant.
	Status VariantAutoscalingStatus `json:"status,omitempty"`
}

// VariantAutoscalingList contains a list of VariantAutoscaling resources.
// +kubebuilder:object:root=true
type VariantAutoscalingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items is the list of VariantAutoscaling resources.
	Items []VariantAutoscaling `json:"items"`
}
