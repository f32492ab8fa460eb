package workload

import (
	"sort"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// rolloutType is the strategy the ModelServing asks for (ServingGroupRollingUpdate unless
// it says RoleRollingUpdate).
func rolloutType(ms *workloadv1alpha1.ModelServing) workloadv1alpha1.RolloutStrategyType {
	if rs := ms.Spec.RolloutStrategy; rs != nil && rs.Type == workloadv1alpha1.RoleRollingUpdate {
		return workloadv1alpha1.RoleRollingUpdate
	}
	return workloadv1alpha1.ServingGroupRollingUpdate
}

// scaled resolves an int-or-percentage against n (0 when unset or unreadable; validation
// refuses what does not read).
func scaled(v *intstr.IntOrString, n int, roundUp bool) int {
	if v == nil {
		return 0
	}
	out, err := intstr.GetScaledValueFromIntOrPercent(v, n, roundUp)
	if err != nil || out < 0 {
		return 0
	}
	return out
}

// groupPartition is how many ServingGroups, by ordinal, keep their revision: an integer (the
// spec's) or a percentage of replicas rounded up (Kthena 1.0). Both strategies honour it.
func groupPartition(ms *workloadv1alpha1.ModelServing) int {
	rs := ms.Spec.RolloutStrategy
	if rs == nil || rs.RollingUpdateConfiguration == nil {
		return 0
	}
	return scaled(rs.RollingUpdateConfiguration.Partition, int(ptr.Deref(ms.Spec.Replicas, 1)), true)
}

// rolePartition is how many replicas of role r, by ordinal, a RoleRollingUpdate keeps on
// their revision in each group (a percentage of the role's replicas rounded up).
func rolePartition(ms *workloadv1alpha1.ModelServing, r *workloadv1alpha1.Role) int {
	if rolloutType(ms) != workloadv1alpha1.RoleRollingUpdate {
		return 0
	}
	return scaled(r.Partition, roleReplicas(r), true)
}

// roleMaxUnavailable is how many replicas of role r may be unavailable at once in a group
// during a RoleRollingUpdate: the role's maxUnavailable (a percentage rounded down, at least
// 1), or, unset, all of them, as Kthena replaces every outdated replica at once then.
func roleMaxUnavailable(r *workloadv1alpha1.Role) int {
	n := roleReplicas(r)
	if r.MaxUnavailable == nil {
		return n
	}
	return max(1, scaled(r.MaxUnavailable, n, false))
}

// protected says whether a role replica keeps the revision it is on: its group is below
// the partition, or (RoleRollingUpdate) its ordinal is below its role's partition.
func protected(ms *workloadv1alpha1.ModelServing, group int, u *unit) bool {
	return group < groupPartition(ms) || u.replica < rolePartition(ms, u.role)
}

// rolloutBudget is what a ServingGroupRollingUpdate may do at once.
type rolloutBudget struct {
	maxUnavailable int // groups that may be unavailable below the desired count
	maxSurge       int // groups that may exist above the desired count
	partition      int // groups with a lower ordinal keep their revision
}

// budgetFor resolves maxUnavailable (percent rounded down) and maxSurge (percent rounded
// up) against the desired replicas, as the seed defines them, and the partition.
func budgetFor(ms *workloadv1alpha1.ModelServing) rolloutBudget {
	want := int(ptr.Deref(ms.Spec.Replicas, 1))
	b := rolloutBudget{maxUnavailable: 1, partition: groupPartition(ms)}
	if rs := ms.Spec.RolloutStrategy; rs != nil && rs.RollingUpdateConfiguration != nil {
		c := rs.RollingUpdateConfiguration
		if c.MaxUnavailable != nil {
			b.maxUnavailable = scaled(c.MaxUnavailable, want, false)
		}
		if c.MaxSurge != nil {
			b.maxSurge = scaled(c.MaxSurge, want, true)
		}
	}
	if b.maxUnavailable == 0 && b.maxSurge == 0 {
		b.maxUnavailable = 1 // validation forbids both 0; percentages can still round to it
	}
	return b
}

// outdated lists the groups a ServingGroupRollingUpdate must replace, at or above the
// partition: those on another revision, and those a RoleRollingUpdate left with pods of
// several revisions when a role's template has changed since.
func outdated(ms *workloadv1alpha1.ModelServing, groups map[int]*servingGroup, revision string, b rolloutBudget) []int {
	hashes := roleHashes(ms)
	var out []int
	for idx, g := range groups {
		if idx < b.partition {
			continue
		}
		if rev := g.revision(); (rev != "" && rev != revision) || (g.mixedRevisions() && !g.rolesCurrent(hashes, revision)) {
			out = append(out, idx)
		}
	}
	sort.Ints(out)
	return out
}

// groupUpdated says whether a group counts as updated in the status: on the current
// revision (or without pods yet); under a RoleRollingUpdate, or with pods of several
// revisions a RoleRollingUpdate left, when every role's pods are on their role's current
// template.
func groupUpdated(ms *workloadv1alpha1.ModelServing, g *servingGroup, revision string, hashes map[string]string) bool {
	if g.revision() == revision || len(g.pods) == 0 {
		return true
	}
	if rolloutType(ms) == workloadv1alpha1.RoleRollingUpdate || g.mixedRevisions() {
		return g.rolesCurrent(hashes, revision)
	}
	return false
}

// rolloutStep decides, for this pass, which outdated groups to delete (they come back on
// the new revision) and how many groups may exist above the desired count. With
// RoleRollingUpdate it replaces no group (roleRolloutStep replaces role replicas).
//
// Not-ready outdated groups go first: removing them costs no availability. A ready one goes
// only while the ready groups stay at or above desired − maxUnavailable. maxSurge extra
// groups on the new revision are allowed while outdated groups remain, so with
// maxUnavailable 0 the new group is ready before an old one goes.
func rolloutStep(ms *workloadv1alpha1.ModelServing, groups map[int]*servingGroup, revision string, b rolloutBudget) (remove []int, allowed int) {
	want := int(ptr.Deref(ms.Spec.Replicas, 1))
	allowed = want
	if rolloutType(ms) != workloadv1alpha1.ServingGroupRollingUpdate {
		return nil, allowed
	}
	old := outdated(ms, groups, revision, b)
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

// roleReplacement is a role replica a RoleRollingUpdate deletes in this pass, to come back
// from the role's current template.
type roleReplacement struct {
	group int
	unit  *unit
}

// roleRolloutStep decides, for this pass of a RoleRollingUpdate, which role replicas to
// replace: in every group at or above the group partition, role by role, the replicas whose
// pods were built from another template of their role, at or above the role's partition.
// Every group moves at once (as Kthena's); inside a group each role keeps its own budget:
// not-ready outdated replicas go first (they cost no availability), a ready one only while
// the role's ready replicas stay at or above replicas − maxUnavailable, and the group keeps
// as many complete sets of one version (a prefill and a decode a router may pair) as the
// roles' budgets promise (completeSets). A role whose template did not change is not
// touched, even though the revision did.
func roleRolloutStep(ms *workloadv1alpha1.ModelServing, groups map[int]*servingGroup, revision string) []roleReplacement {
	if rolloutType(ms) != workloadv1alpha1.RoleRollingUpdate {
		return nil
	}
	partition := groupPartition(ms)
	hashes := roleHashes(ms)
	var out []roleReplacement
	for _, idx := range sortedIndices(groups) {
		if idx < partition {
			continue
		}
		units := groupUnits(ms, groups[idx])
		sets := newCompleteSets(ms, units, hashes, revision)
		for ri := range ms.Spec.Template.Roles {
			r := &ms.Spec.Template.Roles[ri]
			keep, budget := rolePartition(ms, r), roleMaxUnavailable(r)
			ready := 0
			var notReady, readyOld []*unit
			for _, u := range units {
				if u.role != r {
					continue
				}
				uReady := u.ready()
				if uReady {
					ready++
				}
				if u.replica < keep || u.terminating() || !u.outdated(hashes, revision) {
					continue
				}
				if uReady {
					readyOld = append(readyOld, u)
				} else {
					notReady = append(notReady, u)
				}
			}
			for _, u := range notReady {
				out = append(out, roleReplacement{group: idx, unit: u})
			}
			sort.Slice(readyOld, func(i, j int) bool { return readyOld[i].replica > readyOld[j].replica })
			for _, u := range readyOld {
				if ready-1 < roleReplicas(r)-budget || !sets.remove(u) {
					break
				}
				ready--
				out = append(out, roleReplacement{group: idx, unit: u})
			}
		}
	}
	return out
}

// completeSets counts what a group of several roles can serve during a RoleRollingUpdate: a
// request needs a ready replica of every role (a prefill and a decode), of one version (the
// router pairs a prefill only with a decode of a revision that had both their templates).
// A group whose prefill replicas are all on the new template while its decode replicas are
// all on the old one serves nothing, though each role alone is within its maxUnavailable.
type completeSets struct {
	roles []*workloadv1alpha1.Role
	// old and current count each role's ready replicas that can serve with the old
	// templates and with the current ones. A role whose template did not change counts in
	// both; an outdated replica in old only.
	old, current map[*workloadv1alpha1.Role]int
	// floor is the fewest complete sets the roles' own budgets leave when replicas are
	// replaced in step: min over roles of replicas − maxUnavailable (0 when a role may lose
	// every replica, maxUnavailable's default: then nothing is held back).
	floor int
}

func newCompleteSets(ms *workloadv1alpha1.ModelServing, units []*unit, hashes map[string]string, revision string) *completeSets {
	c := &completeSets{old: map[*workloadv1alpha1.Role]int{}, current: map[*workloadv1alpha1.Role]int{}}
	changed := map[*workloadv1alpha1.Role]bool{}
	for _, u := range units {
		if len(u.present) > 0 && u.outdated(hashes, revision) {
			changed[u.role] = true
		}
	}
	for ri := range ms.Spec.Template.Roles {
		r := &ms.Spec.Template.Roles[ri]
		c.roles = append(c.roles, r)
		f := max(0, roleReplicas(r)-roleMaxUnavailable(r))
		if ri == 0 || f < c.floor {
			c.floor = f
		}
	}
	for _, u := range units {
		if !u.ready() {
			continue
		}
		if u.outdated(hashes, revision) {
			c.old[u.role]++
			continue
		}
		c.current[u.role]++
		if !changed[u.role] {
			c.old[u.role]++
		}
	}
	return c
}

// count is how many complete sets the group has: of the old templates plus of the current.
func (c *completeSets) count() int {
	minOf := func(m map[*workloadv1alpha1.Role]int) int {
		n := -1
		for _, r := range c.roles {
			if n < 0 || m[r] < n {
				n = m[r]
			}
		}
		return max(n, 0)
	}
	return minOf(c.old) + minOf(c.current)
}

// remove takes ready outdated replica u out of the count if the group keeps at least floor
// complete sets without it, and says whether it did.
func (c *completeSets) remove(u *unit) bool {
	c.old[u.role]--
	if c.count() >= c.floor {
		return true
	}
	c.old[u.role]++
	return false
}

// roleHashes is every role's current RoleTemplateHash, by role name.
func roleHashes(ms *workloadv1alpha1.ModelServing) map[string]string {
	out := make(map[string]string, len(ms.Spec.Template.Roles))
	for i := range ms.Spec.Template.Roles {
		r := &ms.Spec.Template.Roles[i]
		out[r.Name] = RoleTemplateHash(r)
	}
	return out
}
