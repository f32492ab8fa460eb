package placement

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	volcanobatchv1alpha1 "volcano.sh/apis/pkg/apis/batch/v1alpha1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// Pod annotations (and, for tools that label instead, labels) that tie a pod to its gang.
const (
	// GroupNameKey names the pod's Volcano PodGroup (Volcano's own key).
	GroupNameKey = volcanov1beta1.KubeGroupNameAnnotationKey
	// TaskSpecKey names the pod's task, for Berth a role replica "<role>-<j>" (Volcano's own key).
	TaskSpecKey = volcanobatchv1alpha1.TaskSpecKey
)

// GroupName returns the PodGroup a pod belongs to, if any.
func GroupName(pod *corev1.Pod) string {
	if name := pod.Annotations[GroupNameKey]; name != "" {
		return name
	}
	return pod.Labels[GroupNameKey]
}

// Task returns the task (role replica) a pod belongs to, if any.
func Task(pod *corev1.Pod) string {
	if t := pod.Annotations[TaskSpecKey]; t != "" {
		return t
	}
	return pod.Labels[TaskSpecKey]
}

// Requirement is what a PodGroup demands before any of its pods may bind. It is derived
// from the PodGroup alone and holds no framework state, so the rules are unit-testable.
type Requirement struct {
	MinMember int
	// MinTask is minTaskMember without its zero entries.
	MinTask   map[string]int
	SubGroups []SubGroupRule
}

// SubGroupRule is one entry of spec.subGroupPolicy: pods matching selector are partitioned
// by the values of keys into subgroups of size pods each.
type SubGroupRule struct {
	name         string
	size         int
	minSubGroups int
	selector     labels.Selector
	keys         []string
}

// NewRequirement reads a PodGroup's minimum.
func NewRequirement(pg *volcanov1beta1.PodGroup) (*Requirement, error) {
	r := &Requirement{MinMember: int(pg.Spec.MinMember), MinTask: map[string]int{}}
	for task, n := range pg.Spec.MinTaskMember {
		if n > 0 {
			r.MinTask[task] = int(n)
		}
	}
	for i, sg := range pg.Spec.SubGroupPolicy {
		rule := SubGroupRule{name: sg.Name, size: 1, keys: sg.MatchLabelKeys, selector: labels.Everything()}
		if rule.name == "" {
			rule.name = fmt.Sprintf("subGroupPolicy[%d]", i)
		}
		if sg.SubGroupSize != nil {
			rule.size = int(*sg.SubGroupSize)
		}
		if sg.MinSubGroups != nil {
			rule.minSubGroups = int(*sg.MinSubGroups)
		}
		if sg.LabelSelector != nil {
			sel, err := metav1.LabelSelectorAsSelector(sg.LabelSelector)
			if err != nil {
				return nil, fmt.Errorf("%s.labelSelector: %w", rule.name, err)
			}
			rule.selector = sel
		}
		r.SubGroups = append(r.SubGroups, rule)
	}
	return r, nil
}

// Members returns how many pods the group needs placed together at the least: minMember,
// or more when the task or subgroup minimums add up to more.
func (r *Requirement) Members() int {
	n := 0
	for _, m := range r.MinTask {
		n += m
	}
	for _, sg := range r.SubGroups {
		if sg.minSubGroups*sg.size > n {
			n = sg.minSubGroups * sg.size
		}
	}
	return max(n, r.MinMember)
}

// SubGroupOf returns the subgroup key of a pod under rule, or "" when the rule does not
// cover the pod.
func (sg *SubGroupRule) SubGroupOf(pod *corev1.Pod) string {
	if !sg.selector.Matches(labels.Set(pod.Labels)) {
		return ""
	}
	if len(sg.keys) == 0 {
		return sg.name
	}
	var b strings.Builder
	for _, k := range sg.keys {
		v, ok := pod.Labels[k]
		if !ok {
			return ""
		}
		b.WriteString(v)
		b.WriteByte(0)
	}
	return b.String()
}

// sizes counts the given pods per subgroup of the rule.
func (sg *SubGroupRule) sizes(pods []*corev1.Pod) map[string]int {
	counts := map[string]int{}
	for _, p := range pods {
		if k := sg.SubGroupOf(p); k != "" {
			counts[k]++
		}
	}
	return counts
}

// Verdict says whether a set of pods may be released to bind, and if not, why.
type Verdict struct {
	OK     bool
	Reason string
}

// Check decides whether placed (bound, held in Permit, or being scheduled) satisfies the
// group. all is every pod of the group the scheduler knows of, used to tell whether a
// subgroup could ever complete. The rules:
//   - at least minMember pods placed;
//   - every task at least its minTaskMember;
//   - every subgroup rule at least minSubGroups complete subgroups;
//   - no subgroup partly placed: a subgroup (a role replica with its workers) that has a
//     pod placed has all of them placed, so a replica is never split.
func (r *Requirement) Check(placed []*corev1.Pod) Verdict {
	if len(placed) < r.MinMember {
		return Verdict{Reason: fmt.Sprintf("%d/%d pods placed", len(placed), r.MinMember)}
	}
	if task, have, want := r.shortTask(placed); task != "" {
		return Verdict{Reason: fmt.Sprintf("task %s has %d/%d pods placed", task, have, want)}
	}
	for i := range r.SubGroups {
		sg := &r.SubGroups[i]
		complete := 0
		for _, n := range sg.sizes(placed) {
			if n >= sg.size {
				complete++
			} else {
				return Verdict{Reason: fmt.Sprintf("%s: a subgroup has %d/%d pods placed", sg.name, n, sg.size)}
			}
		}
		if complete < sg.minSubGroups {
			return Verdict{Reason: fmt.Sprintf("%s: %d/%d complete subgroups placed", sg.name, complete, sg.minSubGroups)}
		}
	}
	return Verdict{OK: true}
}

// Enough says whether the pods that exist could ever satisfy the group; PreEnqueue holds
// the group's pods back until they could.
func (r *Requirement) Enough(all []*corev1.Pod) Verdict {
	if len(all) < r.MinMember {
		return Verdict{Reason: fmt.Sprintf("%d/%d pods exist", len(all), r.MinMember)}
	}
	if task, have, want := r.shortTask(all); task != "" {
		return Verdict{Reason: fmt.Sprintf("task %s has %d/%d pods", task, have, want)}
	}
	for i := range r.SubGroups {
		sg := &r.SubGroups[i]
		if sg.minSubGroups == 0 {
			continue
		}
		complete := 0
		for _, n := range sg.sizes(all) {
			if n >= sg.size {
				complete++
			}
		}
		if complete < sg.minSubGroups {
			return Verdict{Reason: fmt.Sprintf("%s: %d/%d complete subgroups exist", sg.name, complete, sg.minSubGroups)}
		}
	}
	return Verdict{OK: true}
}

// shortTask returns the first task (by name) with fewer pods than its minTaskMember.
func (r *Requirement) shortTask(pods []*corev1.Pod) (task string, have, want int) {
	if len(r.MinTask) == 0 {
		return "", 0, 0
	}
	perTask := map[string]int{}
	for _, p := range pods {
		perTask[Task(p)]++
	}
	for _, t := range SortedKeys(r.MinTask) {
		if perTask[t] < r.MinTask[t] {
			return t, perTask[t], r.MinTask[t]
		}
	}
	return "", 0, 0
}

// SortedKeys returns a map's keys in order.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
