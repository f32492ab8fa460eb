package binding

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
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
