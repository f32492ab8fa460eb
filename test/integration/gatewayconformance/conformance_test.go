// Package gatewayconformance runs the Gateway API's own conformance suite
// (sigs.k8s.io/gateway-api/conformance, the version in go.mod) against berth-router on a
// real apiserver: the suite applies its GatewayClass-parametrised base manifests (three
// namespaces, Gateways on ports 80 and 443, echo Deployments and Services), kube-scheduler's
// default profile places the echo pods, the simulated kubelet runs each as an echo server
// (echo_test.go) on a simulated pod network address that the EndpointSlice controller
// publishes, and the suite sends its requests to the address berth-router writes into each
// Gateway's status. The tests are pinned (gatewayTests); what berth-router does not
// implement is named as unsupported features, as the suite expects of an implementation.
package gatewayconformance

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
	"sigs.k8s.io/gateway-api/conformance"
	"sigs.k8s.io/gateway-api/conformance/tests"
	confconfig "sigs.k8s.io/gateway-api/conformance/utils/config"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/gateway-api/pkg/features"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/inprocess"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/router/gateway"
	"github.com/berth-sh/berth/pkg/sim"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) { cptest.Main(m, &cp) }

// gatewayHost is where berth-router opens the Gateways' listener ports (80, 443, 8080) and
// the address it publishes in their status: a loopback address no other test package uses
// (test/integration/router uses 127.0.0.21-22; simulated pods 127.1.0.0 and above).
const gatewayHost = "127.0.0.41"

// podNetwork is the first octet of the echo pods' addresses (sim.Kubelet.PodNetwork).
const podNetwork = 10

// className is the GatewayClass the suite runs against.
const className = "berth-conformance"

// supported are the features berth-router implements (docs/gateway.md) beyond the core
// ones the suite always runs (Gateway, HTTPRoute, ReferenceGrant).
var supported = []features.FeatureName{
	features.SupportGateway,
	features.SupportHTTPRoute,
	features.SupportReferenceGrant,
	features.SupportGatewayPort8080,
	features.SupportGatewayHTTPListenerIsolation,
	features.SupportHTTPRouteQueryParamMatching,
	features.SupportHTTPRouteMethodMatching,
	features.SupportHTTPRouteResponseHeaderModification,
	features.SupportHTTPRouteBackendRequestHeaderModification,
	features.SupportHTTPRouteHostRewrite,
	features.SupportHTTPRoutePathRewrite,
	features.SupportHTTPRouteRequestTimeout,
	features.SupportHTTPRouteParentRefPort,
	features.SupportHTTPRouteNamedRouteRule,
}

// gatewayTests are the pinned conformance tests (their ShortNames), each passing against
// berth-router; docs/gateway.md lists them and why the rest are not run.
var gatewayTests = []string{
	// Gateway and listener status.
	"GatewayInvalidRouteKind",
	"GatewayInvalidTLSConfiguration",
	"GatewayModifyListeners",
	"GatewayObservedGenerationBump",
	"GatewayClassObservedGenerationBump",
	"GatewayWithAttachedRoutes",
	"GatewayWithAttachedRoutesWithPort8080",
	"GatewaySecretInvalidReferenceGrant",
	"GatewaySecretMissingReferenceGrant",
	"GatewaySecretReferenceGrantAllInNamespace",
	"GatewaySecretReferenceGrantSpecific",
	"GatewayHTTPListenerIsolation",
	// HTTPRoute matching and precedence.
	"HTTPRouteSimpleSameNamespace",
	"HTTPRouteExactPathMatching",
	"HTTPRouteHeaderMatching",
	"HTTPRouteQueryParamMatching",
	"HTTPRouteMethodMatching",
	"HTTPRouteMatching",
	"HTTPRouteMatchingAcrossRoutes",
	"HTTPRoutePathMatchOrder",
	"HTTPRouteHostnameIntersection",
	"HTTPRouteListenerHostnameMatching",
	"HTTPRouteListenerPortMatching",
	"HTTPRouteHTTPSListener",
	"HTTPRouteNamedRule",
	// Filters, weights, timeouts.
	"HTTPRouteRequestHeaderModifier",
	"HTTPRouteBackendRequestHeaderModifier",
	"HTTPRouteRequestHeaderModifierBackendWeights",
	"HTTPRouteResponseHeaderModifier",
	"HTTPRouteRewriteHost",
	"HTTPRouteRewritePath",
	"HTTPRouteWeight",
	"HTTPRouteTimeoutRequest",
	// Route status: parents, references, missing backends.
	"HTTPRouteCrossNamespace",
	"HTTPRouteReferenceGrant",
	"HTTPRouteInvalidReferenceGrant",
	"HTTPRoutePartiallyInvalidViaInvalidReferenceGrant",
	"HTTPRouteInvalidCrossNamespaceBackendRef",
	"HTTPRouteInvalidCrossNamespaceParentRef",
	"HTTPRouteInvalidNonExistentBackendRef",
	"HTTPRouteInvalidBackendRefUnknownKind",
	"HTTPRouteInvalidParentRefNotMatchingSectionName",
	"HTTPRouteInvalidParentRefSectionNameNotMatchingPort",
	"HTTPRouteObservedGenerationBump",
	"HTTPRouteNoBackendRefs",
	"HTTPRouteServiceTypes",
}

// startSystem runs kube-scheduler's default profile (the suite's pods name no scheduler),
// the simulated kubelet with an echo server per echo pod, and one berth-router, with a
// node for the pods and the GatewayClass.
func startSystem(t *testing.T) {
	startOnce.Do(func() { started = start(t) })
	require.True(t, started, "the system did not start")
}

var (
	startOnce sync.Once
	started   bool
)

func start(t *testing.T) bool {
	cfg := cp.RESTConfig()
	dir, err := os.MkdirTemp("", "berth-conformance-")
	require.NoError(t, err)
	cptest.BeforeStop(func() { _ = os.RemoveAll(dir) })
	kubeconfig := filepath.Join(dir, "kubeconfig")
	require.NoError(t, cp.WriteKubeconfig(kubeconfig))
	kube := kubernetes.NewForConfigOrDie(cfg)
	echo := newEchoes()
	sys, err := inprocess.Start(context.Background(), cfg, inprocess.Options{
		Dir: dir, Kubeconfig: kubeconfig, DefaultScheduler: true,
		Kubelet: &inprocess.KubeletOptions{PodStartDelay: 50 * time.Millisecond, PodNetwork: podNetwork, BeforeReady: echo.start},
		Routers: []router.Options{{Addr: "127.0.0.1:0", AdminAddr: "127.0.0.1:0", ShutdownTimeout: time.Second,
			GatewayHost: gatewayHost, DialEndpoint: sim.DialPodNetwork}},
	})
	require.NoError(t, err)
	cptest.BeforeStop(func() { sys.Stop(); echo.stop() })

	_, err = kube.CoreV1().Nodes().Create(t.Context(), sim.NewNode("conformance-0", sim.NodeShape{CPU: "32", Memory: "128Gi"}, nil), metav1.CreateOptions{})
	require.NoError(t, err)
	gc := &gwv1.GatewayClass{ObjectMeta: metav1.ObjectMeta{Name: className}, Spec: gwv1.GatewayClassSpec{ControllerName: gateway.ControllerName}}
	require.NoError(t, conformanceClient(t).Create(t.Context(), gc))
	return true
}

// clientOptions carry the kinds the suite reads and writes (it makes a new client per test
// from them).
func clientOptions(t *testing.T) client.Options {
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, gwv1.Install, gwv1beta1.Install} {
		require.NoError(t, add(scheme))
	}
	return client.Options{Scheme: scheme}
}

func conformanceClient(t *testing.T) client.Client {
	c, err := client.New(cp.RESTConfig(), clientOptions(t))
	require.NoError(t, err)
	return c
}

// TestGatewayAPIConformance runs gatewayTests. GATEWAY_CONFORMANCE_TEST=<ShortName> runs
// one test of the suite instead (pinned or not), to look at a failure.
func TestGatewayAPIConformance(t *testing.T) {
	startSystem(t)
	c := conformanceClient(t)
	timeouts := confconfig.DefaultTimeoutConfig()
	opts := suite.ConformanceOptions{
		ConfigurableOptions: suite.ConfigurableOptions{
			GatewayClassName:     className,
			CleanupBaseResources: false, // the control plane goes away with the package
			CleanupTestResources: true,
			SupportedFeatures:    supported,
			TimeoutConfig:        timeouts,
			AllowCRDsMismatch:    true,
			RunTest:              os.Getenv("GATEWAY_CONFORMANCE_TEST"),
		},
		Client:        c,
		ClientOptions: clientOptions(t),
		Clientset:     kubernetes.NewForConfigOrDie(cp.RESTConfig()),
		RestConfig:    cp.RESTConfig(),
		ManifestFS:    []fs.FS{&conformance.Manifests},
	}
	var skipped skips
	opts.Hook = skipped.record
	s, err := suite.NewConformanceTestSuite(opts)
	require.NoError(t, err)

	selected := pinned(t, tests.ConformanceTests, gatewayTests)
	if opts.RunTest != "" {
		selected = tests.ConformanceTests
	}
	s.Setup(t, selected)
	require.NoError(t, s.Run(t, selected))
	if opts.RunTest == "" {
		require.Empty(t, skipped.names, "pinned tests the suite skipped (a feature they need is not in supported)")
	}
}

// skips records the tests the suite skipped (for a feature not declared supported): a
// pinned test must run, or it passes without testing anything.
type skips struct {
	mu    sync.Mutex
	names []string
}

func (s *skips) record(t *testing.T, ct suite.ConformanceTest, _ *suite.ConformanceTestSuite) {
	if t.Skipped() {
		s.mu.Lock()
		s.names = append(s.names, ct.ShortName)
		s.mu.Unlock()
	}
}

// pinned returns the suite's tests named in names, failing when one no longer exists (a
// suite upgrade renamed or dropped it: the list is to be read again).
func pinned(t *testing.T, all []suite.ConformanceTest, names []string) []suite.ConformanceTest {
	var out []suite.ConformanceTest
	var found []string
	for _, ct := range all {
		if slices.Contains(names, ct.ShortName) {
			out = append(out, ct)
			found = append(found, ct.ShortName)
		}
	}
	sort.Strings(found)
	want := slices.Sorted(slices.Values(names))
	require.Equal(t, want, slices.Compact(found), fmt.Sprintf("the suite has %d of the %d pinned tests", len(found), len(names)))
	return out
}
