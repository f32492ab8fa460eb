package modelserving

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// A template change rolls out with maxUnavailable 1, maxSurge 1, partition 1: groups 1 and 2
// move to the new revision, group 0 stays, and a watch on the ModelServing never sees fewer
// than replicas − maxUnavailable groups available.
func TestRollingUpdateKeepsAvailability(t *testing.T) {
	w := newWorld(t, 3) // 24 GPUs: the 3 groups (15) plus one surge group (5)
	manifest := strings.Replace(pd("roll", "berth-scheduler", 3), "  replicas: 3\n",
		"  replicas: 3\n  rolloutStrategy:\n    rollingUpdateConfiguration: {maxUnavailable: 1, maxSurge: 1, partition: 1}\n", 1)
	w.apply(manifest)
	w.eventually("3 groups are available", 60*time.Second, w.availableWith("roll", 3))
	oldRevision := w.get("roll").Status.UpdateRevision

	wc, err := client.NewWithWatch(cp.RESTConfig(), client.Options{Scheme: cl.Scheme()})
	require.NoError(t, err)
	watcher, err := wc.Watch(w.ctx, &workloadv1alpha1.ModelServingList{}, client.InNamespace(w.ns))
	require.NoError(t, err)
	defer watcher.Stop()
	var mu sync.Mutex
	var lowest int32 = 3
	var observed int
	var inexact []string
	go func() {
		for ev := range watcher.ResultChan() {
			ms, ok := ev.Object.(*workloadv1alpha1.ModelServing)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			mu.Lock()
			observed++
			if ms.Status.AvailableReplicas < lowest {
				lowest = ms.Status.AvailableReplicas
			}
			// Every group is counted once: on the old revision (current) or the new (updated).
			if st := ms.Status; st.CurrentRevision != st.UpdateRevision && st.CurrentReplicas+st.UpdatedReplicas != st.Replicas {
				inexact = append(inexact, fmt.Sprintf("replicas=%d current=%d updated=%d", st.Replicas, st.CurrentReplicas, st.UpdatedReplicas))
			}
			mu.Unlock()
		}
	}()

	ms := w.get("roll")
	ms.Spec.Template.Roles[1].EntryTemplate.Spec.Containers[0].Image = "vllm:v2"
	require.NoError(t, cl.Update(w.ctx, ms))

	w.eventually("groups 1 and 2 run the new revision", 90*time.Second, func() bool {
		ms := w.get("roll")
		st := ms.Status
		return st.ObservedGeneration == ms.Generation && st.UpdateRevision != oldRevision &&
			st.UpdatedReplicas == 2 && st.CurrentReplicas == 1 && st.Replicas == 3 && st.AvailableReplicas == 3
	})
	newRevision := w.get("roll").Status.UpdateRevision
	for _, p := range w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "roll"}) {
		want := newRevision
		if p.Labels[workloadv1alpha1.GroupNameLabel] == "roll-0" {
			want = oldRevision // below the partition
		}
		assert.Equal(t, want, p.Labels[workloadv1alpha1.RevisionLabel], "pod %s", p.Name)
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Greater(t, observed, 2, "the watch saw the rollout")
	assert.GreaterOrEqual(t, lowest, int32(2), "availability dropped below replicas - maxUnavailable")
	assert.Empty(t, inexact, "status counts that do not add up")
}
