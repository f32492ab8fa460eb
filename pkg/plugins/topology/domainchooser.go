package topology

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/plugins/placement"
	"github.com/berth-sh/berth/pkg/plugins/podgroups"
)

// This file is the plugin's side of the placement model's domain choice: ChooseDomain
// gathers what the search needs (the fabric, the group's rules, the domains an earlier
// attempt failed in, the spread zones), runs the search (domainsearch.go) and announces
// the domain it chose.

// ChooseDomain is the placement model's domain choice: the network domain (and spread
// domain) that holds the group's units, with each pod's node in it.
func (t *Topology) ChooseDomain(r *placement.Request) (*placement.Plan, bool, string, error) {
	pod, pg := r.Pod, r.PodGroup
	if asksForNothing(pod, pg) {
		return nil, false, "", nil
	}
	f, err := t.currentFabric()
	if err != nil {
		return nil, true, "", err
	}
	rule, err := t.rules(pod, pg, f)
	if err != nil {
		if !r.Reserving {
			groupsRefused.WithLabelValues("invalid").Inc()
		}
		return nil, true, err.Error(), nil
	}
	if rule.empty() {
		return nil, false, "", nil
	}
	key := placement.GroupKey(pod)
	placedNodes := make([]string, 0, len(r.Placed))
	for _, p := range r.Placed {
		placedNodes = append(placedNodes, p.Node)
	}
	avoid := sets.New[string]()
	now := time.Now()
	t.mu.Lock()
	// Read without creating: a count of would-be groups (r.Base) plans groups that never
	// get pods, whose state nothing would forget.
	if st := t.groups[key]; st != nil {
		for d, until := range st.avoid {
			if now.Before(until) {
				avoid.Insert(d)
			} else {
				delete(st.avoid, d)
			}
		}
	}
	t.mu.Unlock()

	c := &choice{fabric: f, avoid: avoid, placed: placedNodes, pool: r.Pool, base: r.Base}
	if rule.group != nil {
		c.group = *rule.group
	}
	for _, u := range r.Units {
		tp := unitToPlace{key: u.Key, name: unitName(u), pods: u.Pods, reqs: u.Requests, along: u.Along}
		if u.Rule >= 0 {
			tp.sub = rule.subs[u.Rule]
		}
		c.units = append(c.units, tp)
	}
	if len(rule.spread) > 0 {
		nodes, err := t.nodeLister.List(labels.Everything())
		if err != nil {
			return nil, true, "", err
		}
		zones, counts := spreadZones(rule.spread, pod.Labels[workloadv1alpha1.GroupNameLabel], nodes, t.servingPlaced(pod))
		hardSpread := false
		for _, s := range rule.spread {
			hardSpread = hardSpread || s.hard
		}
		if !hardSpread {
			zones = append(zones, nil) // ScheduleAnyway: anywhere, as a last resort
		}
		if len(zones) == 0 {
			if !r.Reserving {
				groupsRefused.WithLabelValues("spread").Inc()
			}
			return nil, true, fmt.Sprintf("no %s domain may take another group within maxSkew %d (groups per domain: %s)",
				rule.spread[0].key, rule.spread[0].maxSkew, describeCounts(counts)), nil
		}
		c.zones = zones
	}
	p, msg, reason := chooseDomain(c)
	if r.Reserving {
		return p, true, msg, nil
	}
	if p == nil {
		groupsRefused.WithLabelValues(reason).Inc()
		return nil, true, msg, nil
	}
	where := "anywhere"
	if p.Domain != nil {
		where = p.Domain.Name
	}
	t.mu.Lock()
	st := t.stateLocked(key)
	announce := len(r.Placed) == 0 && st.announced != where
	if announce {
		st.announced = where
	}
	t.mu.Unlock()
	subs := subgroupChoices(f, c.units, p)
	if announce {
		// One event per new choice, not per retry: a decision the user can see on the PodGroup.
		tierName, note := "anywhere", "no domain can hold the group; it goes wherever it fits"
		if rule.group == nil && len(rule.spread) == 0 {
			note = "no domain holds the whole group, and it asks for none"
		}
		if p.Domain != nil {
			tierName = f.TierName(p.Domain.Tier)
			if p.Domain.Tier == 0 {
				tierName = "spread domain"
			}
			note = fmt.Sprintf("%s %s holds the group's %d pods", tierName, p.Domain.Name, countPods(c.units))
		}
		domainsChosen.WithLabelValues(tierName).Inc()
		for _, ch := range subs {
			countSubgroupDomain(ch)
		}
		t.handle.EventRecorder().Eventf(podGroupRef(pg), nil, corev1.EventTypeNormal, "DomainChosen", "Scheduling", note+describeSubgroups(subs))
		klog.Background().V(4).Info("Chose a domain for the group", "plugin", Name, "group", key, "domain", where, "subgroups", len(subs))
	} else if len(r.Placed) > 0 {
		// A replica added to a placed group (scale-up, recovery) gets its domain here; the
		// group's event was sent with its first choice.
		for _, ch := range subs {
			if ch.fresh {
				klog.Background().V(4).Info("Chose a domain for a role replica of a placed group", "plugin", Name, "group", key, "replica", ch.unit, "domain", ch.domain, "inTier", ch.inTier)
			}
		}
	}
	return p, true, "", nil
}

// unitName names a unit for messages and events: its role replica (the pods' task), else
// its first pod.
func unitName(u placement.PendingUnit) string {
	if task := placement.Task(u.Pods[0]); task != "" {
		return task
	}
	return u.Pods[0].Name
}

func podGroupRef(pg *volcanov1beta1.PodGroup) *corev1.ObjectReference { return podgroups.ObjectRef(pg) }

// servingPlaced returns every bound or held pod of the pod's ModelServing.
func (t *Topology) servingPlaced(pod *corev1.Pod) []placement.PlacedPod {
	ms := pod.Labels[workloadv1alpha1.ModelServingNameLabel]
	objs, _ := t.pods.ByIndex(podsByServingIdx, pod.Namespace+"/"+ms)
	var out []placement.PlacedPod
	seen := sets.New[types.UID]()
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
			out = append(out, placement.PlacedPod{Pod: p, Node: p.Spec.NodeName})
			seen.Insert(p.UID)
		}
	}
	for _, h := range t.model.Held("") {
		if !seen.Has(h.Pod.UID) && h.Pod.Namespace == pod.Namespace && h.Pod.Labels[workloadv1alpha1.ModelServingNameLabel] == ms {
			out = append(out, h)
		}
	}
	return out
}
