package rbac

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-sh/berth/pkg/controller"
)

// need is a permission the shipped role must grant, asked as a SubjectAccessReview. The
// reconcilers of drive_test.go are checked by running them instead; this is for those
// that test does not run.
type need struct {
	group, resource string
	verbs           []string
}

// assertAllowed asks the apiserver whether the shipped berth-controller role grants every
// verb of needs, as a SubjectAccessReview for its ServiceAccount.
func assertAllowed(t *testing.T, needs []need) {
	t.Helper()
	cfg := cp.RESTConfig()
	cl, err := client.New(cfg, client.Options{Scheme: controller.Scheme()})
	require.NoError(t, err)
	ctrl := installRBAC(t, cl)["berth-controller"]
	kube := kubernetes.NewForConfigOrDie(cfg)
	as := ctrl.impersonate()
	for _, n := range needs {
		resource, sub, _ := strings.Cut(n.resource, "/")
		for _, verb := range n.verbs {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: as.UserName, Groups: as.Groups,
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: "any", Verb: verb, Group: n.group, Resource: resource, Subresource: sub},
			}}
			got, err := kube.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), sar, metav1.CreateOptions{})
			require.NoError(t, err)
			assert.True(t, got.Status.Allowed, "berth-controller may not %s %s.%s (%s)", verb, n.resource, n.group, got.Status.Reason)
		}
	}
}

// The LeaderWorkerSet reconciler's requests (pkg/lwsserving): LeaderWorkerSets read and their
// status written, the ModelServing each becomes (created, updated, deleted when it stops
// naming berth-scheduler) with an owner reference that blocks the LeaderWorkerSet's
// deletion, and a read of the leader StatefulSet LWS's own controller would make.
func TestShippedRBACCoversLeaderWorkerSet(t *testing.T) {
	const lws = "leaderworkerset.x-k8s.io"
	assertAllowed(t, []need{
		{lws, "leaderworkersets", []string{"get", "list", "watch"}},
		{lws, "leaderworkersets/status", []string{"update", "patch"}},
		{lws, "leaderworkersets/finalizers", []string{"update"}},
		{"workload.serving.volcano.sh", "modelservings", []string{"get", "list", "watch", "create", "update", "delete"}},
		{"apps", "statefulsets", []string{"get"}},
		{"events.k8s.io", "events", []string{"create", "patch"}},
	})
}

// Node drains (pkg/workload/drain.go): the ModelServing reconciler keeps a
// PodDisruptionBudget per ModelServing and reads the nodes its pods run on to see a drain.
// It never writes a node.
func TestShippedRBACCoversNodeDrains(t *testing.T) {
	assertAllowed(t, []need{
		{"policy", "poddisruptionbudgets", []string{"get", "list", "watch", "create", "update", "delete"}},
		{"", "nodes", []string{"get", "list", "watch"}},
	})
}
