package gatewayconformance

import (
	"context"
	"io/fs"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gieconformance "sigs.k8s.io/gateway-api-inference-extension/conformance"
	gietests "sigs.k8s.io/gateway-api-inference-extension/conformance/tests"
	gieconfig "sigs.k8s.io/gateway-api-inference-extension/conformance/utils/config"
	giefeatures "sigs.k8s.io/gateway-api-inference-extension/conformance/utils/features"
	"sigs.k8s.io/gateway-api/conformance/utils/suite"
	"sigs.k8s.io/gateway-api/pkg/features"
)

// The Inference Extension's conformance suite (sigs.k8s.io/gateway-api-inference-extension/
// conformance, the version in go.mod) tests a gateway that sends an HTTPRoute's traffic to
// InferencePools. Its base manifests deploy echo model servers (served here as the Gateway
// API suite's are) and, per pool, the extension's own test endpoint picker, which the
// gateway is meant to call over ext_proc. berth-router as a gateway picks a pool's
// endpoints itself and never calls the pool's endpointPickerRef, so the tests that steer
// the pick through that picker (a test header naming the pod) cannot pass against it; the
// ones about status and about which pool a request reaches can, and are pinned here.
var inferenceTests = []string{
	"InferencePoolAccepted",
	"InferencePoolResolvedRefsCondition",
	"HTTPRouteInvalidInferencePoolRef",
	"InferencePoolHTTPRoutePortValidation",
	"HTTPRouteMultipleRulesDifferentPools",
	"HTTPRouteMultipleGatewaysDifferentPools",
}

// TestInferenceExtensionConformance runs inferenceTests. GIE_CONFORMANCE_TEST=<ShortName>
// runs one test of the suite instead.
func TestInferenceExtensionConformance(t *testing.T) {
	startSystem(t)
	opts := clientOptions(t)
	require.NoError(t, infv1.Install(opts.Scheme))
	c, err := client.New(cp.RESTConfig(), opts)
	require.NoError(t, err)
	conf := suite.ConformanceOptions{
		ConfigurableOptions: suite.ConfigurableOptions{
			GatewayClassName:     className,
			CleanupBaseResources: false,
			CleanupTestResources: true,
			SupportedFeatures:    append([]features.FeatureName{giefeatures.SupportInferencePool}, supported...),
			TimeoutConfig:        gieconfig.DefaultInferenceExtensionTimeoutConfig().TimeoutConfig,
			AllowCRDsMismatch:    true,
			RunTest:              os.Getenv("GIE_CONFORMANCE_TEST"),
		},
		Client:        c,
		ClientOptions: opts,
		Clientset:     kubernetes.NewForConfigOrDie(cp.RESTConfig()),
		RestConfig:    cp.RESTConfig(),
		BaseManifests: "resources/base.yaml",
		ManifestFS:    []fs.FS{&gieconformance.Manifests},
	}
	var skipped skips
	conf.Hook = skipped.record
	s, err := suite.NewConformanceTestSuite(conf)
	require.NoError(t, err)
	gatewayPod(t, c)
	selected := pinned(t, gietests.ConformanceTests, inferenceTests)
	if conf.RunTest != "" {
		selected = gietests.ConformanceTests
	}
	gieconformance.SetupConformanceTestSuite(context.Background(), t, s, conf, selected)
	require.NoError(t, s.Run(t, selected))
	if conf.RunTest == "" {
		require.Empty(t, skipped.names, "pinned tests the suite skipped")
	}
}

// gatewayPod stands for the gateway's own data plane in the Gateways' namespace, where the
// suite expects the implementation to run it (its setup waits for a Ready pod in every
// namespace it uses, and its base manifests put none in inference-conformance-infra, which
// holds only the Gateways): a Deployment as berth-router's would be, made Ready by the
// simulated kubelet. The requests themselves go to the in-process router.
func gatewayPod(t *testing.T, c client.Client) {
	ns := "inference-conformance-infra"
	require.NoError(t, c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	labels := map[string]string{"app.kubernetes.io/name": "berth-router"}
	require.NoError(t, c.Create(t.Context(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "berth-router", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "router", Image: "ghcr.io/berth-sh/berth-router:v0.1.0",
					Args: []string{"--gateway-addresses=" + gatewayHost}}}},
			},
		},
	}))
}
