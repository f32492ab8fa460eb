package topology

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/fabric"
)

// This file resolves what a group asks for: its PodGroup's network topology (and each
// subgroup's) as constraints on the fabric's tiers, and its ModelServing's spread rules.

// groupRule is what a group asks for: its network constraint, its subgroups' constraints
// and its ModelServing's spread rules.
type groupRule struct {
	group  *constraint
	subs   map[int]*constraint // by subGroupPolicy index
	spread []spreadRule
}

func (r *groupRule) empty() bool { return r.group == nil && len(r.subs) == 0 && len(r.spread) == 0 }

// resolve turns a NetworkTopologySpec into a constraint on the fabric's tiers.
func resolve(nt *volcanov1beta1.NetworkTopologySpec, f *fabric.Fabric, field string) (*constraint, error) {
	if nt == nil {
		return nil, nil
	}
	c := &constraint{hard: nt.Mode != volcanov1beta1.SoftNetworkTopologyMode, limit: 1}
	switch {
	case nt.HighestTierName != "":
		tier, ok := f.TierNames[nt.HighestTierName]
		if !ok {
			tier, ok = f.TierKeys[nt.HighestTierName]
		}
		if !ok {
			if !c.hard {
				return &constraint{}, nil // soft: nothing to honour
			}
			if label, absent := absentTier(f, nt.HighestTierName); absent {
				// Say why, or the user hunts for a typo in a tier that is configured.
				return nil, fmt.Errorf("%s.highestTierName %q is not a tier of the network: no node carries its label %s (%s)", field, nt.HighestTierName, label, describeTiers(f))
			}
			return nil, fmt.Errorf("%s.highestTierName %q is not a tier of the network (%s)", field, nt.HighestTierName, describeTiers(f))
		}
		c.limit = tier
	case nt.HighestTierAllowed != nil:
		c.limit = *nt.HighestTierAllowed
	}
	if c.hard && len(f.Tiers) == 0 {
		return nil, fmt.Errorf("%s asks for a hard network topology, but no network tiers are known: create HyperNodes or set the plugin's nodeLabelTiers", field)
	}
	return c, nil
}

// absentTier finds an optional label tier left out for want of labelled nodes, by its name
// or its label, and returns its label.
func absentTier(f *fabric.Fabric, name string) (string, bool) {
	if label, ok := f.Absent[name]; ok {
		return label, true
	}
	for _, label := range f.Absent {
		if label == name {
			return label, true
		}
	}
	return "", false
}

func describeTiers(f *fabric.Fabric) string {
	if len(f.Tiers) == 0 {
		return "no tiers known"
	}
	out := f.Source + ":"
	for i, tier := range f.Tiers {
		if i > 0 {
			out += ","
		}
		out += fmt.Sprintf(" %d=%s", tier, f.TierName(tier))
	}
	return out
}

// rules reads the group's constraints from its PodGroup and ModelServing.
func (t *Topology) rules(pod *corev1.Pod, pg *volcanov1beta1.PodGroup, f *fabric.Fabric) (*groupRule, error) {
	r := &groupRule{subs: map[int]*constraint{}}
	var err error
	if r.group, err = resolve(pg.Spec.NetworkTopology, f, "PodGroup spec.networkTopology"); err != nil {
		return nil, err
	}
	for i := range pg.Spec.SubGroupPolicy {
		c, err := resolve(pg.Spec.SubGroupPolicy[i].NetworkTopology, f, fmt.Sprintf("PodGroup spec.subGroupPolicy[%d].networkTopology", i))
		if err != nil {
			return nil, err
		}
		if c != nil {
			r.subs[i] = c
		}
	}
	if msName := pod.Labels[workloadv1alpha1.ModelServingNameLabel]; msName != "" && pod.Labels[workloadv1alpha1.GroupNameLabel] != "" {
		obj, err := t.msLister.ByNamespace(pod.Namespace).Get(msName)
		if u, ok := obj.(*unstructured.Unstructured); err == nil && ok {
			// Only the spread constraints are read: converting a whole ModelServing (two
			// PodSpecs per role) for every pod would cost more than the rest of PreFilter.
			raw, found, _ := unstructured.NestedSlice(u.Object, "spec", "topologySpreadConstraints")
			if found && len(raw) > 0 {
				ms := &workloadv1alpha1.ModelServing{}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{"spec": map[string]any{"topologySpreadConstraints": raw}}, ms); err != nil {
					return nil, fmt.Errorf("ModelServing %s spec.topologySpreadConstraints: %w", msName, err)
				}
				ms.Name, ms.Namespace = u.GetName(), u.GetNamespace()
				if r.spread, err = spreadRules(ms); err != nil {
					return nil, err
				}
			}
		}
	}
	return r, nil
}

// asksForNothing is the cheap exit for gangs without a network topology that are not
// ModelServing groups (which may have spread constraints).
func asksForNothing(pod *corev1.Pod, pg *volcanov1beta1.PodGroup) bool {
	return pg.Spec.NetworkTopology == nil && !hasSubTopology(pg) && pod.Labels[workloadv1alpha1.GroupNameLabel] == ""
}

func hasSubTopology(pg *volcanov1beta1.PodGroup) bool {
	for _, sg := range pg.Spec.SubGroupPolicy {
		if sg.NetworkTopology != nil {
			return true
		}
	}
	return false
}
