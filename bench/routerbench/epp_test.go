package main

import (
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A small run of -epp against berth-router's picker alone (in this process, no peer), so
// make test keeps the experiment working: every request through the emulated Envoy is
// picked and served, the decision is timed at the data plane and counted by the picker's
// own histogram, the CSV has a line per request, and on the shared-prefix trace the
// default scorers keep prompts on their engines where round robin spreads them.
func TestEPPSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and replays two short traces (about 20 s); runs in make test, which does not pass -short")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := startCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	csvPath := filepath.Join(t.TempDir(), "epp.csv")
	q := qualityConfig{engines: 4, prompts: 8, users: 64, requests: 160, systemTokens: 1000, userTokens: 20, maxTokens: 8,
		cachePrompts: 4, load: 0.5, realSeconds: 3, runs: 1, seed: 7}
	rec := newRecorder()
	r, err := runEPP(ctx, c, eppConfig{inProcess: true, engines: 2, rate: 200, warm: 500 * time.Millisecond, dur: time.Second, csv: csvPath, quality: q, rec: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + r.table)

	if len(r.latency) != 1 || len(r.quality) != 2 {
		t.Fatalf("pickers measured: %d for latency, %d for quality; want berth-router's 1 and 2 (round robin, default scorers)", len(r.latency), len(r.quality))
	}
	points := len(cdfPoints([]float64{1}))
	checkFigures(t, rec, map[string][]string{"epp-decision.svg": {"berth-router"}, "epp-ttft.svg": {"round-robin", "default scorers"}},
		map[string]int{"epp-decision.csv": 1 + points, "epp-ttft.csv": 1 + 2*points})
	for name, o := range r.latency {
		if o.n != 200 || o.errs != 0 {
			t.Errorf("%s: %d requests, %d errors (first: %v); want 200 picked and served", name, o.n, o.errs, o.firstErr)
		}
		switch {
		case raceDetector: // make test runs this package under -race: a rate is not measured there
			t.Logf("%s: %.0f requests/s completed at 200 offered, under the race detector (not checked)", name, o.completed)
		case o.completed < 100:
			t.Errorf("%s: %.0f requests/s completed at 200 offered", name, o.completed)
		}
		if o.p50 <= 0 || o.p99 < o.p50 || o.max < o.p99 {
			t.Errorf("%s: decision p50 %.3f, p99 %.3f, max %.3f ms: not a timed distribution", name, o.p50, o.p99, o.max)
		}
		if o.serverN < 200 || o.serverLE1ms <= 0 {
			t.Errorf("%s: its decision histogram counted %.0f decisions, %.0f%% ≤ 1 ms; want all 200 counted", name, o.serverN, 100*o.serverLE1ms)
		}
	}
	rr, scored := r.quality["round-robin (berth-router)"], r.quality["berth-router (default scorers)"]
	for name, o := range map[string]qualityOutcome{"round robin": rr, "default scorers": scored} {
		if o.errs != 0 || o.ttftP50 <= 0 {
			t.Errorf("%s: %d errors (first: %v), TTFT p50 %.0f ms", name, o.errs, o.firstErr, o.ttftP50)
		}
	}
	// 8 prompts on 4 engines that each hold 4: round robin hits about half the prompt
	// tokens, prefix affinity nearly all but each prompt's first.
	if scored.hitRate < rr.hitRate+0.25 {
		t.Errorf("prefix-cache hit rate %.0f%% with the default scorers, %.0f%% with round robin: no prefix affinity through the picker", 100*scored.hitRate, 100*rr.hitRate)
	}
	for _, want := range []string{"| berth-router (default scorers) |", "| round-robin (berth-router) |", "Target: berth-router's decision p99"} {
		if !strings.Contains(r.table, want) {
			t.Errorf("the tables lack %q", want)
		}
	}

	f, err := os.Open(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if want := 1 + 200 + 2*160; len(lines) != want || r.samples != want-1 {
		t.Errorf("CSV has %d lines (report: %d samples); want a header and %d samples", len(lines), r.samples, want-1)
	}
}
