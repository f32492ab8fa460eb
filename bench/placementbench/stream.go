package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// groupSpec is one group of the stream: pods pods, each asking gpus GPUs.
type groupSpec struct {
	index int
	pods  int
	gpus  int
}

func (g groupSpec) String() string { return fmt.Sprintf("%d×%d GPU", g.pods, g.gpus) }

// sizeWeight is the relative weight of one size in the stream: GPUs per pod, or pods per group.
type sizeWeight struct {
	size   int
	weight int
}

// parseWeights reads "1:40,2:25,4:20,8:15".
func parseWeights(s string, gpusPerNode int) ([]sizeWeight, error) {
	return parseSizes(s, gpusPerNode, "gpus")
}

// parseGroupPods reads the pods-per-group weights ("1:1,2:1,4:1,8:1,16:1,18:1"); empty means
// 1..maxPods pods, uniform.
func parseGroupPods(s string, maxPods int) ([]sizeWeight, error) {
	if s == "" {
		return nil, nil
	}
	return parseSizes(s, maxPods, "pods")
}

// parseSizes reads "size:weight,..." with sizes 1..most.
func parseSizes(s string, most int, what string) ([]sizeWeight, error) {
	var out []sizeWeight
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, fmt.Errorf("weight %q: want %s:weight", part, what)
		}
		size, err1 := strconv.Atoi(k)
		weight, err2 := strconv.Atoi(v)
		if err1 != nil || err2 != nil || size < 1 || size > most || weight < 0 {
			return nil, fmt.Errorf("weight %q: want %s (1..%d):weight (>=0)", part, what, most)
		}
		out = append(out, sizeWeight{size, weight})
	}
	total := 0
	for _, w := range out {
		total += w.weight
	}
	if total == 0 {
		return nil, fmt.Errorf("weights %q add up to 0", s)
	}
	slices.SortFunc(out, func(a, b sizeWeight) int { return a.size - b.size })
	return out, nil
}

// stream draws groups deterministically from seed: 1..maxPods pods (uniform), or a number
// of pods drawn by weight (podWeights), every pod of a group asking the same GPUs, drawn by
// weight. Every mode replays the same stream.
type stream struct {
	rng        *rand.Rand
	weights    []sizeWeight
	podWeights []sizeWeight // nil: uniform 1..maxPods
	maxPods    int
	next       int
}

func newStream(seed uint64, weights []sizeWeight, maxPods int, podWeights []sizeWeight) *stream {
	return &stream{rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), weights: weights, maxPods: maxPods, podWeights: podWeights}
}

func (s *stream) group() groupSpec {
	g := groupSpec{index: s.next}
	if s.podWeights == nil {
		g.pods = 1 + s.rng.IntN(s.maxPods)
	} else {
		g.pods = draw(s.rng, s.podWeights)
	}
	s.next++
	g.gpus = draw(s.rng, s.weights)
	return g
}

// draw picks a size by weight.
func draw(rng *rand.Rand, sizes []sizeWeight) int {
	total := 0
	for _, w := range sizes {
		total += w.weight
	}
	r := rng.IntN(total)
	for _, w := range sizes {
		if r < w.weight {
			return w.size
		}
		r -= w.weight
	}
	return sizes[len(sizes)-1].size
}

// streamGroups returns the first n groups of the stream for seed (podWeights nil: 1..maxPods
// pods, uniform).
func streamGroups(seed uint64, weights []sizeWeight, maxPods, n int, podWeights []sizeWeight) []groupSpec {
	s := newStream(seed, weights, maxPods, podWeights)
	out := make([]groupSpec, n)
	for i := range out {
		out[i] = s.group()
	}
	return out
}
