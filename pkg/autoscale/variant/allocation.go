package variant

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// OptimizeInput is everything Optimize needs for one variant.
type OptimizeInput struct {
	Load     Load
	SLO      SLO
	Profiles []Profile
	// UnitCosts maps accelerator name to the cost of one unit (ParseAcceleratorCosts).
	UnitCosts map[string]float64
	// CurrentAccelerator is the accelerator the variant runs on now ("" if none);
	// it wins ties, and is the only choice when KeepAccelerator is set.
	CurrentAccelerator string
	// KeepAccelerator sizes only CurrentAccelerator when it is set, as llm-d's WVA
	// always did: scaling a Deployment does not change its accelerator.
	KeepAccelerator bool
	// MinReplicas is the fewest replicas to return; 0 means 1 (llm-d's value).
	MinReplicas int
}

// Candidate is what Optimize made of one profile.
type Candidate struct {
	Acc               string
	Replicas          int
	Cost              float64
	MaxRatePerReplica float64 // requests per minute; 0 when not known (no load and no token count)
	// Skipped says why the profile cannot be chosen; empty when it can.
	Skipped string
}

// Allocation is the chosen accelerator and size of a variant.
type Allocation struct {
	Accelerator       string
	AccCount          int
	Replicas          int
	MaxBatch          int
	Cost              float64 // Replicas * AccCount * unit cost
	ITLAverage        float64 // ms, at RatePerReplica
	WaitAverage       float64 // ms, at RatePerReplica
	TTFTAverage       float64 // ms, at RatePerReplica: WaitAverage + the prefill time
	AvgBatch          float64 // average requests in service per replica, at RatePerReplica
	RatePerReplica    float64 // requests per minute
	MaxRatePerReplica float64 // requests per minute meeting the SLO; 0 when not known
	// Candidates holds one entry per input profile, in input order.
	Candidates []Candidate
}

// NoFeasibleError is returned by Optimize when no profile can be chosen.
type NoFeasibleError struct {
	// Kept is the current accelerator when KeepAccelerator limited the choice to it.
	Kept       string
	Candidates []Candidate
}

func (e *NoFeasibleError) Error() string {
	if e.Kept != "" {
		why := "no accelerator profile names it"
		for _, c := range e.Candidates {
			if c.Acc == e.Kept {
				why = c.Skipped
				break
			}
		}
		return fmt.Sprintf("current accelerator %q cannot be kept: %s", e.Kept, why)
	}
	var b strings.Builder
	b.WriteString("no accelerator profile can be used")
	for i, c := range e.Candidates {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %s", c.Acc, c.Skipped)
	}
	return b.String()
}

// Optimize sizes every profile for the load and SLO and returns the cheapest.
//
// For each profile with a unit cost and valid parameters: with load,
// replicas = max(ceil(ArrivalRate / MaxRate), MinReplicas); with no load
// (ArrivalRate 0), replicas = MinReplicas and the profile must still meet the SLO
// for a lone request (ITL(1) + Tp/K <= TPOT, Tp <= TTFT; the Tp/K term only when
// K is known). Cost = replicas * AccCount * unit cost. The lowest cost wins; equal
// costs go to CurrentAccelerator, then to the smaller accelerator name. The ITL,
// wait and TTFT averages are those of one replica at ArrivalRate / replicas (those
// of a lone request, with no wait, when there is no load).
//
// Input errors (negative or non-finite numbers, no profiles) are plain errors;
// when every profile is skipped the error is a *NoFeasibleError naming each one
// and why.
func Optimize(in OptimizeInput) (Allocation, error) {
	if err := in.validate(); err != nil {
		return Allocation{}, err
	}
	minReplicas := max(in.MinReplicas, 1)
	zeroLoad := in.Load.ArrivalRate == 0

	cands := make([]Candidate, len(in.Profiles))
	seen := make(map[string]int, len(in.Profiles))
	for i, p := range in.Profiles {
		c := &cands[i]
		c.Acc = p.Acc
		if first, dup := seen[p.Acc]; dup {
			c.Skipped = fmt.Sprintf("duplicate profile for the accelerator (profile %d is used)", first)
			continue
		}
		seen[p.Acc] = i
		if err := p.validate(); err != nil {
			c.Skipped = "invalid profile: " + err.Error()
			continue
		}
		unit, ok := in.UnitCosts[p.Acc]
		if !ok {
			c.Skipped = "no entry in the accelerator cost ConfigMap"
			continue
		}
		if !finiteNonNeg(unit) {
			c.Skipped = fmt.Sprintf("unit cost must be a finite number >= 0, got %v", unit)
			continue
		}
		if in.Load.AvgOutputTokens > 0 {
			rate, err := MaxRate(p, in.Load.Request(), in.SLO)
			if err != nil && !zeroLoad {
				c.Skipped = err.Error()
				continue
			}
			c.MaxRatePerReplica = rate // 0 on error
		}
		if zeroLoad {
			if why := prefillTooLong(p, in.Load.AvgInputTokens, in.SLO); why != "" {
				c.Skipped = fmt.Sprintf("%v: %s", ErrInfeasible, why)
				continue
			}
			if itl := lone(p, in.Load.Request()).ITLAverage; in.SLO.TPOT > 0 && itl > in.SLO.TPOT*(1+sloSlack) {
				c.Skipped = fmt.Sprintf("%v: ITL of a lone request %.2f ms exceeds slo-tpot %.2f ms", ErrInfeasible, itl, in.SLO.TPOT)
				continue
			}
			c.Replicas = minReplicas
		} else {
			n := math.Ceil(in.Load.ArrivalRate / c.MaxRatePerReplica)
			if n > math.MaxInt32 {
				c.Skipped = fmt.Sprintf("the load needs more than %d replicas", math.MaxInt32)
				continue
			}
			c.Replicas = max(int(n), minReplicas)
		}
		c.Cost = float64(c.Replicas*p.AccCount) * unit
	}

	best := -1
	if in.KeepAccelerator && in.CurrentAccelerator != "" {
		if i, ok := seen[in.CurrentAccelerator]; ok && cands[i].Skipped == "" {
			best = i
		} else {
			return Allocation{}, &NoFeasibleError{Kept: in.CurrentAccelerator, Candidates: cands}
		}
	} else {
		for i := range cands {
			if cands[i].Skipped == "" && (best < 0 || in.better(cands[i], cands[best])) {
				best = i
			}
		}
		if best < 0 {
			return Allocation{}, &NoFeasibleError{Candidates: cands}
		}
	}

	p, c := in.Profiles[best], cands[best]
	alone := lone(p, in.Load.Request())
	out := Allocation{
		Accelerator:       p.Acc,
		AccCount:          p.AccCount,
		Replicas:          c.Replicas,
		MaxBatch:          p.MaxBatchSize,
		Cost:              c.Cost,
		ITLAverage:        alone.ITLAverage,
		TTFTAverage:       alone.TTFTAverage,
		MaxRatePerReplica: c.MaxRatePerReplica,
		Candidates:        cands,
	}
	if !zeroLoad {
		out.RatePerReplica = in.Load.ArrivalRate / float64(c.Replicas)
		m := newQueue(p, in.Load.Request()).metrics(out.RatePerReplica / msPerMinute)
		out.ITLAverage, out.WaitAverage, out.TTFTAverage, out.AvgBatch = m.ITLAverage, m.WaitAverage, m.TTFTAverage, m.AvgBatch
	}
	return out, nil
}

// better orders candidates: lower cost, then the current accelerator, then name.
func (in OptimizeInput) better(a, b Candidate) bool {
	if a.Cost != b.Cost {
		return a.Cost < b.Cost
	}
	if (a.Acc == in.CurrentAccelerator) != (b.Acc == in.CurrentAccelerator) {
		return a.Acc == in.CurrentAccelerator
	}
	return a.Acc < b.Acc
}

func (in OptimizeInput) validate() error {
	if len(in.Profiles) == 0 {
		return errors.New("no accelerator profiles")
	}
	if !finiteNonNeg(in.Load.ArrivalRate) {
		return fmt.Errorf("arrival rate must be a finite number >= 0, got %v", in.Load.ArrivalRate)
	}
	if !finiteNonNeg(in.Load.AvgOutputTokens) {
		return fmt.Errorf("average output tokens must be a finite number >= 0, got %v", in.Load.AvgOutputTokens)
	}
	if !finiteNonNeg(in.Load.AvgInputTokens) {
		return fmt.Errorf("average input tokens must be a finite number >= 0, got %v", in.Load.AvgInputTokens)
	}
	if in.Load.ArrivalRate > 0 && in.Load.AvgOutputTokens == 0 {
		return fmt.Errorf("average output tokens is 0 with an arrival rate of %.2f req/min: the load cannot be sized", in.Load.ArrivalRate)
	}
	if err := in.SLO.validate(); err != nil {
		return err
	}
	if in.MinReplicas < 0 {
		return fmt.Errorf("minReplicas must be >= 0, got %d", in.MinReplicas)
	}
	return nil
}
