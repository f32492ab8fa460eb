package autoscale

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestRecommend(t *testing.T) {
	m := Metric{Name: "vllm:num_requests_waiting", Target: 10}
	for _, tc := range []struct {
		name    string
		current int32
		tol     float64
		s       Sample
		want    int32
		ok      bool
	}{
		{"no pod reported", 3, 0.1, Sample{Missing: 3}, 0, false},
		{"at target", 4, 0.1, Sample{Sum: 40, Reported: 4}, 4, true},
		{"inside tolerance above", 4, 0.1, Sample{Sum: 43.9, Reported: 4}, 4, true},
		{"inside tolerance below", 4, 0.1, Sample{Sum: 36.1, Reported: 4}, 4, true},
		{"at the tolerance edge scales (|ratio-1| >= tolerance)", 10, 0.1, Sample{Sum: 110, Reported: 10}, 11, true},
		{"zero tolerance scales on any excess", 4, 0, Sample{Sum: 41, Reported: 4}, 5, true},
		{"scale up rounds up", 2, 0.1, Sample{Sum: 50, Reported: 2}, 5, true},
		{"scale down", 4, 0.1, Sample{Sum: 8, Reported: 4}, 1, true},
		{"idle goes to zero", 4, 0.1, Sample{Sum: 0, Reported: 4}, 0, true},
		{"float noise does not add a replica", 3, 0, Sample{Sum: 20.0000000001, Reported: 2}, 3, true},
		// 2 of 4 pods still starting: they count as idle, so the two busy pods' load is
		// spread over four: 60/4 = 15 per pod -> ceil(4 * 1.5) = 6, not ceil(4 * 3) = 12.
		{"missing pods count as idle when scaling up", 4, 0.1, Sample{Sum: 60, Reported: 2, Missing: 2}, 6, true},
		// Counting the starting pods as idle brings the average to target: hold.
		{"missing pods can cancel a scale-up", 4, 0.1, Sample{Sum: 40, Reported: 2, Missing: 2}, 4, true},
		// Unread pods count as at target when scaling down: (0 + 2*10)/4 = 5 -> 2.
		{"missing pods count as at target when scaling down", 4, 0.1, Sample{Sum: 0, Reported: 2, Missing: 2}, 2, true},
		{"missing pods can cancel a scale-down", 4, 0.1, Sample{Sum: 18, Reported: 2, Missing: 2}, 4, true},
		{"zero current stays zero", 0, 0.1, Sample{Sum: 50, Reported: 1}, 0, true},
		// A Prometheus query's value is the whole target's: ceil(value / target).
		{"external asks for value over target", 2, 0.1, Sample{Sum: 45, Reported: 1, External: true}, 5, true},
		{"external inside tolerance holds", 4, 0.1, Sample{Sum: 43, Reported: 1, External: true}, 4, true},
		{"external scales down", 4, 0.1, Sample{Sum: 12, Reported: 1, External: true}, 2, true},
		{"external scales up from zero", 0, 0.1, Sample{Sum: 15, Reported: 1, External: true}, 2, true},
		{"external zero goes to zero", 3, 0.1, Sample{Sum: 0, Reported: 1, External: true}, 0, true},
		{"external negative counts as zero", 3, 0.1, Sample{Sum: -4, Reported: 1, External: true}, 0, true},
		{"external unread", 3, 0.1, Sample{External: true}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Recommend(tc.current, tc.tol, m, tc.s)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestRecommendAllTakesTheMetricThatNeedsMost(t *testing.T) {
	p := Policy{Tolerance: 0.1, Metrics: []Metric{{"waiting", 10}, {"kv", 0.8}, {"unread", 1}}}
	got, per, ok := RecommendAll(4, p, map[string]Sample{
		"waiting": {Sum: 20, Reported: 4},  // asks for 2
		"kv":      {Sum: 3.6, Reported: 4}, // 0.9 / 0.8 -> ceil(4.5) = 5
	})
	assert.True(t, ok)
	assert.Equal(t, int32(5), got)
	assert.Equal(t, []int32{2, 5, -1}, per)

	_, _, ok = RecommendAll(4, p, map[string]Sample{})
	assert.False(t, ok, "no metric read: no recommendation")
}
