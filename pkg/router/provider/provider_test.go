package provider

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	"github.com/berth-sh/berth/pkg/router/request"
	"github.com/berth-sh/berth/pkg/router/view"
)

func prov(typ networkingv1alpha1.ExternalProviderType, base string) *view.Provider {
	u, _ := url.Parse(base)
	return &view.Provider{Namespace: "ns", Name: "p", Type: typ, BaseURL: u}
}

func TestURL(t *testing.T) {
	for _, tc := range []struct {
		typ        networkingv1alpha1.ExternalProviderType
		base, path string
		want       string
	}{
		{networkingv1alpha1.OpenAI, "https://api.openai.com/v1", request.ChatPath, "https://api.openai.com/v1/chat/completions"},
		{networkingv1alpha1.OpenAI, "https://api.openai.com/v1/", request.CompletionPath, "https://api.openai.com/v1/completions"},
		{networkingv1alpha1.OpenAI, "https://api.deepseek.com", request.ChatPath, "https://api.deepseek.com/v1/chat/completions"},
		{networkingv1alpha1.OpenAI, "https://generativelanguage.googleapis.com/v1beta/openai", request.ChatPath,
			"https://generativelanguage.googleapis.com/v1beta/openai/chat/completions"},
		{networkingv1alpha1.Anthropic, "https://api.anthropic.com", request.MessagesPath, "https://api.anthropic.com/v1/messages"},
		{networkingv1alpha1.Anthropic, "https://gw.example.com/anthropic/v1", request.MessagesPath, "https://gw.example.com/anthropic/v1/messages"},
		{networkingv1alpha1.Anthropic, "https://gw.example.com/anthropic", request.MessagesPath, "https://gw.example.com/anthropic/v1/messages"},
	} {
		assert.Equal(t, tc.want, URL(prov(tc.typ, tc.base), tc.path), "%s %s", tc.typ, tc.base)
	}
}

// The client's credentials and other headers stay behind; the provider's headers are
// added; its credential comes last, so nothing replaces it.
func TestHeader(t *testing.T) {
	client := http.Header{
		"Authorization":     {"Bearer client-key"},
		"X-Api-Key":         {"client-key"},
		"Cookie":            {"session=1"},
		"X-Internal":        {"secret-topology"},
		"Traceparent":       {"00-abc-def-01"},
		"Anthropic-Version": {"2023-06-01"},
		"Anthropic-Beta":    {"tools-2024"},
	}
	p := prov(networkingv1alpha1.OpenAI, "https://api.openai.com/v1")
	p.AuthScheme, p.Credential = networkingv1alpha1.ProviderAuthSchemeBearer, "sk-provider"
	p.Headers = map[string]string{"OpenAI-Organization": "org-1", "aUthorization": "Bearer static", "COOKIE": "x=1"}
	assert.Equal(t, http.Header{
		"Authorization":       {"Bearer sk-provider"},
		"Content-Type":        {"application/json"},
		"Openai-Organization": {"org-1"},
		"Traceparent":         {"00-abc-def-01"},
	}, Header(p, client))

	p = prov(networkingv1alpha1.Anthropic, "https://api.anthropic.com")
	p.AuthScheme, p.Credential = networkingv1alpha1.ProviderAuthSchemeAPIKey, "ak-provider"
	assert.Equal(t, http.Header{
		"X-Api-Key":         {"ak-provider"},
		"Content-Type":      {"application/json"},
		"Anthropic-Version": {"2023-06-01"},
		"Anthropic-Beta":    {"tools-2024"},
		"Traceparent":       {"00-abc-def-01"},
	}, Header(p, client))

	// Without a client version the Messages API's is set; a provider without auth sends none.
	p.AuthScheme, p.Credential = "", ""
	h := Header(p, http.Header{})
	assert.Equal(t, AnthropicVersion, h.Get("Anthropic-Version"))
	assert.Empty(t, h.Get("X-Api-Key"))
	assert.Empty(t, h.Get("Authorization"))
}

func TestSpeaks(t *testing.T) {
	assert.True(t, Speaks(networkingv1alpha1.OpenAI, request.Messages), "translated to a chat completion")
	assert.True(t, Speaks(networkingv1alpha1.OpenAI, request.Completion))
	assert.True(t, Speaks(networkingv1alpha1.Anthropic, request.Messages))
	assert.False(t, Speaks(networkingv1alpha1.Anthropic, request.Chat))
}
