package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"

	"github.com/berth-sh/berth/pkg/autoscale"
	"github.com/berth-sh/berth/pkg/autoscale/podmetrics"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

// runConfig is what every run of the benchmark shares.
type runConfig struct {
	timeScale      float64
	coldStart      time.Duration // simulated
	sync           time.Duration // simulated sync period of both autoscalers
	berthSync      time.Duration // Berth's, when different
	requestTimeout time.Duration // simulated; a request not done by then fails
	ecfg           engine.Config
	sc             scalerConfig
	policy         autoscale.Policy
	slo            time.Duration // TTFT
	port           int
	verbose        bool
	// hpa is the HorizontalPodAutoscaler the HPA controller gets: Berth's policy's metric,
	// target, bounds and behavior, in real seconds.
	hpa autoscalingv2.HorizontalPodAutoscalerSpec
	// tolerance is both autoscalers' (Berth's policy's; the HPA controller's argument).
	tolerance float64
}

// Names of the two autoscalers.
const (
	nameBerth = "berth"
	// nameHPA is kube-controller-manager's HorizontalPodAutoscaler controller, the peer.
	nameHPA = "hpa"
	// nameModel is the bench's own model of the HPA algorithm (scalers.go), kept as a
	// reference beside the real controller; it is not the peer and not in the ratios.
	nameModel  = "hpa-model"
	nameFixed  = "fixed"  // no autoscaler: min replicas throughout (-calibrate, -static)
	nameStatic = "static" // -static's replay
)

// decision is one sync of an autoscaler.
type decision struct {
	at               time.Duration
	current, desired int32
	sample           autoscale.Sample
	why              string
	readErr          string
}

// lateAfter is how late (simulated) the load generator may send a request before the
// report counts it as late. TTFT is timed from the actual send, so lateness is not in it.
const lateAfter = 500 * time.Millisecond

// outcome is what one autoscaler's replay of the trace produced.
type outcome struct {
	name      string
	length    time.Duration
	ttft      []time.Duration // per request of the trace, simulated; -1: failed
	firstErr  error
	replicas  []replica
	decisions []decision
	cpuCores  float64       // process CPU over the replay, in cores
	maxLag    time.Duration // worst lateness of the load generator, simulated
	late      int           // requests sent more than lateAfter after their due time
	load      []engineLoad  // the engines' state, once per simulated second
}

// engineLoad is the ready engines' state at one moment.
type engineLoad struct {
	ready, running, waiting int
}

// replay runs the trace once against fresh replicas scaled by the named autoscaler: one
// warm replica at the start, the autoscaler deciding every sync period from a read of the
// metric over the active replicas, every request sent at its due time to the replica the
// load balancer picks, and timed from its send to its first content chunk. After the trace
// the autoscaler stops and the requests still in flight finish (or time out).
//
// Every autoscaler acts on the replay's Deployment through its scale subresource, and the
// fleet follows spec.replicas (cl nil: no autoscaler, for -calibrate and -static).
func replay(ctx context.Context, rc runConfig, cl *cluster, tr *trace, name string, subnet int) (*outcome, error) {
	ecfg := rc.ecfg
	ecfg.TimeScale = rc.timeScale
	ecfg.Model = modelName
	length := tr.cfg.length
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // the autoscalers' simulated wall clock
	var sc scaler
	switch name {
	case nameBerth:
		sc = newBerthScaler(rc.sc, rc.policy, epoch)
	case nameModel:
		sc = newHPAScaler(rc.sc, epoch, rc.sc.min)
	case nameHPA:
	case nameFixed:
	default:
		return nil, fmt.Errorf("unknown autoscaler %q", name)
	}
	if name != nameFixed && cl == nil {
		return nil, fmt.Errorf("%s needs the control plane", name)
	}
	cpu0 := cpuTime()
	clk := clock{start: time.Now(), scale: rc.timeScale}
	f := newFleet(clk, ecfg, rc.coldStart, rc.port, subnet)
	o := &outcome{name: name, length: length, ttft: make([]time.Duration, len(tr.reqs))}
	actx, stopScaler := context.WithCancel(ctx)
	defer stopScaler()
	var tgt *target
	var decMu sync.Mutex
	followed := true // the follower may still record decisions
	if name != nameFixed {
		var err error
		if tgt, err = cl.newTarget(ctx, fmt.Sprintf("replay-%d", subnet), rc.sc.min); err != nil {
			return nil, err
		}
		defer tgt.close()
		f.mirror = tgt
		// The HPA's decisions are the changes it writes; Berth's driver records its own.
		err = tgt.follow(actx, f, func(from, to int32) {
			if name != nameHPA {
				return
			}
			decMu.Lock()
			if followed {
				o.decisions = append(o.decisions, decision{at: clk.now(), current: from, desired: to, why: "HorizontalPodAutoscaler"})
			}
			decMu.Unlock()
			if rc.verbose {
				progress("  %s %s: %d → %d replicas", name, clockText(clk.now()), from, to)
			}
		})
		if err != nil {
			return nil, err
		}
	}
	f.scaleTo(int(rc.sc.min), true)
	if f.startErr != nil {
		f.close()
		return nil, f.startErr
	}

	scalerDone := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		for k := 1; clk.sleepUntil(actx, time.Duration(k)*time.Second); k++ {
			o.load = append(o.load, f.load())
		}
	}()
	var peer *hpaPeer
	if name == nameHPA {
		reader := podmetrics.NewReader(2 * time.Second)
		defer reader.Close()
		mc := &gaugeMetrics{f: f, reader: reader, port: int32(rc.port), window: rc.sync}
		var err error
		if peer, err = cl.startHPA(actx, tgt, rc.hpa, mc, clk.real(rc.sync), rc.tolerance); err != nil {
			f.close()
			return nil, err
		}
	}
	go func() {
		defer close(scalerDone)
		if sc == nil {
			return
		}
		reader := podmetrics.NewReader(2 * time.Second)
		defer reader.Close()
		names := []string{rc.sc.metric}
		every := rc.sync
		if name == nameBerth {
			every = rc.berthSync
		}
		for k := 1; ; k++ {
			if !clk.sleepUntil(actx, time.Duration(k)*every) {
				return
			}
			now := clk.now()
			// The current replicas are the scale subresource's, as berth-controller reads them.
			scale, err := tgt.getScale(actx)
			if err != nil {
				if actx.Err() != nil {
					return
				}
				decMu.Lock()
				o.decisions = append(o.decisions, decision{at: now, readErr: "scale: " + err.Error()})
				decMu.Unlock()
				continue
			}
			pods := f.pods()
			res := reader.Read(actx, pods, podmetrics.Endpoint{Port: int32(rc.port), Path: "/metrics"}, names, epoch.Add(now))
			if actx.Err() != nil {
				return
			}
			s := res.Samples[rc.sc.metric]
			current := scale.Spec.Replicas
			desired, why := sc.decide(epoch.Add(now), current, s)
			d := decision{at: now, current: current, desired: desired, sample: s, why: why}
			if len(res.Errors) > 0 {
				d.readErr = res.Errors[0]
			}
			decMu.Lock()
			o.decisions = append(o.decisions, d)
			decMu.Unlock()
			if rc.verbose {
				progress("  %s %s: %d replicas, %s %.1f over %d pods (%d missing) → %d (%s)", name, clockText(now), current,
					rc.sc.metric, s.Average(), s.Reported, s.Missing, desired, why)
			}
			if desired != current {
				if err := tgt.setScale(actx, scale, desired); err != nil && actx.Err() == nil {
					decMu.Lock()
					o.decisions = append(o.decisions, decision{at: now, readErr: "scale: " + err.Error()})
					decMu.Unlock()
				}
			}
		}
	}()

	hc := newClient()
	defer hc.CloseIdleConnections()
	var wg sync.WaitGroup
	var errMu sync.Mutex
	for i, r := range tr.reqs {
		if !clk.sleepUntil(ctx, r.at) {
			break
		}
		due := clk.at(r.at)
		lag := time.Duration(float64(time.Since(due)) / rc.timeScale)
		o.maxLag = max(o.maxLag, lag)
		if lag > lateAfter {
			o.late++
		}
		rep := f.pick()
		if rep == nil {
			o.ttft[i] = -1
			errMu.Lock()
			if o.firstErr == nil {
				o.firstErr = errNoReplica
			}
			errMu.Unlock()
			continue
		}
		wg.Go(func() {
			defer f.done(rep)
			rctx, cancel := context.WithDeadline(ctx, clk.at(r.at+rc.requestTimeout))
			defer cancel()
			d, err := send(rctx, hc, rep.addr(rc.port), body(i, r), time.Now())
			if err != nil {
				if errors.Is(err, context.DeadlineExceeded) {
					err = fmt.Errorf("no answer within %s (simulated): %w", rc.requestTimeout, err)
				}
				o.ttft[i] = -1
				errMu.Lock()
				if o.firstErr == nil {
					o.firstErr = fmt.Errorf("request %d to replica %d: %w", i, rep.n, err)
				}
				errMu.Unlock()
				return
			}
			o.ttft[i] = time.Duration(float64(d) / rc.timeScale)
		})
	}
	clk.sleepUntil(ctx, length)
	if peer != nil {
		peer.stop()
	}
	stopScaler()
	decMu.Lock()
	followed = false
	decMu.Unlock()
	<-scalerDone
	<-samplerDone
	wg.Wait()
	f.close()
	o.replicas = f.snapshot()
	wall := time.Since(clk.start)
	o.cpuCores = (cpuTime() - cpu0).Seconds() / wall.Seconds()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return o, f.startErr
}

// addr is where r's engine listens.
func (r *replica) addr(port int) string { return fmt.Sprintf("%s:%d", r.ip, port) }

// cpuTime is the process's user + system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
