package rbac

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/controller"
)

// A ServiceAccount of another namespace learns nothing of a tenant's objects through Berth:
// not through the apiserver (the shipped roles are bound to Berth's own ServiceAccounts
// only), not through berth-controller's or berth-router's /metrics (whose series name
// ModelServings, routes, servers and pods of every namespace: only callers the apiserver
// authorizes for GET /metrics, as ClusterRole berth-metrics-reader grants, read them), and
// not through berth-router's API port (it proxies nothing to the apiserver). A caller that
// was granted berth-metrics-reader does read them, so the refusals are not a broken endpoint.
func TestAnotherNamespaceCannotReadOurObjects(t *testing.T) {
	s := sharedSystem(t)
	ctx := context.Background()
	for _, ns := range []string{"owner", "intruder", "monitoring"} {
		_, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	// The owner's ModelServing: berth-controller's series name its namespace once it acts.
	ms := &workloadv1alpha1.ModelServing{}
	require.NoError(t, yaml.UnmarshalStrict([]byte(servingManifest), ms))
	ms.Namespace, ms.Name = "owner", "owner-llm"
	require.NoError(t, s.cl.Create(ctx, ms))

	intruder := serviceAccountToken(t, s.kube, "intruder", "reader")
	prometheus := serviceAccountToken(t, s.kube, "monitoring", "prometheus")
	_, err := s.kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-reads-berth-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "berth-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "monitoring", Name: "prometheus"}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	// Through the apiserver: every kind Berth serves is refused to the intruder.
	cfg := rest.AnonymousClientConfig(cp.RESTConfig())
	cfg.BearerToken = intruder
	as, err := client.New(cfg, client.Options{Scheme: controller.Scheme()})
	require.NoError(t, err)
	for _, list := range []client.ObjectList{&workloadv1alpha1.ModelServingList{}, &networkingv1alpha1.ModelRouteList{},
		&networkingv1alpha1.ModelServerList{}, &volcanov1beta1.PodGroupList{}, &corev1.PodList{}} {
		err := as.List(ctx, list, client.InNamespace("owner"))
		assert.True(t, apierrors.IsForbidden(err), "the intruder listed %T in namespace owner: %v", list, err)
	}

	// Through the components' metrics. The filter caches reviews for a while, and the
	// prometheus binding may take a moment to reach the authorizer: poll for the grant.
	endpoints := map[string]string{
		"berth-controller": "https://" + s.controllerMetrics + "/metrics",
		"berth-router":     "https://" + s.router.AdminAddr() + "/metrics",
	}
	for name, url := range endpoints {
		code, body := getWithToken(t, url, "")
		assert.Equal(t, http.StatusUnauthorized, code, "%s /metrics without a token: %s", name, short(body))
		code, body = getWithToken(t, url, intruder)
		assert.Equal(t, http.StatusForbidden, code, "%s /metrics for a ServiceAccount of another namespace: %s", name, short(body))
		assert.NotContains(t, body, "owner", "%s /metrics refused the intruder yet named the owner's objects", name)
		// The reader is let in, and (for berth-controller, once it acted on the owner's
		// ModelServing) reads series that name the owner's namespace: what the intruder was
		// refused is worth refusing.
		want := "# TYPE"
		if name == "berth-controller" {
			want = `namespace="owner"`
		}
		var granted string
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, granted = getWithToken(t, url, prometheus)
			if (code == http.StatusOK && strings.Contains(granted, want)) || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		require.Equal(t, http.StatusOK, code, "%s /metrics for a ServiceAccount bound to berth-metrics-reader: %s", name, short(granted))
		assert.Contains(t, granted, want, "%s /metrics for the reader", name)
	}

	// Through berth-router's API port: paths of the Kubernetes API and debug handlers are
	// not served, with or without a token.
	for _, path := range []string{"/apis/workload.serving.volcano.sh/v1alpha1/namespaces/owner/modelservings",
		"/api/v1/namespaces/owner/pods", "/debug/pprof/", "/metrics"} {
		code, body := getWithToken(t, "http://"+s.router.Addr()+path, intruder)
		assert.Equal(t, http.StatusNotFound, code, "berth-router's API port served %s: %s", path, short(body))
		assert.NotContains(t, body, "owner-llm", "berth-router's API port answered %s with the owner's object", path)
	}
}

// serviceAccountToken creates ServiceAccount ns/name and returns a token the apiserver
// issues it (TokenRequest), as a pod of that ServiceAccount would mount.
func serviceAccountToken(t *testing.T, kube kubernetes.Interface, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	_, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(3600))}}, metav1.CreateOptions{})
	require.NoError(t, err, "a token for %s/%s", ns, name)
	return tr.Status.Token
}

func ptrTo[T any](v T) *T { return &v }

// getWithToken GETs url (HTTPS with the components' self-signed certificates accepted: the
// point is who may read, not the certificate) with the bearer token, if any.
func getWithToken(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed test certificates
	resp, err := c.Do(req)
	require.NoError(t, err, "GET %s", url)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// short keeps a failure message readable when a body is a whole metrics page.
func short(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// Namespace users work with Berth's kinds through Kubernetes' own roles: a RoleBinding to
// edit lets a team create ModelServings and ModelRoutes in its namespace (berth-edit
// aggregates into edit and admin), one to view lets it read them but not write, and neither
// reaches another namespace.
func TestNamespaceUsersGetBerthKindsThroughEditAndView(t *testing.T) {
	s := sharedSystem(t)
	ctx := context.Background()
	for _, ns := range []string{"team", "other-team"} {
		_, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	as := map[string]client.Client{}
	for _, role := range []string{"edit", "view"} {
		token := serviceAccountToken(t, s.kube, "team", role+"er")
		_, err := s.kube.RbacV1().RoleBindings("team").Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: role + "er"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "team", Name: role + "er"}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		cfg := rest.AnonymousClientConfig(cp.RESTConfig())
		cfg.BearerToken = token
		as[role], err = client.New(cfg, client.Options{Scheme: controller.Scheme()})
		require.NoError(t, err)
	}
	objects := func(ns, suffix string) []client.Object {
		ms := &workloadv1alpha1.ModelServing{}
		require.NoError(t, yaml.UnmarshalStrict([]byte(servingManifest), ms))
		ms.Namespace, ms.Name = ns, "team-llm"+suffix
		mr := &networkingv1alpha1.ModelRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team-route" + suffix},
			Spec: networkingv1alpha1.ModelRouteSpec{ModelName: "team-model", Rules: []networkingv1alpha1.Rule{{
				TargetModels: []networkingv1alpha1.TargetModel{{ModelServerName: "team-server"}}}}}}
		return []client.Object{ms, mr}
	}
	// The aggregation controller fills edit from berth-edit shortly after install: poll.
	for _, obj := range objects("team", "") {
		var err error
		deadline := time.Now().Add(30 * time.Second)
		for {
			if err = as["edit"].Create(ctx, obj); err == nil || !apierrors.IsForbidden(err) || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		require.NoError(t, err, "an editor of namespace team creates %T", obj)
	}
	for _, obj := range objects("other-team", "") {
		err := as["edit"].Create(ctx, obj)
		assert.True(t, apierrors.IsForbidden(err), "an editor of team created %T in other-team: %v", obj, err)
	}
	var msList workloadv1alpha1.ModelServingList
	require.NoError(t, as["view"].List(ctx, &msList, client.InNamespace("team")), "a viewer of team lists ModelServings")
	assert.Len(t, msList.Items, 1)
	var mrList networkingv1alpha1.ModelRouteList
	require.NoError(t, as["view"].List(ctx, &mrList, client.InNamespace("team")), "a viewer of team lists ModelRoutes")
	assert.Len(t, mrList.Items, 1)
	for _, obj := range objects("team", "-2") {
		err := as["view"].Create(ctx, obj)
		assert.True(t, apierrors.IsForbidden(err), "a viewer of team created %T: %v", obj, err)
	}

	// An ExternalModelProvider chooses where the router sends a Secret of its namespace, so
	// it is an administrator's object: an editor of the namespace cannot write one (it would
	// send the Secret to a URL of its choosing); a viewer reads them.
	exfil := &networkingv1alpha1.ExternalModelProvider{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "exfil"},
		Spec: networkingv1alpha1.ExternalModelProviderSpec{BaseURL: "https://collector.example.com", Auth: &networkingv1alpha1.ProviderAuth{
			SecretRef: corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db-password"}, Key: "password"}}}}
	err := as["edit"].Create(ctx, exfil)
	assert.True(t, apierrors.IsForbidden(err), "an editor of team created an ExternalModelProvider: %v", err)
	var providers networkingv1alpha1.ExternalModelProviderList
	assert.NoError(t, as["view"].List(ctx, &providers, client.InNamespace("team")), "a viewer of team lists ExternalModelProviders")
}
