package modelbooster

import (
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// Reasons of the events the ModelBooster reconciler records on a ModelBooster, besides
// ReasonInvalidSpec and ReasonAdapterLoadFailed (status.go), which its conditions share.
const (
	// ReasonCreated, ReasonUpdated and ReasonDeleted: a generated object was created, brought
	// back in line with the spec, or deleted because the spec no longer asks for it.
	ReasonCreated = "Created"
	ReasonUpdated = "Updated"
	ReasonDeleted = "Deleted"
	// ReasonSyncFailed: creating, updating or deleting a generated object failed.
	ReasonSyncFailed = "SyncFailed"
	// ReasonLoaded and ReasonUnloaded: a LoRA adapter was loaded into, or unloaded from, an engine.
	ReasonLoaded   = "AdapterLoaded"
	ReasonUnloaded = "AdapterUnloaded"
	// ReasonScaledByAutoscaler: a fixed backend's ModelServing keeps the replica count an
	// autoscaler outside the ModelBooster gave it (scaledby.go).
	ReasonScaledByAutoscaler = "ScaledByAutoscaler"
)

// Actions of those events (events.k8s.io/v1 requires one): what the controller did.
const (
	actionValidate      = "Validate"
	actionSync          = "Sync"
	actionCreate        = "Create"
	actionUpdate        = "Update"
	actionDelete        = "Delete"
	actionLoadAdapter   = "LoadAdapter"
	actionUnloadAdapter = "UnloadAdapter"
)

// event records an event on the ModelBooster, about a related object when there is one.
func (r *Reconciler) event(mb *workloadv1alpha1.ModelBooster, related client.Object, typ, reason, action, note string, args ...any) {
	if r.Recorder == nil {
		return
	}
	if related == nil {
		r.Recorder.Eventf(mb, nil, typ, reason, action, note, args...)
		return
	}
	r.Recorder.Eventf(mb, related, typ, reason, action, note, args...)
}
