package topology

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/berth-sh/berth/pkg/plugins/accelerator"
)

// What the simulated placement needs to know about a node, judged as the scheduler's Filter
// plugins would, without running them: free capacity, node affinity, taints and the
// accelerator requirements.

func labelsEverything() labels.Selector { return labels.Everything() }

// freeOf is a node's allocatable minus what is requested on it (pods held in Permit included).
func freeOf(ni fwk.NodeInfo) map[corev1.ResourceName]int64 {
	node := ni.Node()
	if node == nil || node.Spec.Unschedulable {
		return nil
	}
	alloc, used := ni.GetAllocatable(), ni.GetRequested()
	free := map[corev1.ResourceName]int64{
		corev1.ResourceCPU:    alloc.GetMilliCPU() - used.GetMilliCPU(),
		corev1.ResourceMemory: alloc.GetMemory() - used.GetMemory(),
		corev1.ResourcePods:   int64(alloc.GetAllowedPodNumber() - len(ni.GetPods())),
	}
	usedScalar := used.GetScalarResources()
	for name, v := range alloc.GetScalarResources() {
		free[name] = v - usedScalar[name]
	}
	return free
}

// podRequests is the pod's effective request, one pod slot included.
func podRequests(p *corev1.Pod) map[corev1.ResourceName]int64 {
	out := map[corev1.ResourceName]int64{corev1.ResourcePods: 1}
	for name, q := range resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}) {
		if name == corev1.ResourceCPU {
			out[name] = q.MilliValue()
		} else {
			out[name] = q.Value()
		}
	}
	return out
}

// eligible: the pod's required node affinity and selector match, its tolerations cover the
// node's NoSchedule and NoExecute taints, and the node's accelerators meet its requirements.
func eligible(pod *corev1.Pod, node *corev1.Node) bool {
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); !ok {
		return false
	}
	if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false); untolerated {
		return false
	}
	ok, _ := accelerator.Match(pod, node)
	return ok
}
