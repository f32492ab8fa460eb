package router

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/router/match"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

// servedPods creates n bare pods labelled app=<name> and a ModelServer over them (extra
// YAML lines go under spec), then a ModelRoute for model <name>.
func (w *world) servedPods(name string, n int, specExtra string, podLabels map[string]string) {
	w.t.Helper()
	for i := range n {
		labels := map[string]string{"app": name}
		for k, v := range podLabels {
			labels[k] = v
		}
		w.pod(fmt.Sprintf("%s-%d", name, i), labels)
	}
	w.apply(fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: %[1]s}
spec:
  model: base-model
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {app: %[1]s}}
%[2]s`, name, specExtra), fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: %[1]s}
spec:
  modelName: %[1]s
  rules:
  - targetModels: [{modelServerName: %[1]s}]
`, name))
	w.waitEndpoints(name, n)
}

// With a retry policy, a request that meets a failing endpoint is retried on a healthy
// one before anything reached the client; without one, the engine's error reaches it.
func TestRetryToHealthyEndpoint(t *testing.T) {
	w := newWorld(t, 1)
	w.servedPods("retried", 3, `  trafficPolicy: {retry: {attempts: 2, retryInterval: 10ms}}`, nil)
	w.servedPods("unretried", 1, "", nil)
	for _, p := range []string{"retried-0", "retried-1", "unretried-0"} {
		w.engine(p).SetFault(engine.Fault{Status: http.StatusServiceUnavailable})
	}
	for i := range 30 {
		_, resp, err := chat(w.ctx, client_(i%2), "retried", fmt.Sprintf("r%d", i))
		require.NoError(t, err, "request %d", i)
		require.Equal(t, w.ns+"/retried-2", resp.Header.Get("X-Sim-Engine"))
	}
	_, _, err := chat(w.ctx, client_(0), "unretried", "u")
	assert.Equal(t, http.StatusServiceUnavailable, statusOf(err), "without a retry policy the engine's own 503 reaches the client")
}

// An endpoint whose engine is gone while its pod still looks Ready (the moments before a
// deletion reaches the router) refuses connections; even without a retry policy the router
// sends those requests to another endpoint, and no client sees an error.
func TestRefusedConnectionGoesElsewhere(t *testing.T) {
	w := newWorld(t, 1)
	w.servedPods("vanishing", 2, "", nil)
	require.NoError(t, w.engine("vanishing-0").Close())
	for i := range 20 {
		_, resp, err := chat(w.ctx, client_(i%2), "vanishing", fmt.Sprintf("v%d", i))
		require.NoError(t, err, "request %d", i)
		require.Equal(t, w.ns+"/vanishing-1", resp.Header.Get("X-Sim-Engine"))
	}
}

// trafficPolicy.timeout bounds a request: the client gets 504 instead of the engine's answer.
// The engine would answer 200 after 5 s and the client gives up after 30 s with no status,
// so a 504 can only be the router's timeout (no clock is needed to tell).
func TestTimeout(t *testing.T) {
	w := newWorld(t, 1)
	w.servedPods("slow", 1, `  trafficPolicy: {timeout: 300ms}`, nil)
	w.engine("slow-0").SetFault(engine.Fault{Delay: 5 * time.Second})
	start := time.Now()
	_, _, err := chat(w.ctx, client_(0), "slow", "are you there")
	assert.Equal(t, http.StatusGatewayTimeout, statusOf(err), "%v", err)
	t.Logf("504 after %s (timeout 300ms)", time.Since(start).Round(time.Millisecond))
}

// A prefill and a decode endpoint of the same PD group serve each request, through the
// flow of the ModelServer's KV connector: the decode engine receives the prefill's KV
// (no miss), and pairs never cross groups.
func TestPDPairingPerConnector(t *testing.T) {
	w := newWorld(t, 2)
	for _, conn := range []string{"http", "nixl", "lmcache", "mooncake"} {
		t.Run(conn, func(t *testing.T) {
			name := "pd-" + conn
			var pods []string
			for _, g := range []string{"g1", "g2"} {
				for _, role := range []string{"prefill", "decode"} {
					pod := fmt.Sprintf("%s-%s-%s", name, g, role)
					w.pod(pod, map[string]string{"app": name, "pd-group": g, "pd-role": role})
					pods = append(pods, pod)
				}
			}
			w.apply(fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: %[1]s}
spec:
  model: base-model
  inferenceEngine: vLLM
  workloadSelector:
    matchLabels: {app: %[1]s}
    pdGroup: {groupKey: pd-group, prefillLabels: {pd-role: prefill}, decodeLabels: {pd-role: decode}}
  kvConnector: {type: %[2]s}
`, name, conn), fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: %[1]s}
spec:
  modelName: %[1]s
  rules: [{targetModels: [{modelServerName: %[1]s}]}]
`, name))
			w.waitEndpoints(name, 4)
			long := strings.Repeat("a shared system prompt long enough to span several KV blocks. ", 8)
			const n = 12
			for i := range n {
				prompt := fmt.Sprintf("%s question %d", long, i)
				if i%2 == 0 {
					_, resp, err := chat(w.ctx, client_(i%2), name, prompt)
					require.NoError(t, err)
					checkPair(t, w.ns, resp)
					continue
				}
				oc := client_(i % 2)
				stream := oc.Chat.Completions.NewStreaming(w.ctx, openai.ChatCompletionNewParams{
					Model: name, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}, MaxTokens: openai.Int(5)})
				tokens := 0
				for stream.Next() {
					if ch := stream.Current(); len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
						tokens++
					}
				}
				require.NoError(t, stream.Err())
				assert.Equal(t, 5, tokens)
			}
			var received, misses, prefills int64
			for _, p := range pods {
				st := w.engine(p).Stats()
				if strings.HasSuffix(p, "decode") {
					received += st.KVTransfersReceived
					misses += st.KVTransferMisses
				} else {
					prefills += st.Requests
					assert.Zero(t, st.GenerationTokens-st.Requests, "%s: a prefill engine generates one token per request at most", p)
				}
			}
			assert.EqualValues(t, n, prefills, "every request was prefilled on a prefill engine")
			assert.EqualValues(t, n, received, "every decode got its KV from the prefill side")
			assert.Zero(t, misses, "no decode had to prefill by itself")
		})
	}
}

// checkPair asserts the router paired a prefill and a decode endpoint of one PD group.
func checkPair(t *testing.T, ns string, resp *http.Response) {
	t.Helper()
	pair := resp.Header.Get("X-Berth-Endpoint")
	prefill, decode, ok := strings.Cut(pair, "+")
	require.True(t, ok, "X-Berth-Endpoint %q names a pair", pair)
	require.Equal(t, strings.TrimSuffix(prefill, "-prefill"), strings.TrimSuffix(decode, "-decode"), "a pair stays in one PD group")
	require.Equal(t, decode, resp.Header.Get("X-Sim-Engine"), "the client gets the decode engine's answer")
	_ = ns
}

// Two router replicas share one global token budget through Redis (the route's own, or the
// routers' --redis-addr when the route names none); a local output limit is charged from
// the response's usage and refuses the next request with Retry-After.
func TestRateLimits(t *testing.T) {
	w := newWorld(t, 1)
	w.servedPods("limited", 1, "", nil)
	// 40 bytes of prompt -> "user: " + 40 + "\n" = 47 bytes = 12 estimated tokens; 100
	// tokens per hour admit 8 requests, whichever replica they reach.
	w.apply(fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: global}
spec:
  modelName: global-limited
  rules: [{targetModels: [{modelServerName: limited}]}]
  rateLimit: {inputTokensPerUnit: 100, unit: hour, global: {redis: {address: %q}}}
`, redisAddr), `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: global-default}
spec:
  modelName: global-default-limited
  rules: [{targetModels: [{modelServerName: limited}]}]
  rateLimit: {inputTokensPerUnit: 100, unit: hour, global: {}}
`, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: output}
spec:
  modelName: output-limited
  rules: [{targetModels: [{modelServerName: limited}]}]
  rateLimit: {outputTokensPerUnit: 6, unit: minute}
`)
	w.eventually("both routers know the routes", 10*time.Second, func() bool {
		for _, r := range routers {
			if len(r.View().Snapshot().Routes.Models()) < 4 { // limited, global-limited, global-default-limited, output-limited
				return false
			}
		}
		return true
	})
	prompt := strings.Repeat("x", 40)
	for _, model := range []string{"global-limited", "global-default-limited"} {
		ok, refused := 0, 0
		for i := range 12 {
			_, _, err := chat(w.ctx, client_(i%2), model, prompt)
			if err == nil {
				ok++
				continue
			}
			require.Equal(t, http.StatusTooManyRequests, statusOf(err), "%s: %v", model, err)
			refused++
		}
		assert.Equal(t, 8, ok, "%s: the two replicas share 100 input tokens an hour: 8 requests of 12", model)
		assert.Equal(t, 4, refused, model)
	}

	// Retry-After on a raw request.
	res, err := http.Post("http://"+routers[1].Addr()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"global-limited","messages":[{"role":"user","content":"`+prompt+`"}]}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusTooManyRequests, res.StatusCode)
	retry, err := strconv.Atoi(res.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", res.Header.Get("Retry-After"))
	assert.Positive(t, retry)
	assert.Contains(t, string(body), "rate_limit_exceeded")

	// Output: the first request generates 4 of 6 tokens, the second 4 more (debt), the third waits.
	for i := range 2 {
		_, _, err := chat(w.ctx, client_(0), "output-limited", "o")
		require.NoError(t, err, "request %d", i)
	}
	_, _, err = chat(w.ctx, client_(0), "output-limited", "o")
	assert.Equal(t, http.StatusTooManyRequests, statusOf(err))
}

// Streams pass through chunk by chunk as the engine produces them, and a client that goes
// away cancels the engine's work.
func TestStreamingPassThroughAndCancel(t *testing.T) {
	w := newWorld(t, 1)
	// Real-time engine: 8 ms per token.
	w.servedPods("live", 1, "", map[string]string{timeScaleLabel: "1"})
	body := `{"model":"live","stream":true,"max_tokens":40,"messages":[{"role":"user","content":"count"}]}`
	req, _ := http.NewRequest(http.MethodPost, "http://"+routers[0].Addr()+"/v1/chat/completions", strings.NewReader(body))
	start := time.Now()
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	sc := bufio.NewScanner(res.Body)
	var first, last time.Duration
	chunks := 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "data: {") {
			if chunks == 0 {
				first = time.Since(start)
			}
			chunks++
			last = time.Since(start)
		}
	}
	res.Body.Close()
	assert.GreaterOrEqual(t, chunks, 40)
	assert.Greater(t, last-first, 200*time.Millisecond, "40 tokens at 8 ms arrive spread out, not in one buffered piece (first %s, last %s)", first, last)

	ctx, cancel := context.WithCancel(w.ctx)
	req, _ = http.NewRequestWithContext(ctx, http.MethodPost, "http://"+routers[0].Addr()+"/v1/chat/completions",
		strings.NewReader(`{"model":"live","stream":true,"max_tokens":5000,"messages":[{"role":"user","content":"go on"}]}`))
	res, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, err = bufio.NewReader(res.Body).ReadString('\n')
	require.NoError(t, err)
	eng := w.engine("live-0")
	assert.EqualValues(t, 1, eng.Stats().Running)
	cancel()
	res.Body.Close()
	w.eventually("the engine dropped the cancelled request", 5*time.Second, func() bool { return eng.Stats().Running == 0 })
}

// Bad requests are refused by the router itself with an OpenAI error naming the problem.
func TestBadRequests(t *testing.T) {
	startSystem(t)
	base := "http://" + routers[0].Addr()
	for _, tc := range []struct {
		method, path, body string
		status             int
		contains           string
	}{
		{"POST", "/v1/chat/completions", `{"messages":[]}`, 400, `"param":"model"`},
		{"POST", "/v1/chat/completions", `{"model":"m"`, 400, "not a JSON object"},
		{"POST", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":5}]}`, 400, `messages[0].content`},
		{"POST", "/v1/completions", `{"model":"m"}`, 400, `"param":"prompt"`},
		{"GET", "/v1/chat/completions", ``, 405, "send POST"},
		{"POST", "/v1/chat/completions", `{"model":"m","prompt":"` + strings.Repeat("x", 2<<20) + `"}`, 413, "exceeds"},
		{"POST", "/v1/embeddings", `{}`, 400, `"param":"model"`},
		{"POST", "/v1/audio/transcriptions", `{"model":"m"}`, 400, "multipart/form-data"},
		{"POST", "/v1/images/generations", `{}`, 404, "berth-router serves"},
	} {
		req, _ := http.NewRequest(tc.method, base+tc.path, strings.NewReader(tc.body))
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		assert.Equal(t, tc.status, res.StatusCode, "%s %s: %s", tc.method, tc.path, b)
		assert.Contains(t, string(b), tc.contains)
		assert.Contains(t, string(b), `"error"`)
	}
}

// Pods of a ModelServing are deleted and replaced, and the ModelServing scaled, while
// clients stream through both routers: no request fails, because a terminating pod takes no
// new request, refused or dropped connections are retried on another endpoint, and engines
// finish in-flight streams. Stream lengths, the victims and the pauses come from a seed
// (BERTH_SEED to replay one); a watch checks for the whole run that neither router offers a
// pod that is gone or terminating.
func TestPodsComeAndGoUnderLoad(t *testing.T) {
	seed := time.Now().UnixNano()
	if v := os.Getenv("BERTH_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseInt(v, 10, 64); err != nil {
			t.Fatalf("BERTH_SEED=%q: %v", v, err) // a malformed seed is not silently replaced by the clock
		}
	}
	t.Logf("seed %d (BERTH_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 11))
	w := newWorld(t, 1)
	w.apply(servingYAML("churn", 3, 1, "0.1", 1), serverYAML("churn"), `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: churn}
spec:
  modelName: base-model
  rules: [{targetModels: [{modelServerName: churn}]}]
`)
	w.waitEndpoints("churn", 3)

	// The watch: for the whole run, every endpoint either router offers is a pod that exists
	// and is not being deleted, give or take the second a watch event may take to arrive.
	ctx, stop := context.WithCancel(w.ctx)
	var offeredGone atomic.Int64
	go func() {
		goneSince := map[string]time.Time{}
		for ctx.Err() == nil {
			for _, r := range routers {
				s := r.View().Snapshot().Server(w.ns, "churn")
				if s == nil {
					continue
				}
				for _, e := range s.Endpoints {
					p, err := kube.CoreV1().Pods(w.ns).Get(ctx, e.Pod, metav1.GetOptions{})
					gone := apierrors.IsNotFound(err) || (err == nil && (p.DeletionTimestamp != nil || p.Status.PodIP+":8000" != e.Address))
					if !gone {
						delete(goneSince, e.Address)
						continue
					}
					if first, ok := goneSince[e.Address]; !ok {
						goneSince[e.Address] = time.Now()
					} else if time.Since(first) > time.Second {
						offeredGone.Add(1)
						t.Logf("a router still offers %s (%s) a second after its pod went away", e.Pod, e.Address)
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()

	var sent, failed atomic.Int64
	var failures sync.Map
	var clients sync.WaitGroup
	for c := range 8 {
		maxTokens := int64(5 + rng.IntN(40))
		clients.Add(1)
		go func() {
			defer clients.Done()
			oc := client_(c % 2)
			for i := 0; ctx.Err() == nil; i++ {
				sent.Add(1)
				stream := oc.Chat.Completions.NewStreaming(w.ctx, openai.ChatCompletionNewParams{
					Model: "base-model", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("c%d r%d", c, i))},
					MaxTokens: openai.Int(maxTokens)})
				tokens := int64(0)
				for stream.Next() {
					if ch := stream.Current(); len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
						tokens++
					}
				}
				if err := stream.Err(); err != nil || tokens != maxTokens {
					failed.Add(1)
					failures.Store(fmt.Sprintf("c%d r%d", c, i), fmt.Sprintf("tokens=%d/%d err=%v", tokens, maxTokens, err))
				}
			}
		}()
	}
	replicas, changes := int32(3), 0
	for round := range 5 {
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		if round == 2 { // scale out by one, then keep replacing pods
			replicas = 4
			// berth-controller writes the object too (its status): a conflict is retried.
			require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
				ms := &workloadv1alpha1.ModelServing{}
				if err := cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "churn"}, ms); err != nil {
					return err
				}
				ms.Spec.Replicas = &replicas
				return cl.Update(w.ctx, ms)
			}))
		} else {
			pods := w.podsOf("churn")
			require.NotEmpty(t, pods)
			victim := pods[rng.IntN(len(pods))]
			require.NoError(t, kube.CoreV1().Pods(w.ns).Delete(w.ctx, victim, metav1.DeleteOptions{}))
		}
		changes++
		w.eventually(fmt.Sprintf("the ModelServing is back to %d Ready pods", replicas), 30*time.Second,
			func() bool { return len(w.readyPodsOf("churn")) == int(replicas) })
	}
	time.Sleep(500 * time.Millisecond)
	stop()
	clients.Wait()
	failures.Range(func(k, v any) bool { t.Logf("failed %s: %s", k, v); return true })
	t.Logf("%d streamed requests through %d changes (seed %d)", sent.Load(), changes, seed)
	assert.Zero(t, failed.Load(), "no request is lost to a deleted pod (seed %d)", seed)
	assert.Zero(t, offeredGone.Load(), "a router offered a pod gone or terminating for over a second")
	assert.Greater(t, sent.Load(), int64(50))

	// Scaled back to 2 groups: the per-pod series of groups 2 and 3 leave /metrics with
	// their pods (they would otherwise grow with every pod that ever served).
	metrics := get(t, "http://"+routers[0].AdminAddr()+"/metrics")
	require.True(t, strings.Contains(metrics, `pod="churn-2-`) || strings.Contains(metrics, `pod="churn-3-`),
		"group 2 or 3 served requests before the scale-down")
	// With the load gone (and prompts too short to hold a prefix block) the routers write
	// every pod's deletion cost back to 0 within their interval: no group is worth keeping
	// over another, and the highest ordinals go.
	w.eventually("every churn pod's deletion cost is back to 0", 15*time.Second, func() bool {
		pods, err := kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{LabelSelector: "modelserving.volcano.sh/name=churn"})
		if err != nil {
			return false
		}
		for _, p := range pods.Items {
			if c := p.Annotations["controller.kubernetes.io/pod-deletion-cost"]; c != "" && c != "0" {
				return false
			}
		}
		return true
	})
	ms := &workloadv1alpha1.ModelServing{}
	require.NoError(t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "churn"}, ms))
	two := int32(2)
	ms.Spec.Replicas = &two
	require.NoError(t, cl.Update(w.ctx, ms))
	w.eventually("groups 2 and 3 leave the view and their series leave /metrics", 30*time.Second, func() bool {
		m := get(t, "http://"+routers[0].AdminAddr()+"/metrics")
		return len(w.readyPodsOf("churn")) == 2 && !strings.Contains(m, `pod="churn-2-`) && !strings.Contains(m, `pod="churn-3-`)
	})
	// The groups that stay keep their series once they serve again (a replaced pod's series
	// went with the old pod, so traffic after the churn is what brings them back).
	oc := client_(0)
	for i := range 10 {
		_, err := oc.Chat.Completions.New(w.ctx, openai.ChatCompletionNewParams{Model: "base-model",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("after %d", i))}, MaxTokens: openai.Int(3)})
		require.NoError(t, err)
	}
	m := get(t, "http://"+routers[0].AdminAddr()+"/metrics")
	assert.True(t, strings.Contains(m, `pod="churn-0-`) || strings.Contains(m, `pod="churn-1-`), "the staying groups' series are on /metrics after they serve")
	assert.False(t, strings.Contains(m, `pod="churn-2-`) || strings.Contains(m, `pod="churn-3-`), "no series of a group scaled away comes back")
}

func (w *world) podsOf(ms string) []string {
	pods, err := kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{LabelSelector: "modelserving.volcano.sh/name=" + ms})
	require.NoError(w.t, err)
	var out []string
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p.Name)
		}
	}
	return out
}

func (w *world) readyPodsOf(ms string) []string {
	var out []string
	for _, r := range routers[:1] {
		if s := r.View().Snapshot().Server(w.ns, ms); s != nil {
			for _, e := range s.Endpoints {
				out = append(out, e.Pod)
			}
		}
	}
	return out
}

// A route whose target ModelServer does not exist answers 503 naming it, and spends none of
// the route's rate limit.
func TestMissingModelServer(t *testing.T) {
	w := newWorld(t, 0)
	w.apply(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: dangling}
spec:
  modelName: dangling
  rules: [{name: only, targetModels: [{modelServerName: not-there}]}]
  rateLimit: {inputTokensPerUnit: 10, unit: hour}
`)
	w.eventually("the routers know the route", 10*time.Second, func() bool {
		_, err := routers[0].View().Snapshot().Routes.Match(match.Input{Model: "dangling", Path: "/v1/chat/completions"}, func(uint64) uint64 { return 0 })
		return err == nil
	})
	for range 3 { // 3 × ~7 estimated tokens would exceed the limit of 10 if they were charged
		_, _, err := chat(w.ctx, client_(0), "dangling", "x")
		var apiErr *openai.Error
		require.ErrorAs(t, err, &apiErr)
		assert.Equal(t, http.StatusServiceUnavailable, apiErr.StatusCode)
		assert.Contains(t, apiErr.Message, "ModelServer "+w.ns+"/not-there")
	}
}
