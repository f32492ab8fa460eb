package accelerator

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// PreFilter parses the pod's accelerator request and annotations once per cycle. A pod that
// requests no accelerator and states nothing is skipped, so Filter never runs for it: most
// pods in a cluster (routers, CPU sidecars) pay one scan of their containers' requests.
func (pl *Accelerator) PreFilter(_ context.Context, state fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if pl.acc.requested(pod) == nil && !hasAcceleratorAnnotation(pod) {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	req, err := pl.acc.parse(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	if req.res == nil && !req.constrained() {
		return nil, fwk.NewStatus(fwk.Skip) // e.g. a zero request and empty annotations
	}
	state.Write(preFilterStateKey, &requirementState{req: req})
	return nil, nil
}

func hasAcceleratorAnnotation(pod *corev1.Pod) bool {
	if len(pod.Annotations) == 0 {
		return false
	}
	_, p := pod.Annotations[ProductsAnnotation]
	_, f := pod.Annotations[FamiliesAnnotation]
	_, m := pod.Annotations[MinMemoryAnnotation]
	return p || f || m
}

// PreFilterExtensions is nil: Filter reads free devices from the NodeInfo it is given,
// which already reflects pods the framework adds or removes while evaluating preemption.
func (pl *Accelerator) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter admits a node that offers the pod's accelerator with enough free devices and whose
// labels satisfy the pod's annotations. Label mismatches cannot be fixed by preempting
// pods, so they are UnschedulableAndUnresolvable; too few free devices is Unschedulable.
func (pl *Accelerator) Filter(_ context.Context, state fwk.CycleState, _ *corev1.Pod, node fwk.NodeInfo) *fwk.Status {
	req, err := readRequirement(state)
	if err != nil {
		return fwk.AsStatus(err)
	}
	res := pl.deviceOnNode(req, node)
	if req.res != nil {
		free, allocatable := freeDevices(node, req.res.Name)
		if allocatable <= 0 {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("node has no %s", req.res.Name))
		}
		if ok, why := matchNode(req, res, node.Node().Labels); !ok {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, why)
		}
		if allocatable < req.count {
			return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("node has %d %s in all, pod needs %d", allocatable, req.res.Name, req.count))
		}
		if free < req.count {
			return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("node has %d free %s, pod needs %d", max(free, 0), req.res.Name, req.count))
		}
		return nil
	}
	if ok, why := matchNode(req, res, node.Node().Labels); !ok {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, why)
	}
	return nil
}
