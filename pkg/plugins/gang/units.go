package gang

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// What the gang plugin knows about a group that the topology plugin needs too: which pods
// belong together and which of them the group's minimum needs. The rules live here, once.

// JSONConfig is the scheduler's client configuration speaking JSON: kube-scheduler's own
// client speaks protobuf, which Volcano's kinds and CRDs cannot.
func JSONConfig(handle fwk.Handle) *rest.Config {
	cfg := rest.CopyConfig(handle.KubeConfig())
	cfg.ContentType, cfg.AcceptContentTypes = "application/json", "application/json"
	return cfg
}

// GroupKey returns "<namespace>/<PodGroup>" for a gang pod, or "" for a pod without a group.
func GroupKey(pod *corev1.Pod) string { return groupKeyOf(pod) }

// GroupName returns the name of the pod's PodGroup, or "".
func GroupName(pod *corev1.Pod) string { return groupNameOf(pod) }

// Task returns the pod's task (for Berth, its role replica), or "".
func Task(pod *corev1.Pod) string { return taskOf(pod) }

// CompareNatural orders strings with numbers by value ("x-2" before "x-10"), the order in
// which the gang plugin's queue sort hands out a group's pods.
func CompareNatural(a, b string) int { return compareNatural(a, b) }

// EnsureGroupIndex indexes the scheduler's pod informer by group, once, whichever plugin
// asks first.
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

// Units splits a group's pods into placement units, in the order the gang plugin's queue
// sort hands them out.
func Units(pg *volcanov1beta1.PodGroup, pods []*corev1.Pod) ([]Unit, error) {
	req, err := newRequirement(pg)
	if err != nil {
		return nil, fmt.Errorf("PodGroup %s/%s: %w", pg.Namespace, pg.Name, err)
	}
	byKey := map[string]*Unit{}
	var order []string
	for _, p := range pods {
		key, rule := "pod/"+p.Name, -1
		for i := range req.subGroups {
			if k := req.subGroups[i].subGroupOf(p); k != "" {
				key, rule = fmt.Sprintf("sg/%d/%s", i, k), i
				break
			}
		}
		u, ok := byKey[key]
		if !ok {
			u = &Unit{Key: key, Rule: rule}
			byKey[key] = u
			order = append(order, key)
		}
		u.Pods = append(u.Pods, p)
		if _, isMin := req.minTask[taskOf(p)]; isMin || len(req.minTask) == 0 {
			u.Required = true
		}
	}
	out := make([]Unit, 0, len(order))
	for _, k := range order {
		u := byKey[k]
		sortQueueOrder(u.Pods)
		out = append(out, *u)
	}
	sortUnits(out)
	return out, nil
}

func queueLess(a, b *corev1.Pod) bool {
	if c := compareNatural(taskOf(a), taskOf(b)); c != 0 {
		return c < 0
	}
	return compareNatural(a.Name, b.Name) < 0
}

func sortQueueOrder(pods []*corev1.Pod) {
	sort.SliceStable(pods, func(i, j int) bool { return queueLess(pods[i], pods[j]) })
}

func sortUnits(units []Unit) {
	sort.SliceStable(units, func(i, j int) bool { return queueLess(units[i].Pods[0], units[j].Pods[0]) })
}
