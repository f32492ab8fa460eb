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
	// of a batch, i.e. the inter-token latency each request in it sees. A prefill
	// pass of a P-token prompt takes Alpha + Beta*P (PrefillTime).
	Alpha, Beta  float64
	MaxBatchSize int // most requests served at once by one replica
}

// ITL is the decode step time in milliseconds for a batch of the given size.
func (p Profile) ITL(batch float64) float64 { return p.Alpha + p.Beta*batch }

// PrefillTime is the time in milliseconds of the forward pass that prefills a
// prompt of inputTokens tokens: Alpha + Beta*inputTokens, a pass's time being
// linear in the tokens it processes (see the package documentation). An input of
// 0 tokens means the prompt length is unknown and gives 0: no prefill is
// modelled, as in llm-d's version of this API.
func (p Profile) PrefillTime(inputTokens float64) float64 {
	if inputTokens == 0 {
		return 0
	}
	return p.Alpha + p.Beta*inputTokens
}

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
	// AvgInputTokens is prompt tokens per request, >= 0; 0 means unknown, and then
	// no prefill is modelled (llm-d's model).
	AvgInputTokens float64
}

// Request returns the average request of the load.
func (l Load) Request() Request {
	return Request{InputTokens: l.AvgInputTokens, OutputTokens: l.AvgOutputTokens}
}

// Request is the average request served: its prompt and output lengths in tokens.
type Request struct {
	// InputTokens is the prompt length, >= 0; 0 means unknown (no prefill modelled).
	InputTokens float64
	// OutputTokens is the output length K, > 0: the decode steps a request needs.
	OutputTokens float64
}

func (r Request) validate() error {
	if !finiteNonNeg(r.InputTokens) {
		return fmt.Errorf("average input tokens must be a finite number >= 0, got %v", r.InputTokens)
	}
	if !finitePos(r.OutputTokens) {
		return fmt.Errorf("average output tokens must be a finite number > 0, got %v", r.OutputTokens)
	}
	return nil
}

// SLO is one model's targets in a service class, in milliseconds; 0 means no target.
type SLO struct {
	TPOT float64 // slo-tpot: limit on the average inter-token latency
	TTFT float64 // slo-ttft: limit on WaitMargin * the average queueing wait + the prefill time
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
	ITLAverage  float64 // ms, average inter-token latency (average service time / output tokens)
	WaitAverage float64 // ms, average queueing wait before joining the batch
	TTFTAverage float64 // ms, average time to first token: WaitAverage + the prefill time
	AvgBatch    float64 // average number of requests in service (concurrency)
	AvgInSystem float64 // average number of requests in service or waiting
	Busy        float64 // probability the replica holds at least one request
	Full        float64 // probability an arrival finds the replica full and is lost
}

// Evaluate solves the queue of one replica of p at ratePerMinute requests per
// minute, each request like r. Any rate >= 0 is allowed: the queue is finite, so
// above capacity it loses requests (see Metrics.Full). At rate 0 the figures are
// those of a lone request: ITL = ITL(1) + Tp/K, no wait, TTFT = Tp.
func Evaluate(p Profile, r Request, ratePerMinute float64) (Metrics, error) {
	if err := p.validate(); err != nil {
		return Metrics{}, fmt.Errorf("profile %q: %w", p.Acc, err)
	}
	if err := r.validate(); err != nil {
		return Metrics{}, err
	}
	if !finiteNonNeg(ratePerMinute) {
		return Metrics{}, fmt.Errorf("rate must be a finite number >= 0, got %v", ratePerMinute)
	}
	return newQueue(p, r).metrics(ratePerMinute / msPerMinute), nil
}

// MaxRate is the largest arrival rate, in requests per minute, at which one
// replica of p meets slo, each request like r. It is found by bisection, is never
// above the true maximum and at most RateTolerance times the top of the searched
// range below it. The error wraps ErrInfeasible when the SLO fails even at the
// bottom of the range, or when the prefill alone takes longer than slo-ttft.
func MaxRate(p Profile, r Request, slo SLO) (float64, error) {
	if err := p.validate(); err != nil {
		return 0, fmt.Errorf("profile %q: %w", p.Acc, err)
	}
	if err := r.validate(); err != nil {
		return 0, err
	}
	if err := slo.validate(); err != nil {
		return 0, err
	}
	lambda, err := newQueue(p, r).maxRate(slo)
	return lambda * msPerMinute, err
}

// queue is one replica as a birth–death chain over 0..capacity requests.
type queue struct {
	p        Profile
	prompt   float64   // input tokens per request (0: unknown, no prefill)
	k        float64   // decode steps per request
	tp       float64   // prefill time of one prompt in ms (p.PrefillTime(prompt))
	itl      []float64 // itl[n-1] = ITL(n) in ms, n = 1..N
	mu       []float64 // mu[n-1] = completion rate in requests/ms with n in service
	capacity int       // most requests held
}

func newQueue(p Profile, r Request) queue {
	return newQueueWithCapacity(p, r, QueueToBatchRatio*p.MaxBatchSize)
}

// newQueueWithCapacity builds the chain. With n requests in service, the batch
// completes n requests in the time of K decode steps of ITL(n) and n prefill
// passes of Tp each, so mu(n) = n / (K*ITL(n) + n*Tp); with Tp = 0 this is
// llm-d's n / (K*ITL(n)).
func newQueueWithCapacity(p Profile, r Request, capacity int) queue {
	k := r.OutputTokens
	q := queue{p: p, prompt: r.InputTokens, k: k, tp: p.PrefillTime(r.InputTokens), capacity: capacity}
	for n := 1; n <= p.MaxBatchSize; n++ {
		itl := p.ITL(float64(n))
		q.itl = append(q.itl, itl)
		q.mu = append(q.mu, float64(n)/(k*itl+float64(n)*q.tp))
	}
	return q
}

func (q queue) batch(n int) int { return min(n, len(q.mu)) }

// metrics solves the chain at lambda requests/ms.
func (q queue) metrics(lambda float64) Metrics {
	if lambda == 0 { // a lone request: K steps of ITL(1) and its own prefill
		return Metrics{ITLAverage: q.itl[0] + q.tp/q.k, TTFTAverage: q.tp}
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
	wait := max(inSystem-inService, 0) / x
	return Metrics{
		Throughput:  x * msPerMinute,
		ITLAverage:  inService / x / q.k,
		WaitAverage: wait,
		TTFTAverage: wait + q.tp,
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
	if slo.TTFT > 0 && m.WaitAverage*WaitMargin+q.tp > slo.TTFT*(1+sloSlack) {
		if q.tp == 0 {
			return false, fmt.Sprintf("average wait %.2f ms times %.2f (95th-percentile margin) exceeds slo-ttft %.2f ms",
				m.WaitAverage, WaitMargin, slo.TTFT)
		}
		return false, fmt.Sprintf("average wait %.2f ms times %.2f (95th-percentile margin) plus prefill %.2f ms exceeds slo-ttft %.2f ms",
			m.WaitAverage, WaitMargin, q.tp, slo.TTFT)
	}
	return true, ""
}

// prefillTooLong says why the prefill of a prompt alone breaks slo-ttft, or ""
// when it does not.
func prefillTooLong(p Profile, prompt float64, slo SLO) string {
	if tp := p.PrefillTime(prompt); slo.TTFT > 0 && tp > slo.TTFT*(1+sloSlack) {
		return fmt.Sprintf("prefill of a %.0f-token prompt takes %.2f ms (alpha %g + beta %g × %.0f tokens), more than slo-ttft %.2f ms",
			prompt, tp, p.Alpha, p.Beta, prompt, slo.TTFT)
	}
	return ""
}

// lone is what a request sees alone on a replica: ITL(1) plus its own prefill
// spread over its K tokens (when K is known), and TTFT = Tp.
func lone(p Profile, r Request) Metrics {
	tp := p.PrefillTime(r.InputTokens)
	m := Metrics{ITLAverage: p.ITL(1), TTFTAverage: tp}
	if r.OutputTokens > 0 {
		m.ITLAverage += tp / r.OutputTokens
	}
	return m
}

// maxRate bisects for the largest lambda (requests/ms) meeting slo.
func (q queue) maxRate(slo SLO) (float64, error) {
	if why := prefillTooLong(q.p, q.prompt, slo); why != "" {
		return 0, fmt.Errorf("%w: %s", ErrInfeasible, why)
	}
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
