package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth-sh/berth/pkg/autoscale"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestHPAModelFollowsTheHPAAlgorithm(t *testing.T) {
	c := scalerConfig{metric: "m", target: 6, min: 1, max: 12}
	h := newHPAScaler(c, epoch, 1)
	at := func(s int) time.Time { return epoch.Add(time.Duration(s) * time.Second) }

	// A burst: 62 running on 1 pod asks for 11; scale-up is limited to max(+4, +100%).
	if got, why := h.decide(at(15), 1, autoscale.Sample{Sum: 62, Reported: 1}); got != 5 || why != "ScaleUpLimited" {
		t.Fatalf("burst from 1: %d (%s), want 5 (ScaleUpLimited)", got, why)
	}
	// 15 s later the 4 new pods still load (missing, counted as idle): 64/5 pods/6 → 11,
	// limited to 10 = 5 + 100%.
	if got, _ := h.decide(at(30), 5, autoscale.Sample{Sum: 64, Reported: 1, Missing: 4}); got != 10 {
		t.Fatalf("second step: %d, want 10", got)
	}
	// Within tolerance (6.5/6 = 1.08): no change.
	if got, _ := h.decide(at(45), 10, autoscale.Sample{Sum: 65, Reported: 10}); got != 10 {
		t.Fatalf("within tolerance: %d, want 10", got)
	}
	// Idle: held for 5 minutes by the highest recommendation in the window (10 at 0:45),
	// then down to the highest of the last 5 minutes (2).
	for s := 60; s <= 330; s += 15 {
		if got, _ := h.decide(at(s), 10, autoscale.Sample{Sum: 10, Reported: 10}); got != 10 {
			t.Fatalf("%ds: scaled down to %d inside the 5-minute window", s, got)
		}
	}
	if got, why := h.decide(at(345), 10, autoscale.Sample{Sum: 10, Reported: 10}); got != 2 || why != "ScaledDown" {
		t.Fatalf("after the window: %d (%s), want 2 (ScaledDown)", got, why)
	}
	// Scale-down with missing pods: they count as at target. 2 reported with 1 each, 2
	// missing: (2 + 12) / 4 / 6 = 0.58 → ceil(2.33) = 3.
	h2 := newHPAScaler(c, epoch, 4)
	if got, _ := h2.recommend(4, autoscale.Sample{Sum: 2, Reported: 2, Missing: 2}); got != 3 {
		t.Fatalf("scale-down with missing pods: %d, want 3", got)
	}
	// Scale-up with missing pods that bring the ratio into tolerance: no change.
	if got, _ := h2.recommend(4, autoscale.Sample{Sum: 20, Reported: 3, Missing: 1}); got != 4 {
		t.Fatalf("missing pods absorb the scale-up: %d, want 4", got)
	}
	// No readings: no recommendation.
	if _, ok := h2.recommend(4, autoscale.Sample{Missing: 4}); ok {
		t.Fatal("recommended without readings")
	}
}

func TestTraceIsDeterministic(t *testing.T) {
	o := defaultOptions()
	a, b := newTrace(o.traceConfig()), newTrace(o.traceConfig())
	if len(a.reqs) != len(b.reqs) || len(a.reqs) < 1000 {
		t.Fatalf("trace sizes %d and %d", len(a.reqs), len(b.reqs))
	}
	for i := range a.reqs {
		if a.reqs[i] != b.reqs[i] {
			t.Fatalf("request %d differs: %+v, %+v", i, a.reqs[i], b.reqs[i])
		}
	}
	if len(a.bursts) != o.bursts {
		t.Fatalf("%d bursts, want %d", len(a.bursts), o.bursts)
	}
	for _, x := range a.bursts {
		if x.mult < o.burstMin || x.mult > o.burstMax || x.dur < time.Minute || x.dur > 3*time.Minute || x.start+x.dur > o.length {
			t.Errorf("burst %+v out of shape", x)
		}
	}
	o.seed = 2
	if c := newTrace(o.traceConfig()); c.bursts[0] == a.bursts[0] {
		t.Errorf("seeds 1 and 2 have the same first burst")
	}
}

// TestQuickRun replays the -quick trace with Berth and with the HPA controller on a real
// apiserver (about 50 s here).
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		// Only under -short: make test and .ci/run never pass it, so CI runs this replay.
		t.Skip("replays a trace in real time (about 50 s); runs in make test, which does not pass -short")
	}
	o := defaultOptions()
	o.quick = true
	o.port = 18101 // apart from a benchmark running beside the test
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := run(ctx, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.byRun) != 1 || len(res.byRun[0]) != 2 {
		t.Fatalf("runs: %v", res.byRun)
	}
	for _, s := range res.byRun[0] {
		if s.served == 0 || s.served+s.failed != s.requests {
			t.Errorf("%s: served %d, failed %d of %d requests", s.name, s.served, s.failed, s.requests)
		}
		if s.failed > s.requests/100 {
			t.Errorf("%s: %d of %d requests failed; first: %v", s.name, s.failed, s.requests, s.firstErr)
		}
		if s.replicaSeconds <= 0 || s.replicaSeconds > float64(o.maxReplicas)*res.trace.cfg.length.Seconds() {
			t.Errorf("%s: %.0f replica-seconds", s.name, s.replicaSeconds)
		}
		if s.p50 <= 0 || s.p50 > s.p90 || s.p90 > s.p99 {
			t.Errorf("%s: TTFT p50 %s p90 %s p99 %s", s.name, s.p50, s.p90, s.p99)
		}
		if s.peak < 2 || s.peak > o.maxReplicas {
			t.Errorf("%s: peak %d replicas", s.name, s.peak)
		}
	}
	// Both modes ran and both scaled for the burst: the HPA controller through the
	// Deployment's scale subresource, seen by the fleet.
	for i, want := range []string{nameBerth, nameHPA} {
		if s := res.byRun[0][i]; s.name != want || s.scaleUpsInBurst == 0 {
			t.Errorf("%s (want %s) did not scale up during the burst (%d scale-ups in all)", s.name, want, s.scaleUps)
		}
	}
	for _, want := range []string{"| berth |", "| hpa |", "Berth ÷ HPA: SLO-violation seconds", "berth replicas", "hpa replicas", "seed 1"} {
		if !strings.Contains(res.text, want) {
			t.Errorf("report lacks %q:\n%s", want, res.text)
		}
	}
	dir := t.TempDir()
	if err := writeFigures(dir, res.trace, res.byRun[0], o.slo); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"replicas.svg", "slo.svg", "timeline.csv"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("figure %s: %v", f, err)
		}
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "timeline.csv"))
	if !strings.HasPrefix(string(raw), "second,requests,berth_replicas,berth_ttft_p90_s,hpa_replicas,hpa_ttft_p90_s\n") {
		t.Errorf("timeline.csv begins %.200s", raw)
	}
	t.Logf("\n%s", res.text)
}

// TestCalibrateSmall loads one replica at two rates: the TTFT grows with the rate, and the
// table, figure and CSV have a row per rate.
func TestCalibrateSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("replays two 3-minute loads at TimeScale 0.05 (about 20 s); runs in make test, which does not pass -short")
	}
	o := defaultOptions()
	o.calibrate = "0.5,3"
	o.port = 18102
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := run(ctx, o, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", res.text)
	c := res.calibration
	if c == nil || len(c.rates) != 2 {
		t.Fatalf("calibration: %+v, want two rates", c)
	}
	if c.p90[1] <= c.p90[0] {
		t.Errorf("TTFT p90 %.2f s at 0.5 requests/s and %.2f s at 3: a replica loaded past its batch is not slower", c.p90[0], c.p90[1])
	}
	if strings.Count(res.text, "\n| ") != 3 {
		t.Errorf("the table has not a header and two rows:\n%s", res.text)
	}
	dir := t.TempDir()
	if err := c.write(dir); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "calibrate.csv"))
	if err != nil || strings.Count(string(raw), "\n") != 3 {
		t.Errorf("calibrate.csv (%v):\n%s", err, raw)
	}
	if svg, err := os.ReadFile(filepath.Join(dir, "calibrate.svg")); err != nil || !strings.Contains(string(svg), "p99") {
		t.Errorf("calibrate.svg has no p99 line (%v)", err)
	}
}

// The HPA gets Berth's policy in real seconds, and a time scale that cannot say it in whole
// seconds is refused before anything runs.
func TestHPASpecIsBerthsPolicy(t *testing.T) {
	o := defaultOptions()
	sc := scalerConfig{metric: "m", target: 6, min: 1, max: 12}
	spec, err := hpaSpec(sc, o.policy, 1.0/15)
	if err != nil {
		t.Fatal(err)
	}
	up, down := spec.Behavior.ScaleUp, spec.Behavior.ScaleDown
	if *down.StabilizationWindowSeconds != 8 || *up.StabilizationWindowSeconds != 0 { // 2 min and 0 at 1/15
		t.Errorf("windows: up %d s, down %d s real; want 0 and 8", *up.StabilizationWindowSeconds, *down.StabilizationWindowSeconds)
	}
	for _, p := range append(up.Policies, down.Policies...) {
		if p.PeriodSeconds != 1 {
			t.Errorf("policy %+v: period %d s real, want 1 (15 s simulated)", p, p.PeriodSeconds)
		}
	}
	if up.Policies[0].Value != 4 || up.Policies[1].Value != 100 || down.Policies[0].Value != 1 || down.Policies[1].Value != 10 {
		t.Errorf("policies up %+v down %+v, want Berth's +4 or +100%%, -1 or -10%%", up.Policies, down.Policies)
	}
	if m := spec.Metrics[0].Pods; m.Metric.Name != "m" || m.Target.AverageValue.MilliValue() != 6000 || *spec.MinReplicas != 1 || spec.MaxReplicas != 12 {
		t.Errorf("metric %+v, bounds %d-%d", m, *spec.MinReplicas, spec.MaxReplicas)
	}
	if _, err := hpaSpec(sc, o.policy, 0.05); err == nil || !strings.Contains(err.Error(), "whole seconds") {
		t.Errorf("time scale 0.05 (15 s = 0.75 s real): %v, want an error about whole seconds", err)
	}
}
