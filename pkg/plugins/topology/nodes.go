package topology

import (
	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/berth-sh/berth/pkg/plugins/accelerator"
)

// What the simulated placement needs to know about a node, judged as the scheduler's Filter
// plugins would, without running them: free capacity, node affinity, taints and the
// accelerator requirements.

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
