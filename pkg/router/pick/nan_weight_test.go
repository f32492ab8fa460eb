package pick

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNaNWeightRefused: New accepts "kv-cache=NaN" (strconv.ParseFloat parses it, and
// NaN passes both `w < 0` and `math.IsInf`). Every total is then NaN, no comparison in Pick
// holds, and every request goes to the first candidate. Fix (pick.go, New): also reject
// math.IsNaN(w).
func TestNaNWeightRefused(t *testing.T) {
	for _, spec := range []string{"kv-cache=NaN", "least-requests=2,latency=nan"} {
		p, err := New(Scored, spec, 0)
		require.Error(t, err, spec)
		assert.Nil(t, p)
		assert.Contains(t, err.Error(), "weight")
	}
}
