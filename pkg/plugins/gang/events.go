package gang

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
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
		// Capacity was freed (a pod deleted, or a held pod given back); for a refused group,
		// only once its backoff is over and only its probe (mayRetry).
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: g.mayRetry},
		// Capacity was added.
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAllocatable | fwk.UpdateNodeTaint | fwk.UpdateNodeLabel}, QueueingHintFn: g.mayRetry},
		// The group was created or its spec changed; not its status, which the plugin itself
		// writes after every refusal (each write would retry every pod of the group).
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

func sameGroupPodGroup(_ klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	u, ok := newObj.(*unstructured.Unstructured)
	if !ok {
		return fwk.Queue, nil
	}
	ref, ok := podgroups.Of(pod)
	if !ok || ref.API != podgroups.Volcano || u.GetNamespace() != ref.Namespace || u.GetName() != ref.Name {
		return fwk.QueueSkip, nil
	}
	if old, ok := oldObj.(*unstructured.Unstructured); ok && specEqual(old, u) {
		return fwk.QueueSkip, nil
	}
	return fwk.Queue, nil
}

// specEqual reports whether two versions of a PodGroup have the same spec, labels and
// annotations (what the plugin reads of it besides status).
func specEqual(a, b *unstructured.Unstructured) bool {
	sa, _, _ := unstructured.NestedFieldNoCopy(a.Object, "spec")
	sb, _, _ := unstructured.NestedFieldNoCopy(b.Object, "spec")
	return equality.Semantic.DeepEqual(sa, sb) &&
		equality.Semantic.DeepEqual(a.GetLabels(), b.GetLabels()) &&
		equality.Semantic.DeepEqual(a.GetAnnotations(), b.GetAnnotations())
}
