package placement

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// This file plans groups that do not exist yet, off the scheduling path: pkg/capacity
// counts how many more ServingGroups of a ModelServing (or role replicas of its groups)
// the cluster can place, with the same domain choice and DRA allocator the scheduler
// plans real groups with.

// PoolOver is a pool over fixed nodes with the profile's accelerator rules and DRA view:
// capacity counted off the scheduling path, where the cycle's snapshot is not to be read.
func (m *Model) PoolOver(src NodeSource) *Pool {
	p := NewPool(src, m.Accelerators(), nil)
	p.dra = m.dra
	return p
}

// Chooser is the profile's domain choice (the topology plugin), or nil.
func (m *Model) Chooser() DomainChooser {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.chooser
}

// PlanOn places pods, every one of them, on top of sim as the scheduler would plan them
// now: as the units of pg's gang rules (a role replica with its workers is placed whole),
// in the network domain pg's topology asks for through chooser (nil: anywhere), around
// placed (the group's pods already on nodes: its domain must hold them). It returns the
// simulation with the pods placed and where each went, or nil and why not. sim is not
// changed.
//
// Every unit is needed, not only those of the gang's minimum: the controller creates them
// all. A unit that fits nowhere refuses the whole planning.
func PlanOn(sim *Simulation, chooser DomainChooser, pg *volcanov1beta1.PodGroup, pods []*corev1.Pod, placed []PlacedPod) (*Simulation, []PlacedPod, string, error) {
	if len(pods) == 0 {
		return sim, nil, "", nil
	}
	req, err := NewRequirement(pg)
	if err != nil {
		return nil, nil, "", err
	}
	all := pods
	for _, p := range placed {
		all = append(all[:len(all):len(all)], p.Pod)
	}
	units := pendingUnits(req, all, placed, false)
	for i := range units {
		units[i].Required = true
	}
	r := &Request{Pod: pods[0], PodGroup: pg, Units: units, Placed: placed, Pool: sim.Pool(), Reserving: true, Base: sim}
	var p *Plan
	if chooser != nil {
		var applies bool
		var msg string
		if p, applies, msg, err = chooser.ChooseDomain(r); err != nil {
			return nil, nil, "", err
		}
		if applies && p == nil {
			return nil, nil, msg, nil
		}
		if !applies {
			p = nil
		}
	}
	if p == nil || p.Nodes == nil {
		// Anywhere (or a domain choice that leaves the nodes to the pool): every unit
		// where it fits, whole.
		anywhere, miss, _ := PlaceAnywhere(r, nil)
		if miss != nil {
			return nil, nil, fmt.Sprintf("%d pods of role %s do not fit", len(miss.Pods), miss.Role), nil
		}
		p = anywhere
	}
	// Apply the plan to a copy of sim, pod by pod in the queue's order, so the devices each
	// pod's claims get are taken as the DynamicResources plugin would allocate them.
	out := sim.Clone()
	went := make([]PlacedPod, 0, len(pods))
	for _, u := range units {
		for j, pod := range u.Pods {
			node, ok := p.Nodes[pod.UID]
			if !ok {
				return nil, nil, fmt.Sprintf("pod %s has no node in the plan", pod.Name), nil
			}
			if !out.placeOn(pod, u.Requests[j], node) {
				return nil, nil, fmt.Sprintf("pod %s does not fit node %s after the pods before it", pod.Name, node), nil
			}
			went = append(went, PlacedPod{Pod: pod, Node: node})
		}
	}
	return out, went, "", nil
}

// placeOn places the pod on node, its claims' devices included, when it fits.
func (s *Simulation) placeOn(pod *corev1.Pod, req Resources, node string) bool {
	_, got, ok := s.leftover(pod, s.pool.eligibleFor(pod), req, node)
	if !ok {
		return false
	}
	s.take(node, req)
	s.takeDevices(pod, node, got)
	return true
}
