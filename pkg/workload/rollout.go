package workload

import (
	"sort"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// rolloutBudget is what a ServingGroupRollingUpdate may do at once.
type rolloutBudget struct {
	maxUnavailable int // groups that may be unavailable below the desired count
	maxSurge       int // groups that may exist above the desired count
	partition      int // groups with a lower ordinal keep their revision
}

// budgetFor resolves maxUnavailable (percent rounded down) and maxSurge (percent rounded
// up) against the desired replicas, as the seed defines them.
func budgetFor(ms *workloadv1alpha1.ModelServing) rolloutBudget {
	want := int(ptr.Deref(ms.Spec.Replicas, 1))
	b := rolloutBudget{maxUnavailable: 1}
	if rs := ms.Spec.RolloutStrategy; rs != nil && rs.RollingUpdateConfiguration != nil {
		c := rs.RollingUpdateConfiguration
		if c.MaxUnavailable != nil {
			v, _ := intstr.GetScaledValueFromIntOrPercent(c.MaxUnavailable, want, false)
			b.maxUnavailable = v
		}
		if c.MaxSurge != nil {
			v, _ := intstr.GetScaledValueFromIntOrPercent(c.MaxSurge, want, true)
			b.maxSurge = v
		}
		b.partition = int(ptr.Deref(c.Partition, 0))
	}
	if b.maxUnavailable == 0 && b.maxSurge == 0 {
		b.maxUnavailable = 1 // validation forbids both 0; percentages can still round to it
	}
	return b
}

// outdated lists the groups the rollout must replace: on another revision, at or above
// the partition.
func outdated(groups map[int]*servingGroup, revision string, b rolloutBudget) []int {
	var out []int
	for idx, g := range groups {
		if rev := g.revision(); rev != "" && rev != revision && idx >= b.partition {
			out = append(out, idx)
		}
	}
	sort.Ints(out)
	return out
}

// rolloutStep decides, for this pass, which outdated groups to delete (they come back on
// the new revision) and how many groups may exist above the desired count.
//
// Not-ready outdated groups go first: removing them costs no availability. A ready one goes
// only while the ready groups stay at or above desired − maxUnavailable. maxSurge extra
// groups on the new revision are allowed while outdated groups remain, so with
// maxUnavailable 0 the new group is ready before an old one goes.
func rolloutStep(ms *workloadv1alpha1.ModelServing, groups map[int]*servingGroup, revision string, b rolloutBudget) (remove []int, allowed int) {
	want := int(ptr.Deref(ms.Spec.Replicas, 1))
	old := outdated(groups, revision, b)
	allowed = want
	if len(old) == 0 {
		return nil, allowed
	}
	allowed = want + min(b.maxSurge, len(old))
	ready := 0
	for _, g := range groups {
		if g.ready(ms) {
			ready++
		}
	}
	sort.Slice(old, func(i, j int) bool {
		ri, rj := groups[old[i]].ready(ms), groups[old[j]].ready(ms)
		if ri != rj {
			return !ri
		}
		return old[i] > old[j]
	})
	for _, idx := range old {
		if !groups[idx].ready(ms) {
			remove = append(remove, idx)
			continue
		}
		if ready-1 < want-b.maxUnavailable {
			break
		}
		ready--
		remove = append(remove, idx)
	}
	return remove, allowed
}
