package quantile

import (
	"testing"
	"time"
)

func TestNearestRank(t *testing.T) {
	ten := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct {
		q    float64
		want int
	}{{0.01, 1}, {0.1, 1}, {0.11, 2}, {0.5, 5}, {0.9, 9}, {0.91, 10}, {0.99, 10}, {1, 10}} {
		if got := NearestRank(ten, c.q); got != c.want {
			t.Errorf("NearestRank(1..10, %v) = %d, want %d", c.q, got, c.want)
		}
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	if got := NearestRank(hundred, 0.07); got != 7 { // 0.07×100 is 7.000000000000001 in float64
		t.Errorf("NearestRank(1..100, 0.07) = %d, want 7", got)
	}
	if got := NearestRank([]time.Duration(nil), 0.9); got != 0 {
		t.Errorf("NearestRank(none) = %v, want 0", got)
	}
	if got := Of([]time.Duration{3, 1, 2}, 0.5); got != 2 {
		t.Errorf("Of(3,1,2; 0.5) = %v, want 2", got)
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(c.xs); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
	xs := []float64{3, 1, 2}
	Median(xs)
	if xs[0] != 3 {
		t.Errorf("Median sorted its argument: %v", xs)
	}
}
