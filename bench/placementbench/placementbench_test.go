package main

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/berth-sh/berth/pkg/sim"
)

func TestStreamIsDeterministicAndFollowsWeights(t *testing.T) {
	weights, err := parseWeights("8:15,1:40,2:25,4:20", 8)
	if err != nil {
		t.Fatal(err)
	}
	a := streamGroups(7, weights, 8, 20000, nil)
	b := streamGroups(7, weights, 8, 20000, nil)
	counts := map[int]int{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("group %d differs between two streams of one seed: %v, %v", i, a[i], b[i])
		}
		if a[i].index != i || a[i].pods < 1 || a[i].pods > 8 {
			t.Fatalf("group %d: %+v", i, a[i])
		}
		counts[a[i].gpus]++
	}
	for gpus, want := range map[int]float64{1: 0.40, 2: 0.25, 4: 0.20, 8: 0.15} {
		if got := float64(counts[gpus]) / float64(len(a)); math.Abs(got-want) > 0.02 {
			t.Errorf("%d-GPU groups: share %.3f, want about %.2f", gpus, got, want)
		}
	}
	if c := streamGroups(8, weights, 8, 50, nil); c[0] == a[0] && c[1] == a[1] && c[2] == a[2] {
		t.Errorf("seeds 7 and 8 start alike")
	}
}

func TestParseWeightsRejectsBadInput(t *testing.T) {
	for _, s := range []string{"", "1", "1:x", "16:1", "0:1", "1:0,2:0", "1:-1"} {
		if _, err := parseWeights(s, 8); err == nil {
			t.Errorf("parseWeights(%q): no error", s)
		}
	}
}

func TestLedgerCountsDomainsOverMultiPodGroups(t *testing.T) {
	f := newFabric(2, 2, 2, 8) // gpu-0..7: leaf = n/2, spine = n/4
	l := newLedger(f)
	l.add(groupSpec{pods: 1, gpus: 8}, []string{"gpu-0"})                   // single pod: not counted
	l.add(groupSpec{pods: 2, gpus: 2}, []string{"gpu-2", "gpu-3"})          // one leaf
	l.add(groupSpec{pods: 2, gpus: 2}, []string{"gpu-2", "gpu-1"})          // two leaves, one spine
	l.add(groupSpec{pods: 3, gpus: 1}, []string{"gpu-3", "gpu-4", "gpu-4"}) // two spines
	if got, want := l.spread(), (spread{multiPod: 3, oneLeaf: 1, manySpines: 1}); got != want {
		t.Errorf("spread = %+v, want %+v", got, want)
	}
	if got := l.gpus(); got != 8+4+4+3 {
		t.Errorf("gpus = %d", got)
	}
	if got := l.pods(); got != 8 {
		t.Errorf("pods = %d", got)
	}
	// Used: gpu-0, gpu-2, gpu-3, gpu-1, gpu-4 of 8.
	if got := l.freeNodes(); got != 3 {
		t.Errorf("freeNodes = %d, want 3", got)
	}
}

// TestNVLinkDomainsWithDRAGPUs runs a tiny NVL72 bench: two NVLink domains of 4 nodes of 4
// DRA GPUs, groups of 1–3 whole-node pods claiming their GPUs through one
// ResourceClaimTemplate. Berth's groups ask for one domain: every multi-pod group it places
// must be inside one, and neither scheduler may fail a group the fit check places.
func TestNVLinkDomainsWithDRAGPUs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and both schedulers (about 20 s); runs in make test, which does not pass -short")
	}
	f := newFabricOf(sim.Fabric{Spines: 1, LeavesPerSpine: 2, NodesPerLeaf: 4, NodesPerNVLink: 4, GPUsPerNode: 4,
		GPUProducts: []string{"gb200"}, CPU: "144", Memory: "960Gi"}, true)
	if got := len(f.nodes); got != 8 || !f.hasDomains() {
		t.Fatalf("fabric: %d nodes, domains %v", got, f.domain)
	}
	o := options{fabric: f, seed: 1, repeat: 1, weights: "4:1", maxPods: 3, maxGroups: 10,
		modes: []mode{berthMode, defaultMode}, timeout: 30 * time.Second, stopAfter: 3}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	report, results, err := runAll(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + report)
	berth := results[berthMode][0]
	if !berth.bounded || !berth.ceiling.exact {
		t.Fatalf("no bounds for a stream of whole-node pods on NVLink domains: %+v", berth)
	}
	// Berth keeps whole domains free by filling the fullest domain that holds a group: on
	// this stream it must reach its first failure exactly where best fit does, and no
	// one-domain scheduler can pass the ceiling.
	if berth.gpusAtFirst != berth.bestFit.gpus || berth.gpusAtFirst > berth.ceiling.gpus {
		t.Errorf("berth: %d GPUs at its first failure; best fit %d, ceiling %d", berth.gpusAtFirst, berth.bestFit.gpus, berth.ceiling.gpus)
	}
	if berth.spread.multiPod == 0 || berth.spread.oneDomain != berth.spread.multiPod {
		t.Errorf("berth: %d of %d multi-pod groups inside one NVLink domain, want all (and some)",
			berth.spread.oneDomain, berth.spread.multiPod)
	}
	for m, rs := range results {
		r := rs[0]
		if r.groupsPlaced == 0 || r.gpusAtEnd == 0 {
			t.Errorf("%s placed nothing: %+v", m, r)
		}
		if r.feasibleFailures != 0 {
			t.Errorf("%s failed %d groups that the fit check places", m, r.feasibleFailures)
		}
	}
}

func TestFitCheckNeedsRoomInOneDomain(t *testing.T) {
	f := newFabricOf(sim.Fabric{Spines: 1, LeavesPerSpine: 2, NodesPerLeaf: 3, NodesPerNVLink: 3, GPUsPerNode: 4,
		GPUProducts: []string{"gb200"}}, true)
	l := newLedger(f)
	l.add(groupSpec{pods: 2, gpus: 4}, []string{f.nodes[0], f.nodes[1]}) // domain 0: 1 node free
	l.add(groupSpec{pods: 1, gpus: 4}, []string{f.nodes[3]})             // domain 1: 2 nodes free
	if !f.fits(l, groupSpec{pods: 2, gpus: 4}) {
		t.Error("2 whole nodes: domain 1 has them")
	}
	if f.fits(l, groupSpec{pods: 3, gpus: 4}) {
		t.Error("3 whole nodes: 3 are free, but in no one domain")
	}
	if !f.fits(l, groupSpec{pods: 4, gpus: 2}) {
		t.Error("4 pods of 2 GPUs: domain 1's two free nodes hold them")
	}
}

// TestBoundsOnAKnownStream: two domains of 5 nodes, groups of 2, 2, 3, 3 nodes. Best fit
// puts both 2s into one domain and has no room for the second 3; packed 2+3 and 2+3, all
// four fit, which the exhaustive ceiling finds.
func TestBoundsOnAKnownStream(t *testing.T) {
	groups := []groupSpec{{pods: 2, gpus: 4}, {pods: 2, gpus: 4}, {pods: 3, gpus: 4}, {pods: 3, gpus: 4}, {pods: 1, gpus: 4}}
	if got := bestFit([]int{5, 5}, groups, 4); got.first != 3 || got.gpus != 7*4 {
		t.Errorf("best fit: %+v, want first failure at group 3 with 28 GPUs", got)
	}
	if got := ceiling([]int{5, 5}, groups, 4); got.first != 4 || got.gpus != 10*4 || !got.exact {
		t.Errorf("ceiling: %+v, want first failure at group 4 (more pods than nodes) with 40 GPUs", got)
	}
	if got := ceiling([]int{5, 5}, groups[:4], 4); got.first != 4 || got.gpus != 40 {
		t.Errorf("ceiling of a stream that fits whole: %+v", got)
	}
	f := newFabricOf(sim.Fabric{Spines: 1, LeavesPerSpine: 2, NodesPerLeaf: 5, NodesPerNVLink: 5, GPUsPerNode: 4,
		GPUProducts: []string{"gb200"}}, true)
	if _, _, ok := f.bounds(groups); !ok {
		t.Error("bounds: not computed for whole-node pods on NVLink domains")
	}
	if _, _, ok := f.bounds(append(groups, groupSpec{pods: 1, gpus: 2})); ok {
		t.Error("bounds: computed for a stream with pods smaller than a node")
	}
}

func TestGroupPodsFollowWeights(t *testing.T) {
	w, _ := parseWeights("4:1", 4)
	pw, err := parseGroupPods("1:1,18:3", 18)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[int]int{}
	for _, g := range streamGroups(3, w, 18, 4000, pw) {
		counts[g.pods]++
	}
	if len(counts) != 2 || math.Abs(float64(counts[18])/4000-0.75) > 0.03 {
		t.Errorf("pods per group: %v, want 1 and 18 in 1:3", counts)
	}
	if _, err := parseGroupPods("19:1", 18); err == nil {
		t.Error("19 pods on domains of 18: no error")
	}
}
