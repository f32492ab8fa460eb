package llmazserving

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reasons on Playground, Service and BackendRuntime conditions. Progressing and Available
// are llmaz's condition types; the reasons say what Berth is waiting for or what is wrong.
const (
	ReasonServiceCreated    = "ServiceCreated"
	ReasonWaiting           = "WaitingForPods"
	ReasonAvailable         = "Available"
	ReasonModelNotFound     = "ModelNotFound"
	ReasonRuntimeNotFound   = "BackendRuntimeNotFound"
	ReasonConfigNotFound    = "RecommendedConfigNotFound"
	ReasonFlavorNotFound    = "FlavorNotFound"
	ReasonInvalidArgs       = "InvalidArgs"
	ReasonInvalidResources  = "InvalidResources"
	ReasonNameConflict      = "NameConflict"
	ReasonServingCreated    = "ModelServingCreated"
	ReasonValid             = "Valid"
	ConditionValid          = "Valid"
	conditionProgressingNew = "Progressing"
)

// setConditions records a problem or progress on a Playground or Service: a problem makes
// Available False with its reason; progress keeps Progressing True until Available.
func setProgress(conds *[]metav1.Condition, gen int64, available bool, reason, msg string) {
	if available {
		meta.SetStatusCondition(conds, metav1.Condition{Type: "Available", Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: gen})
		meta.SetStatusCondition(conds, metav1.Condition{Type: conditionProgressingNew, Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: gen})
		return
	}
	meta.SetStatusCondition(conds, metav1.Condition{Type: "Available", Status: metav1.ConditionFalse, Reason: reason, Message: msg, ObservedGeneration: gen})
	meta.SetStatusCondition(conds, metav1.Condition{Type: conditionProgressingNew, Status: metav1.ConditionTrue, Reason: reason, Message: msg, ObservedGeneration: gen})
}
