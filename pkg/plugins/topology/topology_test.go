package topology

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	topologyv1alpha1 "volcano.sh/apis/pkg/apis/topology/v1alpha1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/fabric"
	"github.com/berth-sh/berth/pkg/plugins/placement"
)

// 2 spines × 2 leaves × 2 nodes, 8 GPUs each; node n-<spine><leaf><i>.
func testNodes() []*corev1.Node {
	var out []*corev1.Node
	for s := 0; s < 2; s++ {
		for l := 0; l < 2; l++ {
			for i := 0; i < 2; i++ {
				out = append(out, &corev1.Node{ObjectMeta: metav1.ObjectMeta{
					Name:   fmt.Sprintf("n-%d%d%d", s, l, i),
					Labels: map[string]string{"leaf": fmt.Sprintf("l%d%d", s, l), "spine": fmt.Sprintf("s%d", s), "zone": fmt.Sprintf("z%d", s)},
				}})
			}
		}
	}
	return out
}

var labelTiers = []fabric.LabelTier{{Name: "leaf", Label: "leaf"}, {Name: "spine", Label: "spine"}}

func TestFabricFromLabels(t *testing.T) {
	f := fabric.FromLabels(labelTiers, testNodes())
	assert.Equal(t, []int{1, 2}, f.Tiers)
	assert.Equal(t, 2, f.TierNames["spine"])
	assert.Equal(t, "l01", f.DomainOf("n-010", 1).Name)
	assert.Equal(t, []string{"n-100", "n-101", "n-110", "n-111"}, f.DomainOf("n-111", 2).Nodes)
}

func TestFabricFromHyperNodesResolvesEverySelectorAndNesting(t *testing.T) {
	nodes := testNodes()
	hn := func(name string, tier int, members ...topologyv1alpha1.MemberSpec) *topologyv1alpha1.HyperNode {
		return &topologyv1alpha1.HyperNode{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: topologyv1alpha1.HyperNodeSpec{Tier: tier, TierName: map[int]string{1: "leaf", 2: "spine", 3: "dc"}[tier], Members: members}}
	}
	node := func(sel topologyv1alpha1.MemberSelector) topologyv1alpha1.MemberSpec {
		return topologyv1alpha1.MemberSpec{Type: topologyv1alpha1.MemberTypeNode, Selector: sel}
	}
	child := func(sel topologyv1alpha1.MemberSelector) topologyv1alpha1.MemberSpec {
		return topologyv1alpha1.MemberSpec{Type: topologyv1alpha1.MemberTypeHyperNode, Selector: sel}
	}
	hns := []*topologyv1alpha1.HyperNode{
		hn("leaf-a", 1, node(topologyv1alpha1.MemberSelector{ExactMatch: &topologyv1alpha1.ExactMatch{Name: "n-000"}}),
			node(topologyv1alpha1.MemberSelector{ExactMatch: &topologyv1alpha1.ExactMatch{Name: "n-001"}})),
		hn("leaf-b", 1, node(topologyv1alpha1.MemberSelector{RegexMatch: &topologyv1alpha1.RegexMatch{Pattern: "^n-01"}})),
		hn("leaf-c", 1, node(topologyv1alpha1.MemberSelector{LabelMatch: &metav1.LabelSelector{MatchLabels: map[string]string{"spine": "s1"}}})),
		hn("spine-x", 2, child(topologyv1alpha1.MemberSelector{RegexMatch: &topologyv1alpha1.RegexMatch{Pattern: "^leaf-[ab]$"}})),
		hn("spine-y", 2, child(topologyv1alpha1.MemberSelector{ExactMatch: &topologyv1alpha1.ExactMatch{Name: "leaf-c"}})),
		hn("dc", 3, child(topologyv1alpha1.MemberSelector{ExactMatch: &topologyv1alpha1.ExactMatch{Name: "spine-x"}}),
			child(topologyv1alpha1.MemberSelector{ExactMatch: &topologyv1alpha1.ExactMatch{Name: "spine-y"}})),
	}
	f, problems := fabric.FromHyperNodes(hns, nodes)
	assert.Empty(t, problems)
	assert.Equal(t, []int{1, 2, 3}, f.Tiers)
	assert.Equal(t, "leaf-b", f.DomainOf("n-011", 1).Name)
	assert.Equal(t, "spine-x", f.DomainOf("n-011", 2).Name)
	assert.Equal(t, "spine-y", f.DomainOf("n-110", 2).Name)
	assert.Len(t, f.DomainOf("n-000", 3).Nodes, 8, "nested twice, the data centre holds every node")

	// A node claimed by two leaves stays in the first and the conflict is reported.
	hns = append(hns, hn("leaf-dup", 1, node(topologyv1alpha1.MemberSelector{ExactMatch: &topologyv1alpha1.ExactMatch{Name: "n-000"}})))
	f, problems = fabric.FromHyperNodes(hns, nodes)
	require.Len(t, problems, 1)
	assert.Contains(t, problems[0].Error(), "node n-000 is in two tier-1 HyperNodes")
	assert.Equal(t, "leaf-a", f.DomainOf("n-000", 1).Name)
}

// pool gives every node 8 GPUs minus used[node] and makes every node eligible.
func pool(used map[string]int64) *placement.Pool { return costedPool(used, nil) }

// costedPool is pool with a class cost per node.
func costedPool(used map[string]int64, cost func(string) int64) *placement.Pool {
	var nodes []placement.StaticNode
	for _, n := range testNodes() {
		nodes = append(nodes, placement.StaticNode{Node: n, Free: placement.Resources{"nvidia.com/gpu": 8 - used[n.Name], corev1.ResourceCPU: 64000, corev1.ResourcePods: 110}})
	}
	return placement.NewPool(placement.StaticSource(nodes...), costs(cost), nil)
}

// costs is an accelerator rule set that matches every node and prices it by name.
type costs func(string) int64

func (c costs) Match(*corev1.Pod, *corev1.Node) (bool, string) { return true, "" }
func (c costs) Cost(n *corev1.Node) int64 {
	if c == nil {
		return 0
	}
	return c(n.Name)
}

func units(name string, pods int, gpus int64) []unitToPlace {
	var out []unitToPlace
	for i := 0; i < pods; i++ {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), UID: types.UID(fmt.Sprintf("%s-%d", name, i))}}
		out = append(out, unitToPlace{key: p.Name, pods: []*corev1.Pod{p}, reqs: []placement.Resources{{"nvidia.com/gpu": gpus, corev1.ResourcePods: 1}}})
	}
	return out
}

func TestChooseDomainPicksLowestTierThenTightestFit(t *testing.T) {
	f := fabric.FromLabels(labelTiers, testNodes())
	// l00 has 4 free GPUs left on one node, l01..l11 are empty: a 4-GPU pod goes to l00
	// (tightest), a group of two 8-GPU pods to an empty leaf, three 8-GPU pods to a spine.
	used := map[string]int64{"n-000": 8, "n-001": 4}
	p, msg, _ := chooseDomain(&choice{fabric: f, group: constraint{hard: true, limit: 1}, units: units("a", 1, 4), pool: pool(used)})
	require.Empty(t, msg)
	assert.Equal(t, "l00", p.Domain.Name)

	p, _, _ = chooseDomain(&choice{fabric: f, group: constraint{hard: true, limit: 1}, units: units("b", 2, 8), pool: pool(used)})
	assert.Equal(t, "l01", p.Domain.Name)

	p, _, _ = chooseDomain(&choice{fabric: f, group: constraint{hard: true, limit: 2}, units: units("c", 3, 8), pool: pool(used)})
	assert.Equal(t, "s1", p.Domain.Name, "spine s0 has only 2 whole nodes left")

	_, msg, _ = chooseDomain(&choice{fabric: f, group: constraint{hard: true, limit: 1}, units: units("d", 3, 8), pool: pool(used)})
	assert.Equal(t, "no leaf (tier 1) can hold the group's 3 pods: they need 24 nvidia.com/gpu in one leaf (leaf), the largest free one has 16; the best, l01, holds 2", msg)

	p, msg, _ = chooseDomain(&choice{fabric: f, group: constraint{hard: false, limit: 1}, units: units("e", 3, 8), pool: pool(used)})
	require.Empty(t, msg)
	assert.Equal(t, 2, p.Domain.Tier, "soft mode climbs to the lowest tier that fits")
}

func TestChooseDomainKeepsPlacedPodsAndAvoidsFailedDomains(t *testing.T) {
	f := fabric.FromLabels(labelTiers, testNodes())
	p, _, _ := chooseDomain(&choice{fabric: f, group: constraint{hard: true, limit: 2}, units: units("a", 1, 8), placed: []string{"n-110"}, pool: pool(nil)})
	assert.Equal(t, "l11", p.Domain.Name, "the rest of a group joins its placed pods")

	p, _, _ = chooseDomain(&choice{fabric: f, group: constraint{hard: true, limit: 1}, units: units("a", 2, 8), avoid: sets.New("l00"), pool: pool(nil)})
	assert.Equal(t, "l01", p.Domain.Name)
	p, _, _ = chooseDomain(&choice{fabric: f, group: constraint{hard: true, limit: 1}, units: units("a", 2, 8), avoid: sets.New("l00", "l01", "l10", "l11"), pool: pool(nil)})
	assert.Equal(t, "l00", p.Domain.Name, "when every domain failed once, they are all tried again")
}

func TestSubgroupsGetTheirOwnDomainInsideTheGroup(t *testing.T) {
	f := fabric.FromLabels(labelTiers, testNodes())
	// Two subgroups of two 8-GPU pods, each confined to a leaf, the group to a spine.
	var us []unitToPlace
	for sg := 0; sg < 2; sg++ {
		u := unitToPlace{key: fmt.Sprintf("sg/%d", sg), sub: &constraint{hard: true, limit: 1}}
		for _, x := range units(fmt.Sprintf("sg%d", sg), 2, 8) {
			u.pods = append(u.pods, x.pods...)
			u.reqs = append(u.reqs, x.reqs...)
		}
		us = append(us, u)
	}
	p, msg, _ := chooseDomain(&choice{fabric: f, group: constraint{hard: true, limit: 2}, units: us, pool: pool(nil)})
	require.Empty(t, msg)
	assert.Equal(t, "s0", p.Domain.Name)
	assert.Equal(t, 1, p.Sub["sg/0"].Tier)
	assert.NotEqual(t, p.Sub["sg/0"].Name, p.Sub["sg/1"].Name)
	assert.Equal(t, "s1", func() string {
		p, _, _ := chooseDomain(&choice{fabric: f, group: constraint{hard: true, limit: 2}, units: us, pool: pool(map[string]int64{"n-000": 1})})
		return p.Domain.Name
	}(), "s0 has 3 whole nodes, but only one leaf with two")
}

func TestSpreadCountsGroupsNotPods(t *testing.T) {
	nodes := testNodes()
	ms := &workloadv1alpha1.ModelServing{ObjectMeta: metav1.ObjectMeta{Name: "m", Namespace: "ns"},
		Spec: workloadv1alpha1.ModelServingSpec{TopologySpreadConstraints: []workloadv1alpha1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: corev1.DoNotSchedule}}}}
	rules, err := spreadRules(ms)
	require.NoError(t, err)
	pod := func(group string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{workloadv1alpha1.ModelServingNameLabel: "m", workloadv1alpha1.GroupNameLabel: group}}}
	}
	// Group m-0 has four pods in z0, group m-1 one pod in z1: one group each, so both
	// zones may take the next group (pods would say z1 only).
	placed := []placement.PlacedPod{{Pod: pod("m-0"), Node: "n-000"}, {Pod: pod("m-0"), Node: "n-001"}, {Pod: pod("m-0"), Node: "n-010"}, {Pod: pod("m-0"), Node: "n-011"}, {Pod: pod("m-1"), Node: "n-100"}}
	zones, counts := spreadZones(rules, "m-2", nodes, placed)
	assert.Equal(t, map[string]int{"z0": 1, "z1": 1}, counts)
	assert.Len(t, zones, 2)

	// A third group in z0 leaves only z1 open.
	placed = append(placed, placement.PlacedPod{Pod: pod("m-2"), Node: "n-000"})
	zones, _ = spreadZones(rules, "m-3", nodes, placed)
	require.Len(t, zones, 1)
	assert.Equal(t, "z1", zones[0].Name)
}

func TestResolveTiers(t *testing.T) {
	f := fabric.FromLabels(labelTiers, testNodes())
	c, err := resolve(&volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.HardNetworkTopologyMode, HighestTierName: "spine"}, f, "spec.networkTopology")
	require.NoError(t, err)
	assert.Equal(t, &constraint{hard: true, limit: 2}, c)
	// kube-scheduler's Workload API names the tier by its node label key.
	keyed := fabric.FromLabels([]fabric.LabelTier{{Name: "leaf", Label: "net.example/leaf"}, {Name: "spine", Label: "net.example/spine"}}, testNodes())
	c, err = resolve(&volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.HardNetworkTopologyMode, HighestTierName: "net.example/spine"}, keyed, "spec.networkTopology")
	require.NoError(t, err)
	assert.Equal(t, &constraint{hard: true, limit: 2}, c)
	assert.Equal(t, "spine", keyed.TierName(2), "messages keep the tier's name")
	_, err = resolve(&volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.HardNetworkTopologyMode, HighestTierName: "rack"}, f, "spec.networkTopology")
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), `highestTierName "rack" is not a tier`), err.Error())
	_, err = resolve(&volcanov1beta1.NetworkTopologySpec{HighestTierAllowed: ptr.To(1)}, fabric.FromLabels(nil, testNodes()), "spec.networkTopology")
	assert.ErrorContains(t, err, "no network tiers are known")
}

func TestArgsValidation(t *testing.T) {
	_, err := decodeArgs(&Args{NodeLabelTiers: []fabric.LabelTier{{Name: "leaf", Label: "bad label!"}}})
	assert.ErrorContains(t, err, "nodeLabelTiers[0].label")
	_, err = decodeArgs(&Args{RetryOtherDomainSeconds: ptr.To[int64](-1)})
	assert.ErrorContains(t, err, "retryOtherDomainSeconds")
	a, err := decodeArgs(nil)
	require.NoError(t, err)
	assert.Equal(t, int64(60), *a.RetryOtherDomainSeconds)
}

var _ = resource.MustParse

func TestChooseDomainPrefersTheCheaperClass(t *testing.T) {
	f := fabric.FromLabels(labelTiers, testNodes())
	// Spine s0 is the expensive class: a group that fits in a leaf of either goes to s1.
	pl := costedPool(nil, func(n string) int64 {
		if strings.HasPrefix(n, "n-0") {
			return 2200
		}
		return 1000
	})
	p, _, _ := chooseDomain(&choice{fabric: f, group: constraint{hard: true, limit: 1}, units: units("a", 2, 4), pool: pl})
	assert.Equal(t, "l10", p.Domain.Name)
}

func TestSpreadScheduleAnywayOrdersAndSelectorChoosesWhatCounts(t *testing.T) {
	nodes := testNodes()
	pod := func(ms, group, tier string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{
			workloadv1alpha1.ModelServingNameLabel: ms, workloadv1alpha1.GroupNameLabel: group, "tier": tier}}}
	}
	placed := []placement.PlacedPod{{Pod: pod("m", "m-0", "gold"), Node: "n-000"}, {Pod: pod("m", "m-1", "gold"), Node: "n-001"}, {Pod: pod("m", "m-2", "bronze"), Node: "n-100"}}

	// ScheduleAnyway with maxSkew 1: z0 (2 groups) is over the skew but stays, after z1.
	ms := &workloadv1alpha1.ModelServing{ObjectMeta: metav1.ObjectMeta{Name: "m"}, Spec: workloadv1alpha1.ModelServingSpec{
		TopologySpreadConstraints: []workloadv1alpha1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: corev1.ScheduleAnyway}}}}
	rules, err := spreadRules(ms)
	require.NoError(t, err)
	zones, counts := spreadZones(rules, "m-3", nodes, placed)
	assert.Equal(t, map[string]int{"z0": 2, "z1": 1}, counts)
	require.Len(t, zones, 2)
	assert.Equal(t, []string{"z1", "z0"}, []string{zones[0].Name, zones[1].Name})

	// A selector counts only the gold groups: z1 has none, so under DoNotSchedule only z1 is open.
	ms.Spec.TopologySpreadConstraints[0].WhenUnsatisfiable = corev1.DoNotSchedule
	ms.Spec.TopologySpreadConstraints[0].LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}
	rules, err = spreadRules(ms)
	require.NoError(t, err)
	zones, counts = spreadZones(rules, "m-3", nodes, placed)
	assert.Equal(t, map[string]int{"z0": 2, "z1": 0}, counts)
	require.Len(t, zones, 1)
	assert.Equal(t, "z1", zones[0].Name)
}
