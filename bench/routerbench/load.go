package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// newHTTPClient is the load generator's client: keep-alive, every connection kept idle
// (the default of 2 idle connections per host would make the generator's dialing, not
// the proxy, the thing measured), at most connsPerHost connections per host (0: no
// limit). The open loop needs the limit: without it a hiccup makes requests pile up, each
// dials a connection, and the dialing storm, not the proxy, sets the latency (wrk2 also
// holds a fixed set of connections; requests queue for one, and that wait is counted).
func newHTTPClient(connsPerHost int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxConnsPerHost:     connsPerHost,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}}
}

// statusError is a non-2xx answer.
type statusError int

func (e statusError) Error() string { return fmt.Sprintf("HTTP %d", int(e)) }

// doRequest posts body and reads the answer to its end (so the connection is reused).
func doRequest(cl *http.Client, url string, body []byte) error {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return statusError(resp.StatusCode)
	}
	return err
}

// targets hands out URLs round robin: one URL for a proxy, the engines themselves for
// the direct peer.
type targets struct {
	urls []string
	next atomic.Uint64
}

func (t *targets) pick() string {
	if len(t.urls) == 1 {
		return t.urls[0]
	}
	return t.urls[(t.next.Add(1)-1)%uint64(len(t.urls))]
}

// closedLoop runs conc clients, each sending its next request as soon as the previous one
// is answered, for warm then dur, and returns the answered requests per second during dur
// and the errors seen then.
func closedLoop(cl *http.Client, t *targets, body []byte, conc int, warm, dur time.Duration) (rps float64, errs int64, firstErr error) {
	var measuring atomic.Bool
	var ok, bad atomic.Int64
	var errOnce sync.Once
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for ctx.Err() == nil {
				err := doRequest(cl, t.pick(), body)
				if !measuring.Load() || ctx.Err() != nil {
					continue
				}
				if err != nil {
					bad.Add(1)
					errOnce.Do(func() { firstErr = err })
				} else {
					ok.Add(1)
				}
			}
		})
	}
	time.Sleep(warm)
	measuring.Store(true)
	start := time.Now()
	time.Sleep(dur)
	cancel()
	elapsed := time.Since(start)
	wg.Wait()
	return float64(ok.Load()) / elapsed.Seconds(), bad.Load(), firstErr
}

// openLoop sends requests at a fixed rate for dur, each from its own goroutine, whatever
// the answers do. Latency is counted from the moment a request was due, not from when the
// generator got round to sending it, so a generator or proxy falling behind shows up in the
// latency instead of quietly lowering the rate (coordinated omission).
func openLoop(cl *http.Client, t *targets, body []byte, rate float64, dur time.Duration) (lat []time.Duration, errs int64, firstErr error) {
	n := int(rate * dur.Seconds())
	lat = make([]time.Duration, n)
	failed := make([]bool, n)
	var errOnce sync.Once
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / rate)
	var maxLag time.Duration
	start := time.Now()
	for i := range n {
		due := start.Add(time.Duration(i) * interval)
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		if lag := time.Since(due); lag > maxLag {
			maxLag = lag
		}
		wg.Go(func() {
			err := doRequest(cl, t.pick(), body)
			lat[i] = time.Since(due)
			if err != nil {
				failed[i] = true
				errOnce.Do(func() { firstErr = err })
			}
		})
	}
	sent := time.Since(start)
	wg.Wait()
	if maxLag > 10*time.Millisecond {
		progress("  the generator fell behind its schedule by up to %s (sending took %s for %s); latency counts it", maxLag.Round(time.Millisecond), sent.Round(time.Millisecond), dur)
	}
	good := lat[:0]
	for i, l := range lat {
		if failed[i] {
			errs++
			continue
		}
		good = append(good, l)
	}
	slices.Sort(good)
	return good, errs, firstErr
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
