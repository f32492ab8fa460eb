package jsonscan

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// Value accepts exactly what encoding/json calls valid, on documents and on random
// mutations of them (up to the nesting depth, where it refuses and its callers fall back).
func TestValueAgreesWithValid(t *testing.T) {
	seeds := []string{
		`{"a":[1,-2.5e+3,0,true,false,null,"x\"\\\/\b\f\n\r\t\u00e9"],"b":{"c":{}},"d":[]}`,
		` [ {"k" : "v" } , 1E9 , -0.0 ] `, `"plain"`, `0`, `-`, `01`, `1.`, `.5`, `1e`, `"\u12"`, `"a` + "\x01" + `"`,
		`{"a" 1}`, `{"a":1,}`, `[1,]`, `nul`, `{"\xff":"\xfe"}`,
	}
	check := func(s string) {
		b := []byte(s)
		i := SkipSpace(b, 0)
		end, ok := Value(b, i)
		got := ok && SkipSpace(b, end) == len(b)
		if want := json.Valid(b); got != want {
			t.Fatalf("Value(%q) = %v, json.Valid = %v", s, got, want)
		}
	}
	for _, s := range seeds {
		check(s)
	}
	alphabet := []byte(`{}[]:,"\ 0123456789-+.eEtrufalsnu` + "\n\x00\x7f\xff")
	rng := rand.New(rand.NewPCG(3, 4))
	for range 50000 {
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
