package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// request is one request of the trace.
type request struct {
	at        time.Duration // simulated offset from the start of the trace
	prompt    int           // prompt tokens
	maxTokens int           // tokens to generate
}

// burst multiplies the base rate by mult from start for dur, with rampTime linear ramps
// inside [start, start+dur) on both sides.
type burst struct {
	start, dur time.Duration
	mult       float64
}

// traceConfig shapes a trace.
type traceConfig struct {
	seed           uint64
	length         time.Duration
	baseLow        float64 // requests/s (simulated) at the start and end of the "day"
	baseHigh       float64 // requests/s at its middle
	bursts         int
	burstMin       float64 // multiplier range of a burst
	burstMax       float64
	burstDurMin    time.Duration
	burstDurMax    time.Duration
	promptMin      int // prompt tokens, log-uniform in [promptMin, promptMax]
	promptMax      int
	maxTokensMin   int // generated tokens, uniform in [maxTokensMin, maxTokensMax]
	maxTokensMax   int
	fixedBursts    []burst // used instead of drawn bursts when set (-quick)
	noBaseWobble   bool
	quietBeginning time.Duration // no burst starts before this
}

const rampTime = 5 * time.Second

type trace struct {
	cfg    traceConfig
	phase  float64
	bursts []burst
	reqs   []request
}

// newTrace draws a trace from cfg.seed: a base rate that rises from baseLow to baseHigh at
// the middle of the trace and falls back (half a cosine period each way, with a ±15% wobble
// of a third of the length), times a few bursts of burstMin–burstMax× lasting
// burstDurMin–burstDurMax, one per equal slot of the trace after quietBeginning. Arrivals
// are a Poisson process of that rate (by thinning); prompt lengths are log-uniform and
// output lengths uniform. The same seed gives the same trace.
func newTrace(cfg traceConfig) *trace {
	rng := rand.New(rand.NewPCG(cfg.seed, 0xa5ca1e))
	t := &trace{cfg: cfg, phase: 2 * math.Pi * rng.Float64()}
	if cfg.fixedBursts != nil {
		t.bursts = cfg.fixedBursts
	} else if cfg.bursts > 0 {
		slot := (cfg.length - cfg.quietBeginning) / time.Duration(cfg.bursts)
		for i := range cfg.bursts {
			dur := cfg.burstDurMin + time.Duration(rng.Float64()*float64(cfg.burstDurMax-cfg.burstDurMin))
			dur = dur.Round(time.Second)
			room := max(slot-dur, 0)
			start := cfg.quietBeginning + time.Duration(i)*slot + time.Duration(rng.Float64()*float64(room))
			mult := cfg.burstMin + rng.Float64()*(cfg.burstMax-cfg.burstMin)
			t.bursts = append(t.bursts, burst{start: start.Round(time.Second), dur: dur, mult: math.Round(mult*10) / 10})
		}
	}
	peak := 0.0
	for s := time.Duration(0); s < cfg.length; s += time.Second / 4 {
		peak = max(peak, t.rate(s))
	}
	peak *= 1.05
	var at float64
	logMin, logMax := math.Log(float64(cfg.promptMin)), math.Log(float64(cfg.promptMax))
	for {
		at += rng.ExpFloat64() / peak
		d := time.Duration(at * float64(time.Second))
		if d >= cfg.length {
			break
		}
		accept := rng.Float64() < t.rate(d)/peak
		// Draw the request either way, so the requests of one seed do not depend on the
		// acceptance of the ones before.
		prompt := int(math.Exp(logMin + rng.Float64()*(logMax-logMin)))
		maxTokens := cfg.maxTokensMin + rng.IntN(cfg.maxTokensMax-cfg.maxTokensMin+1)
		if accept {
			t.reqs = append(t.reqs, request{at: d, prompt: prompt, maxTokens: maxTokens})
		}
	}
	return t
}

// base is the request rate without bursts at offset d.
func (t *trace) base(d time.Duration) float64 {
	x := d.Seconds() / t.cfg.length.Seconds()
	r := t.cfg.baseLow + (t.cfg.baseHigh-t.cfg.baseLow)*(1-math.Cos(2*math.Pi*x))/2
	if !t.cfg.noBaseWobble {
		r *= 1 + 0.15*math.Sin(2*math.Pi*3*x+t.phase)
	}
	return r
}

// rate is the request rate at offset d (requests per simulated second).
func (t *trace) rate(d time.Duration) float64 {
	m := 1.0
	for _, b := range t.bursts {
		if d < b.start || d >= b.start+b.dur {
			continue
		}
		f := 1.0
		if in := d - b.start; in < rampTime {
			f = float64(in) / float64(rampTime)
		} else if left := b.start + b.dur - d; left < rampTime {
			f = float64(left) / float64(rampTime)
		}
		m = max(m, 1+(b.mult-1)*f)
	}
	return t.base(d) * m
}

// inBurst reports whether offset d is inside a burst.
func (t *trace) inBurst(d time.Duration) bool {
	for _, b := range t.bursts {
		if d >= b.start && d < b.start+b.dur {
			return true
		}
	}
	return false
}

// describe is the trace's shape in a few lines: seed, size, the base, the bursts, and the
// arrivals per minute.
func (t *trace) describe() string {
	var b strings.Builder
	c := t.cfg
	var tokens, out int
	for _, r := range t.reqs {
		tokens += r.prompt
		out += r.maxTokens
	}
	n := max(len(t.reqs), 1)
	fmt.Fprintf(&b, "Trace: seed %d, %s simulated, %d requests (%.2f/s on average); ", c.seed, c.length, len(t.reqs), float64(len(t.reqs))/c.length.Seconds())
	if c.baseLow == c.baseHigh {
		fmt.Fprintf(&b, "base rate %.2f/s", c.baseLow)
	} else {
		fmt.Fprintf(&b, "base rate %.2f/s at the ends rising to %.2f/s at the middle", c.baseLow, c.baseHigh)
	}
	if !c.noBaseWobble {
		b.WriteString(" (±15% wobble)")
	}
	fmt.Fprintf(&b, "; prompts %d–%d tokens log-uniform (mean %d), %d–%d tokens out (mean %.0f), streamed.\n",
		c.promptMin, c.promptMax, tokens/n, c.maxTokensMin, c.maxTokensMax, float64(out)/float64(n))
	b.WriteString("Bursts (rate × the base, 5 s ramps): ")
	for i, x := range t.bursts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s–%s ×%.1f", clockText(x.start), clockText(x.start+x.dur), x.mult)
	}
	b.WriteString("\n")
	return b.String()
}

// perMinute counts the arrivals in each simulated minute, as requests/s.
func (t *trace) perMinute() []float64 {
	out := make([]float64, int(math.Ceil(t.cfg.length.Minutes())))
	for _, r := range t.reqs {
		out[int(r.at/time.Minute)]++
	}
	for i := range out {
		out[i] /= 60
	}
	return out
}

// clockText renders an offset as m:ss.
func clockText(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
