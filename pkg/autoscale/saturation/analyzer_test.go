package saturation

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAnalyze(t *testing.T) {
	cfg := DefaultConfig()
	for _, tc := range []struct {
		name           string
		replicas       []Replica
		nonSaturated   int
		spareKv        float64
		spareQueue     float64
		up, downSafe   bool
		upReasonSubstr string
	}{
		{name: "nothing reported"},
		{
			// One idle replica: plenty of spare, but one replica cannot give one up.
			name:         "one idle replica",
			replicas:     []Replica{{Variant: "a"}},
			nonSaturated: 1, spareKv: 0.8, spareQueue: 5,
		},
		{
			// Two idle replicas: spread over one, spare stays 0.8 and 5.
			name:         "two idle replicas",
			replicas:     []Replica{{Variant: "a"}, {Variant: "a"}},
			nonSaturated: 2, spareKv: 0.8, spareQueue: 5, downSafe: true,
		},
		{
			// Queue 6 >= 5 saturates the only replica: no spare at all.
			name:     "saturated by the queue",
			replicas: []Replica{{Variant: "a", QueueLength: 6}},
			up:       true, upReasonSubstr: "spare KV cache 0.000 < 0.100 and spare queue 0.00 < 3.00",
		},
		{
			// KV 0.8 is the threshold itself: saturated.
			name:         "saturated by the KV cache",
			replicas:     []Replica{{Variant: "a", KvCacheUsage: 0.8}, {Variant: "a", KvCacheUsage: 0.1}},
			nonSaturated: 1, spareKv: 0.7, spareQueue: 5, up: false,
		},
		{
			// Queues 3 and 2: spare 2 and 3, average 2.5 < 3.
			name:         "queue spare below the trigger",
			replicas:     []Replica{{Variant: "a", QueueLength: 3}, {Variant: "b", QueueLength: 2}},
			nonSaturated: 2, spareKv: 0.8, spareQueue: 2.5, up: true, upReasonSubstr: "spare queue 2.50 < 3.00",
		},
		{
			// KV 0.75 and 0.65: spare 0.05 and 0.15, average 0.1: not below 0.1; queue fine.
			// One fewer: load 0.7 × 2 = 1.4 > 0.8: unsafe.
			name:         "KV spare at the trigger",
			replicas:     []Replica{{Variant: "a", KvCacheUsage: 0.75}, {Variant: "a", KvCacheUsage: 0.65}},
			nonSaturated: 2, spareKv: 0.1, spareQueue: 5,
		},
		{
			// Three replicas with queue 1: load 1 each, over two 1.5, spare 3.5 >= 3; KV 0.2
			// each, over two 0.3, spare 0.5: safe.
			name: "three lightly loaded",
			replicas: []Replica{{Variant: "a", QueueLength: 1, KvCacheUsage: 0.2}, {Variant: "a", QueueLength: 1, KvCacheUsage: 0.2},
				{Variant: "b", QueueLength: 1, KvCacheUsage: 0.2}},
			nonSaturated: 3, spareKv: 0.6, spareQueue: 4, downSafe: true,
		},
		{
			// Queue 1.5 average over 2: over one 3, spare 2 < 3: unsafe.
			name:         "two with some queue",
			replicas:     []Replica{{Variant: "a", QueueLength: 1}, {Variant: "a", QueueLength: 2}},
			nonSaturated: 2, spareKv: 0.8, spareQueue: 3.5,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := Analyze(tc.replicas, map[string]float64{"a": 10, "b": 20}, cfg)
			assert.Equal(t, len(tc.replicas), a.Replicas)
			assert.Equal(t, tc.nonSaturated, a.NonSaturated)
			assert.InDelta(t, tc.spareKv, a.AvgSpareKv, 1e-9)
			assert.InDelta(t, tc.spareQueue, a.AvgSpareQueue, 1e-9)
			assert.Equal(t, tc.up, a.ShouldScaleUp, a.ScaleUpReason)
			assert.Equal(t, tc.downSafe, a.ScaleDownSafe, a.ScaleDownUnsafeBy)
			assert.Contains(t, a.ScaleUpReason, tc.upReasonSubstr)
		})
	}
}

func TestAnalyzeGroupsVariants(t *testing.T) {
	a := Analyze([]Replica{
		{Variant: "h100", QueueLength: 6}, {Variant: "a100", QueueLength: 1}, {Variant: "a100", KvCacheUsage: 0.9},
	}, map[string]float64{"h100": 80, "a100": 40}, DefaultConfig())
	assert.Equal(t, []VariantAnalysis{
		{Variant: "a100", Replicas: 2, NonSaturated: 1, Saturated: 1, Cost: 40},
		{Variant: "h100", Replicas: 1, NonSaturated: 0, Saturated: 1, Cost: 80},
	}, a.Variants)
}

func TestTargets(t *testing.T) {
	costs := map[string]float64{"cheap": 5, "dear": 20, "dear2": 20}
	up := func(names ...string) Analysis {
		var rs []Replica
		for _, n := range names {
			rs = append(rs, Replica{Variant: n, QueueLength: 9})
		}
		return Analyze(rs, costs, DefaultConfig())
	}
	idle := func(names ...string) Analysis {
		var rs []Replica
		for _, n := range names {
			rs = append(rs, Replica{Variant: n})
		}
		return Analyze(rs, costs, DefaultConfig())
	}
	for _, tc := range []struct {
		name   string
		a      Analysis
		states []VariantState
		want   map[string]int
		reason string
	}{
		{
			name:   "no replica reported: current stands",
			a:      Analyze(nil, costs, DefaultConfig()),
			states: []VariantState{{Variant: "cheap", Current: 2}},
			want:   map[string]int{"cheap": 2}, reason: "no replica reported",
		},
		{
			name:   "scale up goes to the cheapest",
			a:      up("cheap", "cheap", "dear"),
			states: []VariantState{{Variant: "cheap", Current: 2, Desired: 2}, {Variant: "dear", Current: 1}},
			want:   map[string]int{"cheap": 3, "dear": 1}, reason: "one more replica of cheap (cost 5)",
		},
		{
			name:   "the cheapest with replicas starting is skipped",
			a:      up("cheap", "dear"),
			states: []VariantState{{Variant: "cheap", Current: 1, Pending: 1}, {Variant: "dear", Current: 1}},
			want:   map[string]int{"cheap": 1, "dear": 2}, reason: "one more replica of dear",
		},
		{
			name:   "the cheapest that cannot land is skipped (placement-aware)",
			a:      up("cheap", "cheap", "dear"),
			states: []VariantState{{Variant: "cheap", Current: 2, Full: true}, {Variant: "dear", Current: 1}},
			want:   map[string]int{"cheap": 2, "dear": 2}, reason: "one more replica of dear (cost 20); capacity-limited: no more replica of cheap fits now",
		},
		{
			name:   "no variant can land: nothing",
			a:      up("cheap", "dear"),
			states: []VariantState{{Variant: "cheap", Current: 1, Full: true}, {Variant: "dear", Current: 1, Full: true}},
			want:   map[string]int{"cheap": 1, "dear": 1}, reason: "capacity-limited: no more replica of cheap, dear fits now",
		},
		{
			name:   "equal costs: the first by name scales up",
			a:      up("dear2", "dear"),
			states: []VariantState{{Variant: "dear", Current: 1}, {Variant: "dear2", Current: 1}},
			want:   map[string]int{"dear": 2, "dear2": 1},
		},
		{
			name:   "scale down takes from the dearest above one",
			a:      idle("cheap", "cheap", "dear"),
			states: []VariantState{{Variant: "cheap", Current: 2}, {Variant: "dear", Current: 1}},
			want:   map[string]int{"cheap": 1, "dear": 1}, reason: "one replica fewer of cheap",
		},
		{
			name:   "equal costs: the last by name scales down",
			a:      idle("dear", "dear", "dear2", "dear2"),
			states: []VariantState{{Variant: "dear", Current: 2}, {Variant: "dear2", Current: 2}},
			want:   map[string]int{"dear": 2, "dear2": 1},
		},
		{
			name:   "never below one replica",
			a:      idle("cheap", "dear"),
			states: []VariantState{{Variant: "cheap", Current: 1}, {Variant: "dear", Current: 1}},
			want:   map[string]int{"cheap": 1, "dear": 1}, reason: "every variant is at one replica",
		},
		{
			name:   "desired not reached yet: hold it",
			a:      up("cheap"),
			states: []VariantState{{Variant: "cheap", Current: 1, Desired: 2}},
			want:   map[string]int{"cheap": 2}, reason: "cheap: desired 2, current 1",
		},
		{
			name:   "a replica not reporting holds the whole model",
			a:      up("cheap", "dear"),
			states: []VariantState{{Variant: "cheap", Current: 2}, {Variant: "dear", Current: 1}},
			want:   map[string]int{"cheap": 2, "dear": 1}, reason: "cheap: 1 of 2 replicas report",
		},
		{
			name:   "every variant starting: nothing",
			a:      up("cheap"),
			states: []VariantState{{Variant: "cheap", Current: 1, Pending: 1}},
			want:   map[string]int{"cheap": 1}, reason: "every variant has replicas starting",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Targets(tc.a, tc.states)
			assert.Equal(t, tc.want, d.Targets)
			assert.Contains(t, d.Reason, tc.reason)
		})
	}
}

func TestConfigValidate(t *testing.T) {
	require.NoError(t, DefaultConfig().Validate())
	c := DefaultConfig()
	c.KvSpareTrigger = 0.9
	assert.ErrorContains(t, c.Validate(), "kvCacheThreshold (0.80) should be >= kvSpareTrigger (0.90)")
}
