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

// The ModelBooster controller's requests, as its code makes them (pkg/modelbooster):
// the shipped role must grant every one. TestShippedRBACServesAModel runs no ModelBooster,
// so a permission only the ModelBooster controller needs would otherwise go unnoticed until
// a real cluster refused it.
func TestShippedRBACCoversModelBooster(t *testing.T) {
	const workload, networking = "workload.serving.volcano.sh", "networking.serving.volcano.sh"
	needs := []need{
		{workload, "modelboosters", []string{"get", "list", "watch"}},
		{workload, "modelboosters/status", []string{"update"}},
		{workload, "modelservings", []string{"get", "list", "watch", "create", "update", "delete"}},
		{workload, "autoscalingpolicies", []string{"get", "list", "watch", "create", "update", "delete"}},
		{workload, "autoscalingpolicybindings", []string{"get", "list", "watch", "create", "update", "delete"}},
		{networking, "modelservers", []string{"get", "list", "watch", "create", "update", "delete"}},
		{networking, "modelroutes", []string{"get", "list", "watch", "create", "update", "delete"}},
		{"", "pods", []string{"get", "list", "watch"}},
		{"events.k8s.io", "events", []string{"create", "patch"}},
	}
	assertAllowed(t, needs)
}

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

// The VariantAutoscaling reconciler's requests (pkg/autoscale/variantscaler): it reads the
// variant and its ConfigMaps, the ModelServing's pods and ModelServers, writes the status and
// scales through modelservings/scale.
func TestShippedRBACCoversVariantAutoscaling(t *testing.T) {
	assertAllowed(t, []need{
		{"llmd.ai", "variantautoscalings", []string{"get", "list", "watch"}},
		{"llmd.ai", "variantautoscalings/status", []string{"update", "patch"}},
		{"", "configmaps", []string{"get", "list", "watch"}},
		{"", "pods", []string{"get", "list", "watch"}},
		{"networking.serving.volcano.sh", "modelservers", []string{"get", "list", "watch"}},
		{"workload.serving.volcano.sh", "modelservings/scale", []string{"get", "update"}},
		{"events.k8s.io", "events", []string{"create", "patch"}},
	})
}

// The llmaz reconcilers' requests (pkg/llmazserving): Playgrounds, Services and
// BackendRuntimes read and their status written, OpenModels read, the Service, ModelServing,
// ModelServer, ModelRoute and HorizontalPodAutoscaler each Playground or Service becomes.
func TestShippedRBACCoversLlmaz(t *testing.T) {
	const inference = "inference.llmaz.io"
	assertAllowed(t, []need{
		{inference, "playgrounds", []string{"get", "list", "watch"}},
		{inference, "services", []string{"get", "list", "watch", "create", "update", "delete"}},
		{inference, "backendruntimes", []string{"get", "list", "watch"}},
		{inference, "playgrounds/status", []string{"update", "patch"}},
		{inference, "services/status", []string{"update", "patch"}},
		{inference, "backendruntimes/status", []string{"update", "patch"}},
		{"llmaz.io", "openmodels", []string{"get", "list", "watch"}},
		{"autoscaling", "horizontalpodautoscalers", []string{"get", "list", "watch", "create", "update", "delete"}},
		{"workload.serving.volcano.sh", "modelservings", []string{"get", "list", "watch", "create", "update"}},
		{"networking.serving.volcano.sh", "modelservers", []string{"get", "list", "watch", "create", "update"}},
		{"networking.serving.volcano.sh", "modelroutes", []string{"get", "list", "watch", "create", "update"}},
		{"events.k8s.io", "events", []string{"create", "patch"}},
	})
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
