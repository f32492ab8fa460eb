package sandbox

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	llmazinferencev1alpha1 "github.com/berth-sh/berth/pkg/apis/llmaz/inference/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/sim"
)

// tracked says which ModelServings the sandbox waits for: those it applied, and those owned
// by an object it applied (a ModelBooster's backends, once a controller creates them).
type tracked struct {
	names map[types.NamespacedName]bool
	uids  map[types.UID]bool
}

func newTracked(objs []applied) tracked {
	t := tracked{names: map[types.NamespacedName]bool{}, uids: map[types.UID]bool{}}
	for _, o := range objs {
		t.uids[o.uid] = true
		if o.kind == "ModelServing" {
			t.names[types.NamespacedName{Namespace: o.namespace, Name: o.name}] = true
		}
	}
	return t
}

func (t tracked) has(ms *workloadv1alpha1.ModelServing) bool {
	if t.names[types.NamespacedName{Namespace: ms.Namespace, Name: ms.Name}] {
		return true
	}
	for _, ref := range ms.OwnerReferences {
		if t.uids[ref.UID] {
			return true
		}
	}
	return false
}

// snapshot is what the sandbox reports on: the tracked ModelServings with their pods and
// PodGroups, and the nodes (for their leaf and spine).
type snapshot struct {
	servings []serving
	boosters []*workloadv1alpha1.ModelBooster
	nodes    map[string]*corev1.Node
}

type serving struct {
	ms        *workloadv1alpha1.ModelServing
	pods      []corev1.Pod
	podGroups []volcanov1beta1.PodGroup
}

func observe(ctx context.Context, cl client.Client, t tracked) (*snapshot, error) {
	var list workloadv1alpha1.ModelServingList
	if err := cl.List(ctx, &list); err != nil {
		return nil, err
	}
	var nodes corev1.NodeList
	if err := cl.List(ctx, &nodes); err != nil {
		return nil, err
	}
	snap := &snapshot{nodes: map[string]*corev1.Node{}}
	// A ModelBooster's ModelServings appear only once the controller made them: wait for
	// the ModelBooster itself to be Ready too.
	var boosters workloadv1alpha1.ModelBoosterList
	if err := cl.List(ctx, &boosters); err != nil {
		return nil, err
	}
	for i := range boosters.Items {
		if t.uids[boosters.Items[i].UID] {
			snap.boosters = append(snap.boosters, &boosters.Items[i])
		}
	}
	for i := range nodes.Items {
		snap.nodes[nodes.Items[i].Name] = &nodes.Items[i]
	}
	// An llmaz Playground's ModelServing is owned by the Service the Playground owns: track
	// the Services of applied Playgrounds too.
	var services llmazinferencev1alpha1.ServiceList
	if err := cl.List(ctx, &services); err != nil {
		return nil, err
	}
	for _, svc := range services.Items {
		for _, ref := range svc.OwnerReferences {
			if t.uids[ref.UID] {
				t.uids[svc.UID] = true
			}
		}
	}
	for i := range list.Items {
		ms := &list.Items[i]
		if !t.has(ms) {
			continue
		}
		s := serving{ms: ms}
		sel := client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: ms.Name}
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(ms.Namespace), sel); err != nil {
			return nil, err
		}
		s.pods = pods.Items
		sort.Slice(s.pods, func(i, j int) bool { return naturalLess(s.pods[i].Name, s.pods[j].Name) })
		var pgs volcanov1beta1.PodGroupList
		if err := cl.List(ctx, &pgs, client.InNamespace(ms.Namespace), sel); err != nil {
			return nil, err
		}
		s.podGroups = pgs.Items
		sort.Slice(s.podGroups, func(i, j int) bool { return naturalLess(s.podGroups[i].Name, s.podGroups[j].Name) })
		snap.servings = append(snap.servings, s)
	}
	sort.Slice(snap.servings, func(i, j int) bool {
		a, b := snap.servings[i].ms, snap.servings[j].ms
		return naturalLess(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name)
	})
	return snap, nil
}

// available is the ModelServing's Available condition, current for its spec.
func available(ms *workloadv1alpha1.ModelServing) bool {
	c := meta.FindStatusCondition(ms.Status.Conditions, workloadv1alpha1.ModelServingAvailable)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == ms.Generation
}

// boosterReady is the ModelBooster's Ready condition, current for its spec.
func boosterReady(mb *workloadv1alpha1.ModelBooster) bool {
	c := meta.FindStatusCondition(mb.Status.Conditions, "Ready")
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == mb.Generation
}

func (s *snapshot) allAvailable() bool {
	for _, mb := range s.boosters {
		if !boosterReady(mb) {
			return false
		}
	}
	for _, sv := range s.servings {
		if !available(sv.ms) {
			return false
		}
	}
	return true
}

func key(ms *workloadv1alpha1.ModelServing) string { return ms.Namespace + "/" + ms.Name }

// progress is one line per ModelServing, e.g.
// "modelserving default/x: 1/2 groups available, 3/6 pods running".
func (s *snapshot) progress() map[string]string {
	lines := map[string]string{}
	for _, mb := range s.boosters {
		line := fmt.Sprintf("modelbooster %s/%s: not reconciled yet", mb.Namespace, mb.Name)
		if c := meta.FindStatusCondition(mb.Status.Conditions, "Ready"); c != nil {
			line = fmt.Sprintf("modelbooster %s/%s: Ready=%s %s: %s", mb.Namespace, mb.Name, c.Status, c.Reason, c.Message)
		}
		lines["modelbooster "+mb.Namespace+"/"+mb.Name] = line
	}
	for _, sv := range s.servings {
		want := int32(1)
		if sv.ms.Spec.Replicas != nil {
			want = *sv.ms.Spec.Replicas
		}
		running := 0
		for i := range sv.pods {
			if sv.pods[i].Status.Phase == corev1.PodRunning {
				running++
			}
		}
		state := ""
		if available(sv.ms) {
			state = " (Available)"
		}
		lines[key(sv.ms)] = fmt.Sprintf("modelserving %s: %d/%d groups available, %d/%d pods running%s",
			key(sv.ms), sv.ms.Status.AvailableReplicas, want, running, len(sv.pods), state)
	}
	return lines
}

// table writes where every pod of every tracked ModelServing runs, one row per pod, sorted
// by ModelServing, group and pod.
func (s *snapshot) table(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// The NVLink domain (GPU feature discovery's clique) is a column only on a fabric that
	// has them (--nvl72): there it is the tier a tensor-parallel replica must not cross.
	nvlink := false
	for _, n := range s.nodes {
		nvlink = nvlink || n.Labels[sim.CliqueLabel] != ""
	}
	cols := []string{"MODELSERVING", "GROUP", "ROLE", "POD", "NODE", "LEAF", "SPINE", "GPU"}
	if nvlink {
		cols = append(cols[:5], append([]string{"NVLINK"}, cols[5:]...)...)
	}
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
	for _, sv := range s.servings {
		if len(sv.pods) == 0 {
			fmt.Fprintln(tw, key(sv.ms)+strings.Repeat("\t-", len(cols)-1))
		}
		for _, p := range sv.pods { // pod names start with their group's: sorted by group
			node, clique, leaf, spine := p.Spec.NodeName, "-", "-", "-"
			n := s.nodes[node]
			if node == "" {
				node = "(pending)"
			} else if n != nil {
				clique, leaf, spine = orDash(n.Labels[sim.CliqueLabel]), orDash(n.Labels[sim.LeafLabel]), orDash(n.Labels[sim.SpineLabel])
			}
			row := []string{key(sv.ms), orDash(p.Labels[workloadv1alpha1.GroupNameLabel]), orDash(p.Labels[workloadv1alpha1.RoleLabel]), p.Name, node}
			if nvlink {
				row = append(row, clique)
			}
			row = append(row, leaf, spine, gpuOf(n, &p))
			fmt.Fprintln(tw, strings.Join(row, "\t"))
		}
	}
	_ = tw.Flush()
}

// gpuOf says which GPUs a pod holds, e.g. "4× NVIDIA-H100-80GB-HBM3", or asks for when it
// is on no node yet ("16× nvidia.com/gpu").
func gpuOf(n *corev1.Node, p *corev1.Pod) string {
	var count int64
	for _, c := range p.Spec.Containers {
		if q, ok := c.Resources.Requests[sim.GPUResource]; ok {
			count += q.Value()
		}
	}
	if count == 0 {
		return "-"
	}
	product := ""
	if n != nil {
		product = n.Labels[sim.GPUProductLabel]
	}
	if product == "" {
		product = string(sim.GPUResource)
	}
	return fmt.Sprintf("%d× %s", count, product)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// notAvailable explains, for every tracked ModelServing that is not Available, why: its
// Available condition, its PodGroups' conditions and why its pending pods are not placed.
func (s *snapshot) notAvailable() string {
	var b strings.Builder
	for _, mb := range s.boosters {
		if boosterReady(mb) {
			continue
		}
		fmt.Fprintf(&b, "modelbooster %s/%s is not Ready: ", mb.Namespace, mb.Name)
		if c := meta.FindStatusCondition(mb.Status.Conditions, "Ready"); c != nil {
			fmt.Fprintf(&b, "%s: %s\n", c.Reason, c.Message)
		} else {
			b.WriteString("no Ready condition yet (berth-controller has not reconciled it)\n")
		}
	}
	for _, sv := range s.servings {
		if available(sv.ms) {
			continue
		}
		fmt.Fprintf(&b, "modelserving %s is not Available: ", key(sv.ms))
		if c := meta.FindStatusCondition(sv.ms.Status.Conditions, workloadv1alpha1.ModelServingAvailable); c != nil {
			fmt.Fprintf(&b, "%s: %s", c.Reason, c.Message)
			if c.ObservedGeneration != sv.ms.Generation {
				fmt.Fprintf(&b, " (as of generation %d; the spec is at %d)", c.ObservedGeneration, sv.ms.Generation)
			}
			b.WriteString("\n")
		} else {
			b.WriteString("no Available condition yet (berth-controller has not reconciled it)\n")
		}
		for _, pg := range sv.podGroups {
			for _, c := range pg.Status.Conditions {
				if c.Type == volcanov1beta1.PodGroupUnschedulableType && c.Status == corev1.ConditionTrue {
					fmt.Fprintf(&b, "  podgroup %s/%s (%s): %s: %s\n", pg.Namespace, pg.Name, pg.Status.Phase, c.Reason, c.Message)
				}
			}
		}
		// Pods of a gang usually fail for the same reason: say it once, with a count.
		type reason struct {
			text  string
			first string
			count int
		}
		var reasons []*reason
		byText := map[string]*reason{}
		for _, p := range sv.pods {
			if p.Spec.NodeName != "" {
				continue
			}
			text := "not tried by the scheduler yet"
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
					text = c.Reason + ": " + c.Message
				}
			}
			if r := byText[text]; r != nil {
				r.count++
				continue
			}
			r := &reason{text: text, first: p.Name, count: 1}
			byText[text] = r
			reasons = append(reasons, r)
		}
		for _, r := range reasons {
			others := ""
			if r.count > 1 {
				others = fmt.Sprintf(" (and %d more pending pods)", r.count-1)
			}
			fmt.Fprintf(&b, "  pod %s/%s pending%s: %s\n", sv.ms.Namespace, r.first, others, r.text)
		}
		if len(sv.pods) == 0 {
			b.WriteString("  no pods yet\n")
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// naturalLess compares strings with runs of digits compared as numbers, so that group 10
// sorts after group 9.
func naturalLess(a, b string) bool {
	for a != "" && b != "" {
		da, db := digitPrefix(a), digitPrefix(b)
		if da > 0 && db > 0 {
			na, _ := strconv.ParseUint(a[:da], 10, 64)
			nb, _ := strconv.ParseUint(b[:db], 10, 64)
			if na != nb {
				return na < nb
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func digitPrefix(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}
