package workload

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
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
	cl := fake.NewClientBuilder().WithScheme(servingScheme(t)).
		WithIndex(&corev1.Service{}, controllerUIDIndex, controllerUID).WithIndex(&volcanov1beta1.PodGroup{}, controllerUIDIndex, controllerUID).
		WithStatusSubresource(&workloadv1alpha1.ModelServing{}).WithObjects(ms, leftover, foreign).Build()
	events := record.NewFakeRecorder(100)
	r := &Reconciler{Client: cl, Scheme: cl.Scheme(), Recorder: events}
	_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ms)})
	require.NoError(t, err)
	defer forgetModelServing("ns", "llm")

	var list volcanov1beta1.PodGroupList
	require.NoError(t, cl.List(ctx, &list, client.InNamespace("ns")))
	var names []string
	for _, pg := range list.Items {
		names = append(names, pg.Name)
	}
	sort.Strings(names)
	assert.Equal(t, []string{"llm-0", "llm-2"}, names, "the kept group's PodGroup (made by this pass) and the foreign one stay")

	close(events.Events)
	var deleted []string
	for e := range events.Events {
		if strings.HasPrefix(e, "Normal DeletePodGroup ") {
			deleted = append(deleted, e)
		}
	}
	require.Len(t, deleted, 1, "one DeletePodGroup event")
	assert.Contains(t, deleted[0], "deleted PodGroup llm-1")
}
