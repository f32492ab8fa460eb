package topology

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/pkg/fabric"
	"github.com/berth-sh/berth/pkg/plugins/placement"
	"github.com/berth-sh/berth/pkg/sim"
)

// nvlinkTiers is the shipped order: an optional NVLink tier below the leaf.
var nvlinkTiers = append([]fabric.LabelTier{{Name: "nvlink", Label: fabric.CliqueLabel, Optional: true}}, labelTiers...)

// cliqueNodes are testNodes with every leaf's two nodes in one NVLink domain, labelled as
// GPU feature discovery labels them (<clusterUUID>.<cliqueID>).
func cliqueNodes() []*corev1.Node {
	nodes := testNodes()
	for _, n := range nodes {
		n.Labels[fabric.CliqueLabel] = "0f3c6e2a-8d1b-4c55-9a7e-2b1d4e6f8a90." + n.Labels["leaf"]
	}
	return nodes
}

func TestAnOptionalNVLinkTierKeepsTheNumberingOfClustersWithoutIt(t *testing.T) {
	f := fabric.FromLabels(nvlinkTiers, testNodes())
	assert.Equal(t, []int{1, 2}, f.Tiers, "no node has a clique label: leaf is still tier 1")
	assert.Equal(t, 1, f.TierNames["leaf"])
	assert.Equal(t, 2, f.TierNames["spine"])
	nt := &volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.HardNetworkTopologyMode, HighestTierName: "nvlink"}
	_, err := resolve(nt, f, "PodGroup spec.networkTopology")
	require.Error(t, err)
	assert.Equal(t, `PodGroup spec.networkTopology.highestTierName "nvlink" is not a tier of the network: no node carries its label nvidia.com/gpu.clique (node labels: 1=leaf, 2=spine)`, err.Error())

	f = fabric.FromLabels(nvlinkTiers, cliqueNodes())
	assert.Equal(t, []int{1, 2, 3}, f.Tiers, "with clique labels the NVLink domain is the lowest tier")
	assert.Equal(t, 1, f.TierNames["nvlink"])
	assert.Equal(t, 1, f.TierKeys[fabric.CliqueLabel], "the Workload API names it by its label")
	assert.Equal(t, 2, f.TierNames["leaf"])
	assert.Equal(t, "0f3c6e2a-8d1b-4c55-9a7e-2b1d4e6f8a90.l01", f.DomainOf("n-011", 1).Name)
	c, err := resolve(nt, f, "PodGroup spec.networkTopology")
	require.NoError(t, err)
	assert.Equal(t, constraint{hard: true, limit: 1}, *c)

	// A tier that is not optional keeps its number even when empty, as before.
	f = fabric.FromLabels([]fabric.LabelTier{{Name: "nvlink", Label: fabric.CliqueLabel}, {Name: "leaf", Label: "leaf"}}, testNodes())
	assert.Equal(t, 2, f.TierNames["leaf"])
}

// place applies a plan to used, as binding its pods would.
func place(used map[string]int64, p *placement.Plan, gpus int64) {
	for _, n := range p.Nodes {
		used[n] += gpus
	}
}

// TestSmallGroupsPackIntoUsedNVLinkDomains: a stream of one-pod 4-GPU groups and two-pod
// 8-GPU groups (a whole 16-GPU domain each), every group hard inside one NVLink domain.
// Packing puts the small groups into the domain they already use, so each large group finds
// a whole domain; spreading the small groups over the domains leaves no whole domain, and
// the large group is refused with the numbers that say why.
func TestSmallGroupsPackIntoUsedNVLinkDomains(t *testing.T) {
	f := fabric.FromLabels(nvlinkTiers, cliqueNodes())
	nvlink := constraint{hard: true, limit: 1}
	used := map[string]int64{}
	domainsUsed := map[string]bool{}
	stream := []struct {
		name string
		pods int
		gpus int64
	}{{"s1", 1, 4}, {"L1", 2, 8}, {"s2", 1, 4}, {"s3", 1, 4}, {"L2", 2, 8}, {"s4", 1, 4}, {"L3", 2, 8}}
	for _, g := range stream {
		p, msg, _ := chooseDomain(&choice{fabric: f, group: nvlink, units: units(g.name, g.pods, g.gpus), pool: pool(used)})
		require.Empty(t, msg, "group %s", g.name)
		require.NotNil(t, p.Domain)
		assert.Equal(t, 1, p.Domain.Tier, "group %s in one NVLink domain", g.name)
		place(used, p, g.gpus)
		domainsUsed[p.Domain.Name] = true
	}
	assert.Len(t, domainsUsed, 4, "three large groups each took a whole domain, the small ones shared the fourth")
	small := f.DomainOf("n-000", 1).Nodes
	assert.Equal(t, int64(16), used[small[0]]+used[small[1]], "the four small groups fill one domain")

	// Spread: one small group in each domain. 12 GPUs are free in every domain, 48 in all,
	// yet no domain holds two 8-GPU pods.
	spread := map[string]int64{"n-000": 4, "n-010": 4, "n-100": 4, "n-110": 4}
	p, msg, reason := chooseDomain(&choice{fabric: f, group: nvlink, units: units("L", 2, 8), pool: pool(spread)})
	assert.Nil(t, p)
	assert.Equal(t, refusedNoDomain, reason)
	assert.Equal(t, "no nvlink (tier 1) can hold the group's 2 pods: they need 16 nvidia.com/gpu in one NVLink domain (nvidia.com/gpu.clique), the largest free one has 12; the best, 0f3c6e2a-8d1b-4c55-9a7e-2b1d4e6f8a90.l00, holds 1", msg)
}

// TestARoleInAnNVLinkDomainWhileTheGroupSpansASpine: Kthena's per-role topology asks for the
// NVLink tier for each role replica (its tensor-parallel pods) and the spine for the group.
func TestARoleInAnNVLinkDomainWhileTheGroupSpansASpine(t *testing.T) {
	f := fabric.FromLabels(nvlinkTiers, cliqueNodes())
	inNVLink := &constraint{hard: true, limit: 1}
	spine := constraint{hard: true, limit: f.TierNames["spine"]}
	// Every domain has 12 GPUs free: each 2×4-GPU replica fits in one, not both in one.
	used := map[string]int64{"n-000": 4, "n-010": 4, "n-100": 4, "n-110": 4}
	us := []unitToPlace{replica("decode-0", 2, 4, inNVLink), replica("prefill-0", 2, 4, inNVLink)}
	p, msg, _ := chooseDomain(&choice{fabric: f, group: spine, units: us, pool: pool(used)})
	require.Empty(t, msg)
	require.Equal(t, 3, p.Domain.Tier, "the group spans a spine")
	for _, u := range us {
		sub := p.Sub[u.key]
		require.NotNil(t, sub, u.name)
		assert.Equal(t, 1, sub.Tier, "%s has an NVLink domain of its own", u.name)
		for _, n := range nodesOf(p, u) {
			assert.True(t, sub.Nodes.Has(n), "%s's pod on %s, outside its NVLink domain %s", u.name, n, sub.Name)
		}
	}
	assert.NotEqual(t, p.Sub[us[0].key].Name, p.Sub[us[1].key].Name, "two domains, one per replica")
	assert.Equal(t, "; each role replica in a domain of its own: decode-0 in nvlink 0f3c6e2a-8d1b-4c55-9a7e-2b1d4e6f8a90.l00, prefill-0 in nvlink 0f3c6e2a-8d1b-4c55-9a7e-2b1d4e6f8a90.l01",
		describeSubgroups(subgroupChoices(f, us, p)))
}

// TestNVLinkHyperNodeTier: with HyperNodes, the NVLink domain is the tier the HyperNodes
// name nvlink (Volcano's convention: tier 1), here the sandbox's NVL72 fabric, one spine of
// two racks; a refusal speaks of NVLink domains from the tier name alone.
func TestNVLinkHyperNodeTier(t *testing.T) {
	nvl := sim.NVL72(1, 2)
	f, problems := fabric.FromHyperNodes(nvl.HyperNodes(), nvl.Nodes())
	require.Empty(t, problems)
	assert.Equal(t, []int{1, 2, 3}, f.Tiers)
	nt := &volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.HardNetworkTopologyMode, HighestTierName: "nvlink"}
	c, err := resolve(nt, f, "PodGroup spec.networkTopology")
	require.NoError(t, err)
	assert.Equal(t, 1, c.limit)
	require.Len(t, f.Domains[1], 2)
	assert.Len(t, f.Domains[1][0].Nodes, 18)

	var nodes []placement.StaticNode
	for _, n := range nvl.Nodes() {
		nodes = append(nodes, placement.StaticNode{Node: n, Free: placement.Resources{"nvidia.com/gpu": 4, corev1.ResourceCPU: 144000, corev1.ResourcePods: 110}})
	}
	p := placement.NewPool(placement.StaticSource(nodes...), costs(nil), nil)
	// 19 trays' worth: one more than a rack.
	_, msg, _ := chooseDomain(&choice{fabric: f, group: *c, units: units("tp76", 19, 4), pool: p})
	assert.Equal(t, "no nvlink (tier 1) can hold the group's 19 pods: they need 76 nvidia.com/gpu in one NVLink domain, the largest free one has 72; the best, nvlink-0, holds 18", msg)
	plan, msg, _ := chooseDomain(&choice{fabric: f, group: *c, units: units("tp72", 18, 4), pool: p})
	require.Empty(t, msg)
	assert.Equal(t, 1, plan.Domain.Tier)
}
