package proxy

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
)

// The scan of a non-streaming answer's usage reads what encoding/json reads, on answers of
// both APIs, odd ones, and thousands of random mutations of them.
func TestUsageScanAgreesWithDecode(t *testing.T) {
	seeds := []string{
		`{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Paris"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}`,
		`{"id":"msg_1","type":"message","role":"assistant","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":5,"cache_creation_input_tokens":2,"cache_read_input_tokens":1,"output_tokens":7}}`,
		`{"error":{"message":"bad","type":"invalid_request_error"}}`,
		`{"usage":null}`, `{"usage":{"prompt_tokens":"5"}}`, `{"usage":[1]}`, `{"Usage":{"prompt_tokens":4}}`,
		`{"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}}`, `{"type":5,"usage":{"output_tokens":1}}`,
		`{"type":null,"usage":{"output_tokens":1}}`, `{"message":{"usage":{"input_tokens":3}},"usage":{"output_tokens":1}}`,
		`{"usage":{"output_tokens":1}} x`, `{"usage":{"output_tokens":1}}]`, `not json`, ``, `[]`,
		`{"u\u0073age":{"output_tokens":1}}`, `{"usage":{"PROMPT_TOKENS":9,"completion_tokens":1.5}}`,
		`{"usage":{"prompt_tokens":4,"prompt_tokens":6,"completion_tokens":null,"prompt_tokens_details":{"cached_tokens":2},"total_tokens":10}}`,
		`{"usage":{"prompt_tokens":4,"prompt_tokens":null,"output_tokens":-2,"input_tokens":1e2}}`,
		`{"usage":{"prompt_tokens":99999999999999999999}}`, `{"usage":{"prompt_tokens":"3"}}`, `{"usage":{"pr\u006fmpt_tokens":3}}`,
	}
	check := func(body string) {
		t.Helper()
		wi, wo := decodeUsage([]byte(body))
		gi, go_ := usageOf([]byte(body))
		if wi != gi || wo != go_ {
			t.Fatalf("usage of %q: scan %d/%d, encoding/json %d/%d", body, gi, go_, wi, wo)
		}
	}
	for _, s := range seeds {
		check(s)
	}
	alphabet := []byte(`{}[]:,"\ 0123456789-.etrufalsn` + "\n\xff" + `usagetypemsg`)
	rng := rand.New(rand.NewPCG(5, 6))
	for range 20000 {
		b := []byte(seeds[rng.IntN(len(seeds))])
		for range 1 + rng.IntN(3) {
			if len(b) == 0 {
				b = append(b, alphabet[rng.IntN(len(alphabet))])
				continue
			}
			i := rng.IntN(len(b))
			switch c := alphabet[rng.IntN(len(alphabet))]; rng.IntN(3) {
			case 0:
				b = append(b[:i], append([]byte{c}, b[i:]...)...)
			case 1:
				b = append(b[:i], b[i+1:]...)
			default:
				b[i] = c
			}
		}
		check(string(b))
	}
}

const benchAnswer = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Paris is the capital of France."},"finish_reason":"stop"}],"usage":{"prompt_tokens":31,"completion_tokens":8,"total_tokens":39}}`

// BenchmarkSendRelay is the proxy's share of one non-streaming request: Send to an engine on
// loopback (kept-alive connection) and Relay of its answer, usage counted, to the client.
func BenchmarkSendRelay(b *testing.B) {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, benchAnswer)
	}))
	defer engine.Close()
	p := New(nil)
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"What is the capital of France?"}],"max_tokens":16}`)
	header := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer x"}, "User-Agent": {"bench"}}
	b.ReportAllocs()
	for b.Loop() {
		resp, err := p.Send(context.Background(), engine.URL, "/v1/chat/completions", header, nil, body)
		if err != nil {
			b.Fatal(err)
		}
		w := httptest.NewRecorder()
		if r := Relay(w, resp, true); r.Err != nil || r.OutputTokens != 8 {
			b.Fatalf("relayed %+v", r)
		}
	}
}

// BenchmarkUsage reads a non-streaming answer's usage by the scan (usageOf) and by
// encoding/json alone (what it did before).
func BenchmarkUsage(b *testing.B) {
	body := []byte(benchAnswer)
	for name, f := range map[string]func([]byte) (int64, int64){"scan": usageOf, "encoding-json": decodeUsage} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, out := f(body); out != 8 {
					b.Fatal(out)
				}
			}
		})
	}
}

// copyHeader leaves dst as copying every header and then StripHopByHop would, whether or not
// a Connection header names more, in src or already in dst.
func TestCopyHeaderStripsAsStripHopByHop(t *testing.T) {
	srcs := []http.Header{
		{"Content-Type": {"application/json"}, "Keep-Alive": {"timeout=5"}, "Te": {"trailers"}, "X-A": {"1", "2"}, "X-Empty": {}},
		{"Connection": {"X-A, keep-alive"}, "X-A": {"1"}, "X-B": {"2"}, "Upgrade": {"h2c"}},
		{"X-B": {"2"}, "Transfer-Encoding": {"chunked"}},
	}
	dsts := []func() http.Header{
		func() http.Header { return http.Header{} },
		func() http.Header { return http.Header{"X-Berth-Endpoint": {"e"}, "Trailer": {"x"}} },
		func() http.Header { return http.Header{"Connection": {"X-Berth-Endpoint"}, "X-Berth-Endpoint": {"e"}} },
	}
	for _, src := range srcs {
		for _, dst := range dsts {
			want, got := dst(), dst()
			for k, vs := range src {
				want[k] = append([]string(nil), vs...)
			}
			StripHopByHop(want)
			copyHeader(got, src)
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("copyHeader(%v, %v) = %v, want %v", dst(), src, got, want)
			}
		}
	}
}
