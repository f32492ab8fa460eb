package placement

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
)

// bound is a victim's pod running on node.
func boundOn(p *corev1.Pod, node string) *corev1.Pod {
	p.Spec.NodeName = node
	return p
}

func victim(key string, prio int32, pods ...*corev1.Pod) Victim {
	return Victim{Key: key, Group: true, Priority: prio, Pods: pods}
}

func victimKeys(vs []Victim) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Key)
	}
	return out
}

// A preemptor of two whole-node pods on four full nodes: n0 and n1 each run one group, n2
// runs two. Freeing n0 and n1 evicts two groups; a reprieve that starts from "evict
// everything" and gives back n0's group first would end with three.
func TestPreemptionEvictsTheFewestGroups(t *testing.T) {
	w := newWorld(t, 0, 0, 0, 0)
	pg := simpleGroup("hi", 2)
	pods := simplePods("hi", 2, 8)
	w.add(pods...)
	req, err := NewRequirement(pg)
	require.NoError(t, err)
	cands := []Victim{
		victim("ns/a", 10, boundOn(gangPod("a", "w", 0, 0, 8), "n0")),
		victim("ns/b", 10, boundOn(gangPod("b", "w", 0, 0, 8), "n1")),
		victim("ns/c", 10, boundOn(gangPod("c", "w", 0, 0, 4), "n2")),
		victim("ns/d", 10, boundOn(gangPod("d", "w", 0, 0, 4), "n2")),
		victim("ns/e", 50, boundOn(gangPod("e", "w", 0, 0, 8), "n3")),
	}
	pre, msg, err := w.m.PlanPreemption(pods[0], pg, req, cands, nil)
	require.NoError(t, err)
	require.NotNil(t, pre, msg)
	assert.ElementsMatch(t, []string{"ns/a", "ns/b"}, victimKeys(pre.Victims))
	assert.ElementsMatch(t, []string{"n0", "n1"}, []string{pre.Plan.Nodes[pods[0].UID], pre.Plan.Nodes[pods[1].UID]})
}

// Lower priority goes first even when a higher-priority victim alone would do.
func TestPreemptionEvictsTheLowestPriorityFirst(t *testing.T) {
	w := newWorld(t, 0, 0)
	pg := simpleGroup("hi", 1)
	pods := simplePods("hi", 1, 8)
	w.add(pods...)
	req, err := NewRequirement(pg)
	require.NoError(t, err)
	cands := []Victim{
		victim("ns/mid", 50, boundOn(gangPod("mid", "w", 0, 0, 8), "n0")),
		victim("ns/low-1", 10, boundOn(gangPod("low-1", "w", 0, 0, 4), "n1")),
		victim("ns/low-2", 10, boundOn(gangPod("low-2", "w", 0, 0, 4), "n1")),
	}
	pre, msg, err := w.m.PlanPreemption(pods[0], pg, req, cands, nil)
	require.NoError(t, err)
	require.NotNil(t, pre, msg)
	assert.ElementsMatch(t, []string{"ns/low-1", "ns/low-2"}, victimKeys(pre.Victims))
}

// Only protected victims would make room: nothing is chosen and the reason names them.
func TestPreemptionNamesWhatProtectsTheOnlyVictims(t *testing.T) {
	w := newWorld(t, 0)
	pg := simpleGroup("hi", 1)
	pods := simplePods("hi", 1, 8)
	w.add(pods...)
	req, err := NewRequirement(pg)
	require.NoError(t, err)
	v := victim("ns/low", 10, boundOn(gangPod("low", "w", 0, 0, 8), "n0"))
	v.Protection = "PodDisruptionBudget ns/pdb allows 0 disruptions"
	pre, msg, err := w.m.PlanPreemption(pods[0], pg, req, nil, []Victim{v})
	require.NoError(t, err)
	assert.Nil(t, pre)
	assert.Contains(t, msg, "group ns/low")
	assert.Contains(t, msg, "PodDisruptionBudget ns/pdb")
}

// A nominated plan keeps its room while the victims leave: the preemptor waits for its
// planned node instead of planning again, and other groups cannot take the capacity.
func TestANominatedPlanWaitsForItsVictims(t *testing.T) {
	w := newWorld(t, 0, 8)
	pg := simpleGroup("hi", 1)
	pods := simplePods("hi", 1, 8)
	w.add(pods...)
	req, err := NewRequirement(pg)
	require.NoError(t, err)
	cands := []Victim{victim("ns/low", 10, boundOn(gangPod("low", "w", 0, 0, 8), "n0"))}
	// n1 is free but kept by another group's plan.
	other := simplePods("other", 1, 8)
	w.add(other...)
	require.NotNil(t, w.plan(simpleGroup("other", 1), other[0]).Plan)

	pre, msg, err := w.m.PlanPreemption(pods[0], pg, req, cands, nil)
	require.NoError(t, err)
	require.NotNil(t, pre, msg)
	w.m.Nominate(GroupKey(pods[0]), pre.Plan, time.Minute)
	assert.True(t, w.m.Nominated(GroupKey(pods[0])))

	out := w.plan(pg, pods[0])
	assert.True(t, out.Waiting, "the preemptor waits while its victim holds n0")
	assert.Contains(t, out.Refusal, "n0")

	third := simplePods("third", 1, 8)
	w.add(third...)
	w.free["n0"] = 8 // the victim left
	assert.Nil(t, w.plan(simpleGroup("third", 1), third[0]).Plan, "the room on n0 is kept for the preemptor")
	out = w.plan(pg, pods[0])
	require.NotNil(t, out.Plan)
	assert.Equal(t, "n0", out.Node(pods[0]))
}

// A group that fits without evicting anything (only capacity kept for another group stood in
// its way) evicts nothing.
func TestPreemptionEvictsNothingWhenTheGroupFits(t *testing.T) {
	w := newWorld(t, 8, 0)
	pg := simpleGroup("hi", 1)
	pods := simplePods("hi", 1, 8)
	w.add(pods...)
	req, err := NewRequirement(pg)
	require.NoError(t, err)
	cands := []Victim{victim("ns/low", 10, boundOn(gangPod("low", "w", 0, 0, 8), "n1"))}
	pre, msg, err := w.m.PlanPreemption(pods[0], pg, req, cands, nil)
	require.NoError(t, err)
	assert.Nil(t, pre)
	assert.Empty(t, msg)
}
