package workload

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// Reasons of the events the ModelServing reconciler records on a ModelServing, each saying
// which group and why (docs/controller.md lists them). The recovery reasons also label
// berth_modelserving_recoveries_total. A plugin of spec.plugins that cannot be used is a
// Warning with plugins.ReasonUnknownPlugin or plugins.ReasonInvalidPluginConfig.
const (
	// ReasonCreateGroup: a ServingGroup is created (scale-up, or a rollout's surge).
	ReasonCreateGroup = "CreateGroup"
	// ReasonScaledDown: a ServingGroup is deleted because the spec asks for fewer.
	ReasonScaledDown = "ScaledDown"
	// ReasonRollingUpdate: a ServingGroup on an old revision is deleted, to come back on the new one.
	ReasonRollingUpdate = "RollingUpdate"
	// ReasonRoleRollingUpdate: a role replica built from an old template of its role is
	// deleted, to come back from the current one (rolloutStrategy.type RoleRollingUpdate).
	ReasonRoleRollingUpdate = "RoleRollingUpdate"
	// ReasonScaleRole: pods of role replicas the spec no longer has are deleted.
	ReasonScaleRole = "ScaleRole"
	// ReasonReplacePod: recoveryPolicy None; a failed pod is replaced alone.
	ReasonReplacePod = "ReplacePod"
	// ReasonRecreateRole: recoveryPolicy RoleRecreate; a role replica restarts together.
	ReasonRecreateRole = "RecreateRole"
	// ReasonRecreateGroup: recoveryPolicy ServingGroupRecreate; the whole group restarts.
	ReasonRecreateGroup = "RecreateGroup"
	// ReasonDeleteStalePod: a pod left by a deleted ModelServing of the same name is in the way.
	ReasonDeleteStalePod = "DeleteStalePod"
	// ReasonDeleteService: a headless Service no kept role replica needs is deleted.
	ReasonDeleteService = "DeleteService"
	// ReasonDeletePodGroup: a PodGroup no kept ServingGroup needs is deleted.
	ReasonDeletePodGroup = "DeletePodGroup"
)

// Actions of those events (events.k8s.io/v1 requires one): what the controller did.
const (
	actionCreate   = "Create"
	actionDelete   = "Delete"
	actionRecreate = "Recreate"
	actionRefuse   = "Refuse"
)

// groupObject is the related object of an event about ServingGroup idx as a whole: its first
// entry pod (first role, replica 0), which creating the group makes and deleting it removes.
// events.k8s.io/v1 folds the events of one object that share reason, action and related
// object into a series that keeps only the first note, so without a related object per group
// "creating ServingGroup ms-1" would vanish into "creating ServingGroup ms-0".
func groupObject(ms *workloadv1alpha1.ModelServing, idx int) runtime.Object {
	if len(ms.Spec.Template.Roles) == 0 {
		return nil
	}
	return &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: ms.Namespace,
		Name: PodName(ms.Name, idx, ms.Spec.Template.Roles[0].Name, 0, 0)}
}

// deletionObject is the related object of a recovery event: the first pod it deletes (which
// names the role replica), else the group.
func deletionObject(ms *workloadv1alpha1.ModelServing, idx int, d deletion) runtime.Object {
	if len(d.pods) > 0 {
		return d.pods[0]
	}
	return groupObject(ms, idx)
}
