package api

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
)

// Networking as Kthena writes it after v1.0: ExternalModelProvider, and ModelRoute targets
// naming one. The objects are written for these tests in the shape of Kthena's
// docs/proposal/kthena-router-third-party-model-api.md and its CRD.
const (
	validProvider = `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ExternalModelProvider
metadata: {name: bad}
spec:
  providerType: Anthropic
  model: claude-test
  baseURL: https://llm.example.com/v1
  auth:
    secretRef: {name: anthropic-key, key: apiKey}
  headers: {anthropic-version: "2023-06-01", x-team: search}
`
	validMixedRoute = `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: bad}
spec:
  modelName: assistant
  rules:
  - targetModels:
    - {modelServerName: local, weight: 80}
    - {externalModelProviderName: hosted, weight: 20}
`
)

func TestValidationRejectsBadNetworkingInput(t *testing.T) {
	target := func(o map[string]any, i int) map[string]any {
		return dig(o, "spec")["rules"].([]any)[0].(map[string]any)["targetModels"].([]any)[i].(map[string]any)
	}
	cases := []badInput{
		// ExternalModelProvider
		{"provider over plain http", validProvider, func(o map[string]any) { dig(o, "spec")["baseURL"] = "http://llm.example.com" },
			"spec.baseURL", "should match '^https://.+'"},
		{"provider URL with a query", validProvider, func(o map[string]any) { dig(o, "spec")["baseURL"] = "https://llm.example.com/v1?key=x" },
			"spec.baseURL", "must not contain user info, a query or a fragment"},
		{"provider URL with user info", validProvider, func(o map[string]any) { dig(o, "spec")["baseURL"] = "https://me:pw@llm.example.com" },
			"spec.baseURL", "must not contain user info, a query or a fragment"},
		{"provider URL with a fragment", validProvider, func(o map[string]any) { dig(o, "spec")["baseURL"] = "https://llm.example.com#v1" },
			"spec.baseURL", "must not contain user info, a query or a fragment"},
		{"provider without a base URL", validProvider, func(o map[string]any) { delete(dig(o, "spec"), "baseURL") },
			"spec.baseURL", "Required value"},
		{"unknown provider type", validProvider, func(o map[string]any) { dig(o, "spec")["providerType"] = "Gemini" },
			"spec.providerType", `supported values: "OpenAI", "Anthropic"`},
		{"unknown auth scheme", validProvider, func(o map[string]any) { dig(o, "spec", "auth")["scheme"] = "Basic" },
			"spec.auth.scheme", `supported values: "Bearer", "APIKey"`},
		{"optional credential", validProvider, func(o map[string]any) { dig(o, "spec", "auth", "secretRef")["optional"] = true },
			"spec.auth", "secretRef.optional must be false or unset"},
		{"credential without a Secret name", validProvider, func(o map[string]any) { delete(dig(o, "spec", "auth", "secretRef"), "name") },
			"spec.auth.secretRef", "secretRef.name is required"},
		{"credential in a static header", validProvider, func(o map[string]any) { dig(o, "spec", "headers")["X-API-Key"] = "sk-leak" },
			"spec.headers", "must not set credentials"},
		{"host in a static header", validProvider, func(o map[string]any) { dig(o, "spec", "headers")["host"] = "evil.example.com" },
			"spec.headers", "Host, Content-Length or hop-by-hop"},
		{"provider model too long", validProvider, func(o map[string]any) { dig(o, "spec")["model"] = string(make([]byte, 257)) },
			"spec.model", "may not be more than 256"},
		{"negative provider retries", validProvider, func(o map[string]any) { dig(o, "spec", "trafficPolicy", "retry")["attempts"] = -1 },
			"spec.trafficPolicy.retry.attempts", "greater than or equal to 0"},

		// ModelRoute targets
		{"target naming both kinds", validMixedRoute, func(o map[string]any) { target(o, 1)["modelServerName"] = "local" },
			"spec.rules[0].targetModels[1]", "exactly one of modelServerName or externalModelProviderName must be set"},
		{"target naming neither", validMixedRoute, func(o map[string]any) { delete(target(o, 1), "externalModelProviderName") },
			"spec.rules[0].targetModels[1]", "exactly one of modelServerName or externalModelProviderName must be set"},
		{"empty provider name", validMixedRoute, func(o map[string]any) { target(o, 1)["externalModelProviderName"] = "" },
			"spec.rules[0].targetModels[1].externalModelProviderName", "at least 1 chars long"},
		{"LoRA route to a provider", validMixedRoute, func(o map[string]any) { dig(o, "spec")["loraAdapters"] = []any{"sql-lora"} },
			"spec.rules", "a route with loraAdapters must target ModelServers only"},
	}

	c := newClient(t)
	ns := newNamespace(t, c)
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := decodeYAML(t, tc.base)[0]
			obj.SetNamespace(ns)
			require.NoError(t, c.Create(ctx, obj.DeepCopy(), dryRunAll), "the unmodified base must be accepted")
			tc.patch(obj.Object)
			err := c.Create(ctx, obj)
			require.Error(t, err, "the apiserver accepted a bad %s", obj.GetKind())
			assert.True(t, apierrors.IsInvalid(err), "want an Invalid error, got %v", err)
			assert.Contains(t, err.Error(), tc.field, "the error must name the field")
			assert.Contains(t, err.Error(), tc.words, "the error must explain the mistake")
			t.Logf("rejected as a user sees it: %v", err)
			got := &unstructured.Unstructured{}
			got.SetGroupVersionKind(obj.GroupVersionKind())
			assert.True(t, apierrors.IsNotFound(c.Get(ctx, keyOf(obj), got)), "a rejected object must not be stored")
		})
	}
}

// Both shapes in one schema: a ModelServer without workloadPort (the specification's and
// Kthena v1.0.0's shape; later Kthena requires the field) and one with it; a route with
// only ModelServer targets (seed 001) and one mixing a provider in (Kthena after v1.0).
func TestNetworkingAcceptsBothShapes(t *testing.T) {
	c := newClient(t)
	ns := newNamespace(t, c)
	ctx := context.Background()
	for i, m := range []string{`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: spec-shape}
spec:
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {app: qwen}}
`, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: kthena-shape}
spec:
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {app: qwen}}
  workloadPort: {port: 8000, protocol: https}
`, validRoute, validMixedRoute} {
		obj := decodeYAML(t, m)[0]
		obj.SetNamespace(ns)
		if obj.GetName() == "bad" {
			obj.SetName(fmt.Sprintf("route-%d", i))
		}
		require.NoError(t, c.Create(ctx, obj), "%s %s", obj.GetKind(), obj.GetName())
	}
}

func TestDefaultsExternalModelProvider(t *testing.T) {
	p := createMinimal[networkingv1alpha1.ExternalModelProvider](t, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ExternalModelProvider
metadata: {name: minimal}
spec:
  baseURL: https://api.example.com/v1
  auth: {secretRef: {name: key, key: apiKey}}
  trafficPolicy: {retry: {attempts: 1}}
`)
	assert.Equal(t, networkingv1alpha1.OpenAI, p.Spec.ProviderType, "providerType")
	assert.False(t, p.Spec.InsecureSkipVerify, "insecureSkipVerify")
	assert.Empty(t, p.Spec.Auth.Scheme, "auth.scheme: the provider type decides (Bearer for OpenAI)")
	assert.Equal(t, duration(100*time.Millisecond), p.Spec.TrafficPolicy.Retry.RetryInterval, "trafficPolicy.retry.retryInterval")

	mr := createMinimal[networkingv1alpha1.ModelRoute](t, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: to-provider}
spec:
  modelName: gpt
  rules:
  - targetModels: [{externalModelProviderName: minimal}]
`)
	assert.Equal(t, ptr.To[uint32](100), mr.Spec.Rules[0].TargetModels[0].Weight, "targetModels[0].weight")
	assert.Empty(t, mr.Spec.Rules[0].TargetModels[0].ModelServerName)
}
