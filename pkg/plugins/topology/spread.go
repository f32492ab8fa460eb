package topology

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/plugins/placement"
)

// A ModelServing's topologySpreadConstraints spread its ServingGroups, not its pods: a group
// counts once in every domain that holds one of its pods, and a new group goes whole into one
// domain of the first constraint's key, where the skew allows it.

// spreadRule is one of the ModelServing's topologySpreadConstraints.
type spreadRule struct {
	key      string
	maxSkew  int
	hard     bool // DoNotSchedule
	selector labels.Selector
}

func spreadRules(ms *workloadv1alpha1.ModelServing) ([]spreadRule, error) {
	var out []spreadRule
	for i, c := range ms.Spec.TopologySpreadConstraints {
		r := spreadRule{key: c.TopologyKey, maxSkew: int(c.MaxSkew), hard: c.WhenUnsatisfiable != corev1.ScheduleAnyway}
		if r.maxSkew < 1 {
			r.maxSkew = 1
		}
		// Without a selector every group of the ModelServing counts.
		sel := &metav1.LabelSelector{MatchLabels: map[string]string{workloadv1alpha1.ModelServingNameLabel: ms.Name}}
		if c.LabelSelector != nil {
			sel = c.LabelSelector
		}
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			return nil, fmt.Errorf("ModelServing %s/%s spec.topologySpreadConstraints[%d].labelSelector: %w", ms.Namespace, ms.Name, i, err)
		}
		r.selector = s
		out = append(out, r)
	}
	return out, nil
}

// spreadZones returns the domains of the first rule's key the group may go to, fewest
// groups first. Every DoNotSchedule rule removes the nodes whose domain is over its skew.
// group is this group's name; its own pods do not count.
func spreadZones(rules []spreadRule, group string, nodes []*corev1.Node, placed []placement.PlacedPod) (zones []*placement.Target, counts map[string]int) {
	if len(rules) == 0 {
		return nil, nil
	}
	nodeLabels := make(map[string]map[string]string, len(nodes))
	for _, n := range nodes {
		nodeLabels[n.Name] = n.Labels
	}
	allowed := sets.New[string]()
	for _, n := range nodes {
		allowed.Insert(n.Name)
	}
	var firstCounts map[string]int
	for i, r := range rules {
		groups := map[string]sets.Set[string]{} // domain value -> groups in it
		for _, n := range nodes {
			if v, ok := n.Labels[r.key]; ok {
				if groups[v] == nil {
					groups[v] = sets.New[string]()
				}
			}
		}
		for _, p := range placed {
			g := p.Pod.Labels[workloadv1alpha1.GroupNameLabel]
			if g == "" || g == group || !r.selector.Matches(labels.Set(p.Pod.Labels)) {
				continue
			}
			if v, ok := nodeLabels[p.Node][r.key]; ok && groups[v] != nil {
				groups[v].Insert(g)
			}
		}
		counts := map[string]int{}
		lowest := -1
		for v, gs := range groups {
			counts[v] = gs.Len()
			if lowest < 0 || gs.Len() < lowest {
				lowest = gs.Len()
			}
		}
		if i == 0 {
			firstCounts = counts
		}
		for _, n := range nodes {
			v, ok := n.Labels[r.key]
			if !ok {
				// A node without the key is in no domain of it: a hard rule excludes it.
				if r.hard {
					allowed.Delete(n.Name)
				}
				continue
			}
			if r.hard && counts[v]+1-lowest > r.maxSkew {
				allowed.Delete(n.Name)
			}
		}
	}
	byValue := map[string][]string{}
	var values []string
	for _, n := range nodes {
		v, ok := n.Labels[rules[0].key]
		if !ok || !allowed.Has(n.Name) {
			continue
		}
		if _, seen := byValue[v]; !seen {
			values = append(values, v)
		}
		byValue[v] = append(byValue[v], n.Name)
	}
	for _, v := range values {
		zones = append(zones, placement.NewTarget(v, 0, byValue[v]))
	}
	sortedTargets(zones, firstCounts)
	return zones, firstCounts
}

// describeCounts renders group counts per domain for messages: "a=2, b=1".
func describeCounts(counts map[string]int) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := ""
	for i, k := range keys {
		if i > 0 {
			out += ", "
		}
		out += fmt.Sprintf("%s=%d", k, counts[k])
	}
	return out
}

// sortedTargets orders spread zones: fewest groups first, then by name.
func sortedTargets(ts []*placement.Target, count map[string]int) {
	sort.SliceStable(ts, func(i, j int) bool {
		if count[ts[i].Name] != count[ts[j].Name] {
			return count[ts[i].Name] < count[ts[j].Name]
		}
		return ts[i].Name < ts[j].Name
	})
}
