package placement

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/plugins/podgroups"
)

// podsByGroupIndex indexes the scheduler's pod informer by "<namespace>/<group>".
const podsByGroupIndex = "berth-group"

// JSONConfig is the scheduler's client configuration speaking JSON: kube-scheduler's own
// client speaks protobuf, which Volcano's kinds and CRDs cannot.
func JSONConfig(handle fwk.Handle) *rest.Config {
	cfg := rest.CopyConfig(handle.KubeConfig())
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	return cfg
}

// GroupKey returns the key of a gang pod's group, whichever gang API names it (see
// podgroups.Key: "<namespace>/<PodGroup>" for Volcano's), or "" for a pod without a group.
func GroupKey(pod *corev1.Pod) string { return podgroups.Key(pod) }

// RoleOf is the pod's role: its ModelServing role label, else its task without the replica
// index, else "pods".
func RoleOf(p *corev1.Pod) string {
	if r := p.Labels[workloadv1alpha1.RoleLabel]; r != "" {
		return r
	}
	if t := Task(p); t != "" {
		// Berth tasks are "<role>-<replica>"; other tools may use any name.
		if i := strings.LastIndexByte(t, '-'); i > 0 {
			return t[:i]
		}
		return t
	}
	return "pods"
}

func indexByGroup(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	if key := GroupKey(pod); key != "" {
		return []string{key}, nil
	}
	return nil, nil
}

// EnsureGroupIndex indexes the scheduler's pod informer by group, once, whoever asks first.
func EnsureGroupIndex(informer cache.SharedIndexInformer) error {
	if _, ok := informer.GetIndexer().GetIndexers()[podsByGroupIndex]; ok {
		return nil
	}
	return informer.AddIndexers(cache.Indexers{podsByGroupIndex: indexByGroup})
}

// GroupPods returns the live pods of the group key from an indexer set up by EnsureGroupIndex.
func GroupPods(indexer cache.Indexer, key string) []*corev1.Pod {
	objs, _ := indexer.ByIndex(podsByGroupIndex, key)
	out := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// Unit is what must be placed whole: a subgroup (a role replica with its workers) or a
// single pod.
type Unit struct {
	// Key identifies the unit within its group.
	Key string
	// Rule is the index of the spec.subGroupPolicy entry the unit comes from, or -1.
	Rule int
	// Required is true when the group's minimum needs this unit.
	Required bool
	// Pods are the unit's pods, in the order the queue hands them out.
	Pods []*corev1.Pod
}

// Role is the role of the unit's pods.
func (u *Unit) Role() string { return RoleOf(u.Pods[0]) }

// UnitOf returns the key of the pod's unit and the index of the spec.subGroupPolicy entry
// it comes from (the first that covers the pod), or -1 for a pod that is a unit on its own.
func (r *Requirement) UnitOf(p *corev1.Pod) (key string, rule int) {
	for i := range r.SubGroups {
		if k := r.SubGroups[i].SubGroupOf(p); k != "" {
			return fmt.Sprintf("sg/%d/%s", i, k), i
		}
	}
	return "pod/" + p.Name, -1
}

// Units splits a group's pods into placement units, in the order the gang plugin's queue
// sort hands them out.
func (r *Requirement) Units(pods []*corev1.Pod) []Unit {
	byKey := map[string]*Unit{}
	var order []string
	for _, p := range pods {
		key, rule := r.UnitOf(p)
		u, ok := byKey[key]
		if !ok {
			u = &Unit{Key: key, Rule: rule}
			byKey[key] = u
			order = append(order, key)
		}
		u.Pods = append(u.Pods, p)
		if _, isMin := r.MinTask[Task(p)]; isMin || len(r.MinTask) == 0 {
			u.Required = true
		}
	}
	out := make([]Unit, 0, len(order))
	for _, k := range order {
		u := byKey[k]
		sort.SliceStable(u.Pods, func(i, j int) bool { return QueueLess(u.Pods[i], u.Pods[j]) })
		out = append(out, *u)
	}
	sort.SliceStable(out, func(i, j int) bool { return QueueLess(out[i].Pods[0], out[j].Pods[0]) })
	return out
}

// QueueLess is the order in which the gang plugin's queue sort hands out a group's pods:
// by role replica, then by name, numbers by value.
func QueueLess(a, b *corev1.Pod) bool {
	if c := CompareNatural(Task(a), Task(b)); c != 0 {
		return c < 0
	}
	return CompareNatural(a.Name, b.Name) < 0
}

// CompareNatural orders strings with numbers by value ("x-2" before "x-10").
func CompareNatural(a, b string) int {
	for a != "" && b != "" {
		da, db := leadingDigits(a), leadingDigits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if len(na) != len(nb) {
				return len(na) - len(nb)
			}
			if na != nb {
				return strings.Compare(na, nb)
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func leadingDigits(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}
