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

// gpuWeight is the relative weight of one GPUs-per-pod size in the stream.
type gpuWeight struct {
	gpus   int
	weight int
}

// parseWeights reads "1:40,2:25,4:20,8:15".
func parseWeights(s string, gpusPerNode int) ([]gpuWeight, error) {
	var out []gpuWeight
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), ":")
		if !ok {
			return nil, fmt.Errorf("weight %q: want gpus:weight", part)
		}
		gpus, err1 := strconv.Atoi(k)
		weight, err2 := strconv.Atoi(v)
		if err1 != nil || err2 != nil || gpus < 1 || gpus > gpusPerNode || weight < 0 {
			return nil, fmt.Errorf("weight %q: want gpus (1..%d):weight (>=0)", part, gpusPerNode)
		}
		out = append(out, gpuWeight{gpus, weight})
	}
	total := 0
	for _, w := range out {
		total += w.weight
	}
	if total == 0 {
		return nil, fmt.Errorf("weights %q add up to 0", s)
	}
	slices.SortFunc(out, func(a, b gpuWeight) int { return a.gpus - b.gpus })
	return out, nil
}

// stream draws groups deterministically from seed: 1..maxPods pods (uniform), every pod
// of a group asking the same GPUs, drawn by weight. Every mode replays the same stream.
type stream struct {
	rng     *rand.Rand
	weights []gpuWeight
	total   int
	maxPods int
	next    int
}

func newStream(seed uint64, weights []gpuWeight, maxPods int) *stream {
	s := &stream{rng: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)), weights: weights, maxPods: maxPods}
	for _, w := range weights {
		s.total += w.weight
	}
	return s
}

func (s *stream) group() groupSpec {
	g := groupSpec{index: s.next, pods: 1 + s.rng.IntN(s.maxPods)}
	s.next++
	r := s.rng.IntN(s.total)
	for _, w := range s.weights {
		if r < w.weight {
			g.gpus = w.gpus
			break
		}
		r -= w.weight
	}
	return g
}

// streamGroups returns the first n groups of the stream for seed.
func streamGroups(seed uint64, weights []gpuWeight, maxPods, n int) []groupSpec {
	s := newStream(seed, weights, maxPods)
	out := make([]groupSpec, n)
	for i := range out {
		out[i] = s.group()
	}
	return out
}
