package variant

import (
	"errors"
	"fmt"
	"math"
	"testing"
)

func near(t *testing.T, name string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol {
		t.Errorf("%s = %.12g, want %.12g (±%g)", name, got, want, tol)
	}
}

func TestWaitMarginIsLn20(t *testing.T) {
	near(t, "WaitMargin", WaitMargin, -math.Log(1-0.95), 1e-15)
}

// Batch of up to 2 with a hand-picked bound of 3 requests in the system.
//
//	alpha=10, beta=5: ITL(1)=15 ms, ITL(2)=20 ms; K=2 tokens per request.
//	mu1 = 1/(K*ITL(1)) = 1/30 req/ms, mu2 = 2/(K*ITL(2)) = 1/20 req/ms (also for n=3).
//	lambda = 1/40 req/ms (1500 req/min): lambda/mu1 = 3/4, lambda/mu2 = 1/2.
//	unnormalised p: 1, 3/4, 3/8, 3/16; sum 37/16 → p = 16/37, 12/37, 6/37, 3/37.
//	L  = (1*12 + 2*6 + 3*3)/37 = 33/37        (average in system)
//	Ls = (1*12 + 2*6 + 2*3)/37 = 30/37        (average batch)
//	X  = lambda*(1-p3) = (1/40)*(34/37) = 17/740 req/ms = 1020000/740 req/min
//	S  = Ls/X = (30/37)*(740/17) = 600/17 ms;  ITL = S/K = 300/17 ≈ 17.647059 ms
//	     (check, token-weighted: (30/37) / ((12/37)/15 + (6/37)*2/20 + (3/37)*2/20)
//	      = 30 / (0.8+0.6+0.3) = 30/1.7 = 17.647059)
//	W  = (L-Ls)/X = (3/37)*(740/17) = 60/17 ≈ 3.529412 ms
func TestQueueSmallBoundByHand(t *testing.T) {
	p := Profile{Acc: "X", AccCount: 1, Alpha: 10, Beta: 5, MaxBatchSize: 2}
	m := newQueueWithCapacity(p, Request{OutputTokens: 2}, 3).metrics(1.0 / 40)
	near(t, "ITLAverage", m.ITLAverage, 300.0/17, 1e-9)
	near(t, "WaitAverage", m.WaitAverage, 60.0/17, 1e-9)
	near(t, "AvgBatch", m.AvgBatch, 30.0/37, 1e-12)
	near(t, "AvgInSystem", m.AvgInSystem, 33.0/37, 1e-12)
	near(t, "Throughput", m.Throughput, 1020000.0/740, 1e-9)
	near(t, "Busy", m.Busy, 21.0/37, 1e-12)
	near(t, "Full", m.Full, 3.0/37, 1e-12)
}

// One request at a time (maxBatchSize 1), so the bound is 10 and the chain is M/M/1/10.
//
//	alpha=20, beta=5: ITL(1)=25 ms; K=4 → mu = 1/(4*25) = 1/100 req/ms = 600 req/min.
//	rate 300 req/min = 1/200 req/ms → rho = 1/2 in every state.
//	p(n) = rho^n (1-rho)/(1-rho^11) = 2^(10-n)/2047, n = 0..10; p0 = 1024/2047, p10 = 1/2047.
//	Ls = 1-p0 = 1023/2047
//	L  = sum n*2^(10-n)/2047 = 2036/2047
//	     (sum_{n=1..10} n/2^n = 2*(1 - 11/2^10 + 10/2^11) = 2036/1024)
//	X  = lambda*(1-p10) = (1/200)*(2046/2047) req/ms = 613800/2047 ≈ 299.853444 req/min
//	S  = Ls/X = 1023*200/2046 = 100 ms → ITL = 100/4 = 25 ms (one request: ITL(1))
//	W  = (L-Ls)/X = (1013/2047)*200*2047/2046 = 202600/2046 ≈ 99.022483 ms
func TestEvaluateSingleServerByHand(t *testing.T) {
	p := Profile{Acc: "A100", AccCount: 1, Alpha: 20, Beta: 5, MaxBatchSize: 1}
	m, err := Evaluate(p, Request{OutputTokens: 4}, 300)
	if err != nil {
		t.Fatal(err)
	}
	near(t, "ITLAverage", m.ITLAverage, 25, 1e-9)
	near(t, "WaitAverage", m.WaitAverage, 202600.0/2046, 1e-6)
	near(t, "AvgBatch", m.AvgBatch, 1023.0/2047, 1e-12)
	near(t, "AvgInSystem", m.AvgInSystem, 2036.0/2047, 1e-12)
	near(t, "Throughput", m.Throughput, 613800.0/2047, 1e-9)
	near(t, "Full", m.Full, 1.0/2047, 1e-12)
}

// Batch of up to 2 with llm-d's bound 10*2 = 20.
//
//	Same rates as TestQueueSmallBoundByHand: lambda/mu1 = 3/4, lambda/mu(n>=2) = 1/2,
//	lambda = 1/40 req/ms, K = 2. Let e = 2^-20.
//	unnormalised p: 1, then (3/4)(1/2)^(n-1) for n = 1..20.
//	Z  = 1 + (3/4)*2*(1-e) = 5/2 - 3e/2
//	Ls*Z = 3/4 + 2*(3/4)*(1 - 2^-19) = 9/4 - 3e
//	L*Z  = (3/4) * sum_{n=1..20} n/2^(n-1) = (3/4)*4*(1 - 21e + 10e) = 3 - 33e
//	p20*Z = (3/4)/2^19 = 3e/2, so X = lambda*(Z - 3e/2)/Z = lambda*(5/2 - 3e)/Z
//	ITL = Ls/X/K = 20*(9/4 - 3e)/(5/2 - 3e)      ≈ 17.9999977 ms
//	W   = (L-Ls)/X = 40*(3/4 - 30e)/(5/2 - 3e)   ≈ 11.9995560 ms
func TestEvaluateBatchOfTwoByHand(t *testing.T) {
	p := Profile{Acc: "X", AccCount: 1, Alpha: 10, Beta: 5, MaxBatchSize: 2}
	m, err := Evaluate(p, Request{OutputTokens: 2}, 1500)
	if err != nil {
		t.Fatal(err)
	}
	e := math.Ldexp(1, -20)
	z := 2.5 - 1.5*e
	near(t, "ITLAverage", m.ITLAverage, 20*(2.25-3*e)/(2.5-3*e), 1e-9)
	near(t, "WaitAverage", m.WaitAverage, 40*(0.75-30*e)/(2.5-3*e), 1e-9)
	near(t, "AvgBatch", m.AvgBatch, (2.25-3*e)/z, 1e-12)
	near(t, "AvgInSystem", m.AvgInSystem, (3-33*e)/z, 1e-12)
	near(t, "Throughput", m.Throughput, 1500*(2.5-3*e)/z, 1e-9)
}

func TestEvaluateZeroRate(t *testing.T) {
	// No arrivals: a lone request would see ITL(1) = 10 + 5*1 = 15 ms and no wait.
	m, err := Evaluate(Profile{Acc: "X", AccCount: 1, Alpha: 10, Beta: 5, MaxBatchSize: 4}, Request{OutputTokens: 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if m != (Metrics{ITLAverage: 15}) {
		t.Errorf("got %+v", m)
	}
}

func TestEvaluateLargeBatchStaysFinite(t *testing.T) {
	// rate(n)/rate(1) grows like n, so unscaled products reach ~e^1024 and overflow.
	p := Profile{Acc: "X", AccCount: 1, Alpha: 1, Beta: 0.01, MaxBatchSize: 1024}
	top, err := MaxRate(p, Request{OutputTokens: 10}, SLO{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rate := range []float64{1, top / 2, top, 10 * top} {
		m, err := Evaluate(p, Request{OutputTokens: 10}, rate)
		if err != nil {
			t.Fatal(err)
		}
		for name, v := range map[string]float64{"itl": m.ITLAverage, "wait": m.WaitAverage, "batch": m.AvgBatch, "tput": m.Throughput} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Errorf("rate %v: %s = %v", rate, name, v)
			}
		}
		if m.ITLAverage < p.ITL(1) || m.ITLAverage > p.ITL(1024) {
			t.Errorf("rate %v: ITL %v outside [ITL(1), ITL(1024)]", rate, m.ITLAverage)
		}
	}
}

func TestEvaluateRejectsBadInput(t *testing.T) {
	good := Profile{Acc: "A100", AccCount: 1, Alpha: 20, Beta: 5, MaxBatchSize: 1}
	for _, tc := range []struct {
		p          Profile
		tokens     float64
		rate       float64
		wantErrMsg string
	}{
		{Profile{Acc: "A100", AccCount: 1, Alpha: 20, Beta: 5}, 4, 1, `profile "A100": maxBatchSize must be at least 1, got 0`},
		{Profile{Acc: "A100", AccCount: 0, Alpha: 20, Beta: 5, MaxBatchSize: 1}, 4, 1, `profile "A100": accCount must be at least 1, got 0`},
		{Profile{Acc: "A100", AccCount: 1, Alpha: -1, Beta: 5, MaxBatchSize: 1}, 4, 1, `profile "A100": alpha must be a finite number >= 0, got -1`},
		{Profile{Acc: "A100", AccCount: 1, Alpha: 0, Beta: 0, MaxBatchSize: 1}, 4, 1, `profile "A100": alpha + beta must be > 0`},
		{good, 0, 1, `average output tokens must be a finite number > 0, got 0`},
		{good, 4, -1, `rate must be a finite number >= 0, got -1`},
		{good, 4, math.NaN(), `rate must be a finite number >= 0, got NaN`},
	} {
		_, err := Evaluate(tc.p, Request{OutputTokens: tc.tokens}, tc.rate)
		if err == nil || err.Error() != tc.wantErrMsg {
			t.Errorf("Evaluate(%+v, %v, %v) error = %v, want %q", tc.p, tc.tokens, tc.rate, err, tc.wantErrMsg)
		}
	}
	for _, input := range []float64{-1, math.Inf(1), math.NaN()} {
		want := fmt.Sprintf("average input tokens must be a finite number >= 0, got %v", input)
		_, err := Evaluate(good, Request{InputTokens: input, OutputTokens: 4}, 1)
		if err == nil || err.Error() != want {
			t.Errorf("Evaluate input %v: error = %v, want %q", input, err, want)
		}
		_, err = MaxRate(good, Request{InputTokens: input, OutputTokens: 4}, SLO{})
		if err == nil || err.Error() != want {
			t.Errorf("MaxRate input %v: error = %v, want %q", input, err, want)
		}
	}
}

// With maxBatchSize 1 the ITL is ITL(1) = 25 ms at every rate, so slo-tpot 25 never binds and,
// without slo-ttft, the answer is the top of the range: 0.999 * 600 req/min = 599.4 req/min.
func TestMaxRateTopOfRange(t *testing.T) {
	p := Profile{Acc: "A100", AccCount: 1, Alpha: 20, Beta: 5, MaxBatchSize: 1}
	got, err := MaxRate(p, Request{OutputTokens: 4}, SLO{TPOT: 25})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "MaxRate", got, 599.4, 1e-9)
}

// slo-tpot binding: in the bound-3 chain of TestQueueSmallBoundByHand the ITL is 300/17 ms
// exactly at lambda = 1/40 req/ms, and the ITL grows with lambda, so with slo-tpot 300/17 the
// bisection must stop at 1/40 (within RateTolerance*top = 1e-9*0.999/20 below, and the
// slack of 1e-9*17.6 ms above, about 1e-10 req/ms).
func TestMaxRateITLBindsByHand(t *testing.T) {
	p := Profile{Acc: "X", AccCount: 1, Alpha: 10, Beta: 5, MaxBatchSize: 2}
	q := newQueueWithCapacity(p, Request{OutputTokens: 2}, 3)
	got, err := q.maxRate(SLO{TPOT: 300.0 / 17})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "maxRate (req/ms)", got, 1.0/40, 1e-9)
}

// slo-ttft binding: for the M/M/1/10 chain of TestEvaluateSingleServerByHand the wait at
// 300 req/min is W = 202600/2046 ms, so with slo-ttft = W*ln(20) the answer is 300 req/min
// (to about 1e-6 req/min: the bisection width 1e-9*599.4 and the 1e-9 relative slack).
func TestMaxRateWaitBindsByHand(t *testing.T) {
	p := Profile{Acc: "A100", AccCount: 1, Alpha: 20, Beta: 5, MaxBatchSize: 1}
	ttft := 202600.0 / 2046 * WaitMargin
	got, err := MaxRate(p, Request{OutputTokens: 4}, SLO{TPOT: 25, TTFT: ttft})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "MaxRate", got, 300, 1e-6)
}

func TestMaxRateInfeasible(t *testing.T) {
	// ITL(1) = 20 + 5 = 25 ms > 24 ms even for a lone request. Bottom of the range:
	// 0.001 * 600 req/min = 0.60 req/min.
	p := Profile{Acc: "A100", AccCount: 1, Alpha: 20, Beta: 5, MaxBatchSize: 1}
	_, err := MaxRate(p, Request{OutputTokens: 4}, SLO{TPOT: 24, TTFT: 500})
	want := "SLO cannot be met: average ITL 25.00 ms exceeds slo-tpot 24.00 ms even at minimal load (0.60 req/min)"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %q", err, want)
	}
	if !errors.Is(err, ErrInfeasible) {
		t.Error("error does not wrap ErrInfeasible")
	}
}

// The rate returned meets the SLO, and a rate one part in 1e6 higher does not (unless the
// answer is the top of the range).
func TestMaxRateIsTheBoundary(t *testing.T) {
	p := Profile{Acc: "X", AccCount: 1, Alpha: 10, Beta: 2, MaxBatchSize: 8}
	const k = 100
	q := newQueue(p, Request{OutputTokens: k})
	top := (1 - RateMargin) * q.mu[len(q.mu)-1] * msPerMinute
	for _, slo := range []SLO{{TPOT: 20, TTFT: 1000}, {TPOT: 25}, {TTFT: 50}, {TPOT: 30, TTFT: 200}} {
		got, err := MaxRate(p, Request{OutputTokens: k}, slo)
		if err != nil {
			t.Fatalf("%+v: %v", slo, err)
		}
		if ok, why := q.meets(got/msPerMinute, slo); !ok {
			t.Errorf("%+v: SLO fails at the returned rate %v: %s", slo, got, why)
		}
		if got < top {
			if ok, _ := q.meets(got*(1+1e-6)/msPerMinute, slo); ok {
				t.Errorf("%+v: SLO still holds above the returned rate %v", slo, got)
			}
		}
	}
}

func TestMaxRateMonotone(t *testing.T) {
	const k = 100
	rate := func(p Profile, slo SLO) float64 {
		t.Helper()
		r, err := MaxRate(p, Request{OutputTokens: k}, slo)
		if err != nil {
			t.Fatalf("%+v %+v: %v", p, slo, err)
		}
		return r
	}
	base := Profile{Acc: "X", AccCount: 1, Alpha: 10, Beta: 2, MaxBatchSize: 8}

	prev := 0.0
	for _, tpot := range []float64{15, 20, 25, 30} { // looser slo-tpot → higher rate
		r := rate(base, SLO{TPOT: tpot, TTFT: 100000})
		if r <= prev {
			t.Errorf("slo-tpot %v: rate %v not above %v", tpot, r, prev)
		}
		prev = r
	}
	prev = 0
	for _, ttft := range []float64{20, 100, 400, 1600} { // looser slo-ttft → higher rate
		r := rate(base, SLO{TPOT: 1000, TTFT: ttft})
		if r <= prev {
			t.Errorf("slo-ttft %v: rate %v not above %v", ttft, r, prev)
		}
		prev = r
	}
	prev = math.Inf(1)
	for _, beta := range []float64{0.5, 1, 2, 3} { // larger beta → lower rate
		p := base
		p.Beta = beta
		r := rate(p, SLO{TPOT: 30, TTFT: 1000})
		if r >= prev {
			t.Errorf("beta %v: rate %v not below %v", beta, r, prev)
		}
		prev = r
	}
}
