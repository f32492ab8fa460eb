package topology

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/fabric"
	"github.com/berth-sh/berth/pkg/plugins/placement"
)

// replica is one role replica of pods×gpus, a subgroup with the given topology.
func replica(name string, pods int, gpus int64, sub *constraint, along ...string) unitToPlace {
	u := unitToPlace{key: "sg/0/" + name, name: name, sub: sub, along: along}
	for i := 0; i < pods; i++ {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), UID: types.UID(fmt.Sprintf("%s-%d", name, i))}}
		u.pods = append(u.pods, p)
		u.reqs = append(u.reqs, placement.Resources{"nvidia.com/gpu": gpus, corev1.ResourcePods: 1})
	}
	return u
}

var (
	hardLeaf  = &constraint{hard: true, limit: 1}
	softLeaf  = &constraint{hard: false, limit: 1}
	hardSpine = constraint{hard: true, limit: 2}
)

// halfUsedLeaves leaves one whole node in every leaf: every spine has two whole nodes, but
// no leaf has two.
var halfUsedLeaves = map[string]int64{"n-000": 4, "n-010": 4, "n-100": 4, "n-110": 4}

// nodesOf is where the plan puts the unit's pods.
func nodesOf(p *placement.Plan, u unitToPlace) []string {
	var out []string
	for _, pod := range u.pods {
		out = append(out, p.Nodes[pod.UID])
	}
	return out
}

func TestEveryReplicaGetsALeafOfItsOwnInsideTheGroupsSpine(t *testing.T) {
	f := fabric.FromLabels(labelTiers, testNodes())
	// decode-0 is two 8-GPU pods, prefill-0 two 4-GPU pods: 24 GPUs, more than a leaf
	// has, so the group takes a spine and each replica a leaf in it. n-000 has 4 GPUs used:
	// spine s0 holds the group tightest (decode-0 in l01, prefill-0 beside the used GPUs in
	// l00), leaving s1 whole.
	us := []unitToPlace{replica("decode-0", 2, 8, hardLeaf), replica("prefill-0", 2, 4, hardLeaf)}
	p, msg, _ := chooseDomain(&choice{fabric: f, group: hardSpine, units: us, pool: pool(map[string]int64{"n-000": 4})})
	require.Empty(t, msg)
	assert.Equal(t, "s0", p.Domain.Name)
	assert.Equal(t, "l01", p.Sub["sg/0/decode-0"].Name)
	assert.Equal(t, "l00", p.Sub["sg/0/prefill-0"].Name)
	for _, u := range us {
		sub := p.Sub[u.key]
		for _, n := range nodesOf(p, u) {
			assert.True(t, sub.Nodes.Has(n), "%s's pod on %s, outside its leaf %s", u.name, n, sub.Name)
			assert.Equal(t, "s0", f.DomainOf(n, 2).Name)
		}
	}
	assert.Equal(t, "; each role replica in a domain of its own: decode-0 in leaf l01, prefill-0 in leaf l00",
		describeSubgroups(subgroupChoices(f, us, p)))
}

func TestAHardReplicaThatNoLeafHoldsIsRefusedWithItsName(t *testing.T) {
	f := fabric.FromLabels(labelTiers, testNodes())
	// Each spine has 24 free GPUs, two whole nodes, but no leaf with two whole nodes.
	us := []unitToPlace{replica("decode-0", 2, 8, hardLeaf)}
	p, msg, reason := chooseDomain(&choice{fabric: f, group: hardSpine, units: us, pool: pool(halfUsedLeaves)})
	assert.Nil(t, p)
	assert.Equal(t, "no spine (tier 2) can hold the group's 2 pods; the best, s0, holds 0 (no leaf in it can hold decode-0 (2 pods))", msg)
	assert.Equal(t, refusedNoSubgroupDomain, reason)

	// Without a group policy the group may go anywhere, but the replica still needs a leaf.
	p, msg, reason = chooseDomain(&choice{fabric: f, units: us, pool: pool(halfUsedLeaves)})
	assert.Nil(t, p)
	assert.Equal(t, "no leaf can hold decode-0 (2 pods)", msg)
	assert.Equal(t, refusedNoSubgroupDomain, reason)
}

func TestASoftReplicaSpreadsOnlyWhenNoLeafHoldsIt(t *testing.T) {
	f := fabric.FromLabels(labelTiers, testNodes())
	us := []unitToPlace{replica("decode-0", 2, 8, softLeaf), replica("prefill-0", 1, 4, softLeaf)}
	p, msg, _ := chooseDomain(&choice{fabric: f, group: hardSpine, units: us, pool: pool(halfUsedLeaves)})
	require.Empty(t, msg)
	require.NotNil(t, p)
	assert.Equal(t, "s0", p.Domain.Name)
	assert.Equal(t, "s0", p.Sub["sg/0/decode-0"].Name, "no leaf holds decode-0: it spreads over its group's spine")
	nodes := nodesOf(p, us[0])
	assert.NotEqual(t, f.DomainOf(nodes[0], 1).Name, f.DomainOf(nodes[1], 1).Name)
	assert.Equal(t, 1, p.Sub["sg/0/prefill-0"].Tier, "prefill-0 fits a leaf, so it keeps one")
	choices := subgroupChoices(f, us, p)
	require.Len(t, choices, 2)
	assert.False(t, choices[0].inTier)
	assert.True(t, choices[1].inTier)
	assert.Equal(t, "; each role replica in a domain of its own: decode-0 across spine s0 (no leaf could hold it), prefill-0 in leaf l00",
		describeSubgroups(choices))

	// With room in a leaf, the soft replica takes it.
	p, _, _ = chooseDomain(&choice{fabric: f, group: hardSpine, units: us[:1], pool: pool(nil)})
	require.NotNil(t, p)
	assert.Equal(t, 1, p.Sub["sg/0/decode-0"].Tier)
}

func TestReplicasKeepTheirLeavesWhenTheGroupFitsNoDomain(t *testing.T) {
	f := fabric.FromLabels(labelTiers, testNodes())
	// Three replicas of two whole nodes: six nodes, more than a spine has. A group without
	// a policy of its own (or a soft one) goes anywhere, each replica still in one leaf.
	for _, group := range []constraint{{}, {hard: false, limit: 2}} {
		us := []unitToPlace{replica("r-0", 2, 8, hardLeaf), replica("r-1", 2, 8, hardLeaf), replica("r-2", 2, 8, hardLeaf)}
		p, msg, _ := chooseDomain(&choice{fabric: f, group: group, units: us, pool: pool(nil)})
		require.Empty(t, msg)
		require.NotNil(t, p)
		assert.Nil(t, p.Domain, "no domain holds the group")
		used := map[string]bool{}
		for _, u := range us {
			sub := p.Sub[u.key]
			require.NotNil(t, sub, u.name)
			assert.Equal(t, 1, sub.Tier)
			for _, n := range nodesOf(p, u) {
				require.NotEmpty(t, n, "%s has a pod without a node", u.name)
				assert.True(t, sub.Nodes.Has(n), "%s's pod on %s, outside its leaf %s", u.name, n, sub.Name)
				assert.False(t, used[n], "two pods of 8 GPUs on %s", n)
				used[n] = true
			}
		}
	}
	// Without subgroup topologies nothing changes: the placement model places the group.
	p, msg, _ := chooseDomain(&choice{fabric: f, units: units("x", 6, 8), pool: pool(nil)})
	require.Empty(t, msg)
	assert.Nil(t, p.Domain)
	assert.Nil(t, p.Nodes)
}

func TestANewReplicaOfAPlacedGroupKeepsToItsPlacedPods(t *testing.T) {
	f := fabric.FromLabels(labelTiers, testNodes())
	// decode-0 has one pod on n-011 (leaf l01); its second pod joins it there. decode-1 is
	// new: it takes a leaf of its own in the group's spine s0, where the placed pods are.
	us := []unitToPlace{replica("decode-0", 1, 8, hardLeaf, "n-011"), replica("decode-1", 2, 8, hardLeaf)}
	p, msg, _ := chooseDomain(&choice{fabric: f, group: hardSpine, units: us, placed: []string{"n-011"}, pool: pool(map[string]int64{"n-011": 8})})
	require.Empty(t, msg)
	assert.Equal(t, "s0", p.Domain.Name)
	assert.Equal(t, "l01", p.Sub["sg/0/decode-0"].Name)
	assert.Equal(t, []string{"n-010"}, nodesOf(p, us[0]))
	assert.Equal(t, "l00", p.Sub["sg/0/decode-1"].Name)
	choices := subgroupChoices(f, us, p)
	assert.False(t, choices[0].fresh)
	assert.True(t, choices[1].fresh)
}

func TestTheEventListsAtMostEightReplicas(t *testing.T) {
	var choices []subgroupChoice
	for i := 0; i < 10; i++ {
		choices = append(choices, subgroupChoice{unit: fmt.Sprintf("decode-%d", i), tier: "leaf", domain: "l00", inTier: true})
	}
	note := describeSubgroups(choices)
	assert.True(t, strings.HasSuffix(note, "decode-7 in leaf l00, and 2 more"), note)
	assert.Empty(t, describeSubgroups(nil))
}

func TestAPodGoesToItsReplicasDomain(t *testing.T) {
	// decode has a leaf policy, server none: a decode pod goes to its replica's leaf, a
	// server pod to the group's spine, and a decode pod of a replica the plan did not give
	// a leaf is refused rather than let loose in the spine.
	leafPolicy := &volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.HardNetworkTopologyMode, HighestTierAllowed: ptr.To(1)}
	pg := &volcanov1beta1.PodGroup{Spec: volcanov1beta1.PodGroupSpec{SubGroupPolicy: []volcanov1beta1.SubGroupPolicySpec{
		{Name: "decode", NetworkTopology: leafPolicy, MatchLabelKeys: []string{workloadv1alpha1.RoleIDLabel},
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{workloadv1alpha1.RoleLabel: "decode"}}},
		{Name: "server", MatchLabelKeys: []string{workloadv1alpha1.RoleIDLabel},
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{workloadv1alpha1.RoleLabel: "server"}}},
	}}}
	req, err := placement.NewRequirement(pg)
	require.NoError(t, err)
	pod := func(role string, replica int) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d-0", role, replica),
			Labels: map[string]string{workloadv1alpha1.RoleLabel: role, workloadv1alpha1.RoleIDLabel: fmt.Sprintf("%s-%d", role, replica)}}}
	}
	spine := placement.NewTarget("s0", 2, []string{"n-000", "n-001", "n-010", "n-011"})
	leaf := placement.NewTarget("l01", 1, []string{"n-010", "n-011"})
	decode0, _ := req.UnitOf(pod("decode", 0))
	plan := &placement.Plan{Domain: spine, Sub: map[string]*placement.Target{decode0: leaf}}

	tgt, why := targetOf(pod("decode", 0), pg, req, plan)
	assert.Empty(t, why)
	assert.Equal(t, leaf, tgt)
	tgt, why = targetOf(pod("server", 0), pg, req, plan)
	assert.Empty(t, why)
	assert.Equal(t, spine, tgt)
	tgt, why = targetOf(pod("decode", 1), pg, req, plan)
	assert.Nil(t, tgt)
	assert.Equal(t, "the role replica of pod decode-1-0 has no domain of its tier planned yet", why)
}
