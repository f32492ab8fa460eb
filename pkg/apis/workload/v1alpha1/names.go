package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
)

// ServingGroupName is ServingGroup i of ModelServing ms: "<ms>-<i>". It names the group's
// Volcano PodGroup and is the value of its pods' GroupNameLabel.
func ServingGroupName(ms string, i int) string { return fmt.Sprintf("%s-%d", ms, i) }

// RoleReplicaName is replica j of role r: "<r>-<j>", the value of its pods' RoleIDLabel
// (and their Volcano task name).
func RoleReplicaName(role string, j int) string { return fmt.Sprintf("%s-%d", role, j) }

// ScaleSelector is what status.labelSelector (the scale subresource's selector) holds, as
// Kthena 1.0 writes it: exactly one pod per ServingGroup, the entry pod of the first role's
// replica 0. The scale subresource counts ServingGroups, so HPA, which sizes by the pods
// its selector finds, and KEDA see one pod per replica.
func ScaleSelector(ms *ModelServing) string {
	set := labels.Set{ModelServingNameLabel: ms.Name, EntryLabel: "true"}
	if len(ms.Spec.Template.Roles) > 0 {
		role := ms.Spec.Template.Roles[0].Name
		set[RoleLabel] = role
		set[RoleIDLabel] = RoleReplicaName(role, 0)
	}
	return set.String()
}

// EntryPodsSelector selects the entry pod of every role replica of ModelServing name:
// every pod that serves requests. Berth's autoscalers read their metrics from these, where
// the scale selector holds one per ServingGroup.
func EntryPodsSelector(name string) labels.Selector {
	return labels.SelectorFromSet(labels.Set{ModelServingNameLabel: name, EntryLabel: "true"})
}
