package gang

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// A preempted group's status says it was preempted even while the scheduler's pod cache
// still shows its evicted pods bound (the informer sees the deletions a moment later);
// a newer verdict, the group placed again, replaces it.
func TestStatusOfAPreemptedGroupWhosePodsTheCacheStillShows(t *testing.T) {
	pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "low"}, Spec: volcanov1beta1.PodGroupSpec{MinMember: 2}}
	bound := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	}
	pods := []*corev1.Pod{bound("a"), bound("b")}
	now := time.Now()

	st := desiredStatus(pg, pods, decision{reason: reasonPreempted, message: "all 2 pods evicted: preempted by gang ns/high"}, now)
	assert.Equal(t, volcanov1beta1.PodGroupPending, st.Phase)
	if assert.Len(t, st.Conditions, 1) {
		c := st.Conditions[0]
		assert.Equal(t, volcanov1beta1.PodGroupUnschedulableType, c.Type)
		assert.Equal(t, corev1.ConditionTrue, c.Status)
		assert.Equal(t, reasonPreempted, c.Reason)
		assert.Contains(t, c.Message, "preempted by gang ns/high")
	}

	st = desiredStatus(pg, pods, decision{scheduled: true, reason: reasonScheduled}, now)
	assert.Equal(t, volcanov1beta1.PodGroupRunning, st.Phase)
	if assert.Len(t, st.Conditions, 2) {
		assert.Equal(t, volcanov1beta1.PodGroupScheduled, st.Conditions[0].Type)
		assert.Equal(t, "2/2 pods placed", st.Conditions[0].Message)
	}
}
