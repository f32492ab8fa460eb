package workload

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
)

// A pass right after the one that created a role replica's pods, whose cache shows only the
// first of them, neither recreates the role replica as "4 of 5 pods are gone" nor creates
// the others again; once the pods are older than createdPodTTL and still unseen, they count
// as lost.
func TestPodsCreatedButNotYetCachedAreNotLost(t *testing.T) {
	ms := withServer(1, 4)
	cl := fake.NewClientBuilder().WithScheme(servingScheme(t)).
		WithIndex(&corev1.Service{}, controllerUIDIndex, controllerUID).WithIndex(&volcanov1beta1.PodGroup{}, controllerUIDIndex, controllerUID).
		WithIndex(&corev1.Pod{}, controllerUIDIndex, controllerUID).WithIndex(&appsv1.ControllerRevision{}, controllerUIDIndex, controllerUID).
		WithStatusSubresource(ms).WithObjects(ms).Build()
	recorder := events.NewFakeRecorder(100)
	r := &Reconciler{Client: cl, Scheme: cl.Scheme(), Recorder: recorder}
	t.Cleanup(func() { forgetModelServing(ms.Namespace, ms.Name) })
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(ms)}
	_, err := r.Reconcile(context.Background(), req)
	require.NoError(t, err)

	// The fake client is the cache here: take the workers out of it, as if their add events
	// had not arrived yet.
	var pods corev1.PodList
	require.NoError(t, cl.List(context.Background(), &pods))
	require.Len(t, pods.Items, 6, "router + server entry + 4 workers")
	for i := range pods.Items {
		if p := &pods.Items[i]; strings.Contains(p.Name, "-server-0-") && !strings.HasSuffix(p.Name, "-0") {
			require.NoError(t, cl.Delete(context.Background(), p))
		}
	}
	_, err = r.Reconcile(context.Background(), req)
	require.NoError(t, err)
	require.NoError(t, cl.List(context.Background(), &pods))
	assert.Len(t, pods.Items, 2, "the entry pod is kept and the pending workers are not created again")
	close(recorder.Events)
	for e := range recorder.Events {
		assert.NotContains(t, e, ReasonRecreateRole)
	}

	// Unseen past the TTL: gone after all, so the role replica restarts together.
	pending := r.created.pendingFor(ms.UID, func(string) bool { return false }, time.Now().Add(createdPodTTL+time.Second))
	assert.Empty(t, pending)
	recorder = events.NewFakeRecorder(100)
	r.Recorder = recorder
	_, err = r.Reconcile(context.Background(), req)
	require.NoError(t, err)
	close(recorder.Events)
	var recreated bool
	for e := range recorder.Events {
		recreated = recreated || strings.Contains(e, ReasonRecreateRole)
	}
	assert.True(t, recreated, "past the TTL the missing workers count as lost")
}

func TestCreatedPodsClearWhenSeen(t *testing.T) {
	var c createdPods
	now := time.Now()
	c.created("ms", "a", 0, now)
	c.created("ms", "b", 1, now)
	c.created("ms", "c", 1, now)
	pod := &corev1.Pod{}
	pod.Name = "a"
	pod.OwnerReferences = []metav1.OwnerReference{{UID: "ms", Controller: ptr.To(true)}}
	c.observed(pod)
	assert.Equal(t, map[string]int{"b": 1}, c.pendingFor("ms", func(n string) bool { return n == "c" }, now), "a is seen by its add event, c in the cache")
	assert.Equal(t, map[string]int{"b": 1}, c.pendingFor("ms", func(string) bool { return false }, now))
	c.forgetGroup("ms", 1)
	assert.Empty(t, c.pendingFor("ms", func(string) bool { return false }, now))
	assert.Empty(t, c.pendingFor(types.UID("other"), func(string) bool { return false }, now))
}
