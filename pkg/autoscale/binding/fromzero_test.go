package binding

import (
	"testing"
	"time"

	"github.com/berth-sh/berth/pkg/autoscale"
)

func TestFromZero(t *testing.T) {
	now := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	r := &Reconciler{}
	newState := func() *state {
		return &state{scaler: autoscale.NewScaler(autoscale.Policy{}, now), zeroAt: map[string]time.Time{}}
	}
	cases := []struct {
		name         string
		demand       time.Time
		zeroAt       time.Time
		current      int32
		lo, hi       int32
		desired      int32
		want         int32
		wantFromZero bool
	}{
		{name: "recent demand at zero: one replica", demand: now.Add(-time.Second), hi: 3, want: 1, wantFromZero: true},
		{name: "minReplicas above one", demand: now.Add(-time.Second), lo: 2, hi: 3, want: 2, wantFromZero: true},
		{name: "no demand stays at zero", hi: 3, want: 0},
		{name: "old demand stays at zero", demand: now.Add(-demandWindow - time.Second), hi: 3, want: 0},
		{name: "demand before the last scale to zero was answered", demand: now.Add(-2 * time.Second), zeroAt: now.Add(-time.Second), hi: 3, want: 0},
		{name: "maxReplicas zero wins", demand: now.Add(-time.Second), hi: 0, want: 0},
		{name: "recent demand keeps the last replica", demand: now.Add(-time.Second), current: 1, hi: 3, want: 1},
		{name: "metrics above one are left alone", demand: now.Add(-time.Second), current: 1, desired: 3, hi: 3, want: 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := newState()
			if !c.zeroAt.IsZero() {
				st.zeroAt["m"] = c.zeroAt
			}
			d := autoscale.Decision{Desired: c.desired}
			got := r.fromZero([]*target{{key: "m", demand: c.demand}}, st, c.current, c.lo, c.hi, &d, now)
			if d.Desired != c.want || got != c.wantFromZero {
				t.Fatalf("desired %d (from zero %v), want %d (%v): %s", d.Desired, got, c.want, c.wantFromZero, d.Message)
			}
		})
	}
}
