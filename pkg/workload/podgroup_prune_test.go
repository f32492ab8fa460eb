package workload

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// A controller killed inside deleteGroup (pods deleted, PodGroup not yet) leaves a PodGroup
// of a group that no longer exists: the next pass deletes it, with an event, and keeps the
// kept group's PodGroup and one it does not own.
func TestReconcileDeletesPodGroupsOfGroupsThatAreGone(t *testing.T) {
	ctx := context.Background()
	ms := withServer(1, 1) // one group: llm-0
	ms.Spec.Replicas = ptr.To[int32](1)
	leftover := BuildPodGroup(ms, 1) // llm-1: scaled away, its pods already deleted
	leftover.UID = types.UID("pg-llm-1")
	foreign := BuildPodGroup(ms, 2)
	foreign.UID = types.UID("pg-llm-2")
	foreign.OwnerReferences = nil
	cl, events := reconcileOnce(t, ms, leftover, foreign)

	var list volcanov1beta1.PodGroupList
	require.NoError(t, cl.List(ctx, &list, client.InNamespace("ns")))
	var names []string
	for _, pg := range list.Items {
		names = append(names, pg.Name)
	}
	sort.Strings(names)
	assert.Equal(t, []string{"llm-0", "llm-2"}, names, "the kept group's PodGroup (made by this pass) and the foreign one stay")

	var deleted []string
	for _, e := range events {
		if strings.HasPrefix(e, "Normal DeletePodGroup ") {
			deleted = append(deleted, e)
		}
	}
	require.Len(t, deleted, 1, "one DeletePodGroup event")
	assert.Contains(t, deleted[0], "deleted PodGroup llm-1")
}

// Volcano's podgroup controller gives a volcano pod that names no PodGroup one of its own,
// "podgroup-<owner UID>", with the pod's owner references (pg_controller_handler.go,
// createNormalPodPGIfNotExist and newPGOwnerReferences), so it is controlled by the
// ModelServing. A ModelServing on volcano without a gang gets no PodGroup from Berth: the pass
// still deletes Berth's own leftover (from a template that had workers) and keeps Volcano's,
// which the pods name and Volcano never makes again.
func TestReconcileKeepsThePodGroupVolcanoMadeForItsPods(t *testing.T) {
	ctx := context.Background()
	ms := withServer(1, 0)
	ms.Spec.SchedulerName = "volcano"
	require.False(t, needsPodGroup(ms))
	leftover := BuildPodGroup(withServer(1, 1), 0) // llm-0, from when the server had a worker
	leftover.UID = types.UID("pg-llm-0")
	volcano := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "podgroup-" + string(ms.UID),
		UID: types.UID("pg-volcano"), OwnerReferences: []metav1.OwnerReference{ownerRef(ms)}}}
	require.True(t, metav1.IsControlledBy(volcano, ms))
	cl, events := reconcileOnce(t, ms, leftover, volcano)

	var list volcanov1beta1.PodGroupList
	require.NoError(t, cl.List(ctx, &list, client.InNamespace("ns")))
	var names []string
	for _, pg := range list.Items {
		names = append(names, pg.Name)
	}
	assert.Equal(t, []string{volcano.Name}, names, "Berth's leftover goes, Volcano's stays")
	var deleted []string
	for _, e := range events {
		if strings.HasPrefix(e, "Normal DeletePodGroup ") {
			deleted = append(deleted, e)
		}
	}
	require.Len(t, deleted, 1)
	assert.Contains(t, deleted[0], "deleted PodGroup llm-0")
}
