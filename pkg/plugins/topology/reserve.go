package topology

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/berth-sh/berth/pkg/plugins/placement"
)

// Reserve tells the placement model where the group's pod went (idempotent with the gang
// plugin, so a profile without it still counts held pods).
func (t *Topology) Reserve(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, nodeName string) *fwk.Status {
	if placement.GroupKey(pod) != "" {
		t.model.Reserve(pod, nodeName)
	}
	return nil
}

// Unreserve forgets the pod. When the group's whole attempt is given back, the domain it
// was meant for goes to the back of the line for a while, so the next attempt tries another.
func (t *Topology) Unreserve(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, _ string) {
	key := placement.GroupKey(pod)
	if key == "" {
		return
	}
	t.model.Unreserve(pod)
	if len(t.model.Held(key)) > 0 {
		return
	}
	for _, q := range t.model.GroupPods(key) {
		if q.Spec.NodeName != "" {
			return
		}
	}
	p := t.model.Plan(key)
	if p != nil && !p.Reservation && p.Domain != nil && p.Domain.Tier > 0 && t.args.retryOtherDomain() > 0 {
		t.mu.Lock()
		t.stateLocked(key).avoid[p.Domain.Name] = time.Now().Add(t.args.retryOtherDomain())
		t.mu.Unlock()
	}
	t.model.Drop(key)
}
