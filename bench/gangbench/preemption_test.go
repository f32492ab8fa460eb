package main

import "testing"

func TestVictimsFillThePoolExactly(t *testing.T) {
	for _, n := range []int{1, 16, 64, 128} {
		sum := 0
		for _, k := range victimSizes(1, n) {
			if k < 1 || k > 4 {
				t.Errorf("n=%d: a gang of %d pods", n, k)
			}
			sum += k
		}
		if sum != n {
			t.Errorf("n=%d: the gangs fill %d nodes", n, sum)
		}
	}
}

func TestFewestCoveringTakesTheLargestGangsFirst(t *testing.T) {
	if got := fewestCovering([]int{1, 4, 2, 3, 1}, 5); got != 2 {
		t.Errorf("fewest gangs covering 5 nodes of [1 4 2 3 1] = %d, want 2 (4+3)", got)
	}
	if got := fewestCovering([]int{2, 2}, 4); got != 2 {
		t.Errorf("fewest covering 4 of [2 2] = %d, want 2", got)
	}
}
