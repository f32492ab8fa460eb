package router

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	"github.com/berth-sh/berth/pkg/router/match"
	"github.com/berth-sh/berth/pkg/routestatus"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

// fakeProvider is an external provider as the router meets one: an HTTPS server (with a
// certificate the router does not trust: the providers set insecureSkipVerify) in front of
// a simulated engine, which answers the OpenAI API and the Anthropic Messages API. It
// refuses (401) a request without the credential or the static header it expects, and
// records what the router sent.
type fakeProvider struct {
	*httptest.Server
	engine *engine.Server
	// authHeader and credential are what the provider type sends (Authorization: Bearer,
	// or x-api-key); the credential is the Secret's.
	authHeader, credential string

	requests atomic.Int64
	mu       sync.Mutex
	seen     []http.Header
	paths    []string
}

func newFakeProvider(t *testing.T, model, authHeader, credential string) *fakeProvider {
	p := &fakeProvider{engine: engine.New(engine.Config{ID: "provider-" + model, Model: model, TimeScale: defaultTimeScale}),
		authHeader: authHeader, credential: credential}
	p.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.requests.Add(1)
		p.mu.Lock()
		p.seen = append(p.seen, r.Header.Clone())
		p.paths = append(p.paths, r.URL.Path)
		p.mu.Unlock()
		if r.Header.Get(authHeader) != credential || r.Header.Get("X-Team") != "search" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":{"message":"invalid credential","type":"authentication_error"}}`))
			return
		}
		// The provider's own API root is /v1 (as api.openai.com/v1 or api.anthropic.com).
		p.engine.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(func() { p.Close(); _ = p.engine.Close() })
	return p
}

func (p *fakeProvider) headers() []http.Header {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]http.Header(nil), p.seen...)
}

// secret creates the credential Secret, labelled for providers unless unlabelled.
func (w *world) secret(name, key, value string, labelled bool) {
	w.t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns}, Data: map[string][]byte{key: []byte(value + "\n")}}
	if labelled {
		s.Labels = map[string]string{networkingv1alpha1.ExternalModelProviderCredentialLabel: "true"}
	}
	_, err := kube.CoreV1().Secrets(w.ns).Create(w.ctx, s, metav1.CreateOptions{})
	require.NoError(w.t, err)
}

// providerObject is an ExternalModelProvider for p (extra YAML lines go under spec).
func providerObject(name string, typ networkingv1alpha1.ExternalProviderType, baseURL, secret, extra string) string {
	return fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ExternalModelProvider
metadata: {name: %s}
spec:
  providerType: %s
  baseURL: %s
  insecureSkipVerify: true
  auth: {secretRef: {name: %s, key: apiKey}}
  headers: {x-team: search}
%s`, name, typ, baseURL, secret, extra)
}

// waitProvider waits until both routers can send to the provider (its credential loaded).
func (w *world) waitProvider(name string) {
	w.t.Helper()
	w.eventually("both routers have ExternalModelProvider "+name+" with its credential", 30*time.Second, func() bool {
		for _, r := range routers {
			p := r.View().Snapshot().Provider(w.ns, name)
			if p == nil || p.Err != nil {
				return false
			}
		}
		return true
	})
}

// waitRouteModel waits until both routers' ModelRoutes serve model: the route is read by
// informers apart from the provider, and either can arrive first.
func (w *world) waitRouteModel(model string) {
	w.t.Helper()
	w.eventually("both routers have a ModelRoute for "+model, 30*time.Second, func() bool {
		for _, r := range routers {
			if !slices.Contains(r.View().Snapshot().Routes.Models(), model) {
				return false
			}
		}
		return true
	})
}

// anthropicCall is one POST /v1/messages, as an Anthropic client sends it (plain HTTP).
func anthropicCall(t *testing.T, router int, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, "http://"+routers[router].Addr()+"/v1/messages", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-api-key", "client-key-to-the-router")
	req.Header.Set("anthropic-version", "2023-06-01")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res, b
}

type anthropicMessage struct {
	ID         string `json:"id"`
	Type       string `json:"type"`
	Role       string `json:"role"`
	Model      string `json:"model"`
	StopReason string `json:"stop_reason"`
	Content    []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	Usage struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage"`
}

// sseEvent is one server-sent event of a Messages stream.
type sseEvent struct {
	name string
	data map[string]any
}

func parseSSE(t *testing.T, b []byte) []sseEvent {
	t.Helper()
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			cur.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &cur.data), line)
		case line == "" && cur.name != "":
			require.Equal(t, cur.name, cur.data["type"], "an event's name is its data's type")
			out = append(out, cur)
			cur = sseEvent{}
		}
	}
	return out
}

// checkMessagesStream checks the Messages stream's event order and returns its text and
// final usage.
func checkMessagesStream(t *testing.T, events []sseEvent) (text string, input, output float64) {
	t.Helper()
	var names []string
	for _, e := range events {
		if len(names) == 0 || names[len(names)-1] != e.name {
			names = append(names, e.name)
		}
		switch e.name {
		case "message_start":
			msg := e.data["message"].(map[string]any)
			assert.Equal(t, "assistant", msg["role"])
			input = msg["usage"].(map[string]any)["input_tokens"].(float64)
		case "content_block_delta":
			text += e.data["delta"].(map[string]any)["text"].(string)
		case "message_delta":
			u := e.data["usage"].(map[string]any)
			output = u["output_tokens"].(float64)
			if in, ok := u["input_tokens"].(float64); ok && in > 0 {
				input = in
			}
			assert.Equal(t, "max_tokens", e.data["delta"].(map[string]any)["stop_reason"])
		}
	}
	assert.Equal(t, []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}, names)
	return text, input, output
}

// counter sums a counter of router i's registry over the series whose labels include want.
func counter(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// A rule splits its traffic by weight between a ModelServer and an OpenAI-type provider.
// The provider gets the credential from the Secret (as Authorization: Bearer) and its
// static header; the client's own key to the router never reaches it; its model name
// replaces the route's. Streams pass through. Its ModelRoute's ResolvedRefs names both.
func TestProviderBesideModelServer(t *testing.T) {
	w := newWorld(t, 1)
	prov := newFakeProvider(t, "gpt-sim", "Authorization", "Bearer sk-from-secret")
	w.secret("openai-key", "apiKey", "sk-from-secret", true)
	w.pod("local-0", map[string]string{"app": "local"})
	w.apply(providerObject("hosted", networkingv1alpha1.OpenAI, prov.URL+"/v1", "openai-key", "  model: gpt-sim\n"), `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: local}
spec:
  model: base-model
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {app: local}}
`, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: assistant}
spec:
  modelName: assistant
  rules:
  - targetModels:
    - {modelServerName: local, weight: 50}
    - {externalModelProviderName: hosted, weight: 50}
`)
	w.waitEndpoints("local", 1)
	w.waitProvider("hosted")
	w.waitRouteModel("assistant")
	w.waitCondition(&networkingv1alpha1.ModelRoute{}, "assistant", routestatus.ConditionResolvedRefs, metav1.ConditionTrue,
		routestatus.ReasonAllModelServersSeen, "every target (2) names an existing ModelServer or ExternalModelProvider")

	const n = 80
	byProvider := 0
	for i := range n {
		out, resp, err := chat(w.ctx, client_(i%2), "assistant", fmt.Sprintf("q%d", i))
		require.NoError(t, err, "request %d", i)
		switch resp.Header.Get("X-Berth-Endpoint") {
		case "ExternalModelProvider " + w.ns + "/hosted":
			byProvider++
			assert.Equal(t, "gpt-sim", out.Model, "the provider's spec.model replaces the route's")
		case w.ns + "/local-0":
			assert.Equal(t, "base-model", out.Model)
		default:
			t.Fatalf("served by %q", resp.Header.Get("X-Berth-Endpoint"))
		}
		assert.Equal(t, "tok0 tok1 tok2 tok3", out.Choices[0].Message.Content)
	}
	assert.InDelta(t, n/2, byProvider, 20, "a 50/50 split of %d requests", n)
	assert.EqualValues(t, byProvider, prov.requests.Load(), "every request the provider served reached it once")
	for _, h := range prov.headers() {
		assert.Equal(t, "Bearer sk-from-secret", h.Get("Authorization"), "the Secret's credential, trimmed, replaces the client's key")
		assert.Equal(t, "search", h.Get("X-Team"))
	}
	assert.Equal(t, "/v1/chat/completions", prov.paths[0], "baseURL .../v1 is the API root")

	// A stream through the provider arrives chunk by chunk.
	c := client_(0)
	stream := c.Chat.Completions.NewStreaming(w.ctx, openai.ChatCompletionNewParams{
		Model: "assistant", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream")}, MaxTokens: openai.Int(5),
	})
	var text strings.Builder
	for stream.Next() {
		if c := stream.Current(); len(c.Choices) > 0 {
			text.WriteString(c.Choices[0].Delta.Content)
		}
	}
	require.NoError(t, stream.Err())
	assert.Equal(t, "tok0 tok1 tok2 tok3 tok4", text.String())

	// A Messages request for the same route: both targets speak OpenAI's API, so the router
	// translates for either, and the provider still gets its Bearer credential.
	before := prov.requests.Load()
	seen := map[string]bool{}
	for i := 0; i < 30 && len(seen) < 2; i++ {
		res, body := anthropicCall(t, i%2, fmt.Sprintf(`{"model":"assistant","max_tokens":2,"messages":[{"role":"user","content":"m%d"}]}`, i))
		require.Equal(t, http.StatusOK, res.StatusCode, string(body))
		var m anthropicMessage
		require.NoError(t, json.Unmarshal(body, &m))
		assert.Equal(t, "tok0 tok1", m.Content[0].Text)
		seen[res.Header.Get("X-Berth-Endpoint")] = true
	}
	assert.Len(t, seen, 2, "both targets answered Messages requests: %v", seen)
	assert.Greater(t, prov.requests.Load(), before)
	assert.Equal(t, "/v1/chat/completions", prov.paths[len(prov.paths)-1], "translated for an OpenAI provider")
}

// POST /v1/messages through a ModelRoute: to a simulated engine behind a ModelServer (the
// router translates to a chat completion and back) and to an Anthropic-type provider (the
// request passes through with x-api-key from the Secret), each streaming and not. The
// token counts of both reach the rate limit and the metrics.
func TestAnthropicMessagesEndToEnd(t *testing.T) {
	w := newWorld(t, 1)
	prov := newFakeProvider(t, "claude-sim", "X-Api-Key", "ak-from-secret")
	w.secret("anthropic-key", "apiKey", "ak-from-secret", true)
	w.pod("engine-0", map[string]string{"app": "engine"})
	w.apply(providerObject("claude", networkingv1alpha1.Anthropic, prov.URL, "anthropic-key", ""), `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: engine}
spec:
  model: base-model
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {app: engine}}
`, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: in-cluster}
spec:
  modelName: in-cluster
  rules:
  - targetModels: [{modelServerName: engine}]
`, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: claude}
spec:
  modelName: claude-sim
  rules:
  - targetModels: [{externalModelProviderName: claude}]
  rateLimit: {outputTokensPerUnit: 12, unit: hour}
`)
	w.waitEndpoints("engine", 1)
	w.waitProvider("claude")
	w.waitRouteModel("in-cluster")
	w.waitRouteModel("claude-sim")

	const prompt = `{"model":%q,"max_tokens":4,"system":"Be brief.","messages":[{"role":"user","content":[{"type":"text","text":"Hello"}]}]%s}`
	for _, tc := range []struct{ model, via string }{{"in-cluster", w.ns + "/engine-0"}, {"claude-sim", "ExternalModelProvider " + w.ns + "/claude"}} {
		t.Run(tc.model, func(t *testing.T) {
			res, body := anthropicCall(t, 0, fmt.Sprintf(prompt, tc.model, ""))
			require.Equal(t, http.StatusOK, res.StatusCode, string(body))
			assert.Equal(t, tc.via, res.Header.Get("X-Berth-Endpoint"))
			assert.True(t, strings.HasPrefix(res.Header.Get("Content-Type"), "application/json"))
			var m anthropicMessage
			require.NoError(t, json.Unmarshal(body, &m), string(body))
			assert.Equal(t, "message", m.Type)
			assert.Equal(t, "assistant", m.Role)
			assert.True(t, strings.HasPrefix(m.ID, "msg_"), m.ID)
			require.Len(t, m.Content, 1)
			assert.Equal(t, "text", m.Content[0].Type)
			assert.Equal(t, "tok0 tok1 tok2 tok3", m.Content[0].Text)
			assert.Equal(t, "max_tokens", m.StopReason)
			// "system: Be brief.\nuser: Hello\n" is 30 bytes: 8 of the simulator's 4-byte tokens.
			assert.EqualValues(t, 8, m.Usage.InputTokens, "the system prompt is the first chat message on both paths")
			assert.EqualValues(t, 4, m.Usage.OutputTokens)

			res, body = anthropicCall(t, 0, fmt.Sprintf(prompt, tc.model, `,"stream":true`))
			require.Equal(t, http.StatusOK, res.StatusCode, string(body))
			assert.True(t, strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream"))
			text, in, out := checkMessagesStream(t, parseSSE(t, body))
			assert.Equal(t, "tok0 tok1 tok2 tok3", text)
			assert.EqualValues(t, 8, in)
			assert.EqualValues(t, 4, out)
		})
	}
	for _, h := range prov.headers() {
		assert.Equal(t, "ak-from-secret", h.Get("X-Api-Key"), "the Secret's key, never the client's")
		assert.Empty(t, h.Get("Authorization"))
		assert.Equal(t, "2023-06-01", h.Get("Anthropic-Version"), "the client's anthropic-version passes")
	}
	assert.Equal(t, []string{"/v1/messages", "/v1/messages"}, prov.paths)

	// 8 output tokens so far on the claude route; its limit is 12 an hour: one more
	// request fits (the bucket needs one token), its 4 take it to 0, the next is refused.
	res, body := anthropicCall(t, 0, fmt.Sprintf(prompt, "claude-sim", ""))
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
	res, body = anthropicCall(t, 0, fmt.Sprintf(prompt, "claude-sim", ""))
	assert.Equal(t, http.StatusTooManyRequests, res.StatusCode, string(body))
	var refusal struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal(body, &refusal), string(body))
	assert.Equal(t, "error", refusal.Type, "an Anthropic-shaped error on /v1/messages")
	assert.Equal(t, "rate_limit_error", refusal.Error.Type)
	assert.Contains(t, refusal.Error.Message, "output tokens")
	assert.NotEmpty(t, res.Header.Get("Retry-After"))

	reg := routers[0].MetricsRegistry()
	assert.EqualValues(t, 12, counter(t, reg, "berth_router_tokens_total", map[string]string{
		"route": w.ns + "/claude", "target_kind": string(match.Provider), "target": w.ns + "/claude", "type": "output"}))
	assert.EqualValues(t, 24, counter(t, reg, "berth_router_tokens_total", map[string]string{
		"route": w.ns + "/claude", "type": "input"}), "Anthropic's input_tokens, three answers of 8")
	assert.EqualValues(t, 8, counter(t, reg, "berth_router_tokens_total", map[string]string{
		"route": w.ns + "/in-cluster", "target_kind": string(match.ModelServer), "target": w.ns + "/engine", "type": "output"}))

	// An Anthropic provider does not speak OpenAI's API: a chat completion for its model
	// is refused, saying so.
	_, _, err := chat(w.ctx, client_(1), "claude-sim", "hi")
	assert.Equal(t, http.StatusBadRequest, statusOf(err), "%v", err)
	assert.Contains(t, messageOf(err), "speaks the Anthropic Messages API (POST /v1/messages) only")
}

// messageOf is the message of an OpenAI client error (the router's own explanation).
func messageOf(err error) string {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return apiErr.Message
	}
	return fmt.Sprint(err)
}

// A provider answering 5xx: with a retry policy, the request goes to the rule's other
// target and every client is answered; the retry is counted against the provider. Without
// one, the provider's own 503 reaches the client. A provider slower than its timeout is
// cut off with 504.
func TestProviderRetriesAndTimeout(t *testing.T) {
	w := newWorld(t, 1)
	prov := newFakeProvider(t, "gpt-sim", "Authorization", "Bearer sk")
	prov.engine.SetFault(engine.Fault{Status: http.StatusServiceUnavailable})
	w.secret("key", "apiKey", "sk", true)
	w.pod("backup-0", map[string]string{"app": "backup"})
	w.apply(
		providerObject("flaky", networkingv1alpha1.OpenAI, prov.URL+"/v1", "key", "  model: gpt-sim\n  trafficPolicy: {retry: {attempts: 1, retryInterval: 10ms}}\n"),
		providerObject("flaky-unretried", networkingv1alpha1.OpenAI, prov.URL+"/v1", "key", "  model: gpt-sim\n"),
		providerObject("slow", networkingv1alpha1.OpenAI, prov.URL+"/v1", "key", "  model: gpt-sim\n  trafficPolicy: {timeout: 300ms}\n"), `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: backup}
spec:
  model: base-model
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {app: backup}}
`, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: retried}
spec:
  modelName: retried
  rules:
  - targetModels: [{externalModelProviderName: flaky, weight: 50}, {modelServerName: backup, weight: 50}]
`, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: unretried}
spec:
  modelName: unretried
  rules:
  - targetModels: [{externalModelProviderName: flaky-unretried}]
`, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: slow}
spec:
  modelName: slow
  rules:
  - targetModels: [{externalModelProviderName: slow}]
`)
	w.waitEndpoints("backup", 1)
	for _, p := range []string{"flaky", "flaky-unretried", "slow"} {
		w.waitProvider(p)
	}
	for _, m := range []string{"retried", "unretried", "slow"} {
		w.waitRouteModel(m)
	}
	const n = 40
	for i := range n {
		_, resp, err := chat(w.ctx, client_(0), "retried", fmt.Sprintf("r%d", i))
		require.NoError(t, err, "request %d", i)
		assert.Equal(t, w.ns+"/backup-0", resp.Header.Get("X-Berth-Endpoint"))
	}
	tried := prov.requests.Load()
	assert.InDelta(t, n/2, tried, n/2-5, "about half the requests were drawn to the provider first")
	assert.EqualValues(t, tried, counter(t, routers[0].MetricsRegistry(), "berth_router_retries_total",
		map[string]string{"server": w.ns + "/flaky", "reason": "503"}))

	_, _, err := chat(w.ctx, client_(0), "unretried", "u")
	assert.Equal(t, http.StatusServiceUnavailable, statusOf(err), "without a retry policy the provider's own 503 reaches the client")

	// The provider would answer 200 after 5 s and the client gives up after 30 s with no
	// status: a 504 can only be the rule's timeout (no clock is needed to tell).
	prov.engine.SetFault(engine.Fault{Delay: 5 * time.Second})
	start := time.Now()
	_, _, err = chat(w.ctx, client_(1), "slow", "are you there")
	assert.Equal(t, http.StatusGatewayTimeout, statusOf(err), "%v", err)
	t.Logf("504 after %s (timeout 300ms)", time.Since(start).Round(time.Millisecond))
}

// The credential comes from a Secret labelled for providers only, and follows it: a
// provider whose Secret lacks the label cannot be used (503, saying why); labelling it
// makes it usable; a rotated key is sent from then on. Without insecureSkipVerify a
// certificate the router does not trust fails the request (502).
func TestProviderCredentialFollowsTheSecret(t *testing.T) {
	w := newWorld(t, 1)
	prov := newFakeProvider(t, "gpt-sim", "Authorization", "Bearer sk-2")
	w.secret("rotating", "apiKey", "sk-1", false)
	w.apply(providerObject("p", networkingv1alpha1.OpenAI, prov.URL, "rotating", "  model: gpt-sim\n"), `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: p}
spec:
  modelName: p-model
  rules:
  - targetModels: [{externalModelProviderName: p}]
`, fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ExternalModelProvider
metadata: {name: strict}
spec:
  model: gpt-sim
  baseURL: %s
  headers: {x-team: search}
`, prov.URL), `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: strict}
spec:
  modelName: strict-model
  rules:
  - targetModels: [{externalModelProviderName: strict}]
`)
	w.eventually("both routers find provider p's Secret unlabelled", 30*time.Second, func() bool {
		for _, r := range routers {
			p := r.View().Snapshot().Provider(w.ns, "p")
			if p == nil || p.Err == nil || !strings.Contains(p.Err.Error(), "not labelled") {
				return false
			}
		}
		return true
	})
	_, _, err := chat(w.ctx, client_(0), "p-model", "x")
	assert.Equal(t, http.StatusServiceUnavailable, statusOf(err), "%v", err)
	assert.Contains(t, messageOf(err), "not labelled "+networkingv1alpha1.ExternalModelProviderCredentialLabel+"=true")
	assert.Zero(t, prov.requests.Load(), "nothing was sent without a credential")

	sec, err := kube.CoreV1().Secrets(w.ns).Get(w.ctx, "rotating", metav1.GetOptions{})
	require.NoError(t, err)
	sec.Labels = map[string]string{networkingv1alpha1.ExternalModelProviderCredentialLabel: "true"}
	sec, err = kube.CoreV1().Secrets(w.ns).Update(w.ctx, sec, metav1.UpdateOptions{})
	require.NoError(t, err)
	w.waitProvider("p")
	w.waitRouteModel("p-model")
	_, _, err = chat(w.ctx, client_(0), "p-model", "x")
	assert.Equal(t, http.StatusUnauthorized, statusOf(err), "sk-1 is the wrong key: the provider's own 401 reaches the client")

	sec.Data["apiKey"] = []byte("sk-2")
	_, err = kube.CoreV1().Secrets(w.ns).Update(w.ctx, sec, metav1.UpdateOptions{})
	require.NoError(t, err)
	w.eventually("both routers read the rotated key", 30*time.Second, func() bool {
		for _, r := range routers {
			if p := r.View().Snapshot().Provider(w.ns, "p"); p == nil || p.Credential != "sk-2" {
				return false
			}
		}
		return true
	})
	for i := range 2 {
		_, _, err = chat(w.ctx, client_(i), "p-model", "x")
		assert.NoError(t, err, "router %d with the rotated key", i)
	}

	w.waitProvider("strict")
	w.waitRouteModel("strict-model")
	_, _, err = chat(w.ctx, client_(0), "strict-model", "x")
	assert.Equal(t, http.StatusBadGateway, statusOf(err), "%v", err)
	assert.Contains(t, messageOf(err), "certificate")
}

// A provider that never answers: at the rule's timeout the client gets 504 (promptly, not
// whenever the provider gives up), and the request to the provider is cancelled then, so
// the provider (and the router's connection to it) is not held for as long as it cares to
// wait. Its handler reads the request, as a provider does before it works on it (an
// HTTP/1.1 server cannot notice its client going away before it has read the body), then
// waits on the request's context alone: only the router's cancellation ends it.
func TestProviderTimeoutCancelsTheUpstreamRequest(t *testing.T) {
	w := newWorld(t, 1)
	arrived, cancelled := make(chan struct{}, 1), make(chan time.Duration, 1)
	release := make(chan struct{})
	silent := httptest.NewTLSServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		start := time.Now()
		_, _ = io.Copy(io.Discard, r.Body)
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
			cancelled <- time.Since(start)
		case <-release: // the test is over; Close waits for handlers
		}
	}))
	t.Cleanup(silent.Close)
	t.Cleanup(func() { close(release) }) // runs before Close
	w.secret("key", "apiKey", "sk", true)
	const timeout = 500 * time.Millisecond
	w.apply(providerObject("silent", networkingv1alpha1.OpenAI, silent.URL+"/v1", "key", "  model: gpt-sim\n  trafficPolicy: {timeout: 500ms}\n"), `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: silent}
spec:
  modelName: silent
  rules:
  - targetModels: [{externalModelProviderName: silent}]
`)
	w.waitProvider("silent")
	w.waitRouteModel("silent")

	start := time.Now()
	_, _, err := chat(w.ctx, client_(0), "silent", "anyone?")
	took := time.Since(start)
	assert.Equal(t, http.StatusGatewayTimeout, statusOf(err), "%v", err)
	assert.Contains(t, messageOf(err), "did not answer within its timeout")
	assert.Less(t, took, timeout+3*time.Second, "the 504 comes at the timeout, not when the provider gives up")
	select {
	case <-arrived:
	default:
		t.Fatal("the request never reached the provider")
	}
	select {
	case held := <-cancelled:
		t.Logf("504 after %s; the provider saw its request cancelled after %s (timeout %s)", took.Round(time.Millisecond), held.Round(time.Millisecond), timeout)
	case <-time.After(5 * time.Second):
		t.Fatal("the provider's request was not cancelled within 5s of the client's 504")
	}
}
