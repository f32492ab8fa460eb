package variant

import (
	"errors"
	"math"
	"testing"
)

func TestPrefillTime(t *testing.T) {
	p := Profile{Acc: "H100", AccCount: 1, Alpha: 8, Beta: 0.15, MaxBatchSize: 4}
	near(t, "PrefillTime(0)", p.PrefillTime(0), 0, 0)          // unknown prompt: no prefill
	near(t, "PrefillTime(1)", p.PrefillTime(1), 8.15, 1e-12)   // 8 + 0.15*1
	near(t, "PrefillTime(200)", p.PrefillTime(200), 38, 1e-12) // 8 + 0.15*200
}

// With no input tokens the chain is llm-d's: mu(n) = n/(K*ITL(n)) exactly, bit for bit.
func TestNoPrefillIsLlmdModel(t *testing.T) {
	p := Profile{Acc: "X", AccCount: 1, Alpha: 10, Beta: 2, MaxBatchSize: 8}
	const k = 100
	q := newQueue(p, Request{OutputTokens: k})
	if q.tp != 0 {
		t.Fatalf("tp = %v, want 0", q.tp)
	}
	for n := 1; n <= p.MaxBatchSize; n++ {
		if want := float64(n) / (k * p.ITL(float64(n))); q.mu[n-1] != want {
			t.Errorf("mu(%d) = %v, want %v", n, q.mu[n-1], want)
		}
	}
	m := q.metrics(0.5 * q.mu[7])
	if m.TTFTAverage != m.WaitAverage {
		t.Errorf("TTFT %v != wait %v without prefill", m.TTFTAverage, m.WaitAverage)
	}
}

// The bound-3 chain of TestQueueSmallBoundByHand with a prompt of P = 2 tokens:
//
//	alpha=10, beta=5: ITL(1)=15 ms, ITL(2)=20 ms; K=2; Tp = 10 + 5*2 = 20 ms.
//	mu1 = 1/(K*ITL(1) + 1*Tp) = 1/(30+20)   = 1/50 req/ms
//	mu2 = 2/(K*ITL(2) + 2*Tp) = 2/(40+40)   = 1/40 req/ms (also for n=3)
//	lambda = 1/80 req/ms (750 req/min): lambda/mu1 = 5/8, lambda/mu2 = 1/2.
//	unnormalised p: 1, 5/8, 5/16, 5/32 = (32, 20, 10, 5)/32; sum 67/32
//	  → p = 32/67, 20/67, 10/67, 5/67.
//	L  = (1*20 + 2*10 + 3*5)/67 = 55/67
//	Ls = (1*20 + 2*10 + 2*5)/67 = 50/67
//	X  = lambda*(1-p3) = (1/80)*(62/67) req/ms = 750*62/67 = 46500/67 req/min
//	     (check: X = p1*mu1 + (p2+p3)*mu2 = (20/67)/50 + (15/67)/40 = (0.4+0.375)/67
//	      = 0.775/67 = (62/80)/67)
//	S  = Ls/X = (50/67)*(80*67/62) = 2000/31 ms;  ITL = S/K = 1000/31 ≈ 32.258 ms
//	     (check: S = 50/0.775 = 64.516 ms, between the 50 ms a request takes alone,
//	      30 decode + 20 prefill, and the 80 ms in a pair, 40 decode + 2*20 prefill)
//	W  = (L-Ls)/X = (5/67)*(80*67/62) = 200/31 ≈ 6.452 ms
//	TTFT = W + Tp = 200/31 + 20 = 820/31 ≈ 26.452 ms
func TestQueuePrefillSmallBoundByHand(t *testing.T) {
	p := Profile{Acc: "X", AccCount: 1, Alpha: 10, Beta: 5, MaxBatchSize: 2}
	q := newQueueWithCapacity(p, Request{InputTokens: 2, OutputTokens: 2}, 3)
	near(t, "mu1", q.mu[0], 1.0/50, 1e-15)
	near(t, "mu2", q.mu[1], 1.0/40, 1e-15)
	m := q.metrics(1.0 / 80)
	near(t, "ITLAverage", m.ITLAverage, 1000.0/31, 1e-9)
	near(t, "WaitAverage", m.WaitAverage, 200.0/31, 1e-9)
	near(t, "TTFTAverage", m.TTFTAverage, 820.0/31, 1e-9)
	near(t, "AvgBatch", m.AvgBatch, 50.0/67, 1e-12)
	near(t, "AvgInSystem", m.AvgInSystem, 55.0/67, 1e-12)
	near(t, "Throughput", m.Throughput, 46500.0/67, 1e-9)
	near(t, "Busy", m.Busy, 35.0/67, 1e-12)
	near(t, "Full", m.Full, 5.0/67, 1e-12)
}

// One request at a time with llm-d's bound 10 (M/M/1/10) and a 16-token prompt:
//
//	alpha=20, beta=5: ITL(1)=25 ms, K=4, Tp = 20 + 5*16 = 100 ms.
//	mu = 1/(K*ITL(1) + Tp) = 1/(100 + 100) = 1/200 req/ms = 300 req/min (600 without prefill).
//	rate 150 req/min = 1/400 req/ms → rho = 1/2: the chain of TestEvaluateSingleServerByHand
//	with the service time doubled, p(n) = 2^(10-n)/2047.
//	X  = (1/400)*(2046/2047) req/ms = 150*2046/2047 req/min
//	S  = Ls/X = (1023/2047)*400*2047/2046 = 200 ms → ITL = 200/4 = 50 ms (= 25 + Tp/K)
//	W  = (L-Ls)/X = (1013/2047)*400*2047/2046 = 1013*400/2046 ≈ 198.044966 ms
//	TTFT = W + 100 ≈ 298.044966 ms
//
// At rate 0 a lone request sees ITL = 25 + 100/4 = 50 ms and TTFT = Tp = 100 ms.
func TestEvaluatePrefillSingleServerByHand(t *testing.T) {
	p := Profile{Acc: "A100", AccCount: 1, Alpha: 20, Beta: 5, MaxBatchSize: 1}
	r := Request{InputTokens: 16, OutputTokens: 4}
	m, err := Evaluate(p, r, 150)
	if err != nil {
		t.Fatal(err)
	}
	w := 1013.0 * 400 / 2046
	near(t, "ITLAverage", m.ITLAverage, 50, 1e-9)
	near(t, "WaitAverage", m.WaitAverage, w, 1e-9)
	near(t, "TTFTAverage", m.TTFTAverage, w+100, 1e-9)
	near(t, "AvgBatch", m.AvgBatch, 1023.0/2047, 1e-12)
	near(t, "AvgInSystem", m.AvgInSystem, 2036.0/2047, 1e-12)
	near(t, "Throughput", m.Throughput, 150*2046.0/2047, 1e-9)
	near(t, "Full", m.Full, 1.0/2047, 1e-12)

	m, err = Evaluate(p, r, 0)
	if err != nil {
		t.Fatal(err)
	}
	if m != (Metrics{ITLAverage: 50, TTFTAverage: 100}) {
		t.Errorf("rate 0: got %+v, want ITL 50 and TTFT 100 only", m)
	}
}

// Same replica: without targets the answer is the top of the range, 0.999*300 = 299.7
// req/min (without the prompt it is 0.999*600 = 599.4). With slo-ttft set to
// exactly the 150 req/min value W*ln(20) + Tp (see above), the answer is 150 req/min; the ITL
// is 50 ms at every rate with one request at a time, so slo-tpot 50 never binds.
func TestMaxRatePrefillByHand(t *testing.T) {
	p := Profile{Acc: "A100", AccCount: 1, Alpha: 20, Beta: 5, MaxBatchSize: 1}
	r := Request{InputTokens: 16, OutputTokens: 4}
	got, err := MaxRate(p, r, SLO{})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "MaxRate (no targets)", got, 299.7, 1e-9)

	ttft := 1013.0*400/2046*WaitMargin + 100
	got, err = MaxRate(p, r, SLO{TPOT: 50, TTFT: ttft})
	if err != nil {
		t.Fatal(err)
	}
	near(t, "MaxRate (slo-ttft binds)", got, 150, 1e-6)
}

// The rate returned meets the SLO and a rate one part in 1e6 higher does not, with prefill.
func TestMaxRatePrefillIsTheBoundary(t *testing.T) {
	p := Profile{Acc: "X", AccCount: 1, Alpha: 10, Beta: 2, MaxBatchSize: 8}
	r := Request{InputTokens: 100, OutputTokens: 100} // Tp = 10 + 2*100 = 210 ms
	q := newQueue(p, r)
	top := (1 - RateMargin) * q.mu[len(q.mu)-1] * msPerMinute
	for _, slo := range []SLO{{TPOT: 20, TTFT: 1000}, {TPOT: 25}, {TTFT: 300}, {TPOT: 30, TTFT: 400}} {
		got, err := MaxRate(p, r, slo)
		if err != nil {
			t.Fatalf("%+v: %v", slo, err)
		}
		if ok, why := q.meets(got/msPerMinute, slo); !ok {
			t.Errorf("%+v: SLO fails at the returned rate %v: %s", slo, got, why)
		}
		if got >= top {
			t.Errorf("%+v: rate %v at the top of the range %v; the test wants a binding SLO", slo, got, top)
		} else if ok, _ := q.meets(got*(1+1e-6)/msPerMinute, slo); ok {
			t.Errorf("%+v: SLO still holds above the returned rate %v", slo, got)
		}
	}
}

// Longer prompts → lower max rate, whichever target binds (or none: then the top of the
// range, 0.999*mu(N), falls as Tp grows). Tp = 10 + 2P: 0 (unknown), 30, 110, 210, 410 ms.
func TestMaxRateLongerPromptLower(t *testing.T) {
	p := Profile{Acc: "X", AccCount: 1, Alpha: 10, Beta: 2, MaxBatchSize: 8}
	for _, slo := range []SLO{{}, {TPOT: 30, TTFT: 1000}, {TPOT: 25}, {TTFT: 1000}} {
		prev := math.Inf(1)
		for _, in := range []float64{0, 10, 50, 100, 200} {
			r, err := MaxRate(p, Request{InputTokens: in, OutputTokens: 100}, slo)
			if err != nil {
				t.Fatalf("%+v, %v input tokens: %v", slo, in, err)
			}
			if r >= prev {
				t.Errorf("%+v, %v input tokens: rate %v not below %v", slo, in, r, prev)
			}
			prev = r
		}
	}
}

func TestMaxRateInfeasibleByPrefill(t *testing.T) {
	// Tp = 10 + 0.15*2000 = 310 ms > slo-ttft 300 ms at any rate.
	p := Profile{Acc: "H100", AccCount: 1, Alpha: 10, Beta: 0.15, MaxBatchSize: 4}
	_, err := MaxRate(p, Request{InputTokens: 2000, OutputTokens: 100}, SLO{TPOT: 50, TTFT: 300})
	want := "SLO cannot be met: prefill of a 2000-token prompt takes 310.00 ms (alpha 10 + beta 0.15 × 2000 tokens), more than slo-ttft 300.00 ms"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant    %s", err, want)
	}
	if !errors.Is(err, ErrInfeasible) {
		t.Error("error does not wrap ErrInfeasible")
	}

	// Tp = 100 ms fits slo-ttft 100.0001 ms, but not with the margin on the wait even at the
	// bottom of the range: lambda = 0.001*mu = 0.001/200 req/ms (0.30 req/min), rho = 0.001,
	// W ≈ rho*S/(1-rho) = 0.001*200/0.999 ≈ 0.20 ms, and 0.20*ln(20) + 100 > 100.0001.
	a := Profile{Acc: "A100", AccCount: 1, Alpha: 20, Beta: 5, MaxBatchSize: 1}
	_, err = MaxRate(a, Request{InputTokens: 16, OutputTokens: 4}, SLO{TTFT: 100.0001})
	want = "SLO cannot be met: average wait 0.20 ms times 3.00 (95th-percentile margin) plus prefill 100.00 ms exceeds slo-ttft 100.00 ms even at minimal load (0.30 req/min)"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant    %s", err, want)
	}
}

// One A100 (the replica of TestEvaluatePrefillSingleServerByHand): 150 req/min of 16-token
// prompts and 4 output tokens fit one replica (max 299.7 req/min), at ITL 50 ms, wait
// 1013*400/2046 ms and TTFT = wait + 100 ms.
func TestOptimizePrefillByHand(t *testing.T) {
	out := optimize(t, OptimizeInput{
		Load:      Load{ArrivalRate: 150, AvgOutputTokens: 4, AvgInputTokens: 16},
		SLO:       SLO{TPOT: 60, TTFT: 100000},
		Profiles:  []Profile{a100},
		UnitCosts: costs,
	})
	if out.Accelerator != "A100" || out.Replicas != 1 {
		t.Fatalf("got %s x%d, want A100 x1", out.Accelerator, out.Replicas)
	}
	w := 1013.0 * 400 / 2046
	near(t, "MaxRatePerReplica", out.MaxRatePerReplica, 299.7, 1e-9)
	near(t, "ITLAverage", out.ITLAverage, 50, 1e-9)
	near(t, "WaitAverage", out.WaitAverage, w, 1e-9)
	near(t, "TTFTAverage", out.TTFTAverage, w+100, 1e-9)
	near(t, "AvgBatch", out.AvgBatch, 1023.0/2047, 1e-12)
}

// The prompt changes the choice. 200 req/min of 4 output tokens, G2 at 25 a unit:
//
//	no prompt:  A100 max 599.4 → x1 = 40;  G2 max 299.7 → x1 = 25: G2.
//	16 tokens:  A100 Tp = 20+5*16 = 100, mu = 1/(100+100) req/ms = 300 req/min,
//	            max 299.7 → x1 = 40;
//	            G2 Tp = 45+5*16 = 125, mu = 1/(4*50+125) = 1/325 req/ms = 60000/325
//	            ≈ 184.6 req/min, max 0.999*60000/325 ≈ 184.43 → x2 = 50: A100.
func TestOptimizePromptChangesChoice(t *testing.T) {
	in := OptimizeInput{
		Load:      Load{ArrivalRate: 200, AvgOutputTokens: 4},
		SLO:       SLO{TPOT: 100, TTFT: 100000},
		Profiles:  []Profile{a100, g2},
		UnitCosts: map[string]float64{"A100": 40, "G2": 25},
	}
	if out := optimize(t, in); out.Accelerator != "G2" || out.Replicas != 1 || out.Cost != 25 {
		t.Errorf("no prompt: got %s x%d cost %v, want G2 x1 cost 25", out.Accelerator, out.Replicas, out.Cost)
	}
	in.Load.AvgInputTokens = 16
	out := optimize(t, in)
	if out.Accelerator != "A100" || out.Replicas != 1 || out.Cost != 40 {
		t.Errorf("16-token prompts: got %s x%d cost %v, want A100 x1 cost 40", out.Accelerator, out.Replicas, out.Cost)
	}
	g := out.Candidates[1]
	if g.Replicas != 2 || g.Cost != 50 {
		t.Errorf("G2 candidate: x%d cost %v, want x2 cost 50", g.Replicas, g.Cost)
	}
	near(t, "G2 max rate", g.MaxRatePerReplica, 0.999*60000/325, 1e-9)
	near(t, "A100 max rate", out.MaxRatePerReplica, 299.7, 1e-9)
}

func TestOptimizeInfeasibleByPrefill(t *testing.T) {
	// A100: Tp = 20 + 5*16 = 100 ms > slo-ttft 90; G2: Tp = 45 + 5*16 = 125 ms > 90.
	_, err := Optimize(OptimizeInput{
		Load:      Load{ArrivalRate: 100, AvgOutputTokens: 4, AvgInputTokens: 16},
		SLO:       SLO{TPOT: 100, TTFT: 90},
		Profiles:  []Profile{a100, g2},
		UnitCosts: costs,
	})
	want := "no accelerator profile can be used: " +
		"A100: SLO cannot be met: prefill of a 16-token prompt takes 100.00 ms (alpha 20 + beta 5 × 16 tokens), more than slo-ttft 90.00 ms; " +
		"G2: SLO cannot be met: prefill of a 16-token prompt takes 125.00 ms (alpha 45 + beta 5 × 16 tokens), more than slo-ttft 90.00 ms"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant    %s", err, want)
	}
}

// No load: a lone A100 request with a 16-token prompt sees TTFT = Tp = 100 ms and, when the
// output length is known (4), ITL = 25 + 100/4 = 50 ms; when it is not, ITL(1) = 25 ms. With
// the output length the max rate is known too: 0.999*300 = 299.7 req/min (slo-ttft 100000 ms
// does not bind, as in allocation_test.go).
func TestOptimizeZeroLoadWithPrompt(t *testing.T) {
	in := OptimizeInput{
		Load:      Load{AvgInputTokens: 16},
		SLO:       SLO{TPOT: 60, TTFT: 100000},
		Profiles:  []Profile{a100},
		UnitCosts: costs,
	}
	out := optimize(t, in)
	near(t, "ITLAverage (K unknown)", out.ITLAverage, 25, 0)
	near(t, "TTFTAverage", out.TTFTAverage, 100, 0)
	near(t, "WaitAverage", out.WaitAverage, 0, 0)

	in.Load.AvgOutputTokens = 4
	out = optimize(t, in)
	near(t, "ITLAverage (K = 4)", out.ITLAverage, 50, 0)
	near(t, "TTFTAverage", out.TTFTAverage, 100, 0)
	near(t, "MaxRatePerReplica", out.MaxRatePerReplica, 299.7, 1e-9)

	in.SLO.TPOT = 40
	_, err := Optimize(in)
	want := "no accelerator profile can be used: A100: SLO cannot be met: ITL of a lone request 50.00 ms exceeds slo-tpot 40.00 ms"
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant    %s", err, want)
	}

	in.SLO = SLO{TPOT: 60, TTFT: 90}
	_, err = Optimize(in)
	want = "no accelerator profile can be used: A100: SLO cannot be met: prefill of a 16-token prompt takes 100.00 ms (alpha 20 + beta 5 × 16 tokens), more than slo-ttft 90.00 ms"
	if err == nil || err.Error() != want {
		t.Errorf("error = %v\nwant    %s", err, want)
	}
}

func TestOptimizeRejectsBadInputTokens(t *testing.T) {
	_, err := Optimize(OptimizeInput{
		Load:      Load{ArrivalRate: 300, AvgOutputTokens: 4, AvgInputTokens: -1},
		SLO:       SLO{TPOT: 60, TTFT: 500},
		Profiles:  []Profile{a100},
		UnitCosts: costs,
	})
	if want := "average input tokens must be a finite number >= 0, got -1"; err == nil || err.Error() != want {
		t.Errorf("error = %v, want %q", err, want)
	}
}
