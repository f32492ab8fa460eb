// Package podgroups is where berth-scheduler reads gangs, whichever API a user wrote them
// in: Volcano's PodGroup (scheduling.volcano.sh/v1beta1, Berth's own contract), the
// scheduler-plugins coscheduling PodGroup (scheduling.x-k8s.io/v1alpha1) and kube-scheduler's
// native PodGroup (scheduling.k8s.io/v1beta1, the Workload API). Each API is a thin adapter:
// its group is read into the one shape the gang rules know (Volcano's PodGroup spec, the
// richest of the three) and its status is written back in its own shape. The rules
// themselves live in the placement model, once.
//
// Like placement, it is a helper the plugins share, not a plugin.
package podgroups

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	coschedulingv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// API says which gang API a group is written in.
type API int

const (
	// Volcano is scheduling.volcano.sh/v1beta1 PodGroup; pods carry the
	// scheduling.k8s.io/group-name annotation.
	Volcano API = iota
	// Coscheduling is sigs.k8s.io/scheduler-plugins' scheduling.x-k8s.io/v1alpha1 PodGroup;
	// pods carry the scheduling.x-k8s.io/pod-group label.
	Coscheduling
	// Workload is kube-scheduler's native scheduling.k8s.io/v1beta1 PodGroup; pods name it
	// in spec.schedulingGroup.podGroupName.
	Workload
)

// Pod annotations and labels that tie a pod to its gang.
const (
	// VolcanoGroupKey names the pod's Volcano PodGroup (annotation, or label for tools
	// that label instead).
	VolcanoGroupKey = volcanov1beta1.KubeGroupNameAnnotationKey
	// CoschedulingLabel names the pod's scheduler-plugins PodGroup.
	CoschedulingLabel = coschedulingv1alpha1.PodGroupLabel
)

// GroupVersion of each API, as events and object references name it.
func (a API) GroupVersion() string {
	switch a {
	case Coscheduling:
		return coschedulingv1alpha1.SchemeGroupVersion.String()
	case Workload:
		return "scheduling.k8s.io/v1beta1"
	default:
		return volcanov1beta1.SchemeGroupVersion.String()
	}
}

// group is the API group, used to keep keys of different APIs apart.
func (a API) group() string {
	gv := a.GroupVersion()
	return gv[:strings.IndexByte(gv, '/')]
}

func (a API) String() string { return a.GroupVersion() }

// Ref names one group.
type Ref struct {
	API       API
	Namespace string
	Name      string
}

// Key is the group's key in the scheduler: "<namespace>/<name>" for a Volcano PodGroup (the
// contract Berth's controller writes), "<namespace>/<name>@<api group>" for the others, so
// groups of the same name in different APIs never mix.
func (r Ref) Key() string {
	if r.API == Volcano {
		return r.Namespace + "/" + r.Name
	}
	return r.Namespace + "/" + r.Name + "@" + r.API.group()
}

func (r Ref) String() string { return r.Key() }

// Of returns the group a pod belongs to. A pod that names groups in more than one API
// belongs to the first of Volcano, coscheduling, Workload.
func Of(pod *corev1.Pod) (Ref, bool) {
	if name := pod.Annotations[VolcanoGroupKey]; name != "" {
		return Ref{API: Volcano, Namespace: pod.Namespace, Name: name}, true
	}
	if name := pod.Labels[VolcanoGroupKey]; name != "" {
		return Ref{API: Volcano, Namespace: pod.Namespace, Name: name}, true
	}
	if name := pod.Labels[CoschedulingLabel]; name != "" {
		return Ref{API: Coscheduling, Namespace: pod.Namespace, Name: name}, true
	}
	if sg := pod.Spec.SchedulingGroup; sg != nil && sg.PodGroupName != nil && *sg.PodGroupName != "" {
		return Ref{API: Workload, Namespace: pod.Namespace, Name: *sg.PodGroupName}, true
	}
	return Ref{}, false
}

// Key is the key of the pod's group, "" for a pod without one.
func Key(pod *corev1.Pod) string {
	if ref, ok := Of(pod); ok {
		return ref.Key()
	}
	return ""
}

// ParseKey is the inverse of Ref.Key.
func ParseKey(key string) (Ref, error) {
	ns, rest, ok := strings.Cut(key, "/")
	if !ok || ns == "" || rest == "" {
		return Ref{}, fmt.Errorf("group key %q is not <namespace>/<name>[@<api group>]", key)
	}
	name, group, hasGroup := strings.Cut(rest, "@")
	if !hasGroup {
		return Ref{API: Volcano, Namespace: ns, Name: name}, nil
	}
	for _, a := range []API{Coscheduling, Workload} {
		if a.group() == group {
			return Ref{API: a, Namespace: ns, Name: name}, nil
		}
	}
	return Ref{}, fmt.Errorf("group key %q names unknown API group %q", key, group)
}
