// Package rbac runs berth-scheduler, berth-controller and berth-router as the ServiceAccounts the shipped
// manifests give them, against an apiserver that enforces RBAC: the other integration tests
// run both as cluster admin, so a permission missing from manifests/ (one the binaries need
// on a real cluster) would pass them all.
package rbac

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/replicas"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/sim"
)

var (
	cp *controlplane.ControlPlane
	// auditLog records every request at Metadata level; denied() reads the 403s from it.
	auditLog string
)

// auditPolicy logs each request once, when its response is complete.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
`

func TestMain(m *testing.M) {
	replicas.RunIfReplica()
	dir, err := os.MkdirTemp("", "berth-rbac-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Registered first, so it runs after the clients below are stopped.
	cptest.BeforeStop(func() { _ = os.RemoveAll(dir) })
	policy := filepath.Join(dir, "audit-policy.yaml")
	auditLog = filepath.Join(dir, "audit.log")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cptest.MainWithOptions(m, &cp, controlplane.Options{APIServerFlags: append(controlplane.DefaultAPIServerFlags(),
		"--authorization-mode=Node,RBAC",
		"--audit-policy-file="+policy, "--audit-log-path="+auditLog)})
}

// component is one of the two Deployments in manifests/ and the identity it runs as.
type component struct {
	namespace      string // the Deployment's, where its ServiceAccount and lease live
	serviceAccount string
}

func (c component) impersonate() rest.ImpersonationConfig {
	return rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + c.namespace + ":" + c.serviceAccount,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + c.namespace, "system:authenticated"},
	}
}

// installRBAC renders manifests/ as `kubectl apply --server-side -k manifests/` would and
// applies, as admin, the Namespace, ServiceAccounts, roles and bindings. The CRDs are already
// installed by the control plane; the Deployments are what the test runs in-process instead,
// so it returns, for each Deployment by name, the namespace and ServiceAccount it runs as.
func installRBAC(t *testing.T, c client.Client) map[string]component {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resources, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join("..", "..", "..", "manifests"))
	require.NoError(t, err, "kustomize build manifests/")

	ctx := context.Background()
	// kube-system, for the scheduler's authentication-reader RoleBinding, may not exist yet.
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}); !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
	components := map[string]component{}
	applied := map[string]int{}
	serviceAccounts := map[string]bool{}
	var rbacObjects []*unstructured.Unstructured
	for _, r := range resources.Resources() {
		m, err := r.Map()
		require.NoError(t, err)
		obj := &unstructured.Unstructured{Object: m}
		switch obj.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(m, &d))
			sa := d.Spec.Template.Spec.ServiceAccountName
			require.NotEmpty(t, sa, "Deployment %s names no ServiceAccount", d.Name)
			components[d.Name] = component{namespace: d.Namespace, serviceAccount: sa}
			continue
		case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding":
		default:
			continue
		}
		if obj.GetKind() == "ServiceAccount" {
			serviceAccounts[obj.GetNamespace()+"/"+obj.GetName()] = true
		}
		require.NoError(t, c.Patch(ctx, obj, client.Apply, client.FieldOwner("berth-rbac-test"), client.ForceOwnership),
			"apply %s %s/%s", obj.GetKind(), obj.GetNamespace(), obj.GetName())
		applied[obj.GetKind()]++
		rbacObjects = append(rbacObjects, obj)
	}
	t.Logf("applied from manifests/: %v", applied)
	waitAuthorizerCaughtUp(t, rbacObjects)
	for name, comp := range components {
		require.True(t, serviceAccounts[comp.namespace+"/"+comp.serviceAccount],
			"Deployment %s runs as ServiceAccount %s/%s, which manifests/ does not create", name, comp.namespace, comp.serviceAccount)
	}
	require.Contains(t, components, "berth-scheduler")
	require.Contains(t, components, "berth-controller")
	require.Contains(t, components, "berth-router")
	return components
}

// waitAuthorizerCaughtUp waits until the apiserver's RBAC authorizer, which reads roles and
// bindings from informers, grants each applied binding's first rule to its subjects, so the
// components' first requests cannot be refused for a moment and count as a missing
// permission. Bindings to roles not in manifests/ (bootstrap roles) are skipped.
func waitAuthorizerCaughtUp(t *testing.T, objs []*unstructured.Unstructured) {
	kube := kubernetes.NewForConfigOrDie(cp.RESTConfig())
	rules := map[string][]rbacv1.PolicyRule{} // "ClusterRole/name" or "Role/ns/name"
	var bindings []rbacv1.RoleBinding         // ClusterRoleBindings too, with no namespace
	for _, obj := range objs {
		switch obj.GetKind() {
		case "ClusterRole", "Role":
			var r rbacv1.Role // same rules field
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &r))
			rules[strings.TrimSuffix(obj.GetKind()+"/"+obj.GetNamespace(), "/")+"/"+obj.GetName()] = r.Rules
		case "ClusterRoleBinding", "RoleBinding":
			var b rbacv1.RoleBinding
			require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &b))
			bindings = append(bindings, b)
		}
	}
	for _, b := range bindings {
		key := "ClusterRole/" + b.RoleRef.Name
		if b.RoleRef.Kind == "Role" {
			key = "Role/" + b.Namespace + "/" + b.RoleRef.Name
		}
		rs := rules[key]
		if len(rs) == 0 || len(rs[0].Resources) == 0 {
			continue
		}
		r := rs[0]
		resource, subresource, _ := strings.Cut(r.Resources[0], "/")
		attrs := &authorizationv1.ResourceAttributes{Namespace: b.Namespace, Verb: r.Verbs[0], Group: r.APIGroups[0],
			Resource: resource, Subresource: subresource}
		if len(r.ResourceNames) > 0 {
			attrs.Name = r.ResourceNames[0]
		}
		for _, subject := range b.Subjects {
			if subject.Kind != rbacv1.ServiceAccountKind {
				continue
			}
			as := component{namespace: subject.Namespace, serviceAccount: subject.Name}.impersonate()
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: as.UserName, Groups: as.Groups, ResourceAttributes: attrs}}
			err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
				got, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
				return err == nil && got.Status.Allowed, nil
			})
			require.NoError(t, err, "%s %s/%s does not grant %s %+v to %s", b.Kind, b.Namespace, b.Name, key, *attrs, as.UserName)
		}
	}
}

// system is what the test talks to: admin clients, and the Berth components it started.
type system struct {
	kube              kubernetes.Interface // admin
	cl                client.Client        // admin
	components        map[string]component
	scheduler         *replicas.Replica
	controllerMetrics string // host:port of berth-controller's HTTPS /metrics
	router            *router.Router
}

var (
	systemOnce sync.Once
	shared     *system
)

// sharedSystem starts the system once for the package (see startSystem).
func sharedSystem(t *testing.T) *system {
	systemOnce.Do(func() { shared = startSystem(t) })
	require.NotNil(t, shared, "the system did not start")
	return shared
}

// freeAddr is a loopback address with a port free right now, for a listener that cannot
// report the port it picked.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// startSystem applies the shipped RBAC and starts berth-scheduler and berth-controller as
// their ServiceAccounts, and the simulated kubelet as admin. They run until the package's
// control plane stops.
func startSystem(t *testing.T) *system {
	cfg := cp.RESTConfig()
	s := &system{kube: kubernetes.NewForConfigOrDie(cfg)}
	var err error
	s.cl, err = client.New(cfg, client.Options{Scheme: controller.Scheme()})
	require.NoError(t, err)
	s.components = installRBAC(t, s.cl)

	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	cptest.BeforeStop(func() { cancel(); running.Wait() })

	// berth-scheduler as its ServiceAccount, leader election on (lease
	// berth-system/berth-scheduler, as shipped), so the lease permissions are exercised too.
	// It runs as a process of its own: kube-scheduler calls os.Exit(0) when its context ends
	// while it leads, which in-process would end the test binary.
	s.scheduler = replicas.StartWith(t, cp, replicas.Scheduler, "berth-scheduler", "", replicas.Options{
		As: ptr.To(s.components["berth-scheduler"].impersonate()), Cleanup: cptest.BeforeStop})

	// berth-controller as its ServiceAccount, electing a leader as it does when deployed, so
	// the lease permissions are exercised too.
	ctrl := s.components["berth-controller"]
	ccfg := cp.RESTConfig()
	ccfg.Impersonate = ctrl.impersonate()
	// Its metrics as shipped: HTTPS, for callers the apiserver authorizes (--metrics-secure).
	s.controllerMetrics = freeAddr(t)
	mgr, err := controller.NewManager(ccfg, controller.Options{MetricsAddr: s.controllerMetrics, MetricsSecure: true,
		LeaderElection: true, LeaderElectionNS: ctrl.namespace})
	require.NoError(t, err)
	running.Add(1)
	go func() {
		defer running.Done()
		if err := mgr.Start(ctx); err != nil && ctx.Err() == nil {
			panic(fmt.Sprintf("berth-controller exited: %v", err))
		}
	}()

	// berth-router as its ServiceAccount: it must be able to watch routes, servers and pods.
	rcfg := cp.RESTConfig()
	rcfg.Impersonate = s.components["berth-router"].impersonate()
	rt, err := router.New(rcfg, router.Options{Addr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", MetricsAuth: true}, logr.Discard())
	require.NoError(t, err)
	running.Add(1)
	go func() {
		defer running.Done()
		if err := rt.Run(ctx); err != nil && ctx.Err() == nil {
			panic(fmt.Sprintf("berth-router exited: %v", err))
		}
	}()
	select {
	case <-rt.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("berth-router, as its ServiceAccount, did not sync routes, servers and pods within 30s")
	}
	s.router = rt

	kubelet := sim.NewKubelet(s.kube, 200*time.Millisecond)
	running.Add(1)
	go func() { defer running.Done(); kubelet.Run(ctx) }()
	return s
}

// audit reads the apiserver's audit log: how many requests each ServiceAccount made
// ("berth-system:berth-scheduler" → n), and the ones refused (403) to Berth's own
// ServiceAccounts (those of components), who, what and how often, e.g.
// "berth-system:berth-scheduler list resource.k8s.io/devicetaintrules (cluster): 7×".
// The log is the package's, shared by every test: the tenant tests' intruders are refused on
// purpose, and must not count whichever order the tests run in (-shuffle=on).
func audit(t *testing.T, components map[string]component) (requests map[string]int, denied []string) {
	berth := map[string]bool{}
	for _, c := range components {
		berth[c.namespace+":"+c.serviceAccount] = true
	}
	f, err := os.Open(auditLog)
	require.NoError(t, err, "the apiserver's audit log")
	defer f.Close()
	requests = map[string]int{}
	counts := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var ev auditv1.Event
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		user := ev.User.Username
		if ev.ImpersonatedUser != nil {
			user = ev.ImpersonatedUser.Username
		}
		sa, ok := strings.CutPrefix(user, "system:serviceaccount:")
		if !ok {
			continue
		}
		requests[sa]++
		if !berth[sa] || ev.ResponseStatus == nil || ev.ResponseStatus.Code != 403 {
			continue
		}
		what := ev.RequestURI
		if o := ev.ObjectRef; o != nil {
			what = o.Resource
			if o.Subresource != "" {
				what += "/" + o.Subresource
			}
			if o.APIGroup != "" {
				what = o.APIGroup + "/" + what
			}
			if o.Name != "" {
				what += " " + o.Name
			}
			if o.Namespace != "" {
				what += " (namespace " + o.Namespace + ")"
			} else {
				what += " (cluster)"
			}
		}
		counts[fmt.Sprintf("%s %s %s", sa, ev.Verb, what)]++
	}
	require.NoError(t, sc.Err())
	for k, n := range counts {
		denied = append(denied, fmt.Sprintf("%s: %d×", k, n))
	}
	sort.Strings(denied)
	return requests, denied
}
