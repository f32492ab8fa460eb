package main

import (
	"math"
	"testing"
)

func TestStreamIsDeterministicAndFollowsWeights(t *testing.T) {
	weights, err := parseWeights("8:15,1:40,2:25,4:20", 8)
	if err != nil {
		t.Fatal(err)
	}
	a := streamGroups(7, weights, 8, 20000)
	b := streamGroups(7, weights, 8, 20000)
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
	if c := streamGroups(8, weights, 8, 50); c[0] == a[0] && c[1] == a[1] && c[2] == a[2] {
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
