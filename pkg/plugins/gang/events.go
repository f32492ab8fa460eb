package gang

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/berth-sh/berth/pkg/plugins/placement"
	"github.com/berth-sh/berth/pkg/plugins/podgroups"
)

// podGroupResource is how the scheduler names Volcano's PodGroup in cluster events; it
// watches it through its dynamic informer factory.
const podGroupResource fwk.EventResource = "podgroups.v1beta1.scheduling.volcano.sh"

// EventsToRegister lists what can make a rejected gang pod schedulable, with hints so a
// pod is only retried for events about its own group or freed capacity.
func (g *Gang) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		// A sibling appeared: the group may now have enough pods (PreEnqueue).
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Add}, QueueingHintFn: sameGroupPod},
		// Capacity was freed (a pod deleted, or a held pod given back).
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}},
		// Capacity was added.
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAllocatable | fwk.UpdateNodeTaint | fwk.UpdateNodeLabel}},
		// The group was created or its minimum changed.
		{Event: fwk.ClusterEvent{Resource: podGroupResource, ActionType: fwk.Add | fwk.Update}, QueueingHintFn: sameGroupPodGroup},
	}, nil
}

func sameGroupPod(_ klog.Logger, pod *corev1.Pod, _, newObj any) (fwk.QueueingHint, error) {
	added, ok := newObj.(*corev1.Pod)
	if !ok {
		return fwk.Queue, nil
	}
	if key := placement.GroupKey(pod); key != "" && key == placement.GroupKey(added) {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

func sameGroupPodGroup(_ klog.Logger, pod *corev1.Pod, _, newObj any) (fwk.QueueingHint, error) {
	u, ok := newObj.(*unstructured.Unstructured)
	if !ok {
		return fwk.Queue, nil
	}
	if ref, ok := podgroups.Of(pod); ok && ref.API == podgroups.Volcano && u.GetNamespace() == ref.Namespace && u.GetName() == ref.Name {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}
