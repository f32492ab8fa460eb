package topology

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// PreScore skips scoring for pods the plugin has nothing to say about.
func (t *Topology) PreScore(_ context.Context, state fwk.CycleState, _ *corev1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if _, err := readCycleState(state); err != nil {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score is 100 inside the pod's target domain and falls with every tier a node is further
// away, so soft-mode pods land as close as the free capacity allows.
func (t *Topology) Score(_ context.Context, state fwk.CycleState, _ *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	cs, err := readCycleState(state)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	node := ni.Node().Name
	tgt := cs.target
	if tgt.Nodes.Has(node) {
		return fwk.MaxNodeScore, nil
	}
	if tgt.Tier == 0 {
		return 0, nil
	}
	top := cs.fabric.Top()
	for _, tier := range cs.fabric.Tiers {
		if tier <= tgt.Tier {
			continue
		}
		if d := cs.fabric.DomainOf(cs.anchor, tier); d != nil && d == cs.fabric.DomainOf(node, tier) {
			return fwk.MaxNodeScore * int64(top+1-tier) / int64(top+1-tgt.Tier+1), nil
		}
	}
	return 0, nil
}

// ScoreExtensions is not needed: scores are already in range.
func (t *Topology) ScoreExtensions() fwk.ScoreExtensions { return nil }
