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

// The ModelBooster controller's requests, as its code makes them (pkg/workload/booster.go):
// the shipped role must grant every one. TestShippedRBACServesAModel runs no ModelBooster,
// so a permission only the ModelBooster controller needs would otherwise go unnoticed until
// a real cluster refused it.
func TestShippedRBACCoversModelBooster(t *testing.T) {
	cfg := cp.RESTConfig()
	cl, err := client.New(cfg, client.Options{Scheme: controller.Scheme()})
	require.NoError(t, err)
	ctrl := installRBAC(t, cl)["berth-controller"]
	kube := kubernetes.NewForConfigOrDie(cfg)
	as := ctrl.impersonate()

	const workload, networking = "workload.serving.volcano.sh", "networking.serving.volcano.sh"
	needs := []struct {
		group, resource string
		verbs           []string
	}{
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
