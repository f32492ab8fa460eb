package ratelimit

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// KeyPrefix prefixes every Redis key this package writes.
const KeyPrefix = "berth:ratelimit:"

// Redis is a Limiter whose buckets live in Redis, shared by every router
// replica that uses the same Redis. Each decision is one Lua script run
// atomically by Redis (EVALSHA, falling back to EVAL when the script is not
// cached), so concurrent replicas can never admit more than the budget.
//
// Clock: the script reads Redis's own clock (TIME) rather than the callers'.
// With callers' clocks, a replica whose clock runs ahead would refill the
// bucket up to its "now", and one running behind would then rewrite the
// bucket's timestamp backwards, so that the ahead replica refills the same
// interval again — skewed replicas would together hand out more than the
// budget. One clock, the server's, makes refill depend only on real elapsed
// time. (Consequently Redis takes no clock from the caller; tests of refill
// timing use Local with an injected clock.)
//
// Keys: berth:ratelimit:{<key>}:in and …:out, hashes of the level ("t") and
// the server time in microseconds it was computed at ("ts"). The braces are
// a Redis Cluster hash tag so both buckets of a route live in one slot. A key
// expires when its bucket would be full again (a missing key is a full
// bucket), so idle routes leave nothing behind.
type Redis struct {
	client redis.UniversalClient
}

var _ Limiter = (*Redis)(nil)

// NewRedis returns a limiter keeping its buckets in the Redis behind client.
// Use one client per address (see [Clients]); the limiter itself holds no state.
func NewRedis(client redis.UniversalClient) *Redis {
	return &Redis{client: client}
}

// maxTTLMillis bounds key expiry (10 years), far beyond any real debt.
const maxTTLMillis = 10 * 365 * 24 * 3600 * 1000

// script decides or charges atomically. KEYS: input bucket, output bucket.
// ARGV: mode ("admit"|"charge"), input capacity, output capacity (0 =
// unlimited), unit in microseconds, tokens. Admit returns {allowed, input
// level, output level} (levels before charging, as %.17g strings so they
// survive the reply); the rule is decide's.
var script = redis.NewScript(`
-- Effects replication (the default since Redis 5, the only mode since 7) is
-- what allows writing after reading TIME; ask for it on older servers.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local mode, incap, outcap = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local unit, n = tonumber(ARGV[4]), tonumber(ARGV[5])
local eps = 1e-9

local function level(key, cap)
  local v = redis.call('HMGET', key, 't', 'ts')
  local tokens, ts = tonumber(v[1]), tonumber(v[2])
  if tokens == nil or ts == nil then return cap end
  local elapsed = now - ts
  if elapsed > 0 then tokens = tokens + elapsed * cap / unit end
  if tokens > cap then tokens = cap end
  return tokens
end

local function save(key, cap, tokens)
  if tokens >= cap then
    redis.call('DEL', key)
    return
  end
  local ms = math.ceil((cap - tokens) * unit / cap / 1000) + 1
  if ms > ` + strconv.Itoa(maxTTLMillis) + ` then ms = ` + strconv.Itoa(maxTTLMillis) + ` end
  redis.call('HSET', key, 't', string.format('%.17g', tokens), 'ts', string.format('%.0f', now))
  redis.call('PEXPIRE', key, string.format('%.0f', ms))
end

if mode == 'charge' then
  save(KEYS[2], outcap, level(KEYS[2], outcap) - n)
  return 1
end

local ok, inl, outl = 1, 0, 0
if incap > 0 then
  inl = level(KEYS[1], incap)
  if inl + eps < n then ok = 0 end
end
if outcap > 0 then
  outl = level(KEYS[2], outcap)
  if outl + eps < 1 then ok = 0 end
end
if ok == 1 and incap > 0 and n > 0 then save(KEYS[1], incap, inl - n) end
return {ok, string.format('%.17g', inl), string.format('%.17g', outl)}
`)

func redisKeys(key string) []string {
	base := KeyPrefix + "{" + key + "}:"
	return []string{base + "in", base + "out"}
}

// Admit implements [Limiter].
//
// When Redis cannot be reached (or answers nonsense) Admit fails open: it
// returns an Allowed decision together with the error, and the router logs
// the error and counts it in a metric. Token limits are a cost and fairness
// control, not a security boundary: failing closed would turn an outage of
// one Redis (a side dependency) into an outage of every route naming it,
// while failing open only suspends the budget for as long as the outage
// lasts — the backends' own capacity still bounds the traffic — and the
// error log and metric make the lapse visible. Output charged while Redis is
// down is lost, not replayed.
func (r *Redis) Admit(ctx context.Context, key string, l Limits, inputTokens int64) (Decision, error) {
	inputTokens = max(inputTokens, 0)
	if d, done, err := precheck(l, inputTokens); done {
		return d, err
	}
	res, err := script.Run(ctx, r.client, redisKeys(key),
		"admit", l.InputPerUnit, l.OutputPerUnit, l.Unit.Microseconds(), inputTokens).Slice()
	if err != nil {
		return failOpen(fmt.Errorf("ratelimit: redis: %w", err))
	}
	ok, inLeft, outLeft, err := parseAdmit(res)
	if err != nil {
		return failOpen(err)
	}
	d := decide(l, inputTokens, inLeft, outLeft)
	if d.Allowed != ok { // the script's verdict is authoritative (it charged or not)
		d.Allowed = ok
		if ok {
			d.RetryAfter, d.Reason = 0, ""
		} else {
			d.RetryAfter = max(d.RetryAfter, 1)
		}
	}
	return d, nil
}

// ChargeOutput implements [Limiter]. An error means the tokens were not
// charged; the router logs it and carries on (fail-open, see Admit).
func (r *Redis) ChargeOutput(ctx context.Context, key string, l Limits, outputTokens int64) error {
	if err := l.Validate(); err != nil {
		return err
	}
	if l.OutputPerUnit <= 0 || outputTokens <= 0 {
		return nil
	}
	err := script.Run(ctx, r.client, redisKeys(key),
		"charge", l.InputPerUnit, l.OutputPerUnit, l.Unit.Microseconds(), outputTokens).Err()
	if err != nil {
		return fmt.Errorf("ratelimit: redis: %w", err)
	}
	return nil
}

func parseAdmit(res []any) (ok bool, inLeft, outLeft float64, err error) {
	if len(res) != 3 {
		return false, 0, 0, fmt.Errorf("ratelimit: redis script returned %d values, want 3", len(res))
	}
	flag, isInt := res[0].(int64)
	in, isStr1 := res[1].(string)
	out, isStr2 := res[2].(string)
	if !isInt || !isStr1 || !isStr2 {
		return false, 0, 0, fmt.Errorf("ratelimit: redis script returned %v", res)
	}
	if inLeft, err = strconv.ParseFloat(in, 64); err == nil {
		outLeft, err = strconv.ParseFloat(out, 64)
	}
	if err != nil {
		return false, 0, 0, fmt.Errorf("ratelimit: redis script returned %v: %w", res, err)
	}
	return flag == 1, inLeft, outLeft, nil
}
