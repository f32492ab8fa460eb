package variant

import (
	"errors"
	"fmt"
	"math"
)

const (
	// QueueToBatchRatio bounds the requests one replica holds (in service and
	// waiting together) to QueueToBatchRatio * MaxBatchSize, as llm-d does.
	QueueToBatchRatio = 10

	// RateMargin sets the range searched for the maximum rate:
	// [RateMargin*rate(1), (1-RateMargin)*rate(MaxBatchSize)], where rate(n) is the
	// completion rate with n requests in service (llm-d's Delta).
	RateMargin = 0.001

	// WaitMargin is ln(20) = -ln(1-0.95): the 95th percentile of an exponential
	// distribution over its mean. A replica meets slo-ttft when its average wait
	// times WaitMargin is at most slo-ttft (llm-d's SLOMargin).
	WaitMargin = 2.995732273553991

	// RateTolerance is the bisection's stopping width, relative to the top of the
	// searched range: MaxRate is within RateTolerance*(1-RateMargin)*rate(N) below
	// the largest rate meeting the SLO.
	RateTolerance = 1e-9

	// sloSlack lets a computed latency exceed its target by this relative amount,
	// so that rounding (an ITL of 25.000000000000004 against slo-tpot 25) does not
	// decide a comparison that holds exactly.
	sloSlack = 1e-9

	msPerMinute = 60_000
)

// ErrInfeasible is wrapped by MaxRate when a profile cannot meet the SLO even at
// the lowest rate searched.
var ErrInfeasible = errors.New("SLO cannot be met")

// Profile is one accelerator profile of a variant (spec.modelProfile.accelerators).
type Profile struct {
	Acc      string // accelerator name, a key of the accelerator cost ConfigMap
	AccCount int    // accelerator units one replica uses
	// ITL(batch) = Alpha + Beta*batch milliseconds: the time of one decode step
	// of a batch, i.e. the inter-token latency each request in it sees.
	Alpha, Beta  float64
	MaxBatchSize int // most requests served at once by one replica
}

// ITL is the decode step time in milliseconds for a batch of the given size.
func (p Profile) ITL(batch float64) float64 { return p.Alpha + p.Beta*batch }

func (p Profile) validate() error {
	switch {
	case p.AccCount < 1:
		return fmt.Errorf("accCount must be at least 1, got %d", p.AccCount)
	case p.MaxBatchSize < 1:
		return fmt.Errorf("maxBatchSize must be at least 1, got %d", p.MaxBatchSize)
	case !finiteNonNeg(p.Alpha):
		return fmt.Errorf("alpha must be a finite number >= 0, got %v", p.Alpha)
	case !finiteNonNeg(p.Beta):
		return fmt.Errorf("beta must be a finite number >= 0, got %v", p.Beta)
	case p.Alpha+p.Beta <= 0:
		return errors.New("alpha + beta must be > 0")
	}
	return nil
}

// Load is the traffic of a whole variant (all replicas together).
type Load struct {
	ArrivalRate     float64 // requests per minute
	AvgOutputTokens float64 // output tokens per request (llm-d's avgLength)
}

// SLO is one model's targets in a service class, in milliseconds; 0 means no target.
type SLO struct {
	TPOT float64 // slo-tpot: limit on the average inter-token latency
	TTFT float64 // slo-ttft: limit on WaitMargin * the average queueing wait (no prefill term)
}

func (s SLO) validate() error {
	if !finiteNonNeg(s.TPOT) {
		return fmt.Errorf("slo-tpot must be a finite number >= 0, got %v", s.TPOT)
	}
	if !finiteNonNeg(s.TTFT) {
		return fmt.Errorf("slo-ttft must be a finite number >= 0, got %v", s.TTFT)
	}
	return nil
}

// Metrics is the steady state of one replica at a given arrival rate.
type Metrics struct {
	Throughput  float64 // requests per minute accepted (arrivals minus those lost to a full queue)
	ITLAverage  float64 // ms, average inter-token latency
	WaitAverage float64 // ms, average queueing wait before joining the batch
	AvgBatch    float64 // average number of requests in service (concurrency)
	AvgInSystem float64 // average number of requests in service or waiting
	Busy        float64 // probability the replica holds at least one request
	Full        float64 // probability an arrival finds the replica full and is lost
}

// Evaluate solves the queue of one replica of p at ratePerMinute requests per
// minute, each producing avgOutputTokens tokens. Any rate >= 0 is allowed: the
// queue is finite, so above capacity it loses requests (see Metrics.Full). At rate
// 0 the ITL is that of a lone request, ITL(1), and the wait is 0.
func Evaluate(p Profile, avgOutputTokens, ratePerMinute float64) (Metrics, error) {
	if err := p.validate(); err != nil {
		return Metrics{}, fmt.Errorf("profile %q: %w", p.Acc, err)
	}
	if !finitePos(avgOutputTokens) {
		return Metrics{}, fmt.Errorf("average output tokens must be a finite number > 0, got %v", avgOutputTokens)
	}
	if !finiteNonNeg(ratePerMinute) {
		return Metrics{}, fmt.Errorf("rate must be a finite number >= 0, got %v", ratePerMinute)
	}
	return newQueue(p, avgOutputTokens).metrics(ratePerMinute / msPerMinute), nil
}

// MaxRate is the largest arrival rate, in requests per minute, at which one
// replica of p meets slo, each request producing avgOutputTokens tokens. It is
// found by bisection, is never above the true maximum and at most RateTolerance
// times the top of the searched range below it. The error wraps ErrInfeasible
// when the SLO fails even at the bottom of the range.
func MaxRate(p Profile, avgOutputTokens float64, slo SLO) (float64, error) {
	if err := p.validate(); err != nil {
		return 0, fmt.Errorf("profile %q: %w", p.Acc, err)
	}
	if !finitePos(avgOutputTokens) {
		return 0, fmt.Errorf("average output tokens must be a finite number > 0, got %v", avgOutputTokens)
	}
	if err := slo.validate(); err != nil {
		return 0, err
	}
	lambda, err := newQueue(p, avgOutputTokens).maxRate(slo)
	return lambda * msPerMinute, err
}

// queue is one replica as a birth–death chain over 0..capacity requests.
type queue struct {
	k        float64   // decode steps per request
	itl      []float64 // itl[n-1] = ITL(n) in ms, n = 1..N
	mu       []float64 // mu[n-1] = completion rate in requests/ms with n in service
	capacity int       // most requests held
}

func newQueue(p Profile, k float64) queue {
	return newQueueWithCapacity(p, k, QueueToBatchRatio*p.MaxBatchSize)
}

func newQueueWithCapacity(p Profile, k float64, capacity int) queue {
	q := queue{k: k, capacity: capacity}
	for n := 1; n <= p.MaxBatchSize; n++ {
		itl := p.ITL(float64(n))
		q.itl = append(q.itl, itl)
		q.mu = append(q.mu, float64(n)/(k*itl))
	}
	return q
}

func (q queue) batch(n int) int { return min(n, len(q.mu)) }

// metrics solves the chain at lambda requests/ms.
func (q queue) metrics(lambda float64) Metrics {
	if lambda == 0 {
		return Metrics{ITLAverage: q.itl[0]}
	}
	// Stationary distribution: p(n) = p(n-1) * lambda / mu(n). Kept in logs and
	// scaled by the largest term so that large batches cannot overflow.
	logw := make([]float64, q.capacity+1)
	top := 0.0
	for n := 1; n <= q.capacity; n++ {
		logw[n] = logw[n-1] + math.Log(lambda) - math.Log(q.mu[q.batch(n)-1])
		top = max(top, logw[n])
	}
	var sum, inSystem, inService float64
	for n := range logw {
		w := math.Exp(logw[n] - top)
		sum += w
		inSystem += float64(n) * w
		inService += float64(q.batch(n)) * w
	}
	p0 := math.Exp(logw[0]-top) / sum
	full := math.Exp(logw[q.capacity]-top) / sum
	inSystem /= sum
	inService /= sum
	x := lambda * (1 - full) // requests/ms
	return Metrics{
		Throughput:  x * msPerMinute,
		ITLAverage:  inService / x / q.k,
		WaitAverage: max(inSystem-inService, 0) / x,
		AvgBatch:    inService,
		AvgInSystem: inSystem,
		Busy:        1 - p0,
		Full:        full,
	}
}

// meets reports whether the SLO holds at lambda requests/ms, and if not, why.
func (q queue) meets(lambda float64, slo SLO) (bool, string) {
	m := q.metrics(lambda)
	if slo.TPOT > 0 && m.ITLAverage > slo.TPOT*(1+sloSlack) {
		return false, fmt.Sprintf("average ITL %.2f ms exceeds slo-tpot %.2f ms", m.ITLAverage, slo.TPOT)
	}
	if slo.TTFT > 0 && m.WaitAverage*WaitMargin > slo.TTFT*(1+sloSlack) {
		return false, fmt.Sprintf("average wait %.2f ms times %.2f (95th-percentile margin) exceeds slo-ttft %.2f ms",
			m.WaitAverage, WaitMargin, slo.TTFT)
	}
	return true, ""
}

// maxRate bisects for the largest lambda (requests/ms) meeting slo.
func (q queue) maxRate(slo SLO) (float64, error) {
	lo := RateMargin * q.mu[0]
	hi := (1 - RateMargin) * q.mu[len(q.mu)-1]
	if ok, why := q.meets(lo, slo); !ok {
		return 0, fmt.Errorf("%w: %s even at minimal load (%.2f req/min)", ErrInfeasible, why, lo*msPerMinute)
	}
	if ok, _ := q.meets(hi, slo); ok {
		return hi, nil
	}
	width := RateTolerance * hi
	for hi-lo > width {
		mid := lo + (hi-lo)/2
		if ok, _ := q.meets(mid, slo); ok {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

func finiteNonNeg(x float64) bool { return x >= 0 && !math.IsInf(x, 1) } // NaN fails x >= 0

func finitePos(x float64) bool { return x > 0 && !math.IsInf(x, 1) }
