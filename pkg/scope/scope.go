// Package scope decides which objects berth-controller acts on. A cluster may already run
// Kthena's controller, llmaz or llm-d's autoscaler over the same kinds; with Mode Berth,
// berth-controller leaves their objects alone (no status write, no event, no finalizer, no
// child object) and acts only on what is meant for Berth. Mode All (the default) acts on
// every object of its kinds, as the only controller of them.
package scope

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// Mode is the --manage setting.
type Mode string

const (
	// All acts on every object of berth-controller's kinds. The zero Mode means All.
	All Mode = "all"
	// Berth acts only on ModelServings whose pods ask for berth-scheduler and on objects
	// labelled workloadv1alpha1.ManagedLabel=true.
	Berth Mode = "berth"
)

// Parse reads a --manage value.
func Parse(s string) (Mode, error) {
	switch m := Mode(s); m {
	case All, Berth:
		return m, nil
	case "":
		return All, nil
	}
	return "", fmt.Errorf("--manage=%q: want %q (every object of Berth's kinds) or %q (only ModelServings on berth-scheduler and objects labelled %s=true)",
		s, All, Berth, workloadv1alpha1.ManagedLabel)
}

// Manages reports whether berth-controller acts on obj.
func (m Mode) Manages(obj client.Object) bool {
	if m != Berth {
		return true
	}
	if OptedIn(obj) {
		return true
	}
	ms, ok := obj.(*workloadv1alpha1.ModelServing)
	return ok && ms.Spec.SchedulerName == workloadv1alpha1.BerthSchedulerName
}

// OptedIn reports whether obj carries the opt-in label.
func OptedIn(obj client.Object) bool {
	return obj.GetLabels()[workloadv1alpha1.ManagedLabel] == "true"
}

// Inherit copies the opt-in label of from into labels (allocated if nil), so what Berth
// generates from an opted-in object is Berth's too. It returns labels.
func Inherit(from client.Object, labels map[string]string) map[string]string {
	if !OptedIn(from) {
		return labels
	}
	if labels == nil {
		labels = map[string]string{}
	}
	labels[workloadv1alpha1.ManagedLabel] = "true"
	return labels
}
