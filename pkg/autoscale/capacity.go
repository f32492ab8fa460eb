package autoscale

import (
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
