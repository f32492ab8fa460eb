package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/berth-sh/berth/internal/quantile"
)

// summary is one outcome's figures. Times are simulated.
type summary struct {
	name                 string
	requests             int
	served, failed       int
	p50, p90, p99        time.Duration
	violationSeconds     int
	replicaSeconds       float64
	peak                 int
	perMinute            []int // most active replicas in each minute
	violationsPerMinute  []int // violating seconds in each minute
	scaleUps, scaleDowns int
	scaleUpsInBurst      int // scale-ups decided while a burst was on
	cpuCores             float64
	maxLag               time.Duration
	late                 int
	firstErr             error
	readErrors           int    // syncs at which some replica's metrics could not be read
	firstReadErr         string // the first of them
	// Per simulated second, for the figures: replicas requested and not scaled away at its
	// start, and its arrivals' p90 TTFT in seconds (NaN: no arrivals; +Inf: one failed).
	replicasPerSecond []int
	p90PerSecond      []float64
}

// summarize computes o's figures against the TTFT SLO:
//
//   - violation seconds: simulated seconds [s, s+1) of the trace in which the p90 TTFT of
//     the requests that arrived in that second exceeds the SLO (nearest rank, so with fewer
//     than 10 arrivals it is their slowest; a failed request counts as infinitely slow);
//     seconds without arrivals do not count;
//   - replica-seconds: from the moment a replica is requested until its engine stops
//     (after draining), within the trace;
//   - peak: the most replicas requested and not scaled away at any moment.
func summarize(o *outcome, tr *trace, slo time.Duration) summary {
	s := summary{name: o.name, requests: len(tr.reqs), cpuCores: o.cpuCores, maxLag: o.maxLag, late: o.late, firstErr: o.firstErr}
	var good []time.Duration
	seconds := int(math.Ceil(o.length.Seconds()))
	bySecond := make([][]time.Duration, seconds)
	for i, r := range tr.reqs {
		t := o.ttft[i]
		if t < 0 {
			s.failed++
			t = time.Duration(math.MaxInt64)
		} else {
			s.served++
			good = append(good, t)
		}
		sec := int(r.at / time.Second)
		bySecond[sec] = append(bySecond[sec], t)
	}
	slices.Sort(good)
	s.p50, s.p90, s.p99 = quantile.NearestRank(good, 0.5), quantile.NearestRank(good, 0.9), quantile.NearestRank(good, 0.99)
	minutes := int(math.Ceil(o.length.Minutes()))
	s.violationsPerMinute = make([]int, minutes)
	s.p90PerSecond = make([]float64, seconds)
	for sec, ts := range bySecond {
		s.p90PerSecond[sec] = math.NaN()
		if len(ts) == 0 {
			continue
		}
		slices.Sort(ts)
		if q := quantile.NearestRank(ts, 0.9); q == time.Duration(math.MaxInt64) {
			s.p90PerSecond[sec] = math.Inf(1)
		} else {
			s.p90PerSecond[sec] = q.Seconds()
		}
		if quantile.NearestRank(ts, 0.9) > slo {
			s.violationSeconds++
			s.violationsPerMinute[sec/60]++
		}
	}

	clampT := func(d time.Duration) time.Duration { return min(max(d, 0), o.length) }
	type event struct {
		at    time.Duration
		delta int
	}
	var events []event
	for _, r := range o.replicas {
		end := r.removedAt
		if end < 0 {
			end = o.length
		}
		s.replicaSeconds += (clampT(end) - clampT(r.requested)).Seconds()
		events = append(events, event{max(r.requested, 0), +1})
		if r.goneAt >= 0 {
			events = append(events, event{r.goneAt, -1})
		}
	}
	sort.SliceStable(events, func(i, j int) bool {
		if events[i].at != events[j].at {
			return events[i].at < events[j].at
		}
		return events[i].delta < events[j].delta // leave before arriving at the same instant
	})
	s.replicasPerSecond = make([]int, seconds)
	{
		active, next := 0, 0
		for sec := range seconds {
			for next < len(events) && events[next].at <= time.Duration(sec)*time.Second {
				active += events[next].delta
				next++
			}
			s.replicasPerSecond[sec] = active
		}
	}
	s.perMinute = make([]int, minutes)
	active, next := 0, 0
	for m := range minutes {
		end := time.Duration(m+1) * time.Minute
		most := active
		for next < len(events) && events[next].at < end {
			active += events[next].delta
			most = max(most, active)
			next++
		}
		s.perMinute[m] = most
		s.peak = max(s.peak, most)
	}
	for _, d := range o.decisions {
		if d.readErr != "" {
			s.readErrors++
			if s.firstReadErr == "" {
				s.firstReadErr = fmt.Sprintf("%s: %s", clockText(d.at), d.readErr)
			}
		}
		switch {
		case d.desired > d.current:
			s.scaleUps++
			if tr.inBurst(d.at) {
				s.scaleUpsInBurst++
			}
		case d.desired < d.current:
			s.scaleDowns++
		}
	}
	return s
}

// digits renders small counts one character each: 0–9, then a=10, b=11, … z=35, + above.
func digits(xs []int) string {
	var b strings.Builder
	for _, x := range xs {
		switch {
		case x < 10:
			b.WriteByte(byte('0' + x))
		case x < 36:
			b.WriteByte(byte('a' + x - 10))
		default:
			b.WriteByte('+')
		}
	}
	return b.String()
}

// violationMarks renders violating seconds per minute: . none, - 1–9, + 10–29, # 30–60.
func violationMarks(xs []int) string {
	var b strings.Builder
	for _, x := range xs {
		switch {
		case x == 0:
			b.WriteByte('.')
		case x < 10:
			b.WriteByte('-')
		case x < 30:
			b.WriteByte('+')
		default:
			b.WriteByte('#')
		}
	}
	return b.String()
}

// ruler marks every fifth minute.
func ruler(minutes int) string {
	var b strings.Builder
	for m := 0; m < minutes; m++ {
		switch {
		case m%10 == 0:
			b.WriteByte('|')
		case m%5 == 0:
			b.WriteByte(':')
		default:
			b.WriteByte(' ')
		}
	}
	return b.String()
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()) }

// ratio formats a/b, "–" when b is 0.
func ratio(a, b float64) string {
	if b == 0 {
		if a == 0 {
			return "1.00"
		}
		return "∞"
	}
	return fmt.Sprintf("%.2f", a/b)
}

const tableHeader = "| autoscaler | SLO-violation s | replica-s | served | failed | TTFT p50 s | TTFT p90 s | TTFT p99 s | peak replicas | scale-ups / downs |\n" +
	"|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"

func tableRow(label string, s summary) string {
	return fmt.Sprintf("| %s | %d | %.0f | %d | %d | %s | %s | %s | %d | %d / %d |\n", label, s.violationSeconds, s.replicaSeconds,
		s.served, s.failed, secs(s.p50), secs(s.p90), secs(s.p99), s.peak, s.scaleUps, s.scaleDowns)
}

// timelines renders the load and each autoscaler's replicas and violations per minute.
func timelines(tr *trace, ss []summary) string {
	var b strings.Builder
	minutes := len(ss[0].perMinute)
	rates := tr.perMinute()
	load := make([]int, len(rates))
	for i, r := range rates {
		load[i] = int(math.Round(r))
	}
	w := 0
	for _, s := range ss {
		w = max(w, len(s.name)+len(" replicas"))
	}
	line := func(label, text string) { fmt.Fprintf(&b, "%-*s %s\n", w, label, text) }
	line("minute", ruler(minutes))
	line("requests/s", digits(load))
	for _, s := range ss {
		line(s.name+" replicas", digits(s.perMinute))
		line(s.name+" SLO", violationMarks(s.violationsPerMinute))
	}
	return b.String()
}
