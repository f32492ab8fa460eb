package placement

import (
	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// Accelerators are the profile's accelerator rules, as the accelerator plugin applies them:
// whether a node's devices satisfy what a pod states about them, and what one device of a
// node costs. The accelerator plugin hands its rules to the profile's Model when the
// profile is built.
type Accelerators interface {
	// Match reports whether the node's accelerator labels satisfy the pod's requirements.
	Match(pod *corev1.Pod, node *corev1.Node) (bool, string)
	// Cost is the relative cost of one device of the node, in thousandths; 0 when costs
	// are not configured or the node has no accelerator.
	Cost(node *corev1.Node) int64
}

// anyAccelerator is what a profile without the accelerator plugin uses: every node
// matches, every class costs the same.
type anyAccelerator struct{}

func (anyAccelerator) Match(*corev1.Pod, *corev1.Node) (bool, string) { return true, "" }
func (anyAccelerator) Cost(*corev1.Node) int64                        { return 0 }

// Eligible judges, as the scheduler's Filter plugins would without running them, whether
// the pod may run on the node at all, whatever is free there: required node affinity and
// node selector, NoSchedule and NoExecute taints, and the accelerator requirements.
func Eligible(pod *corev1.Pod, node *corev1.Node, acc Accelerators) bool {
	if node == nil || node.Spec.Unschedulable {
		return false
	}
	if ok, _ := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); !ok {
		return false
	}
	if _, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, false); untolerated {
		return false
	}
	if acc == nil {
		return true
	}
	ok, _ := acc.Match(pod, node)
	return ok
}

// shapeOf names the pods that share one eligibility: the pods of one role of one
// ModelServing revision are built from the same template (entry pods from one, workers from
// another), so their node affinity, tolerations and accelerator annotations are the same,
// and eligibility is computed once per role rather than once per pod. Other pods are their
// own shape.
func shapeOf(pod *corev1.Pod) string {
	ms, role := pod.Labels[workloadv1alpha1.ModelServingNameLabel], pod.Labels[workloadv1alpha1.RoleLabel]
	if ms == "" || role == "" {
		return "pod/" + string(pod.UID)
	}
	return "ms/" + pod.Namespace + "/" + ms + "/" + role + "/" + pod.Labels[workloadv1alpha1.RevisionLabel] + "/" + pod.Labels[workloadv1alpha1.EntryLabel]
}

// Narrowable reports whether the pod can be sent straight to its planned node: the plan
// judged everything the pod's Filter plugins check, which is so unless the pod has required
// inter-pod affinity or anti-affinity, or host ports. Such pods keep their plan's capacity
// but take the scheduler's full pass.
func Narrowable(pod *corev1.Pod) bool {
	if a := pod.Spec.Affinity; a != nil {
		if a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			return false
		}
		if a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			return false
		}
	}
	for i := range pod.Spec.Containers {
		for _, port := range pod.Spec.Containers[i].Ports {
			if port.HostPort > 0 {
				return false
			}
		}
	}
	return true
}
