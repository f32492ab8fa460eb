package gang

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/klog/v2"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/pkg/plugins/placement"
	"github.com/berth-sh/berth/pkg/plugins/podgroups"
	"github.com/berth-sh/berth/pkg/workload/disruption"
)

// Reasons of preemption events and conditions.
const (
	reasonPreempting = "Preempting"
	reasonPreempted  = podgroups.ReasonPreempted
)

// preemptionGrace is added to the victims' termination grace period to bound how long a
// preemptor's room is kept for it: long enough for the victims to leave and the
// preemptor's pods to come back through the queue.
const preemptionGrace = 30 * time.Second

// preempt evicts whole lower-priority groups (and lone lower-priority pods) so the pod's
// group fits, when that is possible without breaking a disruption budget. It returns the
// message to show while the victims leave, or, when it evicted nothing, why not ("" when
// preemption does not apply at all).
func (g *Gang) preempt(ctx context.Context, pod *corev1.Pod, pg *volcanov1beta1.PodGroup, req *placement.Requirement, key string) (preempting bool, msg string) {
	logger := klog.FromContext(ctx).WithValues("group", key)
	if pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == corev1.PreemptNever {
		return false, ""
	}
	if n := g.victimsLeaving(key); n > 0 {
		// As kube-scheduler does: while pods preempted for the group are still leaving,
		// their room is on its way and preempting again would evict more than needed.
		return false, fmt.Sprintf("waiting for %d pods preempted for it to leave", n)
	}
	if g.takeRoomArrived(key) {
		// The victims left while this cycle ran on a snapshot taken before: try again on
		// one that has their room before evicting anyone else.
		g.activate(key)
		return false, "the pods preempted for it have left; trying again"
	}
	prio := g.groupPriority(pg, g.groupPods(key))
	budgets := g.budgets()
	candidates, protected := g.victimCandidates(key, prio, budgets)
	if len(candidates) == 0 && len(protected) == 0 {
		return false, ""
	}
	pre, why, err := g.model.PlanPreemption(pod, pg, req, candidates, protected)
	if err != nil {
		logger.Error(err, "Planning preemption failed")
		return false, ""
	}
	if pre == nil && why == "" {
		return false, "" // it fits without evicting anything
	}
	if pre == nil {
		result := "infeasible"
		if strings.HasPrefix(why, placement.OnlyProtected) {
			result = "forbidden"
		}
		preemptions.WithLabelValues(result).Inc()
		return false, "preemption cannot help: " + why
	}
	if msg := budgets.exceeded(pre.Victims); msg != "" {
		preemptions.WithLabelValues("forbidden").Inc()
		return false, "preemption cannot help: " + msg
	}
	ttl := preemptionGrace
	for i := range pre.Victims {
		for _, p := range pre.Victims[i].Pods {
			if gp := p.Spec.TerminationGracePeriodSeconds; gp != nil && time.Duration(*gp)*time.Second+preemptionGrace > ttl {
				ttl = time.Duration(*gp)*time.Second + preemptionGrace
			}
		}
	}
	g.model.Nominate(key, pre.Plan, ttl)
	g.mu.Lock()
	for i := range pre.Victims {
		devices := pre.Victims[i].Devices()
		for _, p := range pre.Victims[i].Pods {
			g.victimOf[p.UID] = victim{namespace: p.Namespace, name: p.Name, preemptor: key, devices: devices}
		}
	}
	g.mu.Unlock()

	groups, pods := 0, 0
	for i := range pre.Victims {
		if pre.Victims[i].Group {
			groups++
		} else {
			pods++
		}
		victimsEvicted.WithLabelValues(victimKind(pre.Victims[i].Group)).Inc()
	}
	preemptions.WithLabelValues("preempted").Inc()
	msg = fmt.Sprintf("preempting %s (%d groups, %d lone pods, all of lower priority than its %d); its room is kept until they leave",
		placement.DescribeVictims(pre.Victims, 4), groups, pods, prio)
	logger.V(2).Info("Preempting for group", "priority", prio, "victims", placement.DescribeVictims(pre.Victims, 16))
	g.status.preempting(pg, msg)
	go g.evict(context.WithoutCancel(ctx), key, prio, pre.Victims)
	return true, msg
}

func victimKind(group bool) string {
	if group {
		return "group"
	}
	return "pod"
}

// groupPriority is the group's PriorityClass value when its PodGroup names one that
// exists, else the highest priority of its pods.
func (g *Gang) groupPriority(pg *volcanov1beta1.PodGroup, pods []*corev1.Pod) int32 {
	if pg != nil && pg.Spec.PriorityClassName != "" && g.pcLister != nil {
		if pc, err := g.pcLister.Get(pg.Spec.PriorityClassName); err == nil {
			return pc.Value
		}
	}
	var prio int32
	for i, p := range pods {
		if v := podPriority(p); i == 0 || v > prio {
			prio = v
		}
	}
	return prio
}

func podPriority(p *corev1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// victimCandidates lists what a group of priority prio may evict: every group with a pod
// bound in this cycle's snapshot whose priority is strictly lower, whole, and every lone
// pod of strictly lower priority. A group with a pod already terminating is on its way out
// and is not counted twice. Candidates a disruption budget protects are returned apart.
func (g *Gang) victimCandidates(key string, prio int32, budgets *budgets) (candidates, protected []placement.Victim) {
	infos, err := g.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return nil, nil
	}
	seen := map[string]bool{key: true}
	var all []placement.Victim
	for _, ni := range infos {
		for _, pi := range ni.GetPods() {
			p := pi.GetPod()
			if p.DeletionTimestamp != nil {
				continue
			}
			gk := placement.GroupKey(p)
			if gk == "" {
				if podPriority(p) < prio {
					all = append(all, placement.Victim{Key: p.Namespace + "/" + p.Name, Priority: podPriority(p), Pods: []*corev1.Pod{p}})
				}
				continue
			}
			if seen[gk] {
				continue
			}
			seen[gk] = true
			pods := g.groupPods(gk)
			terminating := false
			for _, q := range pods {
				terminating = terminating || q.DeletionTimestamp != nil
			}
			if terminating || len(pods) == 0 {
				continue
			}
			vpg, _ := g.groups.GetKey(gk)
			if vp := g.groupPriority(vpg, pods); vp < prio {
				all = append(all, placement.Victim{Key: gk, Group: true, Priority: vp, Pods: pods})
			}
		}
	}
	for _, v := range all {
		if why := budgets.exceeded([]placement.Victim{v}); why != "" {
			v.Protection = why
			protected = append(protected, v)
		} else {
			candidates = append(candidates, v)
		}
	}
	return candidates, protected
}

// budgets answers, for one preemption, which PodDisruptionBudget evicting a set of victims
// would break. Each namespace's budgets, their selectors and what they allow are read once,
// however many sets of victims the preemption checks.
type budgets struct {
	g    *Gang
	byNS map[string][]budget
}

type budget struct {
	pdb     *policyv1.PodDisruptionBudget
	sel     labels.Selector
	allowed int32
}

func (g *Gang) budgets() *budgets { return &budgets{g: g, byNS: map[string][]budget{}} }

// of returns the namespace's budgets, by name.
func (b *budgets) of(ns string) []budget {
	if l, ok := b.byNS[ns]; ok {
		return l
	}
	var l []budget
	if b.g.pdbLister != nil {
		pdbs, _ := b.g.pdbLister.PodDisruptionBudgets(ns).List(labels.Everything())
		sort.Slice(pdbs, func(i, j int) bool { return pdbs[i].Name < pdbs[j].Name })
		for _, pdb := range pdbs {
			if pdb.Labels[disruption.WholeGroupsLabel] == "true" {
				// berth-controller's budget for a ModelServing: it refuses evictions of single
				// pods, not the preemption of a group as a whole.
				continue
			}
			// policy/v1: a nil selector matches no pod, an empty one every pod.
			if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err == nil {
				l = append(l, budget{pdb: pdb, sel: sel, allowed: b.g.disruptionsAllowed(pdb, sel)})
			}
		}
	}
	b.byNS[ns] = l
	return l
}

// exceeded says which budget evicting the victims together would break, or "". A budget
// allows what its status says when the disruption controller has seen its current spec,
// else what its spec allows over the matching pods that are ready now (the disruption
// controller's own count).
func (b *budgets) exceeded(victims []placement.Victim) string {
	byNS := map[string][]*corev1.Pod{}
	for i := range victims {
		for _, p := range victims[i].Pods {
			if p.Spec.NodeName != "" {
				byNS[p.Namespace] = append(byNS[p.Namespace], p)
			}
		}
	}
	for _, ns := range placement.SortedKeys(byNS) {
		for _, bu := range b.of(ns) {
			evicting := 0
			for _, p := range byNS[ns] {
				if bu.sel.Matches(labels.Set(p.Labels)) {
					evicting++
				}
			}
			if evicting > 0 && int32(evicting) > bu.allowed {
				return fmt.Sprintf("PodDisruptionBudget %s/%s allows %d disruptions, evicting %s would disrupt %d",
					ns, bu.pdb.Name, max(bu.allowed, 0), placement.DescribeVictims(victims, 4), evicting)
			}
		}
	}
	return ""
}

// disruptionsAllowed is how many of the budget's pods may be disrupted now.
func (g *Gang) disruptionsAllowed(pdb *policyv1.PodDisruptionBudget, sel labels.Selector) int32 {
	if pdb.Generation > 0 && pdb.Status.ObservedGeneration == pdb.Generation {
		return pdb.Status.DisruptionsAllowed
	}
	pods, err := g.podLister.Pods(pdb.Namespace).List(sel)
	if err != nil {
		return 0
	}
	var expected, healthy int32
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		expected++
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				healthy++
			}
		}
	}
	switch {
	case pdb.Spec.MaxUnavailable != nil:
		maxUnavailable, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MaxUnavailable, int(expected), true)
		if err != nil {
			return 0
		}
		return int32(maxUnavailable) - (expected - healthy)
	case pdb.Spec.MinAvailable != nil:
		minAvailable, err := intstr.GetScaledValueFromIntOrPercent(pdb.Spec.MinAvailable, int(expected), true)
		if err != nil {
			return 0
		}
		return healthy - int32(minAvailable)
	}
	return expected
}

// evict removes every pod of every victim: each is marked with the DisruptionTarget
// condition kube-scheduler's own preemption sets, then deleted with its grace period.
func (g *Gang) evict(ctx context.Context, preemptor string, prio int32, victims []placement.Victim) {
	logger := klog.FromContext(ctx).WithValues("preemptor", preemptor)
	client := g.handle.ClientSet()
	for i := range victims {
		v := &victims[i]
		why := fmt.Sprintf("preempted by gang %s (priority %d > %d)", preemptor, prio, v.Priority)
		if v.Group {
			if vpg, err := g.groups.GetKey(v.Key); err == nil {
				g.status.preempted(vpg, fmt.Sprintf("all %d pods evicted: %s", len(v.Pods), why))
			}
		}
		for _, p := range v.Pods {
			if err := g.markDisruptionTarget(ctx, p, why); err != nil && !apierrors.IsNotFound(err) {
				logger.V(2).Info("Marking a victim failed; deleting it anyway", "pod", klog.KObj(p), "err", err)
			}
			uid := p.UID
			err := client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				logger.Error(err, "Evicting a victim failed", "pod", klog.KObj(p))
				continue
			}
			if rec := g.handle.EventRecorder(); rec != nil {
				rec.Eventf(p, nil, corev1.EventTypeNormal, reasonPreempted, "Preempting", "Preempted: %s", why)
			}
		}
	}
}

// markDisruptionTarget sets the pod's DisruptionTarget condition, so its owner and users
// see why it went.
func (g *Gang) markDisruptionTarget(ctx context.Context, p *corev1.Pod, msg string) error {
	patch, err := json.Marshal(map[string]any{
		"status": map[string]any{
			"conditions": []corev1.PodCondition{{
				Type:               corev1.DisruptionTarget,
				Status:             corev1.ConditionTrue,
				Reason:             corev1.PodReasonPreemptionByScheduler,
				Message:            "berth-scheduler: " + msg,
				LastTransitionTime: metav1.Now(),
			}},
		},
	})
	if err != nil {
		return err
	}
	_, err = g.handle.ClientSet().CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// victimsLeaving counts the pods preempted for the group that still exist, or are gone
// with their DRA devices not yet freed (for every group when key is ""), forgetting those
// that left.
func (g *Gang) victimsLeaving(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	stillAllocated := g.model.AllocatedCheck()
	for uid, v := range g.victimOf {
		if key != "" && v.preemptor != key {
			continue
		}
		if p, err := g.podLister.Pods(v.namespace).Get(v.name); err == nil && p.UID == uid {
			n++
		} else if stillAllocated(v.devices) {
			n++ // gone, its devices not freed yet
		} else {
			delete(g.victimOf, uid)
			g.stateLocked(v.preemptor).roomArrived = true
		}
	}
	return n
}

// takeRoomArrived reports, once, that the group's last victims have just left.
func (g *Gang) takeRoomArrived(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	st, ok := g.states[key]
	if !ok || !st.roomArrived {
		return false
	}
	st.roomArrived = false
	return true
}

// victimGone re-queues the preemptor of a victim pod that just left, or, when the victim's
// DRA devices are still allocated, waits for victimDevicesFreed to.
func (g *Gang) victimGone(pod *corev1.Pod) {
	g.mu.Lock()
	v, ok := g.victimOf[pod.UID]
	if ok && g.model.AllocatedCheck()(v.devices) {
		v.gone = true
		g.victimOf[pod.UID] = v
		ok = false
	} else if ok {
		delete(g.victimOf, pod.UID)
		g.stateLocked(v.preemptor).roomArrived = true
	}
	g.mu.Unlock()
	if ok {
		g.activate(v.preemptor)
	}
}

// victimDevicesFreed re-queues the preemptors of victims that are gone and whose devices
// are now free.
func (g *Gang) victimDevicesFreed() {
	g.mu.Lock()
	var ready []string
	stillAllocated := g.model.AllocatedCheck()
	for uid, v := range g.victimOf {
		if v.gone && !stillAllocated(v.devices) { // only gone victims list devices
			delete(g.victimOf, uid)
			g.stateLocked(v.preemptor).roomArrived = true
			ready = append(ready, v.preemptor)
		}
	}
	g.mu.Unlock()
	for _, key := range ready {
		g.activate(key)
	}
}
