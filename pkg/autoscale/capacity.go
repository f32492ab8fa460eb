package autoscale

import (
	"encoding/json"
	"strconv"
	"time"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// GroupsThatFit reads the count berth-scheduler publishes on a ModelServing it places
// (docs/autoscaling.md, "Placement-aware scale-up"): how many more whole ServingGroups fit
// the cluster now, and the spec.replicas it was counted against. ok is false when the
// annotations are absent, malformed, or no longer vouched for at now: the caller then
// scales blind, as before.
func GroupsThatFit(annotations map[string]string, now time.Time) (fits, base int32, ok bool) {
	v, found := annotations[workloadv1alpha1.GroupsThatFitAnnotation]
	if !found {
		return 0, 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, 0, false
	}
	until, err := time.Parse(time.RFC3339Nano, annotations[workloadv1alpha1.GroupsThatFitUntilAnnotation])
	if err != nil || now.After(until) {
		return 0, 0, false
	}
	b, err := strconv.Atoi(annotations[workloadv1alpha1.GroupsThatFitReplicasAnnotation])
	if err != nil || b < 0 {
		return 0, 0, false
	}
	return int32(n), int32(b), true
}

// ReplicasThatLand is the most replicas a ModelServing may be scaled to now that can land:
// the replicas the count was made against plus the groups that fit, never below what it
// has (a count never scales a target down).
func ReplicasThatLand(fits, base, current int32) int32 {
	return max(base+fits, current)
}

// RoleFit is one role's entry in the count berth-scheduler publishes for a ModelServing of
// more than one role (workloadv1alpha1.RoleReplicasThatFitAnnotation): how many more
// replicas of the role every placed group can take now, counted against the role's
// replicas.
type RoleFit struct {
	Fit      int32 `json:"fit"`
	Replicas int32 `json:"replicas"`
	// Alongside holds, for each role whose name sorts after this one, how many more of it
	// every group can take with 0, 1, … Fit more of this one: the scale-ups that fit
	// together, where each count alone may overcommit a pool the roles share.
	Alongside map[string][]int32 `json:"alongside,omitempty"`
}

// RoleReplicasThatFit reads the per-role count, vouched for with the groups that fit (the
// same until time). ok is false when it is absent, malformed or no longer vouched for.
func RoleReplicasThatFit(annotations map[string]string, now time.Time) (map[string]RoleFit, bool) {
	v, found := annotations[workloadv1alpha1.RoleReplicasThatFitAnnotation]
	if !found {
		return nil, false
	}
	until, err := time.Parse(time.RFC3339Nano, annotations[workloadv1alpha1.GroupsThatFitUntilAnnotation])
	if err != nil || now.After(until) {
		return nil, false
	}
	var out map[string]RoleFit
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		return nil, false
	}
	for _, f := range out {
		if f.Fit < 0 || f.Replicas < 0 {
			return nil, false
		}
	}
	return out, true
}
