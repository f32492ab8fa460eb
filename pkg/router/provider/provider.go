// Package provider builds the requests berth-router sends to an ExternalModelProvider: the
// URL under its baseURL, and headers made from an allowlist of the client's, the provider's
// static headers and its credential, in that order, so that neither the client nor a static
// header can replace the credential, and the client's own key to the router never leaves
// the cluster. It follows Kthena's provider adapters (volcano-sh/kthena
// pkg/kthena-router/providers) in URL joining and header policy.
package provider

import (
	"net/http"
	"strings"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	"github.com/berth-sh/berth/pkg/router/request"
	"github.com/berth-sh/berth/pkg/router/view"
)

// Speaks reports whether a provider of type t answers requests of kind k as they are sent
// to it: OpenAI the paths of OpenAI's own API (chat and text completions, embeddings,
// responses, audio) and Messages requests (translated to a chat completion), not vLLM's own
// (rerank, score, tokenize); Anthropic only Messages requests. A chat or text completion is
// not translated into a Messages request (nor is it in Kthena).
func Speaks(t networkingv1alpha1.ExternalProviderType, k request.Kind) bool {
	if t == networkingv1alpha1.Anthropic {
		return k == request.Messages
	}
	return k == request.Messages || k.OpenAIPath()
}

// AnthropicVersion is sent to an Anthropic provider when neither the client nor the
// provider's headers set anthropic-version, which the Messages API requires.
const AnthropicVersion = "2023-06-01"

// URL is where a request for path (/v1/chat/completions, /v1/completions, /v1/messages)
// goes. An OpenAI baseURL with a path is the API root (https://api.openai.com/v1,
// https://generativelanguage.googleapis.com/v1beta/openai), so the request's /v1 is
// dropped; without a path, the request's path is appended whole. An Anthropic baseURL
// ending in /v1 gets /messages, any other /v1/messages.
func URL(p *view.Provider, path string) string {
	u := *p.BaseURL
	base := strings.TrimRight(u.Path, "/")
	switch {
	case p.Type == networkingv1alpha1.Anthropic && strings.HasSuffix(base, "/v1"):
		path = strings.TrimPrefix(path, "/v1")
	case p.Type != networkingv1alpha1.Anthropic && base != "":
		path = strings.TrimPrefix(path, "/v1")
	}
	u.Path, u.RawPath = base+path, ""
	return u.String()
}

// forwarded are the client headers a provider gets: content negotiation, request ids and
// tracing. Everything else (Authorization, x-api-key, cookies, the client's own headers)
// stays in the cluster.
var forwarded = []string{"Accept", "X-Request-Id", "Traceparent", "Tracestate", "Baggage",
	"X-B3-Traceid", "X-B3-Spanid", "X-B3-Parentspanid", "X-B3-Sampled", "X-B3-Flags"}

// reserved are headers a provider's static headers may not set, in any spelling (the schema
// refuses the common ones): credentials, which come from auth only, and what the HTTP client
// itself owns.
var reserved = map[string]bool{"Authorization": true, "Proxy-Authorization": true, "Cookie": true, "X-Api-Key": true,
	"Host": true, "Content-Length": true, "Connection": true, "Keep-Alive": true, "Proxy-Connection": true,
	"Transfer-Encoding": true, "Upgrade": true, "Trailer": true, "Te": true}

// anthropicForwarded are the Messages API's own request headers.
var anthropicForwarded = []string{"Anthropic-Version", "Anthropic-Beta"}

// Header is the header of a request to p: the allowed client headers, p's static headers,
// then its credential.
func Header(p *view.Provider, client http.Header) http.Header {
	h := http.Header{}
	keep := forwarded
	if p.Type == networkingv1alpha1.Anthropic {
		keep = append(append([]string(nil), forwarded...), anthropicForwarded...)
	}
	for _, k := range keep {
		if vs := client.Values(k); len(vs) > 0 {
			h[k] = append([]string(nil), vs...)
		}
	}
	for k, v := range p.Headers {
		if !reserved[http.CanonicalHeaderKey(k)] {
			h.Set(k, v)
		}
	}
	if p.Type == networkingv1alpha1.Anthropic && h.Get("Anthropic-Version") == "" {
		h.Set("Anthropic-Version", AnthropicVersion)
	}
	h.Set("Content-Type", "application/json")
	h.Del("Authorization")
	h.Del("X-Api-Key")
	switch p.AuthScheme {
	case networkingv1alpha1.ProviderAuthSchemeBearer:
		h.Set("Authorization", "Bearer "+p.Credential)
	case networkingv1alpha1.ProviderAuthSchemeAPIKey:
		h.Set("X-Api-Key", p.Credential)
	}
	return h
}
