package variant

import (
	"errors"
	"strings"
	"testing"
)

// Two single-request accelerators, K = 4 output tokens per request:
//
//	A100: ITL = 20 + 5*1 = 25 ms → rate 1/(4*25) req/ms = 600 req/min; max 0.999*600 = 599.4
//	G2:   ITL = 45 + 5*1 = 50 ms → rate 1/(4*50) req/ms = 300 req/min; max 0.999*300 = 299.7
//
// slo-ttft 100000 ms never binds: even at 0.999 of the rate the M/M/1/10 wait is under
// 5 services (< 1000 ms on G2), times ln(20) < 3000 ms.
var (
	a100  = Profile{Acc: "A100", AccCount: 1, Alpha: 20, Beta: 5, MaxBatchSize: 1}
	g2    = Profile{Acc: "G2", AccCount: 1, Alpha: 45, Beta: 5, MaxBatchSize: 1}
	costs = map[string]float64{"A100": 40, "G2": 15}
)

func optimize(t *testing.T, in OptimizeInput) Allocation {
	t.Helper()
	out, err := Optimize(in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// G2 needs 2 replicas (ceil(300/299.7) = 2) for 2*15 = 30, A100 one (ceil(300/599.4) = 1) for
// 40: the cheaper total wins although it needs more replicas. Each G2 replica then gets
// 150 req/min = 1/400 req/ms, rho = 1/2 of its 300 req/min, the M/M/1/10 case of
// TestEvaluateSingleServerByHand with the service time doubled (200 ms):
//
//	ITL = 200/4 = 50 ms; W = (1013/2047)/(lambda*2046/2047) = 1013*400/2046 ≈ 198.044966 ms;
//	average batch = 1 - p0 = 1023/2047.
func TestOptimizeCheaperAcceleratorWithMoreReplicas(t *testing.T) {
	out := optimize(t, OptimizeInput{
		Load:      Load{ArrivalRate: 300, AvgOutputTokens: 4},
		SLO:       SLO{TPOT: 60, TTFT: 100000},
		Profiles:  []Profile{a100, g2},
		UnitCosts: costs,
	})
	if out.Accelerator != "G2" || out.Replicas != 2 || out.MaxBatch != 1 || out.AccCount != 1 {
		t.Fatalf("got %s x%d (maxBatch %d), want G2 x2 (maxBatch 1)", out.Accelerator, out.Replicas, out.MaxBatch)
	}
	near(t, "Cost", out.Cost, 30, 0)
	near(t, "RatePerReplica", out.RatePerReplica, 150, 1e-12)
	near(t, "MaxRatePerReplica", out.MaxRatePerReplica, 299.7, 1e-9)
	near(t, "ITLAverage", out.ITLAverage, 50, 1e-9)
	near(t, "WaitAverage", out.WaitAverage, 1013.0*400/2046, 1e-6)
	near(t, "AvgBatch", out.AvgBatch, 1023.0/2047, 1e-12)
	want := []Candidate{
		{Acc: "A100", Replicas: 1, Cost: 40, MaxRatePerReplica: out.Candidates[0].MaxRatePerReplica},
		{Acc: "G2", Replicas: 2, Cost: 30, MaxRatePerReplica: out.Candidates[1].MaxRatePerReplica},
	}
	if len(out.Candidates) != 2 || out.Candidates[0] != want[0] || out.Candidates[1] != want[1] {
		t.Errorf("candidates = %+v, want %+v", out.Candidates, want)
	}
	near(t, "A100 max rate", out.Candidates[0].MaxRatePerReplica, 599.4, 1e-9)
}

// slo-tpot 30 ms: G2's ITL is 50 ms at any load, so the dearer A100 is chosen: one replica at
// 300 req/min, the case of TestEvaluateSingleServerByHand: ITL 25 ms, W = 202600/2046 ms.
func TestOptimizeDearerWhenCheapCannotMeetSLO(t *testing.T) {
	out := optimize(t, OptimizeInput{
		Load:      Load{ArrivalRate: 300, AvgOutputTokens: 4},
		SLO:       SLO{TPOT: 30, TTFT: 100000},
		Profiles:  []Profile{g2, a100},
		UnitCosts: costs,
	})
	if out.Accelerator != "A100" || out.Replicas != 1 {
		t.Fatalf("got %s x%d, want A100 x1", out.Accelerator, out.Replicas)
	}
	near(t, "Cost", out.Cost, 40, 0)
	near(t, "ITLAverage", out.ITLAverage, 25, 1e-9)
	near(t, "WaitAverage", out.WaitAverage, 202600.0/2046, 1e-6)
	// G2: bottom of its range is 0.001*300 = 0.30 req/min.
	wantSkip := "SLO cannot be met: average ITL 50.00 ms exceeds slo-tpot 30.00 ms even at minimal load (0.30 req/min)"
	if got := out.Candidates[0].Skipped; got != wantSkip {
		t.Errorf("G2 skipped = %q, want %q", got, wantSkip)
	}
}

func TestOptimizeNoProfileMeetsSLO(t *testing.T) {
	_, err := Optimize(OptimizeInput{
		Load:      Load{ArrivalRate: 300, AvgOutputTokens: 4},
		SLO:       SLO{TPOT: 20, TTFT: 100000},
		Profiles:  []Profile{a100, g2, {Acc: "H100", AccCount: 1, Alpha: 1, Beta: 1, MaxBatchSize: 8}},
		UnitCosts: costs,
	})
	want := "no accelerator profile can be used: " +
		"A100: SLO cannot be met: average ITL 25.00 ms exceeds slo-tpot 20.00 ms even at minimal load (0.60 req/min); " +
		"G2: SLO cannot be met: average ITL 50.00 ms exceeds slo-tpot 20.00 ms even at minimal load (0.30 req/min); " +
		"H100: no entry in the accelerator cost ConfigMap"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant    %s", err, want)
	}
	var nf *NoFeasibleError
	if !errors.As(err, &nf) || len(nf.Candidates) != 3 {
		t.Errorf("error is not a *NoFeasibleError with 3 candidates: %#v", err)
	}
}

func TestOptimizeSkipsBadProfiles(t *testing.T) {
	out := optimize(t, OptimizeInput{
		Load: Load{ArrivalRate: 300, AvgOutputTokens: 4},
		SLO:  SLO{TPOT: 60, TTFT: 100000},
		Profiles: []Profile{
			{Acc: "H100", AccCount: 1, Alpha: 1, Beta: 1, MaxBatchSize: 8}, // no cost
			{Acc: "G2", AccCount: 1, Alpha: 45, Beta: 5},                   // maxBatchSize 0
			a100,
			a100, // duplicate
		},
		UnitCosts: costs,
	})
	if out.Accelerator != "A100" || out.Replicas != 1 {
		t.Fatalf("got %s x%d, want A100 x1", out.Accelerator, out.Replicas)
	}
	for i, want := range []string{
		"no entry in the accelerator cost ConfigMap",
		"invalid profile: maxBatchSize must be at least 1, got 0",
		"",
		"duplicate profile for the accelerator (profile 2 is used)",
	} {
		if got := out.Candidates[i].Skipped; got != want {
			t.Errorf("candidate %d skipped = %q, want %q", i, got, want)
		}
	}
}

// A100 alone, max 599.4 req/min per replica: replicas = ceil(rate/599.4), not rounded.
func TestOptimizeReplicasCeil(t *testing.T) {
	for _, tc := range []struct {
		rate     float64
		replicas int
	}{
		{1, 1},    // 1/599.4 = 0.0017 → 1
		{599, 1},  // 599/599.4 = 0.9993 → 1
		{600, 2},  // 600/599.4 = 1.0010 → 2
		{1198, 2}, // 1198/599.4 = 1.9987 → 2
		{1199, 3}, // 1199/599.4 = 2.0003 → 3 (rounding would give 2)
		{2000, 4}, // 2000/599.4 = 3.3367 → 4 (rounding would give 3)
	} {
		two := a100
		two.AccCount = 2
		out := optimize(t, OptimizeInput{
			Load:      Load{ArrivalRate: tc.rate, AvgOutputTokens: 4},
			SLO:       SLO{TPOT: 25, TTFT: 100000},
			Profiles:  []Profile{two},
			UnitCosts: costs,
		})
		if out.Replicas != tc.replicas {
			t.Errorf("rate %v: replicas %d, want %d", tc.rate, out.Replicas, tc.replicas)
		}
		// cost = replicas * accCount 2 * 40
		near(t, "Cost", out.Cost, float64(tc.replicas*2*40), 0)
		near(t, "RatePerReplica", out.RatePerReplica, tc.rate/float64(tc.replicas), 1e-12)
	}
}

func TestOptimizeZeroLoad(t *testing.T) {
	// No traffic: llm-d's minimum of 1 replica on the cheapest accelerator, G2 (15 < 40);
	// ITL of a lone request 45+5 = 50 ms, no wait, and no max rate without a token count.
	out := optimize(t, OptimizeInput{
		SLO:       SLO{TPOT: 60, TTFT: 500},
		Profiles:  []Profile{a100, g2},
		UnitCosts: costs,
	})
	if out.Accelerator != "G2" || out.Replicas != 1 {
		t.Fatalf("got %s x%d, want G2 x1", out.Accelerator, out.Replicas)
	}
	near(t, "Cost", out.Cost, 15, 0)
	near(t, "ITLAverage", out.ITLAverage, 50, 0)
	near(t, "WaitAverage", out.WaitAverage, 0, 0)
	near(t, "RatePerReplica", out.RatePerReplica, 0, 0)
	near(t, "MaxRatePerReplica", out.MaxRatePerReplica, 0, 0)

	// With a token count the max rate is known (0.999*300 = 299.7); MinReplicas 3 → 3*15 = 45.
	out = optimize(t, OptimizeInput{
		Load:        Load{AvgOutputTokens: 4},
		SLO:         SLO{TPOT: 60, TTFT: 100000},
		Profiles:    []Profile{a100, g2},
		UnitCosts:   costs,
		MinReplicas: 3,
	})
	if out.Accelerator != "G2" || out.Replicas != 3 {
		t.Fatalf("got %s x%d, want G2 x3", out.Accelerator, out.Replicas)
	}
	near(t, "Cost", out.Cost, 45, 0)
	near(t, "MaxRatePerReplica", out.MaxRatePerReplica, 299.7, 1e-9)

	// slo-tpot 30: a lone request on G2 already sees 50 ms, so A100 (25 ms) is chosen.
	out = optimize(t, OptimizeInput{
		SLO:       SLO{TPOT: 30, TTFT: 500},
		Profiles:  []Profile{a100, g2},
		UnitCosts: costs,
	})
	if out.Accelerator != "A100" || out.Replicas != 1 || out.ITLAverage != 25 {
		t.Fatalf("got %s x%d ITL %v, want A100 x1 ITL 25", out.Accelerator, out.Replicas, out.ITLAverage)
	}
	if want := "SLO cannot be met: ITL of a lone request 50.00 ms exceeds slo-tpot 30.00 ms"; out.Candidates[1].Skipped != want {
		t.Errorf("G2 skipped = %q, want %q", out.Candidates[1].Skipped, want)
	}
}

// MinReplicas also floors a loaded variant: 300 req/min needs A100 x1 (40) or G2 x2 (30);
// with at least 3 replicas it is A100 x3 = 120 or G2 x3 = 45, each G2 replica at 100 req/min.
func TestOptimizeMinReplicasWithLoad(t *testing.T) {
	out := optimize(t, OptimizeInput{
		Load:        Load{ArrivalRate: 300, AvgOutputTokens: 4},
		SLO:         SLO{TPOT: 60, TTFT: 100000},
		Profiles:    []Profile{a100, g2},
		UnitCosts:   costs,
		MinReplicas: 3,
	})
	if out.Accelerator != "G2" || out.Replicas != 3 {
		t.Fatalf("got %s x%d, want G2 x3", out.Accelerator, out.Replicas)
	}
	near(t, "Cost", out.Cost, 45, 0)
	near(t, "RatePerReplica", out.RatePerReplica, 100, 1e-12)
}

func TestOptimizeTies(t *testing.T) {
	// B is A100's twin at the same unit cost: both cost 40 for one replica.
	b := a100
	b.Acc = "B"
	in := OptimizeInput{
		Load:      Load{ArrivalRate: 300, AvgOutputTokens: 4},
		SLO:       SLO{TPOT: 30, TTFT: 100000},
		Profiles:  []Profile{b, a100},
		UnitCosts: map[string]float64{"A100": 40, "B": 40},
	}
	if out := optimize(t, in); out.Accelerator != "A100" { // no current: smaller name
		t.Errorf("no current accelerator: got %s, want A100", out.Accelerator)
	}
	in.CurrentAccelerator = "B"
	if out := optimize(t, in); out.Accelerator != "B" { // current wins the tie
		t.Errorf("current B: got %s, want B", out.Accelerator)
	}
}

func TestOptimizeKeepAccelerator(t *testing.T) {
	in := OptimizeInput{
		Load:               Load{ArrivalRate: 300, AvgOutputTokens: 4},
		SLO:                SLO{TPOT: 60, TTFT: 100000},
		Profiles:           []Profile{a100, g2},
		UnitCosts:          costs,
		CurrentAccelerator: "A100",
		KeepAccelerator:    true,
	}
	// G2 x2 would cost 30, but the variant stays on A100: 1 replica, 40.
	if out := optimize(t, in); out.Accelerator != "A100" || out.Replicas != 1 || out.Cost != 40 {
		t.Errorf("got %s x%d cost %v, want A100 x1 cost 40", out.Accelerator, out.Replicas, out.Cost)
	}

	in.CurrentAccelerator, in.SLO.TPOT = "G2", 30
	_, err := Optimize(in)
	want := `current accelerator "G2" cannot be kept: SLO cannot be met: average ITL 50.00 ms exceeds slo-tpot 30.00 ms even at minimal load (0.30 req/min)`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %q", err, want)
	}

	in.CurrentAccelerator = "H100"
	_, err = Optimize(in)
	want = `current accelerator "H100" cannot be kept: no accelerator profile names it`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %q", err, want)
	}
}

func TestOptimizeInputErrors(t *testing.T) {
	base := OptimizeInput{
		Load:      Load{ArrivalRate: 300, AvgOutputTokens: 4},
		SLO:       SLO{TPOT: 60, TTFT: 500},
		Profiles:  []Profile{a100},
		UnitCosts: costs,
	}
	for _, tc := range []struct {
		edit func(*OptimizeInput)
		want string
	}{
		{func(in *OptimizeInput) { in.Profiles = nil }, "no accelerator profiles"},
		{func(in *OptimizeInput) { in.Load.ArrivalRate = -1 }, "arrival rate must be a finite number >= 0, got -1"},
		{func(in *OptimizeInput) { in.Load.AvgOutputTokens = 0 }, "average output tokens is 0 with an arrival rate of 300.00 req/min: the load cannot be sized"},
		{func(in *OptimizeInput) { in.SLO.TTFT = -5 }, "slo-ttft must be a finite number >= 0, got -5"},
		{func(in *OptimizeInput) { in.MinReplicas = -1 }, "minReplicas must be >= 0, got -1"},
	} {
		in := base
		tc.edit(&in)
		_, err := Optimize(in)
		if err == nil || err.Error() != tc.want {
			t.Errorf("error = %v, want %q", err, tc.want)
		}
		var nf *NoFeasibleError
		if errors.As(err, &nf) || (err != nil && strings.Contains(err.Error(), "profile can be used")) {
			t.Errorf("input error reported as infeasible: %v", err)
		}
	}
}
