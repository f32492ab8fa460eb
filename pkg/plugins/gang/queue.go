package gang

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/berth-sh/berth/pkg/plugins/placement"
)

// PreEnqueue keeps a group's pods out of the queue until its PodGroup exists and enough of
// its pods exist to meet the minimum; scheduling a partial gang would only hold capacity.
func (g *Gang) PreEnqueue(_ context.Context, pod *corev1.Pod) *fwk.Status {
	key := placement.GroupKey(pod)
	if key == "" {
		return nil
	}
	pg, req, err := g.podGroup(pod)
	if err != nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("waiting for PodGroup %s: %v", key, err))
	}
	if pg.DeletionTimestamp != nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("PodGroup %s is being deleted", key))
	}
	if v := req.Enough(g.groupPods(key)); !v.OK {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("gang %s is incomplete: %s", key, v.Reason))
	}
	return nil
}

// Less orders the queue by priority (a group's is its PodGroup's priorityClassName when it
// names one), then by group (oldest group first), then by pod, so the pods of one gang
// leave the queue back to back instead of interleaving with another, and older groups are
// tried before younger ones.
func (g *Gang) Less(a, b fwk.QueuedEntityInfo) bool {
	ta, ka, pa, pra := g.queueTime(a)
	tb, kb, pb, prb := g.queueTime(b)
	if pra != prb {
		return pra > prb
	}
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	if ka != kb {
		return ka < kb
	}
	if ka != "" && pa != nil && pb != nil {
		// Within a gang, a role replica's pods leave together and lower replicas (those
		// the minimum counts first) go first, so an assembly is not spread over replicas.
		return placement.QueueLess(pa, pb)
	}
	return a.GetTimestamp().Before(b.GetTimestamp())
}

type podInfoGetter interface{ GetPodInfo() fwk.PodInfo }

// queueTime is the group's creation time for gang pods and the queue time for others,
// with the group key, the pod and the priority it is queued at.
func (g *Gang) queueTime(e fwk.QueuedEntityInfo) (time.Time, string, *corev1.Pod, int32) {
	pi, ok := e.(podInfoGetter)
	if !ok || pi.GetPodInfo() == nil {
		return e.GetTimestamp(), "", nil, e.GetPriority()
	}
	pod := pi.GetPodInfo().GetPod()
	if key := placement.GroupKey(pod); key != "" {
		if pg, err := g.groups.Get(pod); err == nil {
			return pg.CreationTimestamp.Time, key, pod, g.groupPriority(pg, []*corev1.Pod{pod})
		}
	}
	return e.GetTimestamp(), "", pod, e.GetPriority()
}
