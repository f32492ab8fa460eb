package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/berth-sh/berth/pkg/sim/engine"
)

// engineSSE returns real event streams from a simulated engine, for the seed corpus.
func engineSSE(f *testing.F) [][]byte {
	f.Helper()
	eng := engine.New(engine.Config{Model: "m", TimeScale: 0.001})
	defer eng.Close()
	h := eng.Handler()
	var out [][]byte
	for _, c := range []struct {
		path, body string
	}{
		{"/v1/chat/completions", chatBody("seed one", 5, true, true)},
		{"/v1/chat/completions", chatBody("seed two", 3, true, false)},
		{"/v1/completions", `{"model":"m","prompt":"seed three","max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}`},
		{"/v1/completions", `{"model":"m","prompt":"seed four","max_tokens":2,"stream":true}`},
	} {
		rec := &flushRecorder{}
		req, _ := http.NewRequest(http.MethodPost, c.path, strings.NewReader(c.body))
		h.ServeHTTP(rec, req)
		if rec.status != 0 && rec.status != http.StatusOK {
			f.Fatalf("engine answered %d: %s", rec.status, rec.body.String())
		}
		if !strings.HasSuffix(rec.body.String(), "data: [DONE]\n\n") {
			f.Fatalf("not an event stream: %q", rec.body.String())
		}
		out = append(out, []byte(rec.body.String()))
	}
	return out
}

// flushRecorder is a minimal flushable ResponseWriter.
type flushRecorder struct {
	header http.Header
	status int
	body   strings.Builder
}

func (r *flushRecorder) Header() http.Header {
	if r.header == nil {
		r.header = http.Header{}
	}
	return r.header
}
func (r *flushRecorder) WriteHeader(code int)        { r.status = code }
func (r *flushRecorder) Write(p []byte) (int, error) { return r.body.Write(p) }
func (r *flushRecorder) Flush()                      {}

var _ io.Writer = (*flushRecorder)(nil)

// FuzzTokenCounter: the count does not depend on how the stream is split into reads, and
// feeding never panics. cuts gives the lengths of the successive pieces.
func FuzzTokenCounter(f *testing.F) {
	for i, s := range engineSSE(f) {
		f.Add(s, []byte{byte(i), 1, 7, 64, 3})
		f.Add(s, []byte{1})
	}
	f.Add([]byte("data: {\"choices\":[{}]}\r\n\r\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":3}}\n"), []byte{5, 0, 2})
	f.Add([]byte("data: {\"choices\":[1]}"), []byte{})
	f.Add([]byte("data:{\"usage\":{\"completion_tokens\":-1},\"choices\":[]}\n\n: comment\nevent: x\n\n"), []byte{2, 2})
	f.Add([]byte("\n\n\ndata: [DONE]\n"), []byte{0})
	f.Add([]byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":9,\"output_tokens\":1}}}\n\n"+
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"a\"}}\n\n"+
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":4}}\n\n"), []byte{3, 40})

	f.Fuzz(func(t *testing.T, data, cuts []byte) {
		var whole tokenCounter
		whole.feed(data)

		var split tokenCounter
		rest := data
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if len(cuts) > 0 {
				n = min(int(cuts[i%len(cuts)]), len(rest))
			}
			split.feed(rest[:n]) // an empty read, too
			rest = rest[n:]
			if i > 4*len(data)+8 {
				break // only zero-length cuts: give the rest at once
			}
		}
		split.feed(rest)

		wi, wo := whole.tokens()
		si, so := split.tokens()
		if wi != si || wo != so {
			t.Fatalf("whole %d+%d tokens, split %d+%d (cuts %v)", wi, wo, si, so, cuts)
		}
		if whole.chunks != split.chunks || whole.sawUse != split.sawUse || whole.input != split.input || whole.output != split.output {
			t.Fatalf("whole %+v, split %+v", whole, split)
		}
	})
}
