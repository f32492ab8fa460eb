package accelerator

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"
)

// EventsToRegister lists what can make a pod this plugin rejected schedulable, each with a
// hint so a pod is retried only for an event that could change the answer.
func (pl *Accelerator) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		// Devices were added (a node joined, a device plugin registered) or a labeller
		// wrote product, family or memory labels.
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAllocatable | fwk.UpdateNodeLabel}, QueueingHintFn: pl.isSchedulableAfterNodeChange},
		// Devices were freed.
		{Event: fwk.ClusterEvent{Resource: fwk.AssignedPod, ActionType: fwk.Delete}, QueueingHintFn: pl.isSchedulableAfterPodDelete},
		// The user fixed or relaxed the pod's annotations (there is no finer event for
		// annotations, so the hint compares them).
		{Event: fwk.ClusterEvent{Resource: fwk.TargetPod, ActionType: fwk.Update}, QueueingHintFn: isSchedulableAfterOwnUpdate},
	}, nil
}

// isSchedulableAfterNodeChange queues the pod when the node now offers enough of its
// accelerator in all and matches its labels, and did not before (or offers more now).
func (pl *Accelerator) isSchedulableAfterNodeChange(logger klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	oldNode, newNode, err := schedutil.As[*corev1.Node](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	req, err := pl.acc.parse(pod)
	if err != nil {
		return fwk.QueueSkip, nil // only an update of the pod itself can help
	}
	nowFits, nowDevices := pl.couldFit(&req, newNode)
	if !nowFits {
		logger.V(5).Info("node change does not make the pod fit", "pod", klog.KObj(pod), "node", klog.KObj(newNode))
		return fwk.QueueSkip, nil
	}
	if oldNode == nil {
		return fwk.Queue, nil
	}
	if fitted, devices := pl.couldFit(&req, oldNode); !fitted || devices < nowDevices {
		return fwk.Queue, nil
	}
	return fwk.QueueSkip, nil
}

// couldFit ignores what other pods use: whether the node, empty, would take the pod, and
// how many of the pod's devices it has.
func (pl *Accelerator) couldFit(req *requirement, node *corev1.Node) (bool, int64) {
	res := req.res
	if res == nil {
		res = pl.acc.firstOffered(func(name corev1.ResourceName) bool {
			q, ok := node.Status.Allocatable[name]
			return ok && q.Sign() > 0
		})
	}
	var devices int64
	if res != nil {
		q := node.Status.Allocatable[res.Name]
		devices = q.Value()
	}
	if req.res != nil && devices < req.count {
		return false, devices
	}
	ok, _ := matchNode(req, res, node.Labels)
	return ok, devices
}

// isSchedulableAfterPodDelete queues the pod when a bound pod that held its kind of
// accelerator goes away. Pods rejected for labels alone never fit by a deletion.
func (pl *Accelerator) isSchedulableAfterPodDelete(_ klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	deleted, _, err := schedutil.As[*corev1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if deleted.Spec.NodeName == "" {
		return fwk.QueueSkip, nil
	}
	want := pl.acc.requested(pod)
	if want == nil {
		return fwk.QueueSkip, nil
	}
	for i := range deleted.Spec.Containers {
		if q, ok := deleted.Spec.Containers[i].Resources.Requests[want.Name]; ok && !q.IsZero() {
			return fwk.Queue, nil
		}
	}
	for i := range deleted.Spec.InitContainers {
		if q, ok := deleted.Spec.InitContainers[i].Resources.Requests[want.Name]; ok && !q.IsZero() {
			return fwk.Queue, nil
		}
	}
	return fwk.QueueSkip, nil
}

// isSchedulableAfterOwnUpdate queues the pod when its accelerator annotations changed.
func isSchedulableAfterOwnUpdate(_ klog.Logger, _ *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	oldPod, newPod, err := schedutil.As[*corev1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	if oldPod == nil || newPod == nil {
		return fwk.Queue, nil
	}
	for _, key := range []string{ProductsAnnotation, FamiliesAnnotation, MinMemoryAnnotation} {
		if oldPod.Annotations[key] != newPod.Annotations[key] {
			return fwk.Queue, nil
		}
	}
	return fwk.QueueSkip, nil
}
