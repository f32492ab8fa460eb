package binding

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale"
)

func fitsTarget(key string, replicas, min int32, fits string, until time.Time) *target {
	t := &target{key: key, min: min, scale: &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}}
	readFits(t, map[string]string{
		workloadv1alpha1.GroupsThatFitAnnotation:         fits,
		workloadv1alpha1.GroupsThatFitUntilAnnotation:    until.Format(time.RFC3339Nano),
		workloadv1alpha1.GroupsThatFitReplicasAnnotation: "3",
	}, time.Unix(1000, 0))
	return t
}

func TestCapOfReadsOnlyFreshCounts(t *testing.T) {
	fresh, stale := time.Unix(1010, 0), time.Unix(990, 0)
	assert.Equal(t, int32(5), capOf(fitsTarget("a", 3, 0, "2", fresh)), "current + fits")
	assert.Equal(t, int32(3), capOf(fitsTarget("a", 3, 0, "0", fresh)), "never below current")
	assert.Equal(t, int32(6), capOf(fitsTarget("a", 6, 0, "0", fresh)), "never below current")
	assert.Equal(t, int32(5), capOf(fitsTarget("a", 4, 0, "2", fresh)), "a scale-up since the count is not counted twice")
	assert.Equal(t, int32(7), capOf(fitsTarget("a", 0, 7, "1", fresh)), "never below min")
	assert.Equal(t, int32(-1), capOf(fitsTarget("a", 3, 0, "2", stale)), "stale: blind")
	assert.Equal(t, int32(-1), capOf(fitsTarget("a", 3, 0, "x", fresh)), "unreadable: blind")
	assert.Equal(t, int32(-1), capOf(&target{fits: -1}), "absent: blind")

	assert.Equal(t, int32(5), capped(10, 0, 5))
	assert.Equal(t, int32(10), capped(10, 0, -1))
	assert.Equal(t, int32(2), capped(10, 2, 0))
}

func TestReportCapacitySaysWhatFits(t *testing.T) {
	fresh := time.Unix(1010, 0)
	a, b := fitsTarget("cheap", 2, 0, "0", fresh), fitsTarget("dear", 0, 0, "3", fresh)
	rep := reportCapacity([]*target{a, b}, []int32{2, 2}, []int32{4, 0})
	assert.True(t, rep.limited)
	assert.Equal(t, "capacity-limited: 0 more groups of cheap fit, 3 more groups of dear fit", rep.message)
	rep = reportCapacity([]*target{a, b}, []int32{2, 0}, []int32{2, 0})
	assert.False(t, rep.limited)
	assert.Equal(t, "capacity: 0 more groups of cheap fit, 3 more groups of dear fit", rep.message)
	assert.False(t, reportCapacity([]*target{{fits: -1}}, []int32{1}, []int32{1}).known)
}

// A status whose only change is the CapacityLimited message (new counts) is written at once;
// one whose only change is the Ready message (live readings) waits for the minute.
func TestCapacityMessageIsWrittenAtOnce(t *testing.T) {
	now := time.Now()
	status := func(ready, capacity string) *workloadv1alpha1.AutoscalingPolicyBindingStatus {
		return &workloadv1alpha1.AutoscalingPolicyBindingStatus{
			LastDecisionTime: &metav1.Time{Time: now},
			Conditions: []metav1.Condition{
				{Type: ConditionReady, Status: metav1.ConditionTrue, Reason: "Decided", Message: ready},
				{Type: ConditionCapacityLimited, Status: metav1.ConditionTrue, Reason: ReasonCapacityLimited, Message: capacity},
			},
		}
	}
	a := status("2.5 per pod", "capacity-limited: 0 more groups of a fit, 2 more groups of b fit")
	if !equalStatus(a, status("2.7 per pod", "capacity-limited: 0 more groups of a fit, 2 more groups of b fit")) {
		t.Error("a new reading alone should wait for the minute")
	}
	if equalStatus(a, status("2.5 per pod", "capacity-limited: 0 more groups of a fit, 0 more groups of b fit")) {
		t.Error("new counts should be written at once")
	}
}

// Two roles whose scale-ups each fit alone but not together are lowered to the largest
// pair that fits together and keeps their ratio.
func TestFitTogetherKeepsTheRatio(t *testing.T) {
	// prefill:decode within [0.5, 1]; 1:1 now, the metrics and the ratio asked for 2:3.
	decode := &roleDecision{name: "decode", current: 1, decided: 3, final: 3, fitsBase: 1, blind: 3}
	prefill := &roleDecision{name: "prefill", current: 1, decided: 1, final: 2, fitsBase: 1, blind: 1}
	// With 0, 1, 2 more decode replicas, 2, 1, 0 more prefill ones fit.
	along := []int32{2, 1, 0}
	ratio := &autoscale.Ratio{Min: 0.5, Max: 1}
	if !fitTogether(decode, prefill, along, ratio, false) {
		t.Fatal("3 decode and 2 prefill do not fit together; nothing was lowered")
	}
	if decode.final != 2 || prefill.final != 2 {
		t.Fatalf("want 2:2 (the largest pair that fits and keeps the ratio; 3:1 is outside it), got prefill %d, decode %d", prefill.final, decode.final)
	}
	// A pair that fits is left alone, and so is a pair where one role does not grow.
	decode.final, prefill.final = 2, 2
	if fitTogether(decode, prefill, along, ratio, false) {
		t.Fatal("2:2 fits together")
	}
	decode.final, prefill.final = 3, 1
	if fitTogether(decode, prefill, along, nil, false) {
		t.Fatal("only decode grows: its own count bounds it")
	}
	// The count was made at 1:1 and 2:2 has since landed; the next sync still reads it.
	// decode asks for one more and prefill is held at 2: one more prefill over the count's
	// base leaves room for one more decode, not two, so decode stays at 2.
	decode.current, prefill.current = 2, 2
	decode.final, prefill.final = 3, 2
	if !fitTogether(decode, prefill, along, ratio, false) {
		t.Fatal("3 decode beside 2 prefill do not fit where the count was made at 1:1")
	}
	if decode.final != 2 || prefill.final != 2 {
		t.Fatalf("want 2:2 kept, got prefill %d, decode %d", prefill.final, decode.final)
	}
}
