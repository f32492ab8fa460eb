package request

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// scanSeeds are request bodies in the shapes clients send and in the odd ones encoding/json
// has an opinion on; the scan must read each as encoding/json does, or leave it to it.
var scanSeeds = []string{
	`{"model":"m","messages":[{"role":"user","content":"hello there"}],"max_tokens":1}`,
	`{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":7,
		"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url","image_url":{"url":"x"}}]}],"seed":3}`,
	` {"model":"m","prompt":["ab","cd"],"max_tokens":1,"max_completion_tokens":9} `,
	`{"model":"m","prompt":[1,2,3],"temperature":0.5e-3,"logit_bias":{"50256":-100}}`,
	`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"Be brief."}],"stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"Hello"}]},{"role":"assistant","content":"Hi"}]}`,
	`{"model":"m","max_tokens":5,"system":"sys","messages":[{"role":"user","content":"x"}]}`,
	`{"model":"caf\u00e9","messages":[{"role":"us\"er","content":"\ud83d\ude00 line\nbreak"}]}`,
	`{"model":"m","messages":[{"role":"user","content":"héllo wörld"}],"stream":null,"max_tokens":null}`,
	`{"model":null,"messages":[null,{"role":null,"content":null}]}`,
	`{"Model":"m","messages":[{"ROLE":"user","Content":"x"}]}`,
	`{"model":"m","model":"n","messages":[{"role":"a","role":"b","content":"x","content":"y"}]}`,
	`{"model":"m","stream_options":{"include_usage":true},"stream_options":{}}`,
	`{"model":"m","stream_options":null,"messages":[]}`,
	`{"model":"m","stream_options":{"Include_Usage":true,"x":[{}]},"messages":null}`,
	`{"model":"m","max_tokens":1.0,"messages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","max_tokens":1e3}`,
	`{"model":"m","max_tokens":99999999999999999999}`,
	`{"model":"m","max_tokens":-1}`,
	`{"model":"m","max_tokens":"5"}`,
	`{"model":5}`,
	`{"model":"m","stream":"yes"}`,
	`{"model":"m","messages":{}}`,
	`{"model":"m","messages":["x"]}`,
	`{"model":"m","messages":[{"role":"user","content":5}]}`,
	`{"model":"m","prompt":{}}`,
	`{"model":"m","prompt":null}`,
	`{"model":"m"} {"model":"n"}`,
	`{"model":"m"}]`,
	`{"model":"m",}`,
	`{"model":"m" "x":1}`,
	`{"model":"m","x":01}`,
	`{"model":"m","x":-}`,
	`{"model":"m","x":"\x"}`,
	`{"model":"m","x":"a` + "\t" + `b"}`,
	`{"model":"m","x":[1,2,]}`,
	`{"model":"m","x":tru}`,
	"{\"model\":\"\xff\xfe\",\"messages\":[{\"role\":\"user\",\"content\":\"\xc3\"}]}",
	`{"model":"m","\u006dessages":[{"role":"user","content":"x"}]}`,
	`{"model":"m","meſsages":[{"role":"user","content":"x"}]}`,
	`[{"model":"m"}]`,
	`"model"`,
	``,
	`   `,
	`{}`,
	`{"model":""}`,
}

func requireSameParse(t *testing.T, kind Kind, body string) {
	t.Helper()
	want, werr := parse(kind, []byte(body), false)
	got, gerr := parse(kind, []byte(body), true)
	require.Equal(t, werr, gerr, "error of %s %q", kind, body)
	require.Equal(t, want, got, "request of %s %q", kind, body)
}

// TestScanAgreesWithDecode parses every seed, and thousands of random mutations of them (bytes
// JSON cares about inserted, deleted, replaced), both ways: the scan and encoding/json must give
// the same request or the same error, for every kind.
func TestScanAgreesWithDecode(t *testing.T) {
	kinds := []Kind{Chat, Completion, Messages}
	for _, s := range scanSeeds {
		for _, k := range kinds {
			requireSameParse(t, k, s)
		}
	}
	alphabet := []byte(`{}[]:,"\ 0123456789-+.eEtrufalsn` + "\n\t\x00\xff" + `mdoelpg_u`)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		b := []byte(scanSeeds[rng.IntN(len(scanSeeds))])
		for range 1 + rng.IntN(3) {
			i := 0
			if len(b) > 0 {
				i = rng.IntN(len(b))
			}
			c := alphabet[rng.IntN(len(alphabet))]
			switch rng.IntN(3) {
			case 0:
				b = append(b[:i], append([]byte{c}, b[i:]...)...)
			case 1:
				if len(b) > 0 {
					b = append(b[:i], b[i+1:]...)
				}
			default:
				if len(b) > 0 {
					b[i] = c
				}
			}
		}
		requireSameParse(t, kinds[rng.IntN(len(kinds))], string(b))
	}
}

func FuzzScanAgreesWithDecode(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		for _, k := range []Kind{Chat, Completion, Messages} {
			requireSameParse(t, k, body)
		}
	})
}

// BenchmarkParse reads a typical chat request by the scan (what Parse does) and by
// encoding/json alone (what it did before), to keep the difference visible.
func BenchmarkParse(b *testing.B) {
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"You are a helpful assistant. Answer briefly."},{"role":"user","content":"What is the capital of France? Please answer in one word."}],"max_tokens":16,"temperature":0.7,"stream":false}`)
	for _, scan := range []bool{true, false} {
		name := "scan"
		if !scan {
			name = "encoding-json"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := parse(Chat, body, scan); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
