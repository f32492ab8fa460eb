// Package ratelimit limits the input (prompt) and output (completion) tokens a
// ModelRoute may consume per unit of time.
//
// Each (route key, direction) pair has its own token bucket: its capacity is
// the per-unit limit and it refills continuously at limit/unit, so a full
// bucket allows a burst of one whole unit's budget and an empty one regains
// it linearly over one unit. A month is 30 days (see [UnitDuration]).
//
// The router calls [Limiter.Admit] before it forwards a request, with its
// estimated input tokens: they are charged to the input bucket when they fit,
// and the output bucket must hold at least one token. Nothing is charged on
// refusal. After the response the router calls [Limiter.ChargeOutput] with the
// output tokens it learned from the response's usage (or counted in the
// stream); the output bucket may go negative, and that debt refuses later
// requests until it is refilled. A refused request is answered with 429 and a
// Retry-After header taken from [Decision.RetryAfterSeconds].
//
// Two implementations exist: [Local] keeps the buckets in one router process;
// [Redis] keeps them in Redis so every router replica draws from one budget
// (used when the route's rateLimit.global.redis.address is set; [Clients]
// hands out one client per address).
//
// Failure policy: a Limiter that cannot decide (Redis unreachable, bad
// limits) returns an error together with an Allowed decision — it fails open.
// The router needs no policy of its own: it logs the error, counts it in its
// metric and forwards the request. See [Redis.Admit] for why.
//
// The package has no global state and no metrics; the router owns those.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
)

// Month is the length of the "month" rate-limit unit: 30 days, whatever the
// calendar says, so that the refill rate is constant.
const Month = 30 * 24 * time.Hour

// UnitDuration returns the length of a rate-limit unit. The empty unit is the
// CRD's default, "second"; a month is 30 days.
func UnitDuration(u v1alpha1.RateLimitUnit) (time.Duration, error) {
	switch u {
	case "", v1alpha1.Second:
		return time.Second, nil
	case v1alpha1.Minute:
		return time.Minute, nil
	case v1alpha1.Hour:
		return time.Hour, nil
	case v1alpha1.Day:
		return 24 * time.Hour, nil
	case v1alpha1.Month:
		return Month, nil
	}
	return 0, fmt.Errorf("ratelimit: unknown unit %q (want second, minute, hour, day or month)", u)
}

// Limits is the budget of one route. A zero per-unit limit means that
// direction is unlimited; the zero Limits limits nothing.
type Limits struct {
	InputPerUnit  int64         // input tokens per Unit; 0 = unlimited
	OutputPerUnit int64         // output tokens per Unit; 0 = unlimited
	Unit          time.Duration // refill period of a whole bucket
}

// Unlimited reports whether l limits neither direction.
func (l Limits) Unlimited() bool { return l.InputPerUnit <= 0 && l.OutputPerUnit <= 0 }

// Validate reports an error when l limits something without a positive Unit,
// or has a negative limit.
func (l Limits) Validate() error {
	if l.InputPerUnit < 0 || l.OutputPerUnit < 0 {
		return fmt.Errorf("ratelimit: negative limit (input %d, output %d)", l.InputPerUnit, l.OutputPerUnit)
	}
	if !l.Unlimited() && l.Unit <= 0 {
		return fmt.Errorf("ratelimit: unit must be positive, got %v", l.Unit)
	}
	return nil
}

// LimitsFrom converts a route's RateLimit. A nil RateLimit gives the zero
// (unlimited) Limits. A limit of 0, which the CRD forbids (minimum 1), is an
// error rather than silently unlimited.
func LimitsFrom(rl *v1alpha1.RateLimit) (Limits, error) {
	if rl == nil {
		return Limits{}, nil
	}
	unit, err := UnitDuration(rl.Unit)
	if err != nil {
		return Limits{}, err
	}
	l := Limits{Unit: unit}
	if p := rl.InputTokensPerUnit; p != nil {
		if *p == 0 {
			return Limits{}, errors.New("ratelimit: inputTokensPerUnit must be at least 1")
		}
		l.InputPerUnit = int64(*p)
	}
	if p := rl.OutputTokensPerUnit; p != nil {
		if *p == 0 {
			return Limits{}, errors.New("ratelimit: outputTokensPerUnit must be at least 1")
		}
		l.OutputPerUnit = int64(*p)
	}
	return l, nil
}

// RedisAddress returns the Redis address of a global rate limit: the route's own, else
// fallback (the router's --redis-addr). "" means the limit is local to one router process.
func RedisAddress(rl *v1alpha1.RateLimit, fallback string) string {
	switch {
	case rl == nil || rl.Global == nil:
		return ""
	case rl.Global.Redis == nil || rl.Global.Redis.Address == "":
		return fallback
	}
	return rl.Global.Redis.Address
}

// Decision is the outcome of [Limiter.Admit].
type Decision struct {
	Allowed bool
	// RetryAfter is how long until the refused request would fit (both
	// buckets considered); zero when allowed.
	RetryAfter time.Duration
	// Reason says why the request was refused (or, when allowed together
	// with an error, that the limiter failed open). Empty otherwise.
	Reason string
	// Oversized is set when the request's input tokens exceed the whole
	// input capacity: it can never be admitted, however long the client
	// waits. The router still answers 429 (RetryAfter is then one Unit).
	Oversized bool
}

// RetryAfterSeconds is the value of the Retry-After header: RetryAfter
// rounded up to whole seconds, at least 1.
func (d Decision) RetryAfterSeconds() int64 {
	s := int64(math.Ceil(d.RetryAfter.Seconds()))
	if s < 1 {
		return 1
	}
	return s
}

// Limiter decides whether a route may spend tokens. Implementations are safe
// for concurrent use. On error the returned Decision is Allowed (fail-open);
// the caller logs and counts the error.
type Limiter interface {
	// Admit is called before a request: it charges inputTokens to the input
	// bucket if they fit, and requires the output bucket to hold at least
	// one token (output is charged afterwards). Nothing is charged when
	// refused. A request whose input alone exceeds the whole capacity can
	// never pass: it is refused with Oversized set and a Reason saying so.
	Admit(ctx context.Context, key string, l Limits, inputTokens int64) (Decision, error)
	// ChargeOutput charges the response's output tokens; the bucket may go
	// negative (debt), which refuses later requests until refilled.
	ChargeOutput(ctx context.Context, key string, l Limits, outputTokens int64) error
}

// eps absorbs floating-point rounding in bucket levels (a fraction of a token).
const eps = 1e-9

// maxWait bounds RetryAfter so that absurd debts cannot overflow a Duration.
const maxWait = 100 * 365 * 24 * time.Hour

// failOpen is the decision returned together with an error.
func failOpen(err error) (Decision, error) {
	return Decision{Allowed: true, Reason: "rate limiter failed open: " + err.Error()}, err
}

// precheck decides what needs no bucket, the same for every limiter: invalid limits fail
// open, unlimited routes pass, and a request larger than the whole input capacity is
// refused. done is false when the buckets must decide.
func precheck(l Limits, inputTokens int64) (d Decision, done bool, err error) {
	if err := l.Validate(); err != nil {
		d, err = failOpen(err)
		return d, true, err
	}
	if l.Unlimited() {
		return Decision{Allowed: true}, true, nil
	}
	if d, ok := oversized(l, inputTokens); ok {
		return d, true, nil
	}
	return Decision{}, false, nil
}

// oversized returns the refusal of a request that can never fit, or false.
func oversized(l Limits, inputTokens int64) (Decision, bool) {
	if l.InputPerUnit <= 0 || inputTokens <= l.InputPerUnit {
		return Decision{}, false
	}
	return Decision{
		RetryAfter: l.Unit,
		Oversized:  true,
		Reason: fmt.Sprintf("input tokens: %d requested, more than the whole limit of %d per %s; this request can never be admitted",
			inputTokens, l.InputPerUnit, unitName(l.Unit)),
	}, true
}

// decide is the admission rule shared by both limiters, given the buckets'
// current (refilled) levels; a level is ignored when its direction is
// unlimited. The Redis Lua script applies the same rule atomically.
func decide(l Limits, inputTokens int64, inLeft, outLeft float64) Decision {
	d := Decision{Allowed: true}
	var reasons []string
	if c := l.InputPerUnit; c > 0 && inLeft+eps < float64(inputTokens) {
		d.Allowed = false
		d.RetryAfter = max(d.RetryAfter, wait(float64(inputTokens)-inLeft, c, l.Unit))
		reasons = append(reasons, fmt.Sprintf("input tokens: %d requested, %s of %d per %s left",
			inputTokens, left(inLeft), c, unitName(l.Unit)))
	}
	if c := l.OutputPerUnit; c > 0 && outLeft+eps < 1 {
		d.Allowed = false
		d.RetryAfter = max(d.RetryAfter, wait(1-outLeft, c, l.Unit))
		reasons = append(reasons, fmt.Sprintf("output tokens: %s of %d per %s left",
			left(outLeft), c, unitName(l.Unit)))
	}
	for i, r := range reasons {
		if i > 0 {
			d.Reason += "; "
		}
		d.Reason += r
	}
	return d
}

// wait is the time to refill need tokens into a bucket of capacity c per unit.
func wait(need float64, c int64, unit time.Duration) time.Duration {
	w := math.Ceil(need * float64(unit) / float64(c))
	if w >= float64(maxWait) {
		return maxWait
	}
	return max(time.Duration(w), 1)
}

// left formats a bucket level: whole tokens, rounded down (so a debt shows
// as a negative number).
func left(v float64) string { return fmt.Sprintf("%.0f", math.Floor(v+eps)) }

func unitName(u time.Duration) string {
	switch u {
	case time.Second:
		return "second"
	case time.Minute:
		return "minute"
	case time.Hour:
		return "hour"
	case 24 * time.Hour:
		return "day"
	case Month:
		return "month"
	}
	return u.String()
}
