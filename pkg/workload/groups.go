package workload

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// servingGroup is what exists of one ServingGroup: its pods, observed from the cache.
type servingGroup struct {
	index int
	pods  map[string]*corev1.Pod // by name
}

// observeGroups sorts a ModelServing's pods into its groups by the group-name label.
func observeGroups(ms *workloadv1alpha1.ModelServing, pods []corev1.Pod) map[int]*servingGroup {
	groups := map[int]*servingGroup{}
	for i := range pods {
		p := &pods[i]
		idx, ok := GroupIndex(ms.Name, p.Labels[workloadv1alpha1.GroupNameLabel])
		if !ok {
			continue
		}
		g := groups[idx]
		if g == nil {
			g = &servingGroup{index: idx, pods: map[string]*corev1.Pod{}}
			groups[idx] = g
		}
		g.pods[p.Name] = p
	}
	return groups
}

// podIn says whether any group holds pod name.
func podIn(groups map[int]*servingGroup, name string) bool {
	for _, g := range groups {
		if _, ok := g.pods[name]; ok {
			return true
		}
	}
	return false
}

// expectedPods is the number of pods a complete group has.
func expectedPods(ms *workloadv1alpha1.ModelServing) int {
	n := 0
	for i := range ms.Spec.Template.Roles {
		r := &ms.Spec.Template.Roles[i]
		n += roleReplicas(r) * (1 + int(r.WorkerReplicas))
	}
	return n
}

// revision is the ControllerRevision hash the group's live pods were created from ("" if
// none or mixed). Terminating pods do not count: a group being replaced comes back on the
// new revision.
func (g *servingGroup) revision() string {
	rev, mixed := g.liveRevisions()
	if mixed {
		return ""
	}
	return rev
}

// mixedRevisions says whether the group's live pods were created under more than one
// revision: a RoleRollingUpdate replaced some roles' replicas and left the others.
func (g *servingGroup) mixedRevisions() bool {
	_, mixed := g.liveRevisions()
	return mixed
}

// liveRevisions is the revision of the group's first live pod, and whether another live pod
// has a different one.
func (g *servingGroup) liveRevisions() (rev string, mixed bool) {
	for _, p := range g.pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		r := p.Labels[workloadv1alpha1.RevisionLabel]
		if rev == "" {
			rev = r
		} else if r != rev {
			return rev, true
		}
	}
	return rev, false
}

// rolesCurrent says whether every live pod of the group was built from its role's current
// template (hashes: RoleTemplateHash by role): a RoleRollingUpdate has nothing left to do
// in it, whatever revision its pods were created under.
func (g *servingGroup) rolesCurrent(hashes map[string]string, revision string) bool {
	for _, p := range g.pods {
		if p.DeletionTimestamp == nil && !onCurrentRoleTemplate(p, hashes, revision) {
			return false
		}
	}
	return true
}

// onCurrentRoleTemplate says whether pod p was built from its role's current template.
// Pods created before pods carried the role template hash compare by revision.
func onCurrentRoleTemplate(p *corev1.Pod, hashes map[string]string, revision string) bool {
	want, ok := hashes[p.Labels[workloadv1alpha1.RoleLabel]]
	if !ok {
		return false
	}
	if h, ok := p.Labels[workloadv1alpha1.RoleTemplateHashLabel]; ok {
		return h == want
	}
	return p.Labels[workloadv1alpha1.RevisionLabel] == revision
}

// ready says whether every pod of a complete group is Ready: the group can serve.
func (g *servingGroup) ready(ms *workloadv1alpha1.ModelServing) bool {
	if len(g.pods) != expectedPods(ms) {
		return false
	}
	for _, p := range g.pods {
		if p.DeletionTimestamp != nil || !podReady(p) {
			return false
		}
	}
	return true
}

func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// scaleDownOrder lists groups in the order they are removed: not-ready groups first, so
// scaling down never takes away a serving group while a broken one remains; then the
// lowest deletion cost (cost: the sum of the group's pods' pod-deletion-cost annotations,
// which berth-router publishes from what it knows of their in-flight requests and prefix
// cache, and users may set as on a ReplicaSet's pods), so the group whose loss hurts least
// goes; then the highest ordinal, which is all that decides when nobody publishes a cost.
func scaleDownOrder(ms *workloadv1alpha1.ModelServing, groups map[int]*servingGroup, cost map[int]int64) []int {
	idx := make([]int, 0, len(groups))
	for i := range groups {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool {
		ra, rb := groups[idx[a]].ready(ms), groups[idx[b]].ready(ms)
		if ra != rb {
			return !ra
		}
		if ca, cb := cost[idx[a]], cost[idx[b]]; ca != cb {
			return ca < cb
		}
		return idx[a] > idx[b]
	})
	return idx
}

// deletionCost is a group's deletion cost: the sum of its live pods' pod-deletion-cost
// annotations (ReplicaSet's convention: an int32; absent or unreadable counts 0).
func (g *servingGroup) deletionCost() int64 {
	var sum int64
	for _, p := range g.pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		if v, err := strconv.ParseInt(p.Annotations[corev1.PodDeletionCost], 10, 32); err == nil {
			sum += v
		}
	}
	return sum
}

// deletionCosts is every group's deletion cost.
func deletionCosts(groups map[int]*servingGroup) map[int]int64 {
	out := make(map[int]int64, len(groups))
	for i, g := range groups {
		out[i] = g.deletionCost()
	}
	return out
}

// scaleDownWhy says why a group is the one removed, for its ScaledDown event: not ready,
// or its deletion cost against the kept groups' ("" when costs played no part: all zero).
func scaleDownWhy(ms *workloadv1alpha1.ModelServing, groups map[int]*servingGroup, cost map[int]int64, idx int, kept []int) string {
	if !groups[idx].ready(ms) {
		return "not ready"
	}
	costed := cost[idx] != 0
	others := make([]string, 0, len(kept))
	for _, k := range kept {
		costed = costed || cost[k] != 0
		others = append(others, fmt.Sprintf("%s %d", workloadv1alpha1.ServingGroupName(ms.Name, k), cost[k]))
	}
	if !costed {
		return "highest ordinal; no pod has a deletion cost"
	}
	return fmt.Sprintf("lowest deletion cost %d (kept: %s)", cost[idx], strings.Join(others, ", "))
}

// freeOrdinals returns the n lowest ordinals no group uses.
func freeOrdinals(groups map[int]*servingGroup, n int) []int {
	var out []int
	for i := 0; len(out) < n; i++ {
		if _, used := groups[i]; !used {
			out = append(out, i)
		}
	}
	return out
}

// ScaleDownOrder is the order (ordinals, first removed first) in which the reconciler
// removes the groups that pods make up when ms scales down, the same rule as its own:
// bench/routerbench replays it against simulated engines without running the reconciler.
func ScaleDownOrder(ms *workloadv1alpha1.ModelServing, pods []corev1.Pod) []int {
	groups := observeGroups(ms, pods)
	return scaleDownOrder(ms, groups, deletionCosts(groups))
}
