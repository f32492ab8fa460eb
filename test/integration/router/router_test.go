package router

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-sh/berth/pkg/version"
)

// A ModelServing behind a ModelServer and a ModelRoute answers chat and completion
// requests through the router, streaming and not, with the model rewritten to the
// ModelServer's; unknown models get OpenAI's 404.
func TestServesModelServing(t *testing.T) {
	w := newWorld(t, 1)
	w.apply(`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata: {name: llama}
spec:
  schedulerName: berth-scheduler
  replicas: 2
  template:
    roles:
    - name: worker
      replicas: 1
      entryTemplate:
        spec:
          containers:
          - name: vllm
            image: vllm/vllm-openai:v0.11.0
            args: ["--model", "meta-llama/Llama-3.1-8B-Instruct"]
            ports: [{containerPort: 8000}]
            resources: {limits: {nvidia.com/gpu: "1"}}
`, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: llama}
spec:
  model: meta-llama/Llama-3.1-8B-Instruct
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {modelserving.volcano.sh/name: llama}}
  workloadPort: {port: 8000}
`, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: llama}
spec:
  modelName: llama-3.1
  rules:
  - targetModels: [{modelServerName: llama}]
`)
	w.waitEndpoints("llama", 2)
	c := client_(0)

	out, resp, err := chat(w.ctx, c, "llama-3.1", "hello there")
	require.NoError(t, err)
	assert.Equal(t, "meta-llama/Llama-3.1-8B-Instruct", out.Model, "the model is rewritten to the ModelServer's")
	assert.NotEmpty(t, out.Choices[0].Message.Content)
	assert.EqualValues(t, 4, out.Usage.CompletionTokens)
	assert.Contains(t, resp.Header.Get("X-Sim-Engine"), w.ns+"/llama-")

	comp, err := c.Completions.New(w.ctx, openai.CompletionNewParams{
		Model: "llama-3.1", Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("once upon a time")}, MaxTokens: openai.Int(3)})
	require.NoError(t, err)
	assert.EqualValues(t, 3, comp.Usage.CompletionTokens)

	stream := c.Chat.Completions.NewStreaming(w.ctx, openai.ChatCompletionNewParams{
		Model: "llama-3.1", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream please")},
		MaxTokens: openai.Int(6), StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
	var acc openai.ChatCompletionAccumulator
	chunks := 0
	for stream.Next() {
		acc.AddChunk(stream.Current())
		chunks++
	}
	require.NoError(t, stream.Err())
	assert.GreaterOrEqual(t, chunks, 6)
	assert.EqualValues(t, 6, acc.Usage.CompletionTokens, "the final usage chunk reaches the client")
	assert.Len(t, strings.Fields(acc.Choices[0].Message.Content), 6)

	_, _, err = chat(w.ctx, c, "no-such-model", "hi")
	assert.Equal(t, http.StatusNotFound, statusOf(err))
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Contains(t, apiErr.Message, "no-such-model")
	assert.Equal(t, "model_not_found", apiErr.Code)

	models, err := c.Models.List(w.ctx)
	require.NoError(t, err)
	var ids []string
	for _, m := range models.Data {
		ids = append(ids, m.ID)
	}
	assert.Contains(t, ids, "llama-3.1")

	// What happened is visible on the admin listener's /metrics; /healthz, /readyz and
	// /version answer.
	metrics := get(t, "http://"+routers[0].AdminAddr()+"/metrics")
	for _, series := range []string{
		`berth_router_requests_total{model="llama-3.1",route="` + w.ns + `/llama",status="200"}`,
		// A model nothing serves gets no series of its own (clients cannot grow /metrics).
		`berth_router_requests_total{model="",route="",status="404"}`,
		`berth_router_endpoint_picks_total{pod="llama-`,
		`berth_router_time_to_first_token_seconds_count{model="llama-3.1",route="` + w.ns + `/llama"}`,
	} {
		assert.Contains(t, metrics, series)
		assert.NotContains(t, metrics, `model="no-such-model"`)
	}
	assert.Equal(t, "ok\n", get(t, "http://"+routers[0].AdminAddr()+"/readyz"))
	assert.Equal(t, "ok\n", get(t, "http://"+routers[0].Addr()+"/healthz"))
	var v version.Info
	require.NoError(t, json.Unmarshal([]byte(get(t, "http://"+routers[0].AdminAddr()+"/version")), &v))
	assert.Equal(t, version.Get(), v)
}

func get(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode, string(b))
	return string(b)
}

// Each modelMatch kind selects its target; rules are tried in order; a request no rule
// matches gets 404. The ModelServers select bare pods: any workload can be served.
func TestRuleKinds(t *testing.T) {
	w := newWorld(t, 1)
	for _, name := range []string{"gold", "teams", "legacy", "lora", "rest"} {
		w.pod(name+"-0", map[string]string{"app": name})
		w.apply(fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: %[1]s}
spec:
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {app: %[1]s}}
  workloadPort: {port: 8000}
`, name))
	}
	w.apply(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: base}
spec:
  modelName: base-model
  loraAdapters: [sql-lora]
  rules:
  - name: gold-tier
    modelMatch: {headers: {x-tier: {exact: gold}}}
    targetModels: [{modelServerName: gold}]
  - name: teams
    modelMatch: {headers: {x-user: {regex: "^team-[0-9]+$"}}}
    targetModels: [{modelServerName: teams}]
  - name: completions
    modelMatch: {uri: {prefix: /v1/completions}}
    targetModels: [{modelServerName: legacy}]
  - name: adapter
    modelMatch: {body: {model: sql-lora}}
    targetModels: [{modelServerName: lora}]
  - name: chat-only
    modelMatch: {uri: {exact: /v1/chat/completions}}
    targetModels: [{modelServerName: rest}]
`)
	for _, name := range []string{"gold", "teams", "legacy", "lora", "rest"} {
		w.waitEndpoints(name, 1)
	}
	loadAdapter(t, w.engine("lora-0").Addr(), "sql-lora")
	c := client_(1)
	served := func(model string, opts ...option.RequestOption) string {
		t.Helper()
		_, resp, err := chat(w.ctx, c, model, "which one?", opts...)
		require.NoError(t, err)
		return strings.TrimPrefix(resp.Header.Get("X-Sim-Engine"), w.ns+"/")
	}
	assert.Equal(t, "gold-0", served("base-model", option.WithHeader("X-Tier", "gold")))
	assert.Equal(t, "teams-0", served("base-model", option.WithHeader("X-User", "team-42")))
	assert.Equal(t, "rest-0", served("base-model", option.WithHeader("X-User", "team-x")), "a regex miss falls through to later rules")
	assert.Equal(t, "rest-0", served("base-model", option.WithHeader("X-Tier", "silver")))
	assert.Equal(t, "lora-0", served("sql-lora"), "an adapter is matched by loraAdapters and routed by the body rule")

	var resp *http.Response
	_, err := c.Completions.New(w.ctx, openai.CompletionNewParams{Model: "base-model",
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("x")}, MaxTokens: openai.Int(1)}, option.WithResponseInto(&resp))
	require.NoError(t, err)
	assert.Equal(t, w.ns+"/legacy-0", resp.Header.Get("X-Sim-Engine"))

	// /v1/chat/completions/ (a trailing slash) matches no rule: 404, as seed 001 requires.
	res, err := http.Post("http://"+routers[0].Addr()+"/v1/chat/completions/", "application/json",
		strings.NewReader(`{"model":"base-model","messages":[{"role":"user","content":"x"}]}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusNotFound, res.StatusCode, string(body))
	assert.Contains(t, string(body), `"error"`)
}

// Traffic splits by weight (chi-squared), and a target of weight 0 gets nothing.
func TestWeights(t *testing.T) {
	w := newWorld(t, 1)
	for _, name := range []string{"a", "b", "idle"} {
		w.pod(name+"-0", map[string]string{"app": name})
		w.apply(fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: %[1]s}
spec:
  model: base-model
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {app: %[1]s}}
`, name))
	}
	w.apply(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: split}
spec:
  modelName: split
  rules:
  - targetModels: [{modelServerName: a, weight: 25}, {modelServerName: b, weight: 75}, {modelServerName: idle, weight: 0}]
`)
	for _, name := range []string{"a", "b", "idle"} {
		w.waitEndpoints(name, 1)
	}
	counts := map[string]float64{}
	const n = 400
	sem := make(chan struct{}, 16)
	results := make(chan string, n)
	for i := range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			_, resp, err := chat(w.ctx, client_(i%2), "split", "w")
			if err != nil {
				results <- "error: " + err.Error()
				return
			}
			results <- strings.TrimPrefix(resp.Header.Get("X-Sim-Engine"), w.ns+"/")
		}()
	}
	for range n {
		counts[<-results]++
	}
	assert.Zero(t, counts["idle-0"], "weight 0 takes no traffic")
	// Every request is answered, by a or b: a failed one counts against the split, not
	// outside it (a router that failed a quarter of them evenly would keep the ratio).
	assert.Equal(t, float64(n), counts["a-0"]+counts["b-0"], "requests answered by a-0 or b-0; all results: %v", counts)
	exp := map[string]float64{"a-0": n * 0.25, "b-0": n * 0.75}
	chi := 0.0
	for k, e := range exp {
		chi += (counts[k] - e) * (counts[k] - e) / e
	}
	assert.Less(t, chi, 10.83, "chi-squared at 1 degree of freedom, p=0.001; counts %v", counts)
}

// Requests for an adapter go to the endpoint that has it loaded.
func TestLoRAAffinity(t *testing.T) {
	w := newWorld(t, 1)
	for i := range 3 {
		w.pod(fmt.Sprintf("pool-%d", i), map[string]string{"app": "pool"})
	}
	w.apply(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: pool}
spec:
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {app: pool}}
`, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: pool}
spec:
  modelName: base-model
  loraAdapters: [support-lora]
  rules:
  - targetModels: [{modelServerName: pool}]
`)
	w.waitEndpoints("pool", 3)
	loadAdapter(t, w.engine("pool-1").Addr(), "support-lora")
	w.eventually("both routers scraped the adapter on pool-1", 30*time.Second, func() bool {
		for _, r := range routers {
			if st, _ := r.Scraped(w.engine("pool-1").Addr()); !st.Adapters["support-lora"] {
				return false
			}
		}
		return true
	})
	for i := range 20 {
		_, resp, err := chat(w.ctx, client_(i%2), "support-lora", fmt.Sprintf("ticket %d", i))
		require.NoError(t, err)
		require.Equal(t, w.ns+"/pool-1", resp.Header.Get("X-Sim-Engine"))
	}
}

func loadAdapter(t *testing.T, addr, name string) {
	t.Helper()
	res, err := http.Post("http://"+addr+"/v1/load_lora_adapter", "application/json",
		strings.NewReader(fmt.Sprintf(`{"lora_name":%q,"lora_path":"/adapters/%s"}`, name, name)))
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, string(body))
}
