package autoscale

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestEnforceRatio(t *testing.T) {
	wide := RoleBounds{Min: 0, Max: 100}
	for _, tc := range []struct {
		name       string
		num, den   int32
		nb, db     RoleBounds
		r          Ratio
		wantN      int32
		wantD      int32
		wantAdjust bool
	}{
		{"within", 2, 4, wide, wide, Ratio{0.5, 1}, 2, 4, false},
		{"numerator raised to the minimum ratio", 1, 6, wide, wide, Ratio{0.5, 1}, 3, 6, true},
		{"denominator raised to the maximum ratio", 5, 2, wide, wide, Ratio{0.5, 1}, 5, 5, true},
		{"rounds the raised side up", 1, 5, wide, wide, Ratio{0.5, 1}, 3, 5, true},
		{"numerator at its maximum: the denominator comes down", 1, 10, RoleBounds{1, 3}, wide, Ratio{0.5, 1}, 3, 6, true},
		{"denominator at its maximum: the numerator comes down", 9, 2, wide, RoleBounds{1, 4}, Ratio{0.5, 2}, 8, 4, true},
		{"both zero stay zero", 0, 0, wide, wide, Ratio{0.5, 1}, 0, 0, false},
		{"a lone side gets a partner", 0, 4, wide, wide, Ratio{0.25, 1}, 1, 4, true},
		{"a lone numerator gets a partner", 3, 0, wide, wide, Ratio{0.5, 1}, 3, 3, true},
		{"bounds first", 0, 9, RoleBounds{1, 5}, RoleBounds{1, 8}, Ratio{0.5, 1}, 4, 8, true},
		{"infeasible: nearest the bounds allow", 1, 10, RoleBounds{1, 1}, RoleBounds{10, 10}, Ratio{0.5, 1}, 1, 10, false},
		{"float noise", 3, 30, wide, wide, Ratio{0.1, 1}, 3, 30, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, d, adj := EnforceRatio(tc.num, tc.den, tc.nb, tc.db, tc.r)
			assert.Equal(t, [2]int32{tc.wantN, tc.wantD}, [2]int32{n, d})
			assert.Equal(t, tc.wantAdjust, adj)
		})
	}
}

// Whenever the bounds allow a count within the ratio, the result is within it and within the
// bounds, and the side the metrics asked more of is never lowered below what they asked.
func TestEnforceRatioProperties(t *testing.T) {
	for _, r := range []Ratio{{0.5, 1}, {0.25, 0.5}, {1, 3}, {0.3333, 0.5}} {
		nb, db := RoleBounds{1, 6}, RoleBounds{1, 12}
		for num := int32(0); num <= 8; num++ {
			for den := int32(0); den <= 14; den++ {
				n, d, _ := EnforceRatio(num, den, nb, db, r)
				msg := fmt.Sprintf("ratio %v, asked %d:%d, got %d:%d", r, num, den, n, d)
				assert.True(t, n >= nb.Min && n <= nb.Max && d >= db.Min && d <= db.Max, "bounds: "+msg)
				assert.True(t, InRatio(n, d, r), "ratio: "+msg)
				if num >= nb.Min && num <= nb.Max && den >= db.Min && den <= db.Max && InRatio(num, den, r) {
					assert.Equal(t, [2]int32{num, den}, [2]int32{n, d}, "a count within the ratio is kept: "+msg)
				}
			}
		}
	}
}
