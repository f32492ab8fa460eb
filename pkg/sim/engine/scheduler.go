package engine

import (
	"slices"
	"sort"
	"strings"
	"time"
)

// The scheduling loop: continuous batching on a simulated clock. See the package
// documentation for the latency model; this file is its implementation.

// Real sleeps shorter than minSleep are not taken: the loop runs several simulated steps
// back to back and sleeps once they add up, so that timer granularity (~50–100µs plus
// scheduling) does not throttle throughput at small TimeScales.
const minSleep = 200 * time.Microsecond

// maxLag is how far the loop may fall behind its real-time schedule (a loaded machine,
// the race detector) before it gives up catching up and re-anchors the clock; catching
// up a long lag would release a burst of tokens at once.
const maxLag = 50 * time.Millisecond

type seqState int

const (
	stateWaiting seqState = iota // in the waiting queue
	statePrefill                 // admitted; prefill (or KV transfer) not finished
	stateDecode                  // produced its first token, decoding
	stateDone                    // finished or aborted; events closed
)

// seq is one request inside the engine. The handler fills the request part before
// submitting it; from then on the scheduler owns it, under Server.mu.
type seq struct {
	// Request, immutable after submit.
	id           string // request id, "chatcmpl-…"; NIXL's remote_request_id
	lora         string // adapter name, "" for the base model
	promptTokens int
	maxTokens    int           // after the role's cap
	hashes       []uint64      // chained hashes of the prompt's full blocks
	whole        uint64        // hash of the whole prompt
	kvBlocks     int           // KV blocks held while running
	remoteTokens int           // prompt tokens whose KV arrives by transfer (decode side)
	handoff      time.Duration // simulated time the transfer takes by distance (Config.KVTransferByTier)
	extraQueue   time.Duration // simulated time spent waiting before submit (bootstrap)
	publish      publishSpec

	// Scheduler state.
	state         seqState
	canceled      bool
	arrival       time.Duration // simulated
	readyAt       time.Duration // simulated time the KV transfer lands
	lastToken     time.Duration
	computeTokens int
	generated     int
	blockIDs      []int
	finishReason  string

	// events receives the index of every generated token and is closed when the
	// sequence ends. Its capacity is maxTokens, so the loop never blocks on it.
	events chan int
}

// publishSpec says where a prefilled prompt's KV must be published in the hub.
type publishSpec struct {
	reqKey  string // "req/<X-Request-Id>" (http connector), prefill role only
	room    string // "room/<bootstrap_room>" (mooncake), prefill role only
	nixl    bool   // kv_transfer_params.do_remote_decode: publish under nixl/<id>/<request id>
	content bool   // prefill role: feed the content-addressed (LMCache) store
}

// submit hands a request to the loop.
func (s *Server) submit(q *seq) {
	s.mu.Lock()
	s.incoming = append(s.incoming, q)
	s.stats.Requests++
	s.mu.Unlock()
	s.poke()
}

// cancel aborts a request (client gone); the loop frees it at its next step boundary.
func (s *Server) cancel(q *seq) {
	s.mu.Lock()
	q.canceled = true
	s.mu.Unlock()
	s.poke()
}

// poke wakes the loop if it sleeps idle.
func (s *Server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// loop runs the engine until Close. Simulated time (simNow) only advances by steps; real
// time follows it through an anchor: simulated instant t is due at
// anchorReal + (t-anchorSim)×TimeScale.
func (s *Server) loop() {
	defer close(s.loopDone)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var simNow time.Duration
	anchorReal, anchorSim := time.Now(), simNow

	// sleepUntil waits until simulated instant t is due in real time. It reports false
	// when the server closes or, if interruptible, when a request arrives first.
	sleepUntil := func(t time.Duration, interruptible bool) bool {
		wait := time.Until(anchorReal.Add(s.cfg.real(t - anchorSim)))
		if wait < -maxLag {
			anchorReal, anchorSim = time.Now(), t
			return true
		}
		if wait < minSleep {
			return true
		}
		timer.Reset(wait)
		var wake chan struct{}
		if interruptible {
			wake = s.wake
		}
		select {
		case <-timer.C:
			return true
		case <-wake:
			timer.Stop()
			return false
		case <-s.done:
			timer.Stop()
			return false
		}
	}

	for {
		select {
		case <-s.done:
			return
		default:
		}
		s.mu.Lock()
		s.intakeLocked(simNow)
		s.reapLocked(simNow)
		if len(s.running) == 0 && len(s.waiting) == 0 {
			s.genThroughput = 0
			s.mu.Unlock()
			// Idle: block until a request arrives; no spinning.
			select {
			case <-s.wake:
			case <-s.done:
				return
			}
			anchorReal, anchorSim = time.Now(), simNow
			continue
		}
		s.admitLocked(simNow)
		batch, prefill, nextReady := s.planLocked(simNow)
		s.mu.Unlock()

		if len(batch) == 0 {
			// Nothing to compute: every running sequence waits for its KV transfer.
			// Jump to the first landing, unless a new request arrives before.
			if nextReady < 0 {
				select { // cannot happen (see admitLocked), but never spin
				case <-s.wake:
				case <-s.done:
					return
				}
				continue
			}
			if sleepUntil(nextReady, true) {
				simNow = nextReady
			} else {
				elapsed := s.cfg.sim(time.Since(anchorReal))
				simNow = max(simNow, min(nextReady, anchorSim+elapsed))
			}
			continue
		}

		step := s.cfg.DecodeBase + s.cfg.DecodePerSeq*time.Duration(len(batch)) + prefill
		end := simNow + step
		sleepUntil(end, false)
		s.mu.Lock()
		s.applyLocked(batch, end, step)
		s.mu.Unlock()
		simNow = end
	}
}

// intakeLocked moves newly submitted requests to the waiting queue. Their arrival is the
// current step boundary, as a real engine only sees new requests between steps.
func (s *Server) intakeLocked(now time.Duration) {
	for _, q := range s.incoming {
		q.arrival = now - q.extraQueue
		q.state = stateWaiting
		s.waiting = append(s.waiting, q)
	}
	s.incoming = s.incoming[:0]
}

// reapLocked removes aborted requests from the queue and the batch, freeing their KV at
// once.
func (s *Server) reapLocked(now time.Duration) {
	drop := func(q *seq) bool {
		if q.state == stateDone {
			return true
		}
		if !q.canceled {
			return false
		}
		if q.state != stateWaiting {
			s.usedBlocks -= q.kvBlocks
		}
		s.finishLocked(q, "abort", now)
		return true
	}
	s.waiting = slices.DeleteFunc(s.waiting, drop)
	s.running = slices.DeleteFunc(s.running, drop)
}

// admitLocked admits waiting requests in FIFO order while the batch has room and the
// head of the queue fits in the free KV blocks (no overtaking, like vLLM's FCFS
// policy). Admission consults the prefix cache and starts any KV transfer.
func (s *Server) admitLocked(now time.Duration) {
	for len(s.waiting) > 0 && len(s.running) < s.cfg.MaxBatch {
		q := s.waiting[0]
		if q.kvBlocks > s.totalBlocks-s.usedBlocks {
			break // requests needing more than the whole cache are refused at the API
		}
		s.waiting = s.waiting[1:]
		s.usedBlocks += q.kvBlocks

		promptBlocks := (q.promptTokens + s.cfg.BlockSize - 1) / s.cfg.BlockSize
		q.blockIDs = make([]int, promptBlocks)
		for i := range q.blockIDs {
			q.blockIDs[i] = s.nextBlockID
			s.nextBlockID = (s.nextBlockID + 1) % s.totalBlocks
		}

		hit := s.prefix.match(q.hashes) * s.cfg.BlockSize
		s.stats.PrefixQueryTokens += int64(q.promptTokens)
		s.stats.PrefixHitTokens += int64(hit)
		if s.metrics.prefixQueries != nil {
			s.metrics.prefixQueries.Add(float64(q.promptTokens))
			s.metrics.prefixHits.Add(float64(hit))
		}
		q.computeTokens = q.promptTokens - max(hit, q.remoteTokens)
		q.readyAt = now + s.cfg.KVTransferPerToken*time.Duration(q.remoteTokens) + q.handoff
		q.state = statePrefill
		s.running = append(s.running, q)
	}
}

// planLocked picks the sequences of the next step: all decoding ones plus those whose
// prefill can run (KV transfer landed). It returns the prefill compute time of the step
// and, if some sequences still wait for a transfer, the first landing time (else -1).
func (s *Server) planLocked(now time.Duration) (batch []*seq, prefill, nextReady time.Duration) {
	nextReady = -1
	for _, q := range s.running {
		switch {
		case q.state == stateDecode:
			batch = append(batch, q)
		case q.readyAt <= now:
			batch = append(batch, q)
			prefill += s.cfg.PrefillPerToken * time.Duration(q.computeTokens)
		case nextReady < 0 || q.readyAt < nextReady:
			nextReady = q.readyAt
		}
	}
	return batch, prefill, nextReady
}

// applyLocked completes a step that ended at simulated time end: each sequence of the
// batch produces one token (its first one if it was prefilling).
func (s *Server) applyLocked(batch []*seq, end, step time.Duration) {
	produced := 0
	for _, q := range batch {
		if q.canceled || q.state == stateDone {
			continue // reaped at the next step boundary
		}
		if q.state == statePrefill {
			q.state = stateDecode
			s.prefix.insert(q.hashes)
			s.stats.PromptTokens += int64(q.promptTokens)
			s.metrics.promptTokens.Add(float64(q.promptTokens))
			s.publishLocked(q)
			s.metrics.ttft.Observe((end - q.arrival).Seconds())
		} else {
			s.metrics.itl.Observe((end - q.lastToken).Seconds())
		}
		q.lastToken = end
		q.events <- q.generated
		q.generated++
		produced++
		// Counted before the sequence can finish: its handler answers as soon as it is told,
		// and a scrape right after the answer must see every token of it.
		s.stats.GenerationTokens++
		s.metrics.genTokens.Inc()
		if q.generated >= q.maxTokens {
			s.usedBlocks -= q.kvBlocks
			s.finishLocked(q, "length", end)
		}
	}
	s.running = slices.DeleteFunc(s.running, func(q *seq) bool { return q.state == stateDone })
	s.genThroughput = float64(produced) / step.Seconds()
}

// finishLocked ends a sequence and tells its handler.
func (s *Server) finishLocked(q *seq, reason string, now time.Duration) {
	q.state = stateDone
	q.finishReason = reason
	if s.metrics.success != nil {
		s.metrics.success.WithLabelValues(reason).Inc()
		s.metrics.requestPrompt.Observe(float64(q.promptTokens))
		s.metrics.requestGeneration.Observe(float64(q.generated))
	}
	if reason != "abort" {
		s.metrics.e2e.Observe((now - q.arrival).Seconds())
	}
	close(q.events)
}

// publishLocked makes a freshly prefilled prompt's KV available to decode engines.
// It runs before the token is handed to the handler, so by the time a router sees the
// prefill response the KV is in the hub.
func (s *Server) publishLocked(q *seq) {
	p := q.publish
	if p == (publishSpec{}) {
		return
	}
	e := &kvEntry{engineID: s.cfg.ID, version: s.cfg.Version, tokens: q.promptTokens, blocks: q.hashes, whole: q.whole, location: s.cfg.Location}
	if p.nixl {
		s.hub.publish(nixlKey(s.cfg.ID, q.id), e)
	}
	if p.reqKey != "" {
		s.hub.publish(p.reqKey, e)
	}
	if p.room != "" {
		s.hub.publish(p.room, e)
	}
	if p.content {
		s.hub.putBlocks(q.hashes)
	}
}

func nixlKey(engineID, requestID string) string { return "nixl/" + engineID + "/" + requestID }

// state is a consistent snapshot for metrics and Stats.
type state struct {
	running, waiting                   int
	kvUsage                            float64
	runningLoRAs, waitingLoRAs         string
	prefixQueryTokens, prefixHitTokens int64
	genThroughput                      float64
}

func (s *Server) snapshot() state {
	s.mu.Lock()
	defer s.mu.Unlock()
	return state{
		running:           len(s.running),
		waiting:           s.waitingLocked(),
		kvUsage:           float64(s.usedBlocks) / float64(s.totalBlocks),
		runningLoRAs:      loraNames(s.running),
		waitingLoRAs:      loraNames(append(slices.Clip(s.waiting), s.incoming...)),
		prefixQueryTokens: s.stats.PrefixQueryTokens,
		prefixHitTokens:   s.stats.PrefixHitTokens,
		genThroughput:     s.genThroughput,
	}
}

// waitingLocked counts every accepted request not yet admitted, including those just
// submitted and decode requests waiting for their bootstrap room.
func (s *Server) waitingLocked() int {
	return len(s.waiting) + len(s.incoming) + s.pendingBootstrap
}

// loraNames lists the distinct adapters of seqs, sorted and comma-separated as vLLM
// renders them.
func loraNames(seqs []*seq) string {
	var names []string
	for _, q := range seqs {
		if q.lora != "" && !slices.Contains(names, q.lora) {
			names = append(names, q.lora)
		}
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}
