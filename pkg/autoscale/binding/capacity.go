package binding

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale"
)

// Placement-aware scale-up (docs/autoscaling.md). berth-scheduler publishes on each
// ModelServing it places how many more whole ServingGroups of it fit the cluster now
// (workloadv1alpha1.GroupsThatFitAnnotation, vouched for until GroupsThatFitUntilAnnotation).
// While that answer is fresh, a scale-up of the target stops at its current replicas plus
// the count: a group that cannot land is not made into pending pods, and an optimizer's
// overflow goes to the next-cheapest target that can land. Without a fresh answer (another
// scheduler, a scheduler that stopped publishing, a kind other than ModelServing) the target
// scales as before, blind.

const (
	// ConditionCapacityLimited is True while the placement model's counts held a scale-up
	// back, False while they were read and did not; absent when no target has a fresh count.
	ConditionCapacityLimited = "CapacityLimited"
	ReasonCapacityLimited    = "CapacityLimited"
	ReasonCapacityAvailable  = "CapacityAvailable"
)

// readFits reads t's published count into t.fits (-1: none, or not fresh at now).
func readFits(t *target, annotations map[string]string, now time.Time) {
	t.fits = -1
	if fits, base, ok := autoscale.GroupsThatFit(annotations, now); ok {
		t.fits, t.fitsBase = fits, base
	}
}

// capOf is the most replicas t may be scaled to now that can land: the replicas the count
// was made against plus the groups that fit, never below its minimum (the user's floor
// stands, landing or not) and never below what it has; -1 without a fresh count.
func capOf(t *target) int32 {
	if t.fits < 0 {
		return -1
	}
	return max(autoscale.ReplicasThatLand(t.fits, t.fitsBase, t.scale.Spec.Replicas), t.min)
}

// capped lowers the bound hi to c (no cap when c < 0), never below lo.
func capped(hi, lo, c int32) int32 {
	if c < 0 || c >= hi {
		return hi
	}
	return max(c, lo)
}

// capacityReport is what the counts did to one decision.
type capacityReport struct {
	known   bool   // some target had a fresh count
	limited bool   // the counts changed the decision
	message string // "capacity-limited: 2 more groups of a fit, 0 of b" or "capacity: ..."
}

// reportCapacity compares the decision with what it would have been blind: blind is what
// each target would have got without the counts.
func reportCapacity(targets []*target, want, blind []int32) capacityReport {
	var rep capacityReport
	var parts []string
	for i, t := range targets {
		if t.fits < 0 {
			continue
		}
		rep.known = true
		if want[i] != blind[i] {
			rep.limited = true
		}
		noun, verb := "groups", "fit"
		if t.fits == 1 {
			noun, verb = "group", "fits"
		}
		parts = append(parts, fmt.Sprintf("%d more %s of %s %s", t.fits, noun, t.key, verb))
	}
	prefix := "capacity"
	if rep.limited {
		prefix = "capacity-limited"
	}
	rep.message = prefix + ": " + strings.Join(parts, ", ")
	return rep
}

// applyCapacityReport sets the CapacityLimited condition, records an event when the counts
// changed the decision, and exports each target's count.
func (r *Reconciler) applyCapacityReport(j job, targets []*target, want, blind []int32, status *workloadv1alpha1.AutoscalingPolicyBindingStatus) {
	for _, t := range targets {
		if t.fits >= 0 {
			groupsThatFit.WithLabelValues(j.namespace, j.label, t.key).Set(float64(t.fits))
		} else {
			groupsThatFit.DeleteLabelValues(j.namespace, j.label, t.key)
		}
	}
	rep := reportCapacity(targets, want, blind)
	var moves []string
	for i, t := range targets {
		if want[i] != blind[i] {
			moves = append(moves, fmt.Sprintf("%s %d instead of %d", t.key, want[i], blind[i]))
		}
	}
	r.setCapacityCondition(j, &status.Conditions, rep, moves)
}

// setCapacityCondition writes what the counts did to a decision: no condition without a
// count, False while they held nothing back, True (with the metric, and an event naming
// the moves once per new message) while they did.
func (r *Reconciler) setCapacityCondition(j job, conds *[]metav1.Condition, rep capacityReport, moves []string) {
	if !rep.known {
		meta.RemoveStatusCondition(conds, ConditionCapacityLimited)
		return
	}
	if !rep.limited {
		setCondition(conds, j.generation, ConditionCapacityLimited, metav1.ConditionFalse, ReasonCapacityAvailable, rep.message)
		return
	}
	capacityLimits.WithLabelValues(j.namespace, j.label).Inc()
	// One event per new limit, not one per sync period while it stands.
	if c := meta.FindStatusCondition(*conds, ConditionCapacityLimited); c == nil || c.Status != metav1.ConditionTrue || c.Message != rep.message {
		r.Recorder.Eventf(j.owner, nil, corev1.EventTypeNormal, ReasonCapacityLimited, actionDecide, "%s: %s", rep.message, strings.Join(moves, ", "))
	}
	setCondition(conds, j.generation, ConditionCapacityLimited, metav1.ConditionTrue, ReasonCapacityLimited, rep.message)
}

// blindWant is what each target would get of total without the counts.
func blindWant(targets []*target, total int32, rate int32, single bool) []int32 {
	if single {
		return []int32{total}
	}
	shares := make([]autoscale.Share, len(targets))
	for i, t := range targets {
		shares[i] = autoscale.Share{Cost: t.cost, Min: t.min, Max: t.max}
	}
	return autoscale.Distribute(total, shares, rate)
}

// applyRoleCapacity is applyCapacityReport for a disaggregatedTarget's roles: the
// CapacityLimited condition says how many more replicas of each role every group can take
// ("capacity-limited: 0 more replicas of decode fit in every group, 2 of prefill"), and an
// event is recorded when a count held a role's scale-up back.
func (r *Reconciler) applyRoleCapacity(j job, ms string, names []string, roles map[string]*roleDecision, conds *[]metav1.Condition) {
	var parts, moves []string
	for _, name := range names {
		rd := roles[name]
		key := ms + "/" + name
		if rd.fits < 0 {
			groupsThatFit.DeleteLabelValues(j.namespace, j.label, key)
			continue
		}
		groupsThatFit.WithLabelValues(j.namespace, j.label, key).Set(float64(rd.fits))
		noun, verb := "replicas", "fit"
		if rd.fits == 1 {
			noun, verb = "replica", "fits"
		}
		parts = append(parts, fmt.Sprintf("%d more %s of %s %s in every group", rd.fits, noun, name, verb))
		switch {
		case rd.unlowered > rd.final:
			moves = append(moves, fmt.Sprintf("%s %d instead of %d (with the other role's scale-up)", name, rd.final, max(rd.unlowered, rd.blind)))
		case rd.blind != rd.decided:
			moves = append(moves, fmt.Sprintf("%s %d instead of %d", name, rd.decided, rd.blind))
		}
	}
	rep := capacityReport{known: len(parts) > 0, limited: len(moves) > 0, message: "capacity: " + strings.Join(parts, ", ")}
	if rep.limited {
		rep.message = "capacity-limited: " + strings.Join(parts, ", ")
	}
	r.setCapacityCondition(j, conds, rep, moves)
}

// fitTogether lowers the scale-ups of roles a and b (a's name sorts first) to the largest
// pair that fits together, when the pair they were decided at does not: along[k] is how
// many more replicas of b every group takes with k more of a, counted from each role's
// fitsBase. Growth is judged from the count's base, not from the current replicas: a
// count made before the last scale-up landed still says what the pair may add in all (a
// role held at its current replicas may already be above its base, and then it takes
// room the other's scale-up needs). With a ratio (aIsNum: a is its numerator) the pair
// chosen keeps it. Neither role goes below its current replicas (nor above what it was
// decided at). It says whether it lowered them.
func fitTogether(a, b *roleDecision, along []int32, ratio *autoscale.Ratio, aIsNum bool) bool {
	fits := func(x, y int32) bool {
		dx, dy := x-a.fitsBase, y-b.fitsBase
		if dx <= 0 || dy <= 0 {
			return true // one role at most grows: its own count bounds it already
		}
		return int(dx) < len(along) && dy <= along[dx]
	}
	inRatio := func(x, y int32) bool {
		if ratio == nil {
			return true
		}
		if aIsNum {
			return autoscale.InRatio(x, y, *ratio)
		}
		return autoscale.InRatio(y, x, *ratio)
	}
	if (a.final <= a.current && b.final <= b.current) || fits(a.final, b.final) {
		return false
	}
	loA, loB := min(a.current, a.final), min(b.current, b.final)
	bestX, bestY, found := loA, loB, false
	for x := a.final; x >= loA; x-- {
		for y := b.final; y >= loB; y-- {
			if fits(x, y) && inRatio(x, y) && (!found || x+y > bestX+bestY) {
				bestX, bestY, found = x, y, true
			}
		}
	}
	if bestX == a.final && bestY == b.final {
		return false
	}
	a.unlowered, b.unlowered = a.final, b.final
	a.final, b.final = bestX, bestY
	return true
}
