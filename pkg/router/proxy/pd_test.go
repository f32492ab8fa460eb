package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

// recorded is a request an engine received.
type recorded struct {
	header http.Header
	body   map[string]any
}

// recorder records the completion requests passing to an engine.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

func (rec *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			rec.mu.Lock()
			rec.reqs = append(rec.reqs, recorded{r.Header.Clone(), m})
			rec.mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		h.ServeHTTP(w, r)
	})
}

func (rec *recorder) all() []recorded {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]recorded(nil), rec.reqs...)
}

type pdPair struct {
	prefill, decode       *engine.Server
	prefillRec, decodeRec *recorder
	target                PDTarget
}

func startPD(t *testing.T, flavor engine.Flavor) *pdPair {
	t.Helper()
	hub := engine.NewKVHub()
	pp := &pdPair{prefillRec: &recorder{}, decodeRec: &recorder{}}
	var psrv, dsrv *httptest.Server
	pp.prefill, psrv = serveEngine(t, engine.Config{Model: "m", Flavor: flavor, ID: "ns/prefill-0", Role: engine.RolePrefill,
		TimeScale: 0.001, Hub: hub}, pp.prefillRec.wrap)
	pp.decode, dsrv = serveEngine(t, engine.Config{Model: "m", Flavor: flavor, ID: "ns/decode-0", Role: engine.RoleDecode,
		TimeScale: 0.001, Hub: hub, BootstrapTimeout: 200 * time.Millisecond}, pp.decodeRec.wrap)
	u, err := url.Parse(psrv.URL)
	require.NoError(t, err)
	pp.target = PDTarget{PrefillURL: psrv.URL, DecodeURL: dsrv.URL, PrefillAddress: u.Host}
	return pp
}

var pdPrompt = strings.Repeat("Summarise the quarterly report for the board. ", 40) // ~470 tokens

var connectors = []networkingv1alpha1.KVConnectorType{
	networkingv1alpha1.ConnectorTypeHTTP,
	networkingv1alpha1.ConnectorTypeNIXL,
	networkingv1alpha1.ConnectorTypeLMCache,
	networkingv1alpha1.ConnectorTypeMoonCake,
}

func TestDisaggregated(t *testing.T) {
	for _, conn := range connectors {
		for _, stream := range []bool{false, true} {
			name := string(conn)
			if stream {
				name += "/stream"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				flavor := engine.VLLM
				if conn == networkingv1alpha1.ConnectorTypeMoonCake {
					flavor = engine.SGLang
				}
				pd := startPD(t, flavor)
				clientHeader := http.Header{"Authorization": {"Bearer k"}, "Content-Type": {"application/json"}}
				body := []byte(chatBody(pdPrompt, 12, stream, stream))

				resp, err := New(nil).Disaggregated(context.Background(), conn, "/v1/chat/completions", clientHeader, body, pd.target)
				require.NoError(t, err)
				w := httptest.NewRecorder()
				r := Relay(w, resp, true)
				require.NoError(t, r.Err)
				require.Equal(t, http.StatusOK, r.Status, "%s", w.Body)

				assert.Equal(t, "ns/decode-0", w.Result().Header.Get("X-Sim-Engine"), "the client gets the decode engine's answer")
				assert.EqualValues(t, 12, r.OutputTokens, "all of max_tokens come from decode")
				if stream {
					assert.Contains(t, w.Body.String(), "data: [DONE]")
				}

				dst := pd.decode.Stats()
				assert.EqualValues(t, 1, dst.KVTransfersReceived, "decode received the prefill's KV")
				assert.EqualValues(t, 0, dst.KVTransferMisses)
				require.Eventually(t, func() bool { return pd.prefill.Stats().Requests == 1 }, 5*time.Second, time.Millisecond)

				preqs, dreqs := pd.prefillRec.all(), pd.decodeRec.all()
				require.Len(t, preqs, 1)
				require.Len(t, dreqs, 1)
				p, d := preqs[0], dreqs[0]
				assert.Equal(t, "Bearer k", p.header.Get("Authorization"))
				assert.Equal(t, "Bearer k", d.header.Get("Authorization"))
				assert.Equal(t, pdPrompt, d.body["messages"].([]any)[0].(map[string]any)["content"])
				assert.EqualValues(t, 12, d.body["max_tokens"])
				assert.Equal(t, stream, d.body["stream"] == true, "decode streams as the client asked")

				switch conn {
				case networkingv1alpha1.ConnectorTypeMoonCake:
					assert.Equal(t, p.body["bootstrap_room"], d.body["bootstrap_room"])
					assert.NotNil(t, d.body["bootstrap_room"])
					assert.Equal(t, "127.0.0.1", d.body["bootstrap_host"])
					assert.EqualValues(t, SGLangBootstrapPort, d.body["bootstrap_port"])
				default:
					assert.EqualValues(t, 1, p.body["max_tokens"], "prefill computes one token")
					assert.NotEqual(t, true, p.body["stream"], "prefill is not streamed")
					assert.Nil(t, p.body["stream_options"])
				}
				switch conn {
				case networkingv1alpha1.ConnectorTypeHTTP:
					id := p.header.Get("X-Request-Id")
					assert.NotEmpty(t, id)
					assert.Equal(t, id, d.header.Get("X-Request-Id"), "decode repeats the prefill's request id")
				case networkingv1alpha1.ConnectorTypeNIXL:
					kv, _ := d.body["kv_transfer_params"].(map[string]any)
					require.NotNil(t, kv)
					assert.Equal(t, true, kv["do_remote_prefill"])
					assert.Equal(t, "ns/prefill-0", kv["remote_engine_id"])
				case networkingv1alpha1.ConnectorTypeLMCache:
					assert.Empty(t, d.header.Get("X-Request-Id"), "lmcache finds KV by content")
				}
			})
		}
	}
}

func TestDisaggregatedPrefillFails(t *testing.T) {
	for _, conn := range []networkingv1alpha1.KVConnectorType{
		networkingv1alpha1.ConnectorTypeHTTP,
		networkingv1alpha1.ConnectorTypeNIXL,
		networkingv1alpha1.ConnectorTypeLMCache,
	} {
		t.Run(string(conn), func(t *testing.T) {
			t.Parallel()
			pd := startPD(t, engine.VLLM)
			pd.prefill.SetFault(engine.Fault{Status: http.StatusServiceUnavailable})
			resp, err := New(nil).Disaggregated(context.Background(), conn, "/v1/chat/completions", nil,
				[]byte(chatBody(pdPrompt, 8, false, false)), pd.target)
			require.Error(t, err)
			assert.Nil(t, resp)
			var pe *PrefillError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, http.StatusServiceUnavailable, pe.Status)
			assert.Contains(t, err.Error(), "503")
			assert.Contains(t, err.Error(), "simulated fault", "the engine's message is kept")
			assert.True(t, Retryable(context.Background(), nil, err))
			assert.False(t, DialFailed(err))
			assert.Empty(t, pd.decodeRec.all(), "decode got no request")
			assert.Zero(t, pd.decode.Stats().Requests)
		})
	}
}

func TestDisaggregatedPrefillUnreachable(t *testing.T) {
	pd := startPD(t, engine.VLLM)
	pd.target.PrefillURL = "http://" + closedAddr(t)
	for _, conn := range []networkingv1alpha1.KVConnectorType{networkingv1alpha1.ConnectorTypeHTTP, networkingv1alpha1.ConnectorTypeNIXL} {
		_, err := New(nil).Disaggregated(context.Background(), conn, "/v1/chat/completions", nil,
			[]byte(chatBody(pdPrompt, 8, false, false)), pd.target)
		var pe *PrefillError
		require.ErrorAs(t, err, &pe, conn)
		assert.Zero(t, pe.Status)
		assert.True(t, DialFailed(err), "the router may retry another prefill endpoint")
	}
	assert.Empty(t, pd.decodeRec.all())
}

func TestDisaggregatedNIXLWithoutTransferParams(t *testing.T) {
	prefill := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"choices":[{"message":{"content":"x"}}],"usage":{"completion_tokens":1},"kv_transfer_params":null}`)
	}))
	t.Cleanup(prefill.Close)
	decodeHit := false
	decode := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { decodeHit = true }))
	t.Cleanup(decode.Close)
	_, err := New(nil).Disaggregated(context.Background(), networkingv1alpha1.ConnectorTypeNIXL, "/v1/chat/completions", nil,
		[]byte(chatBody("hi", 4, false, false)), PDTarget{PrefillURL: prefill.URL, DecodeURL: decode.URL})
	var pe *PrefillError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, http.StatusBadGateway, pe.Status)
	assert.Contains(t, err.Error(), "kv_transfer_params")
	assert.False(t, decodeHit)
}

func TestDisaggregatedBadBody(t *testing.T) {
	pd := startPD(t, engine.VLLM)
	for _, conn := range connectors {
		_, err := New(nil).Disaggregated(context.Background(), conn, "/v1/chat/completions", nil, []byte(`not json`), pd.target)
		require.Error(t, err, conn)
		var pe *PrefillError
		assert.False(t, errors.As(err, &pe), "a bad request body is not the prefill's fault")
	}
	assert.Empty(t, pd.prefillRec.all())
	assert.Empty(t, pd.decodeRec.all())
}
