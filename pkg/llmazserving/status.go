package llmazserving

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// recordProblem turns a sync error that is a problem into conditions (Available False with
// its reason), one warning event per new problem, and a log line; it says whether err was
// one. Other errors are the caller's to return (and retry).
func recordProblem(ctx context.Context, rec events.EventRecorder, obj client.Object, old []metav1.Condition, conds *[]metav1.Condition, err error) bool {
	var p *problem
	if !errors.As(err, &p) {
		return false
	}
	if c := meta.FindStatusCondition(old, "Available"); c == nil || c.Reason != p.reason {
		rec.Eventf(obj, nil, corev1.EventTypeWarning, p.reason, actionSync, "%s", p.message)
	}
	log.FromContext(ctx).Info("not served", "reason", p.reason, "message", p.message)
	setProgress(conds, obj.GetGeneration(), false, p.reason, p.message)
	return true
}

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

// setProgress records a problem or progress on a Playground or Service: a problem makes
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
