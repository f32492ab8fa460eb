// Package fabric is the network as tiers of domains (NVLink domains, leaves, spines), read
// from Volcano HyperNodes or from node labels. berth-scheduler's topology plugin places
// groups by it; berth-router pairs prefill and decode endpoints by it. It depends on the
// API types only, so the router shares it without importing the scheduler framework.
package fabric

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	topologyv1alpha1 "volcano.sh/apis/pkg/apis/topology/v1alpha1"
)

// Domain is one switch of the network: the nodes under it talk to each other without
// crossing a higher tier.
type Domain struct {
	Tier  int    // 1 is the lowest (closest) tier
	Name  string // HyperNode name, or the node label's value
	Nodes []string
	set   sets.Set[string] // Nodes, built once with the fabric
}

// Fabric is the network as tiers of domains. Every node sits in at most one domain per tier.
type Fabric struct {
	// Source says where the tiers come from: "HyperNodes" or "node labels".
	Source string
	// Tiers are the tier numbers that exist, lowest first.
	Tiers []int
	// TierNames maps a tier name (HyperNode tierName, or the label tier's name) to its number.
	TierNames map[string]int
	// TierKeys maps a label tier's node label key to its number: kube-scheduler's Workload
	// API names a topology by that key.
	TierKeys map[string]int
	// Absent are the optional label tiers left out because no node carries their label, by
	// name, with that label: a group that asks for one is told why it is missing.
	Absent map[string]string
	// Domains per tier number, sorted by name.
	Domains map[int][]*Domain
	// nodeDomains maps a node to its domain per tier number.
	nodeDomains map[string]map[int]*Domain
}

// DomainOf returns the node's domain at tier, or nil.
func (f *Fabric) DomainOf(node string, tier int) *Domain { return f.nodeDomains[node][tier] }

// NodeSet is the domain's nodes as a set (shared: do not modify).
func (d *Domain) NodeSet() sets.Set[string] { return d.set }

// Knows reports whether the node sits in at least one domain.
func (f *Fabric) Knows(node string) bool { return len(f.nodeDomains[node]) > 0 }

// Apart says how far apart two nodes are: 0 when they are the same node, else the lowest
// tier with one domain holding both, else Far (no tier joins them, or either node is
// unknown to the fabric).
func (f *Fabric) Apart(a, b string) int {
	if a == b && a != "" {
		return 0
	}
	for _, tier := range f.Tiers {
		if d := f.DomainOf(a, tier); d != nil && d == f.DomainOf(b, tier) {
			return tier
		}
	}
	return Far
}

// Far is what Apart says of nodes no tier joins.
const Far = math.MaxInt

// TierName returns a tier's name for messages ("leaf"), or "tier N".
func (f *Fabric) TierName(tier int) string {
	for name, t := range f.TierNames {
		if t == tier {
			return name
		}
	}
	return fmt.Sprintf("tier %d", tier)
}

// Top is the highest tier, or 0 for an empty fabric.
func (f *Fabric) Top() int {
	if len(f.Tiers) == 0 {
		return 0
	}
	return f.Tiers[len(f.Tiers)-1]
}

// TierLabel returns the node label a label tier is read from, or "" (HyperNode tiers).
func (f *Fabric) TierLabel(tier int) string {
	for key, t := range f.TierKeys {
		if t == tier {
			return key
		}
	}
	return ""
}

// CliqueLabel is the label GPU feature discovery gives a node whose GPUs share an NVLink
// fabric (GB200/GB300 NVL72: 18 trays × 4 GPUs): "<clusterUUID>.<cliqueID>", the same value
// on every node of one NVLink domain.
const CliqueLabel = "nvidia.com/gpu.clique"

// IsNVLink says whether a tier is an NVLink domain, by its label or its name: messages
// then speak of NVLink domains, which is what the user configured.
func (f *Fabric) IsNVLink(tier int) bool {
	if f.TierLabel(tier) == CliqueLabel {
		return true
	}
	name := f.TierName(tier)
	return strings.EqualFold(name, "nvlink") || strings.EqualFold(name, "nvl")
}

// LabelTier is one network tier read from a node label.
type LabelTier struct {
	// Name is what highestTierName refers to, e.g. "leaf".
	Name string `json:"name"`
	// Label is the node label whose value names the node's domain at this tier.
	Label string `json:"label"`
	// Optional leaves the tier out, and the tiers above it keep their numbers, while no node
	// carries the label: an NVLink tier (nvidia.com/gpu.clique) listed below the leaf then
	// changes nothing on clusters without NVLink domains.
	Optional bool `json:"optional,omitempty"`
}

// Build is the fabric of a cluster as Berth reads it: from the HyperNodes when there is
// any, else from the nodes' labels by tiers. problems are the HyperNodes' conflicts.
func Build(hns []*topologyv1alpha1.HyperNode, nodes []*corev1.Node, tiers []LabelTier) (f *Fabric, problems []error) {
	if len(hns) > 0 {
		return FromHyperNodes(hns, nodes)
	}
	return FromLabels(tiers, nodes), nil
}

// FromLabels builds tiers from node labels: the first tier present is tier 1. Nodes
// without a tier's label are outside every domain of that tier. An optional tier whose
// label no node carries is not numbered at all.
func FromLabels(tiers []LabelTier, nodes []*corev1.Node) *Fabric {
	f := newFabric("node labels")
	tier := 0
	for _, t := range tiers {
		byValue := map[string]*Domain{}
		var domains []*Domain
		for _, n := range nodes {
			v, ok := n.Labels[t.Label]
			if !ok || v == "" {
				continue
			}
			d := byValue[v]
			if d == nil {
				d = &Domain{Tier: tier + 1, Name: v}
				byValue[v] = d
				domains = append(domains, d)
			}
			d.Nodes = append(d.Nodes, n.Name)
		}
		if t.Optional && len(domains) == 0 {
			f.Absent[t.Name] = t.Label
			continue
		}
		tier++
		f.Tiers = append(f.Tiers, tier)
		f.TierNames[t.Name] = tier
		f.TierKeys[t.Label] = tier
		f.Domains[tier] = domains
	}
	f.index()
	return f
}

// FromHyperNodes builds tiers from Volcano HyperNodes. Members are nodes (by exact
// name, name regex or labels) or other HyperNodes (by exact name or name regex), nested to
// any depth; a HyperNode's nodes are the union of its members' nodes. A node listed in two
// HyperNodes of one tier belongs to the first by name, and the conflict is reported.
func FromHyperNodes(hns []*topologyv1alpha1.HyperNode, nodes []*corev1.Node) (*Fabric, []error) {
	f := newFabric("HyperNodes")
	var problems []error
	byName := make(map[string]*topologyv1alpha1.HyperNode, len(hns))
	names := make([]string, 0, len(hns))
	for _, hn := range hns {
		byName[hn.Name] = hn
		names = append(names, hn.Name)
	}
	sort.Strings(names)

	resolved := map[string][]string{}
	visiting := map[string]bool{}
	var nodesOf func(name string) []string
	nodesOf = func(name string) []string {
		if ns, ok := resolved[name]; ok {
			return ns
		}
		if visiting[name] {
			problems = append(problems, fmt.Errorf("HyperNode %s is its own member", name))
			return nil
		}
		visiting[name] = true
		defer delete(visiting, name)
		hn := byName[name]
		set := map[string]bool{}
		for i, m := range hn.Spec.Members {
			switch m.Type {
			case topologyv1alpha1.MemberTypeHyperNode:
				for _, child := range matchNames(m.Selector, names, &problems, name, i) {
					if child == name {
						continue
					}
					for _, n := range nodesOf(child) {
						set[n] = true
					}
				}
			default: // Node
				for _, n := range matchNodes(m.Selector, nodes, &problems, name, i) {
					set[n] = true
				}
			}
		}
		out := make([]string, 0, len(set))
		for n := range set {
			out = append(out, n)
		}
		sort.Strings(out)
		resolved[name] = out
		return out
	}

	tiers := map[int]bool{}
	for _, name := range names {
		hn := byName[name]
		tier := hn.Spec.Tier
		if !tiers[tier] {
			tiers[tier] = true
			f.Tiers = append(f.Tiers, tier)
		}
		if hn.Spec.TierName != "" {
			if _, ok := f.TierNames[hn.Spec.TierName]; !ok {
				f.TierNames[hn.Spec.TierName] = tier
			}
		}
		f.Domains[tier] = append(f.Domains[tier], &Domain{Tier: tier, Name: name, Nodes: nodesOf(name)})
	}
	sort.Ints(f.Tiers)
	problems = append(problems, f.index()...)
	return f, problems
}

func newFabric(source string) *Fabric {
	return &Fabric{Source: source, TierNames: map[string]int{}, TierKeys: map[string]int{}, Absent: map[string]string{}, Domains: map[int][]*Domain{}, nodeDomains: map[string]map[int]*Domain{}}
}

// index fills nodeDomains; a node claimed twice in one tier keeps its first domain.
func (f *Fabric) index() []error {
	var problems []error
	for _, tier := range f.Tiers {
		sort.Slice(f.Domains[tier], func(i, j int) bool { return f.Domains[tier][i].Name < f.Domains[tier][j].Name })
		for _, d := range f.Domains[tier] {
			kept := d.Nodes[:0]
			for _, n := range d.Nodes {
				m := f.nodeDomains[n]
				if m == nil {
					m = map[int]*Domain{}
					f.nodeDomains[n] = m
				}
				if other := m[tier]; other != nil {
					problems = append(problems, fmt.Errorf("node %s is in two tier-%d HyperNodes, %s and %s; using %s", n, tier, other.Name, d.Name, other.Name))
					continue
				}
				m[tier] = d
				kept = append(kept, n)
			}
			d.Nodes = kept
			sort.Strings(d.Nodes)
			d.set = sets.New(d.Nodes...)
		}
	}
	return problems
}

func matchNames(sel topologyv1alpha1.MemberSelector, names []string, problems *[]error, owner string, i int) []string {
	switch {
	case sel.ExactMatch != nil:
		for _, n := range names {
			if n == sel.ExactMatch.Name {
				return []string{n}
			}
		}
		return nil
	case sel.RegexMatch != nil:
		re, err := regexp.Compile(sel.RegexMatch.Pattern)
		if err != nil {
			*problems = append(*problems, fmt.Errorf("HyperNode %s members[%d].selector.regexMatch: %w", owner, i, err))
			return nil
		}
		var out []string
		for _, n := range names {
			if re.MatchString(n) {
				out = append(out, n)
			}
		}
		return out
	}
	return nil
}

func matchNodes(sel topologyv1alpha1.MemberSelector, nodes []*corev1.Node, problems *[]error, owner string, i int) []string {
	var out []string
	switch {
	case sel.ExactMatch != nil:
		for _, n := range nodes {
			if n.Name == sel.ExactMatch.Name {
				out = append(out, n.Name)
			}
		}
	case sel.RegexMatch != nil:
		re, err := regexp.Compile(sel.RegexMatch.Pattern)
		if err != nil {
			*problems = append(*problems, fmt.Errorf("HyperNode %s members[%d].selector.regexMatch: %w", owner, i, err))
			return nil
		}
		for _, n := range nodes {
			if re.MatchString(n.Name) {
				out = append(out, n.Name)
			}
		}
	case sel.LabelMatch != nil:
		s, err := metav1.LabelSelectorAsSelector(sel.LabelMatch)
		if err != nil {
			*problems = append(*problems, fmt.Errorf("HyperNode %s members[%d].selector.labelMatch: %w", owner, i, err))
			return nil
		}
		for _, n := range nodes {
			if s.Matches(labels.Set(n.Labels)) {
				out = append(out, n.Name)
			}
		}
	}
	return out
}

// DefaultLabelTiers are the tiers berth-scheduler's shipped configuration reads from node
// labels (manifests/scheduler/config.yaml, nodeLabelTiers): an optional NVLink tier below
// the leaf, then spine and zone. berth-router reads the same by default, so both see one
// fabric.
var DefaultLabelTiers = []LabelTier{
	{Name: "nvlink", Label: CliqueLabel, Optional: true},
	{Name: "leaf", Label: "network.berth.sh/leaf"},
	{Name: "spine", Label: "network.berth.sh/spine"},
	{Name: "zone", Label: "topology.kubernetes.io/zone"},
}

// ParseLabelTiers reads tiers written name=label, lowest first, separated by commas (the
// router's --fabric-label-tiers). Every tier is optional: a tier no node carries is left
// out, which changes nothing for a reader that only compares nodes.
func ParseLabelTiers(s string) ([]LabelTier, error) {
	var out []LabelTier
	names, keys := sets.New[string](), sets.New[string]()
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		name, label, ok := strings.Cut(f, "=")
		name, label = strings.TrimSpace(name), strings.TrimSpace(label)
		switch {
		case !ok || name == "" || label == "":
			return nil, fmt.Errorf("tier %q: write name=label, such as leaf=network.berth.sh/leaf", f)
		case names.Has(name):
			return nil, fmt.Errorf("tier %q: the name %s is given twice", f, name)
		case keys.Has(label):
			return nil, fmt.Errorf("tier %q: the label %s is given twice", f, label)
		}
		if msgs := validation.IsQualifiedName(label); len(msgs) > 0 {
			return nil, fmt.Errorf("tier %q: %s is not a label key: %s", f, label, strings.Join(msgs, "; "))
		}
		names.Insert(name)
		keys.Insert(label)
		out = append(out, LabelTier{Name: name, Label: label, Optional: true})
	}
	return out, nil
}

// FormatLabelTiers writes tiers as ParseLabelTiers reads them.
func FormatLabelTiers(tiers []LabelTier) string {
	parts := make([]string, len(tiers))
	for i, t := range tiers {
		parts[i] = t.Name + "=" + t.Label
	}
	return strings.Join(parts, ",")
}
