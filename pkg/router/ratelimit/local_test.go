package ratelimit

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
)

// clock is a fake clock advanced by tests.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *clock                   { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }
func u32(v uint32) *uint32               { return &v }

func TestLimitsFrom(t *testing.T) {
	tests := []struct {
		name    string
		rl      *v1alpha1.RateLimit
		want    Limits
		wantErr bool
	}{
		{"nil", nil, Limits{}, false},
		{"default unit", &v1alpha1.RateLimit{InputTokensPerUnit: u32(10)}, Limits{InputPerUnit: 10, Unit: time.Second}, false},
		{"second", &v1alpha1.RateLimit{OutputTokensPerUnit: u32(5), Unit: v1alpha1.Second}, Limits{OutputPerUnit: 5, Unit: time.Second}, false},
		{"minute", &v1alpha1.RateLimit{InputTokensPerUnit: u32(1), OutputTokensPerUnit: u32(2), Unit: v1alpha1.Minute}, Limits{1, 2, time.Minute}, false},
		{"hour", &v1alpha1.RateLimit{InputTokensPerUnit: u32(1), Unit: v1alpha1.Hour}, Limits{1, 0, time.Hour}, false},
		{"day", &v1alpha1.RateLimit{InputTokensPerUnit: u32(1), Unit: v1alpha1.Day}, Limits{1, 0, 24 * time.Hour}, false},
		{"month is 30 days", &v1alpha1.RateLimit{InputTokensPerUnit: u32(1), Unit: v1alpha1.Month}, Limits{1, 0, 30 * 24 * time.Hour}, false},
		{"max uint32", &v1alpha1.RateLimit{InputTokensPerUnit: u32(^uint32(0))}, Limits{1<<32 - 1, 0, time.Second}, false},
		{"unknown unit", &v1alpha1.RateLimit{InputTokensPerUnit: u32(1), Unit: "week"}, Limits{}, true},
		{"zero limit", &v1alpha1.RateLimit{InputTokensPerUnit: u32(0)}, Limits{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LimitsFrom(tc.rl)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	own := &v1alpha1.RateLimit{Global: &v1alpha1.GlobalRateLimit{Redis: &v1alpha1.RedisConfig{Address: "r:6379"}}}
	if a := RedisAddress(own, ""); a != "r:6379" {
		t.Errorf("RedisAddress = %q", a)
	}
	if a := RedisAddress(own, "default:6379"); a != "r:6379" {
		t.Errorf("RedisAddress with a router default = %q, want the route's own", a)
	}
	if a := RedisAddress(&v1alpha1.RateLimit{Global: &v1alpha1.GlobalRateLimit{}}, ""); a != "" {
		t.Errorf("RedisAddress without redis = %q", a)
	}
	if a := RedisAddress(&v1alpha1.RateLimit{Global: &v1alpha1.GlobalRateLimit{}}, "default:6379"); a != "default:6379" {
		t.Errorf("RedisAddress without redis, router default = %q", a)
	}
	if a := RedisAddress(&v1alpha1.RateLimit{}, "default:6379"); a != "" {
		t.Errorf("RedisAddress of a local limit = %q, want local even with a router default", a)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{{0, 1}, {time.Nanosecond, 1}, {time.Second, 1}, {time.Second + 1, 2}, {6 * time.Second, 6}, {Month, 2592000}} {
		if got := (Decision{RetryAfter: tc.d}).RetryAfterSeconds(); got != tc.want {
			t.Errorf("RetryAfterSeconds(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// step is one call in a local-limiter scenario.
type step struct {
	advance   time.Duration // advance the clock first
	admit     int64         // Admit with these input tokens (when charge == 0)
	charge    int64         // ChargeOutput instead of Admit
	allowed   bool
	retry     time.Duration // expected RetryAfter when refused
	oversized bool
	reason    string // substring of Reason
}

func TestLocal(t *testing.T) {
	perMinute := Limits{InputPerUnit: 100, OutputPerUnit: 100, Unit: time.Minute}
	tests := []struct {
		name  string
		l     Limits
		steps []step
	}{
		{"input refusal and retry-after", Limits{InputPerUnit: 100, Unit: time.Minute}, []step{
			{admit: 60, allowed: true},
			// 40 left; 50 more need 10 tokens at 100/min = 6s.
			{admit: 50, allowed: false, retry: 6 * time.Second, reason: "input tokens: 50 requested, 40 of 100 per minute left"},
			// refused requests charge nothing: 40 still fit.
			{admit: 40, allowed: true},
			{admit: 1, allowed: false, retry: 600 * time.Millisecond},
		}},
		{"refill over time", Limits{InputPerUnit: 100, Unit: time.Minute}, []step{
			{admit: 100, allowed: true},
			{advance: 30 * time.Second, admit: 51, allowed: false, retry: 600 * time.Millisecond},
			{admit: 50, allowed: true},
			{advance: 10 * time.Minute, admit: 100, allowed: true}, // refill caps at capacity
			{admit: 1, allowed: false},
		}},
		{"output debt blocks the next request", perMinute, []step{
			{admit: 10, allowed: true},
			{charge: 150},
			// output at -50: needs 51 tokens to reach 1, 51 * 0.6s.
			{admit: 10, allowed: false, retry: 30600 * time.Millisecond, reason: "output tokens: -50 of 100 per minute left"},
			{advance: 30 * time.Second, admit: 10, allowed: false, retry: 600 * time.Millisecond},
			{advance: 600 * time.Millisecond, admit: 10, allowed: true},
		}},
		{"both exhausted: longest wait and both reasons", perMinute, []step{
			{admit: 90, allowed: true},
			{charge: 110},
			{admit: 20, allowed: false, retry: 6600 * time.Millisecond, reason: "input tokens: 20 requested, 10 of 100 per minute left; output tokens: -10 of 100"},
		}},
		{"output used up exactly refuses", Limits{OutputPerUnit: 10, Unit: time.Second}, []step{
			{charge: 10},
			{admit: 1000, allowed: false, retry: 100 * time.Millisecond},
			{advance: 100 * time.Millisecond, admit: 1000, allowed: true},
		}},
		{"unit second", Limits{InputPerUnit: 10, Unit: time.Second}, []step{
			{admit: 10, allowed: true},
			{admit: 5, allowed: false, retry: 500 * time.Millisecond, reason: "per second"},
			{advance: 500 * time.Millisecond, admit: 5, allowed: true},
		}},
		{"unit hour", Limits{InputPerUnit: 3600, Unit: time.Hour}, []step{
			{admit: 3600, allowed: true},
			{admit: 60, allowed: false, retry: time.Minute, reason: "per hour"},
			{advance: time.Minute, admit: 60, allowed: true},
		}},
		{"unit day", Limits{InputPerUnit: 24, Unit: 24 * time.Hour}, []step{
			{admit: 24, allowed: true},
			{admit: 2, allowed: false, retry: 2 * time.Hour, reason: "per day"},
			{advance: 2 * time.Hour, admit: 2, allowed: true},
		}},
		{"unit month", Limits{InputPerUnit: 30, Unit: Month}, []step{
			{admit: 30, allowed: true},
			{admit: 1, allowed: false, retry: 24 * time.Hour, reason: "per month"},
			{advance: 24 * time.Hour, admit: 1, allowed: true},
		}},
		{"unlimited input", Limits{OutputPerUnit: 10, Unit: time.Second}, []step{
			{admit: 1 << 40, allowed: true},
			{admit: 1 << 40, allowed: true},
		}},
		{"unlimited output", Limits{InputPerUnit: 10, Unit: time.Second}, []step{
			{charge: 1 << 40},
			{admit: 10, allowed: true},
		}},
		{"unlimited both", Limits{}, []step{
			{admit: 1 << 50, allowed: true},
			{charge: 1 << 50},
			{admit: 1 << 50, allowed: true},
		}},
		{"oversized request can never pass", Limits{InputPerUnit: 100, Unit: time.Minute}, []step{
			{admit: 120, allowed: false, oversized: true, retry: time.Minute, reason: "never"},
			{advance: time.Hour, admit: 120, allowed: false, oversized: true},
			{admit: 100, allowed: true}, // the refusal charged nothing
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newClock()
			lim := NewLocal(c.now)
			ctx := context.Background()
			for i, s := range tc.steps {
				c.advance(s.advance)
				if s.charge != 0 {
					if err := lim.ChargeOutput(ctx, "ns/route", tc.l, s.charge); err != nil {
						t.Fatalf("step %d: ChargeOutput: %v", i, err)
					}
					continue
				}
				d, err := lim.Admit(ctx, "ns/route", tc.l, s.admit)
				if err != nil {
					t.Fatalf("step %d: Admit: %v", i, err)
				}
				if d.Allowed != s.allowed || d.Oversized != s.oversized {
					t.Fatalf("step %d: Admit(%d) = %+v, want allowed=%v oversized=%v", i, s.admit, d, s.allowed, s.oversized)
				}
				if d.Allowed && (d.RetryAfter != 0 || d.Reason != "") {
					t.Errorf("step %d: allowed decision carries %+v", i, d)
				}
				if !d.Allowed && d.RetryAfter <= 0 {
					t.Errorf("step %d: refused without RetryAfter: %+v", i, d)
				}
				if s.retry != 0 && d.RetryAfter != s.retry {
					t.Errorf("step %d: RetryAfter = %v, want %v", i, d.RetryAfter, s.retry)
				}
				if !strings.Contains(d.Reason, s.reason) {
					t.Errorf("step %d: Reason = %q, want it to contain %q", i, d.Reason, s.reason)
				}
			}
		})
	}
}

func TestLocalKeysAndDirectionsAreSeparate(t *testing.T) {
	c := newClock()
	lim := NewLocal(c.now)
	ctx := context.Background()
	l := Limits{InputPerUnit: 10, OutputPerUnit: 10, Unit: time.Minute}
	if d, _ := lim.Admit(ctx, "a/r", l, 10); !d.Allowed {
		t.Fatal("first request on a/r refused")
	}
	// Input spent on a/r: output of a/r and all of b/r are untouched.
	if d, _ := lim.Admit(ctx, "b/r", l, 10); !d.Allowed {
		t.Fatal("b/r refused because of a/r")
	}
	if err := lim.ChargeOutput(ctx, "a/r", l, 9); err != nil {
		t.Fatal(err)
	}
	if d, _ := lim.Admit(ctx, "a/r", Limits{OutputPerUnit: 10, Unit: time.Minute}, 10); !d.Allowed {
		t.Fatalf("a/r output with 1 token left refused: %+v", d)
	}
}

func TestLocalDropsIdleFullBuckets(t *testing.T) {
	c := newClock()
	lim := NewLocal(c.now)
	ctx := context.Background()
	l := Limits{InputPerUnit: 10, OutputPerUnit: 10, Unit: time.Second}
	for i := range 1000 {
		key := "ns/r" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		if d, _ := lim.Admit(ctx, key, l, 5); !d.Allowed {
			t.Fatal("refused")
		}
		_ = lim.ChargeOutput(ctx, key, l, 5)
	}
	if n := lim.Len(); n != 2000 {
		t.Fatalf("Len = %d, want 2000", n)
	}
	c.advance(2 * sweepEvery) // all refilled
	if d, _ := lim.Admit(ctx, "other", l, 1); !d.Allowed {
		t.Fatal("refused")
	}
	if n := lim.Len(); n != 1 {
		t.Fatalf("after sweep Len = %d, want 1 (only the bucket just charged)", n)
	}
}

func TestLocalInvalidLimitsFailOpen(t *testing.T) {
	lim := NewLocal(nil)
	d, err := lim.Admit(context.Background(), "k", Limits{InputPerUnit: 10}, 1)
	if err == nil || !d.Allowed {
		t.Fatalf("Admit with zero unit = %+v, %v; want allowed plus error", d, err)
	}
}
