package modelserving

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// Scaling a role with workers down inside its groups (server 2 → 1) deletes the headless
// Service of the replica that went, in every group, with a DeleteService event, and leaves
// the remaining replicas' Services in place (the same objects, not recreated).
func TestScaleRoleDeletesItsServices(t *testing.T) {
	w := newWorld(t, 2)
	w.apply(withWorkers("sr", 2))
	w.eventually("2 groups are available", 60*time.Second, w.settled("sr", 2, 2))
	require.Equal(t, []string{"sr-0-server-0", "sr-0-server-1", "sr-1-server-0", "sr-1-server-1"}, w.serviceNames("sr"))
	kept := map[string]types.UID{}
	for _, name := range []string{"sr-0-server-0", "sr-1-server-0"} {
		kept[name] = w.serviceUID(name)
	}

	w.change("sr", func(ms *workloadv1alpha1.ModelServing) { ms.Spec.Template.Roles[1].Replicas = ptr.To[int32](1) })
	w.eventually("both groups are available with one server replica", 60*time.Second, func() bool {
		ms := w.get("sr")
		if st := ms.Status; st.ObservedGeneration != ms.Generation || st.AvailableReplicas != 2 {
			return false
		}
		pods := w.pods(map[string]string{workloadv1alpha1.ModelServingNameLabel: "sr"})
		for _, p := range pods {
			if p.DeletionTimestamp != nil {
				return false
			}
		}
		return len(pods) == 2*3 // per group: the router, and one server entry with its worker
	})
	var have []string
	ok := poll(w.ctx, 30*time.Second, func() bool {
		have = w.serviceNames("sr")
		return strings.Join(have, ",") == "sr-0-server-0,sr-1-server-0"
	})
	assert.True(t, ok, "the Services of server replica 1 are deleted and only they: have %v", have)
	w.expectEvent("sr", "Normal", "DeleteService", "sr-0-server-1")
	w.expectEvent("sr", "Normal", "DeleteService", "sr-1-server-1")
	for name, uid := range kept {
		assert.Equal(t, uid, w.serviceUID(name), "Service %s stayed as it was", name)
	}
}

func (w *world) serviceUID(name string) types.UID {
	w.t.Helper()
	svc := &corev1.Service{}
	require.NoError(w.t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, svc))
	return svc.UID
}

// A deleted ModelServing's series leave the controller's /metrics registry: a long-running
// controller's /metrics does not grow with every ModelServing it has seen.
func TestDeletedModelServingLeavesNoSeries(t *testing.T) {
	w := newWorld(t, 0) // no node: the series exist from the first pass, no pod needs to run
	ms := w.apply(withWorkers("bye", 1))
	series := func(state string) func() (float64, bool) {
		return func() (float64, bool) {
			return metricValue(t, "berth_modelserving_groups", map[string]string{"namespace": w.ns, "modelserving": "bye", "state": state})
		}
	}
	w.expectMetric("berth_modelserving_groups{state=unavailable}", 1, series("unavailable"))
	w.expectMetric("berth_modelserving_groups{state=available}", 0, series("available"))

	require.NoError(t, cl.Delete(w.ctx, ms))
	w.eventually("the ModelServing is gone", 30*time.Second, func() bool {
		return apierrors.IsNotFound(cl.Get(w.ctx, client.ObjectKeyFromObject(ms), &workloadv1alpha1.ModelServing{}))
	})
	var left []string
	ok := poll(w.ctx, 30*time.Second, func() bool {
		left = left[:0]
		for _, state := range []string{"available", "unavailable"} {
			if _, found := series(state)(); found {
				left = append(left, state)
			}
		}
		return len(left) == 0
	})
	assert.True(t, ok, "berth_modelserving_groups series of the deleted ModelServing remain for states %v", left)
}
