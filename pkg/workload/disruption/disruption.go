// Package disruption decides how a node drain moves a ModelServing's ServingGroups: which
// nodes are being drained, how many whole groups must keep serving, and which displaced group
// moves next. It is pure: the ModelServing reconciler gathers what it observed, asks Plan,
// and carries out the answer (pkg/workload/drain.go).
//
// Why the controller and not the Eviction API decides: the Eviction API counts pods against a
// PodDisruptionBudget, and a ServingGroup is a unit of several pods that serves only whole.
// berth-controller keeps a PodDisruptionBudget that refuses every voluntary eviction of a
// ModelServing's pods (so no drain, autoscaler or descheduler takes part of a group), sees
// the drain itself (a cordoned or drain-tainted node), and moves displaced groups whole, one
// at a time, within the budget below. No admission webhook: nothing cluster-wide breaks when
// berth-controller is down (evictions only wait), and there is no certificate to manage.
package disruption

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// MinAvailableAnnotation on a ModelServing says how many whole ServingGroups must stay Ready
// while a drain moves its groups: an integer ("2") or a percentage of spec.replicas ("75%",
// rounded up). Without it the minimum is spec.replicas minus the rollout's maxUnavailable
// (at least one group may move at a time; see DefaultMinAvailable).
const MinAvailableAnnotation = "disruption.berth.sh/min-available"

// WholeGroupsLabel ("true") marks the PodDisruptionBudget berth-controller keeps for a
// ModelServing. That budget refuses every eviction so that nothing takes single pods of a
// group; it is not a limit on preemption, which takes a group whole: berth-scheduler's gang
// preemption passes over budgets with this label (kube-scheduler's own preemption treats
// every budget as a preference only).
const WholeGroupsLabel = "disruption.berth.sh/whole-groups"

// UnschedulableTaint is the taint the node lifecycle controller puts on a cordoned node.
const UnschedulableTaint = corev1.TaintNodeUnschedulable

// DefaultMinAvailable is the minimum without the annotation: replicas minus the rollout's
// maxUnavailable (what the user already accepts going down while a rollout replaces groups),
// but never all replicas, so a drain always makes progress one group at a time; and never
// below zero. With one replica that is 0: the only group moves, as a rollout would replace it.
func DefaultMinAvailable(replicas, rolloutMaxUnavailable int) int {
	return max(0, replicas-max(1, rolloutMaxUnavailable))
}

// MinAvailable reads the annotation's value (set says it is present) against replicas. An
// unreadable value is an error naming the annotation and what is wrong; the caller then moves
// nothing until it is fixed. A value above replicas is taken as replicas (a drain then waits
// until the user lowers it or adds replicas: what such a value asks for).
func MinAvailable(value string, set bool, replicas, rolloutMaxUnavailable int) (int, error) {
	if !set {
		return DefaultMinAvailable(replicas, rolloutMaxUnavailable), nil
	}
	v := strings.TrimSpace(value)
	var n int
	if strings.HasSuffix(v, "%") {
		p, err := strconv.Atoi(strings.TrimSuffix(v, "%"))
		if err != nil || p < 0 || p > 100 {
			return 0, fmt.Errorf("annotation %s=%q: a percentage must be a whole number from 0%% to 100%%", MinAvailableAnnotation, value)
		}
		n, _ = intstr.GetScaledValueFromIntOrPercent(ptrTo(intstr.FromString(v)), replicas, true)
	} else {
		i, err := strconv.Atoi(v)
		if err != nil || i < 0 {
			return 0, fmt.Errorf("annotation %s=%q: want a non-negative number of ServingGroups (\"2\") or a percentage of spec.replicas (\"75%%\")", MinAvailableAnnotation, value)
		}
		n = i
	}
	return min(n, replicas), nil
}

func ptrTo[T any](v T) *T { return &v }

// Drained says whether a node is being drained, and how one can tell: it is cordoned
// (spec.unschedulable), or carries the unschedulable taint or a NoExecute taint a drain or
// a node lifecycle manager puts on (whatever its key: pods not tolerating it are evicted).
// A NoSchedule taint other than the unschedulable one is not a drain: it only keeps new pods
// off, and the pods already there keep serving.
func Drained(node *corev1.Node) (bool, string) {
	if node.Spec.Unschedulable {
		return true, "cordoned"
	}
	for _, t := range node.Spec.Taints {
		if t.Key == UnschedulableTaint {
			return true, "tainted " + t.Key
		}
		if t.Effect == corev1.TaintEffectNoExecute {
			return true, fmt.Sprintf("tainted %s:%s", t.Key, t.Effect)
		}
	}
	return false, ""
}

// Group is what Plan needs to know of one ServingGroup.
type Group struct {
	Index int
	// Ready: every pod of the complete group is Ready (it serves).
	Ready bool
	// Terminating: some of its pods are being deleted (it is moving, or being replaced).
	Terminating bool
	// Drained are the drained nodes its live pods run on (none: not displaced).
	Drained []string
}

// Displaced says whether the group has a pod on a drained node.
func (g Group) Displaced() bool { return len(g.Drained) > 0 }

// Decision is what Plan says to do now.
type Decision struct {
	// Move are the groups to delete whole now (they come back elsewhere).
	Move []int
	// Waiting are the displaced groups that stay for now, with why.
	Waiting []Wait
	// ReadyGroups is how many whole groups serve; Min the minimum.
	ReadyGroups, Min int
}

// Wait is a displaced group that may not move yet.
type Wait struct {
	Index int
	Why   string
}

// Plan picks the displaced groups to move now. A displaced group that does not serve (not
// Ready) moves at once: losing it costs nothing. A Ready one moves only when no other group
// is starting or moving (the previous move's replacement must be Ready first, so moves go one
// unit at a time) and the Ready groups left stay at least min. Lowest ordinal first.
//
// Moving whole groups keeps a disaggregated (P/D) ModelServing's prefill:decode ratio: the
// ratio is each group's own (its roles' replicas), so the groups left serve with exactly the
// ratio the spec gives; only their number drops, and never below min.
func Plan(groups []Group, min int) Decision {
	sort.Slice(groups, func(a, b int) bool { return groups[a].Index < groups[b].Index })
	d := Decision{Min: min}
	var busy []string // groups starting or moving: "group 0 moving"
	for _, g := range groups {
		if g.Ready && !g.Terminating {
			d.ReadyGroups++
		}
		switch {
		case g.Terminating:
			busy = append(busy, fmt.Sprintf("group %d moving", g.Index))
		case !g.Ready && !g.Displaced():
			busy = append(busy, fmt.Sprintf("group %d starting", g.Index))
		}
	}
	ready := d.ReadyGroups
	for _, g := range groups {
		if !g.Displaced() || g.Terminating {
			continue // not displaced, or already moving (it comes back elsewhere)
		}
		if !g.Ready {
			d.Move = append(d.Move, g.Index)
			continue
		}
		switch {
		case len(busy) > 0:
			d.Waiting = append(d.Waiting, Wait{g.Index, fmt.Sprintf("group %d waits: %d of min %d groups ready, %s",
				g.Index, ready, min, strings.Join(busy, ", "))})
		case ready-1 < min:
			d.Waiting = append(d.Waiting, Wait{g.Index, fmt.Sprintf("group %d waits: %d of min %d groups ready", g.Index, ready, min)})
		default:
			d.Move = append(d.Move, g.Index)
			ready--
			busy = append(busy, fmt.Sprintf("group %d moving", g.Index)) // one Ready group at a time
		}
	}
	return d
}
