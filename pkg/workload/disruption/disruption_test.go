package disruption

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

func TestMinAvailable(t *testing.T) {
	for _, c := range []struct {
		value          string
		set            bool
		replicas, maxU int
		want           int
		err            string
	}{
		{set: false, replicas: 4, maxU: 1, want: 3},
		{set: false, replicas: 4, maxU: 0, want: 3}, // maxSurge-only rollouts: a drain still moves one group
		{set: false, replicas: 4, maxU: 2, want: 2},
		{set: false, replicas: 1, maxU: 1, want: 0},
		{value: "2", set: true, replicas: 4, want: 2},
		{value: " 2 ", set: true, replicas: 4, want: 2},
		{value: "75%", set: true, replicas: 3, want: 3}, // 2.25 rounds up
		{value: "50%", set: true, replicas: 4, want: 2},
		{value: "9", set: true, replicas: 4, want: 4},
		{value: "two", set: true, replicas: 4, err: `disruption.berth.sh/min-available="two": want a non-negative number`},
		{value: "-1", set: true, replicas: 4, err: "non-negative"},
		{value: "150%", set: true, replicas: 4, err: "from 0% to 100%"},
		{value: "", set: true, replicas: 4, err: "non-negative"},
	} {
		got, err := MinAvailable(c.value, c.set, c.replicas, c.maxU)
		if c.err != "" {
			require.Error(t, err, "%+v", c)
			assert.Contains(t, err.Error(), c.err)
			continue
		}
		require.NoError(t, err, "%+v", c)
		assert.Equal(t, c.want, got, "%+v", c)
	}
}

func TestDrained(t *testing.T) {
	n := &corev1.Node{}
	ok, _ := Drained(n)
	assert.False(t, ok)
	n.Spec.Taints = []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}
	ok, _ = Drained(n)
	assert.False(t, ok, "a NoSchedule taint only keeps new pods off")
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "maintenance", Effect: corev1.TaintEffectNoExecute})
	ok, why := Drained(n)
	assert.True(t, ok)
	assert.Equal(t, "tainted maintenance:NoExecute", why)
	n = &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: UnschedulableTaint, Effect: corev1.TaintEffectNoSchedule}}}}
	ok, _ = Drained(n)
	assert.True(t, ok)
	n = &corev1.Node{Spec: corev1.NodeSpec{Unschedulable: true}}
	ok, why = Drained(n)
	assert.True(t, ok)
	assert.Equal(t, "cordoned", why)
}

func TestPlan(t *testing.T) {
	ready := func(i int, drained ...string) Group { return Group{Index: i, Ready: true, Drained: drained} }

	// Two groups displaced, min 3 of 4: one moves, the other waits for it.
	d := Plan([]Group{ready(1, "n1"), ready(0, "n0"), ready(2), ready(3)}, 3)
	assert.Equal(t, []int{0}, d.Move)
	require.Len(t, d.Waiting, 1)
	assert.Equal(t, "group 1 waits: 3 of min 3 groups ready, group 0 moving", d.Waiting[0].Why)

	// Group 0 is moving (terminating): group 1 waits.
	d = Plan([]Group{{Index: 0, Terminating: true, Drained: []string{"n0"}}, ready(1, "n1"), ready(2), ready(3)}, 3)
	assert.Empty(t, d.Move)
	assert.Equal(t, "group 1 waits: 3 of min 3 groups ready, group 0 moving", d.Waiting[0].Why)
	assert.Equal(t, 3, d.ReadyGroups)

	// Its replacement starts elsewhere: group 1 still waits.
	d = Plan([]Group{{Index: 0}, ready(1, "n1"), ready(2), ready(3)}, 3)
	assert.Empty(t, d.Move)
	assert.Equal(t, "group 1 waits: 3 of min 3 groups ready, group 0 starting", d.Waiting[0].Why)

	// Replacement Ready: group 1 moves.
	d = Plan([]Group{ready(0), ready(1, "n1"), ready(2), ready(3)}, 3)
	assert.Equal(t, []int{1}, d.Move)
	assert.Empty(t, d.Waiting)

	// At the minimum with every group Ready: nothing moves, and the message says why.
	d = Plan([]Group{ready(0, "n0"), ready(1)}, 2)
	assert.Empty(t, d.Move)
	assert.Equal(t, "group 0 waits: 2 of min 2 groups ready", d.Waiting[0].Why)

	// A displaced group that does not serve moves at once, whatever else goes on.
	d = Plan([]Group{{Index: 0, Drained: []string{"n0"}}, {Index: 1}, ready(2)}, 2)
	assert.Equal(t, []int{0}, d.Move)

	// Min 0 (one replica): the only group moves.
	d = Plan([]Group{ready(0, "n0")}, 0)
	assert.Equal(t, []int{0}, d.Move)

	// A low minimum still moves Ready groups one at a time.
	d = Plan([]Group{ready(0, "n0"), ready(1, "n0"), ready(2, "n1"), ready(3)}, 1)
	assert.Equal(t, []int{0}, d.Move)
	assert.Len(t, d.Waiting, 2)
}
