package router

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-sh/berth/pkg/sim/engine"
)

// Every engine path beside completions is routed by the model its body names: the
// ModelRoute "paths" serves ModelServer "paths", whose engines know only "base-model", so
// an answer proves the request was matched to the route and its model rewritten (in a
// multipart upload too); the engine's own record proves which path it was sent to.
func TestPassThroughPaths(t *testing.T) {
	w := newWorld(t, 1)
	w.servedPods("paths", 2, "", nil)
	c := client_(0)
	base := "http://" + routers[0].Addr()
	audio := bytes.Repeat([]byte("RIFF-simulated-audio"), 500)

	// post sends a JSON body with plain HTTP and decodes the answer into out.
	post := func(t *testing.T, path, body string, out any) *http.Response {
		t.Helper()
		res, err := http.Post(base+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		require.Equal(t, http.StatusOK, res.StatusCode, "%s: %s", path, b)
		require.NoError(t, json.Unmarshal(b, out), "%s: %s", path, b)
		return res
	}
	var score struct {
		Data []struct {
			Score float64 `json:"score"`
		} `json:"data"`
	}
	var rerank struct {
		Results []struct {
			Index int     `json:"index"`
			Score float64 `json:"relevance_score"`
		} `json:"results"`
	}
	for _, tc := range []struct {
		path string
		send func(t *testing.T) *http.Response // checks the answer, returns it
	}{
		{"/v1/embeddings", func(t *testing.T) *http.Response {
			var resp *http.Response
			out, err := c.Embeddings.New(w.ctx, openai.EmbeddingNewParams{Model: "paths",
				Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"alpha", "beta"}}}, option.WithResponseInto(&resp))
			require.NoError(t, err)
			require.Len(t, out.Data, 2)
			assert.NotEmpty(t, out.Data[1].Embedding)
			assert.NotEqual(t, out.Data[0].Embedding, out.Data[1].Embedding)
			assert.Positive(t, out.Usage.PromptTokens)
			return resp
		}},
		{"/v1/responses", func(t *testing.T) *http.Response {
			var resp *http.Response
			out, err := c.Responses.New(w.ctx, responses.ResponseNewParams{Model: "paths",
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("tell me")}, MaxOutputTokens: openai.Int(5)},
				option.WithResponseInto(&resp))
			require.NoError(t, err)
			assert.NotEmpty(t, out.OutputText())
			assert.EqualValues(t, 5, out.Usage.OutputTokens)
			return resp
		}},
		{"/v1/audio/transcriptions", func(t *testing.T) *http.Response {
			var resp *http.Response
			out, err := c.Audio.Transcriptions.New(w.ctx, openai.AudioTranscriptionNewParams{Model: "paths",
				File: openai.File(bytes.NewReader(audio), "talk.wav", "audio/wav")}, option.WithResponseInto(&resp))
			require.NoError(t, err)
			assert.Equal(t, fmt.Sprintf("simulated transcript of talk.wav (%d bytes)", len(audio)), out.Text, "the whole file reached the engine")
			return resp
		}},
		{"/v1/audio/translations", func(t *testing.T) *http.Response {
			var resp *http.Response
			out, err := c.Audio.Translations.New(w.ctx, openai.AudioTranslationNewParams{Model: "paths",
				File: openai.File(bytes.NewReader(audio), "talk.wav", "audio/wav")}, option.WithResponseInto(&resp))
			require.NoError(t, err)
			assert.Contains(t, out.Text, "talk.wav")
			return resp
		}},
		{"/v1/audio/speech", func(t *testing.T) *http.Response {
			resp, err := c.Audio.Speech.New(w.ctx, openai.AudioSpeechNewParams{Model: "paths", Input: "read this aloud",
				Voice: openai.AudioSpeechNewParamsVoiceUnion{OfString: openai.String("alloy")}})
			require.NoError(t, err)
			wav, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(t, "audio/wav", resp.Header.Get("Content-Type"))
			assert.True(t, bytes.HasPrefix(wav, []byte("RIFF")), "audio comes back as sent")
			return resp
		}},
		{"/v1/rerank", func(t *testing.T) *http.Response {
			res := post(t, "/v1/rerank", `{"model":"paths","query":"capital of france","documents":["berlin is big","the capital of france"]}`, &rerank)
			require.Len(t, rerank.Results, 2)
			assert.Equal(t, 1, rerank.Results[0].Index, "the relevant document ranks first")
			return res
		}},
		{"/rerank", func(t *testing.T) *http.Response {
			return post(t, "/rerank", `{"model":"paths","query":"q","documents":["q"],"top_n":1}`, &rerank)
		}},
		{"/v2/rerank", func(t *testing.T) *http.Response {
			return post(t, "/v2/rerank", `{"model":"paths","query":"q","documents":[{"text":"q"}]}`, &rerank)
		}},
		{"/v1/score", func(t *testing.T) *http.Response {
			res := post(t, "/v1/score", `{"model":"paths","text_1":"paris","text_2":["paris","rome"]}`, &score)
			require.Len(t, score.Data, 2)
			assert.Greater(t, score.Data[0].Score, score.Data[1].Score)
			return res
		}},
		{"/score", func(t *testing.T) *http.Response {
			return post(t, "/score", `{"model":"paths","queries":"a","documents":["a"]}`, &score)
		}},
		{"/tokenize", func(t *testing.T) *http.Response {
			var out struct {
				Count  int   `json:"count"`
				Tokens []int `json:"tokens"`
			}
			res := post(t, "/tokenize", `{"model":"paths","prompt":"twelve bytes"}`, &out)
			assert.Equal(t, 3, out.Count)
			assert.Len(t, out.Tokens, 3)
			return res
		}},
		{"/detokenize", func(t *testing.T) *http.Response {
			var out struct {
				Prompt string `json:"prompt"`
			}
			res := post(t, "/detokenize", `{"model":"paths","tokens":[1,2]}`, &out)
			assert.NotEmpty(t, out.Prompt)
			return res
		}},
	} {
		t.Run(strings.TrimPrefix(tc.path, "/"), func(t *testing.T) {
			resp := tc.send(t)
			require.NotNil(t, resp)
			id := resp.Header.Get("X-Sim-Engine")
			require.True(t, strings.HasPrefix(id, w.ns+"/paths-"), "an engine of ModelServer paths answered, not %q", id)
			assert.True(t, strings.HasPrefix(resp.Header.Get("X-Berth-Endpoint"), w.ns+"/paths-"), "the test system's routers name the endpoint")
			got := engines.Engine(w.ns, strings.TrimPrefix(id, w.ns+"/")).LastRequest()
			assert.Equal(t, tc.path, got.Path, "the engine was sent the path the client used")
		})
	}

	t.Run("unknown model", func(t *testing.T) {
		_, err := c.Embeddings.New(w.ctx, openai.EmbeddingNewParams{Model: "nobody-serves-this",
			Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}})
		require.Equal(t, http.StatusNotFound, statusOf(err), "%v", err)
		var apiErr *openai.Error
		require.ErrorAs(t, err, &apiErr)
		assert.Equal(t, "model_not_found", apiErr.Code)
		_, err = c.Audio.Transcriptions.New(w.ctx, openai.AudioTranscriptionNewParams{Model: "nobody-serves-this",
			File: openai.File(bytes.NewReader(audio), "talk.wav", "audio/wav")})
		assert.Equal(t, http.StatusNotFound, statusOf(err), "a multipart upload is matched by its model field: %v", err)
	})

	t.Run("GET /v1/models/{id}", func(t *testing.T) {
		m, err := c.Models.Get(w.ctx, "paths")
		require.NoError(t, err)
		assert.Equal(t, "paths", m.ID)
		_, err = c.Models.Get(w.ctx, "nobody-serves-this")
		require.Equal(t, http.StatusNotFound, statusOf(err))
		var apiErr *openai.Error
		require.ErrorAs(t, err, &apiErr)
		assert.Equal(t, "model_not_found", apiErr.Code)
		_, _, err = chat(w.ctx, c, "nobody-serves-this", "x")
		var chatErr *openai.Error
		require.ErrorAs(t, err, &chatErr)
		assert.Equal(t, chatErr.Type, apiErr.Type, "the same error type as a completion for an unknown model")
	})
}

// The engine learns who called: X-Forwarded-For and Forwarded get the client's address
// appended to what came in (never replaced), X-Forwarded-Proto says http.
func TestForwardingHeaders(t *testing.T) {
	w := newWorld(t, 1)
	w.servedPods("fwd", 1, "", nil)
	req, err := http.NewRequest(http.MethodPost, "http://"+routers[1].Addr()+"/v1/embeddings", strings.NewReader(`{"model":"fwd","input":"x"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Forwarded-For", "203.0.113.9")
	req.Header.Set("Forwarded", "for=203.0.113.9;proto=https")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	var got engine.Received = w.engine("fwd-0").LastRequest()
	require.Equal(t, "/v1/embeddings", got.Path)
	assert.Equal(t, "203.0.113.9, 127.0.0.1", got.Header.Get("X-Forwarded-For"))
	assert.Equal(t, fmt.Sprintf(`for=203.0.113.9;proto=https, for=127.0.0.1;proto=http;host="%s"`, routers[1].Addr()), got.Header.Get("Forwarded"))
	assert.Equal(t, "http", got.Header.Get("X-Forwarded-Proto"))
}
