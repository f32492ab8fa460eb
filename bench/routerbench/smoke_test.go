package main

import (
	"context"
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestOverheadAndQualitySmall runs the overhead and quality experiments in small (one short
// run each; the overhead's berth-router as its own process, as the benchmark runs it) so
// make test keeps them and their figures
// working: every path (direct, nginx, berth-rr, berth-scored) and every router policy ran
// (and the replicas experiment, 1 and 2 replicas sharing a Redis) and answered without errors, the tables have a row for each, and the figures and CSVs
// are written. nginx is the Debian nginx-light that make test-deps installs.
func TestOverheadAndQualitySmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane, nginx and five routers in turn (about 40 s); runs in make test, which does not pass -short")
	}
	const nginxBin = "/usr/sbin/nginx"
	if _, err := os.Stat(nginxBin); err != nil {
		t.Fatalf("%s: %v; make test-deps installs Debian's nginx-light (apt-get install nginx-light)", nginxBin, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := startCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	rec := newRecorder()

	table, err := runOverhead(ctx, c, overheadConfig{engines: 2, conc: 8, warm: 300 * time.Millisecond, dur: time.Second, runs: 1,
		nginx: nginxBin, rec: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table)
	paths := []string{"direct", "nginx", "berth-rr", "berth-scored"}
	for _, p := range paths {
		row := tableRow(table, p)
		if row == nil || len(row) != 11 || row[1] == "0" || row[10] != "0" {
			t.Errorf("overhead row for %s: %q; want 11 cells, a max rate and no errors", p, row)
			continue
		}
		// The proxies run as processes of their own (berth-router built from cmd/router, as
		// the benchmark runs it by default): each has its CPU per request.
		if cpu, err := strconv.ParseFloat(row[8], 64); p != "direct" && (err != nil || cpu <= 0) {
			t.Errorf("overhead row for %s: proxy CPU per request %q, want a positive number", p, row[8])
		}
		if len(rec.overhead.vals[p]) == 0 {
			t.Errorf("no open-loop latency recorded for %s", p)
		}
	}

	q := qualityConfig{engines: 4, prompts: 8, users: 64, requests: 120, systemTokens: 1000, userTokens: 20, maxTokens: 8,
		cachePrompts: 4, load: 0.5, realSeconds: 3, runs: 1, seed: 3, rec: rec}
	table, err = runQuality(ctx, c, q)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table)
	for _, p := range qualityPolicies {
		row := tableRow(table, p.name)
		if row == nil || len(row) != 8 || row[7] != "0" {
			t.Errorf("quality row for %s: %q; want 8 cells and no errors", p.name, row)
		}
		if got := len(rec.quality.vals[p.name]); got != q.requests {
			t.Errorf("%s: %d TTFTs recorded, want %d", p.name, got, q.requests)
		}
	}

	// Replicas, tiny: one and two replicas sharing a Redis, and round robin.
	rq := q
	rq.requests = 60
	table, err = runReplicas(ctx, c, rq, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table)
	for _, name := range []string{replicasRoundRobin, "1 replica", "2 replicas"} {
		row := tableRow(table, name)
		if row == nil || len(row) != 8 || row[7] != "0" {
			t.Errorf("replicas row for %s: %q; want 8 cells and no errors", name, row)
		}
		if got := len(rec.replicas.vals[name]); got != rq.requests {
			t.Errorf("%s: %d TTFTs recorded, want %d", name, got, rq.requests)
		}
	}

	dir := t.TempDir()
	if err := rec.write(dir); err != nil {
		t.Fatal(err)
	}
	for file, names := range map[string][]string{
		"overhead-latency.svg": paths,
		"quality-ttft.svg":     {"round-robin", "least-requests", "prefix-aware"},
		"replicas-ttft.svg":    {"round robin", "1 replica", "2 replicas"},
	} {
		svg, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if !strings.Contains(string(svg), n) {
				t.Errorf("%s has no curve labelled %s", file, n)
			}
		}
	}
	for file, want := range map[string]int{
		"overhead-latency.csv": 1 + len(paths)*len(cdfPoints([]float64{1})),
		"overhead-max.csv":     1 + len(paths),
		"overhead-cpu.csv":     len(paths), // a header and a row per proxy
		"quality-ttft.csv":     1 + len(qualityPolicies)*len(cdfPoints([]float64{1})),
		"replicas-ttft.csv":    1 + 3*len(cdfPoints([]float64{1})),
	} {
		f, err := os.Open(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(f).ReadAll()
		f.Close()
		if err != nil || len(rows) != want {
			t.Errorf("%s: %d rows (%v), want %d", file, len(rows), err, want)
		}
	}
}

// tableRow is the cells of the markdown row whose first cell is name, or nil.
func tableRow(table, name string) []string {
	for _, line := range strings.Split(table, "\n") {
		if strings.HasPrefix(line, "| "+name+" |") {
			return strings.Split(strings.Trim(line, "| "), " | ")
		}
	}
	return nil
}

// TestTenantsSmoke runs the noisy/quiet tenants experiment in small: every configuration
// answers without errors, the table has its three rows, the CSV every quiet request, and the
// quiet tenant waits less in the fair queue than in FIFO order (the noisy backlog is 5
// requests of about 100 ms, 2 at a time: about 250 ms in FIFO, 50 ms fair), and less still
// with a slot reserved for it (about 0).
func TestTenantsSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and four routers in turn (about 30 s); runs in make test, which does not pass -short")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := startCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	csvPath := filepath.Join(t.TempDir(), "tenants.csv")
	cfg := tenantsConfig{engines: 1, concurrency: 2, noisyConc: 6, noisyTokens: 12, quietRequests: 8, quietTokens: 200, quietGap: 20 * time.Millisecond, timeScale: 1, csv: csvPath}
	table, err := runTenants(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table)
	var waits []float64
	for _, tc := range tenantsConfigs {
		row := tableRow(table, tc.name)
		if row == nil || len(row) != 7 || row[6] != "0" {
			t.Fatalf("tenants row for %s: %q; want 7 cells and no errors", tc.name, row)
		}
		w, err := strconv.ParseFloat(row[4], 64)
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, w)
	}
	if fair, fifo, reserve := waits[1], waits[2], waits[3]; fifo <= fair || reserve >= fair {
		t.Errorf("the quiet tenant's mean queue wait: %.1f ms fair, %.1f ms FIFO, %.1f ms fair with reserve; want FIFO > fair > reserve", fair, fifo, reserve)
	}
	f, err := os.Open(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil || len(rows) != 1+len(tenantsConfigs)*cfg.quietRequests {
		t.Errorf("%s: %d rows (%v), want %d", csvPath, len(rows), err, 1+len(tenantsConfigs)*cfg.quietRequests)
	}
}

// TestScaledownSmoke runs the scale-down experiment in small: both rules remove one group
// without a request failing, the blind rule the highest ordinal, and the table has both rows
// (the routers' costs name every group).
func TestScaledownSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane, engines and two routers in turn (about 15 s); runs in make test, which does not pass -short")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := startCluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	q := qualityConfig{engines: 4, prompts: 8, users: 64, requests: 160, systemTokens: 1000, userTokens: 20, maxTokens: 8,
		cachePrompts: 4, load: 0.5, realSeconds: 4, runs: 1, seed: 3}
	csvPath := filepath.Join(t.TempDir(), "scaledown.csv")
	rec := newRecorder()
	table, err := runScaledown(ctx, c, scaledownConfig{quality: q, window: time.Minute, csv: csvPath, rec: rec})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + table)
	// Each run's rows start with the run's number; the summary's with the rule.
	for _, p := range scaledownPolicies {
		row := tableRow(table, "0 | "+p.name)
		if row == nil || len(row) != 10 || row[9] != "0" || !strings.HasPrefix(row[2], "sd-") || strings.Count(row[3], "sd-") != 4 {
			t.Errorf("scaledown row of run 0 for %s: %q; want 10 cells, a group removed, every group's cost and no errors", p.name, row)
		}
		if sum := tableRow(table, p.name); sum == nil || len(sum) != 4 {
			t.Errorf("scaledown summary row for %s: %q; want 4 cells", p.name, sum)
		}
	}
	if row := tableRow(table, "0 | "+scaledownPolicies[0].name); row != nil && row[2] != "sd-3" {
		t.Errorf("the blind rule removed %s, want the highest ordinal sd-3", row[2])
	}
	if b, err := os.ReadFile(csvPath); err != nil || strings.Count(string(b), "\n") < 10 {
		t.Errorf("the CSV holds too little (%v): %.200s", err, b)
	}
	for _, row := range rec.scaledown.tab.Rows {
		if strings.Count(row[3], "sd-") != 4 || strings.Count(row[4], "sd-") != 4 {
			t.Errorf("scaledown-runs.csv row %q: want every group's cost and requests before the decision", row)
		}
	}
	checkFigures(t, rec, map[string][]string{"scaledown-p90.svg": {"highest ordinal", "lowest deletion cost"}},
		map[string]int{"scaledown-runs.csv": 1 + len(scaledownPolicies)})
}

// checkFigures writes what rec recorded and checks that each SVG names every curve or bar
// series it should, and that each CSV has its rows (the header among them).
func checkFigures(t *testing.T, rec *recorder, svgs map[string][]string, csvs map[string]int) {
	t.Helper()
	dir := t.TempDir()
	if err := rec.write(dir); err != nil {
		t.Fatal(err)
	}
	for file, names := range svgs {
		svg, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Error(err)
			continue
		}
		for _, n := range names {
			if !strings.Contains(string(svg), n) {
				t.Errorf("%s has no series labelled %s", file, n)
			}
		}
	}
	for file, want := range csvs {
		f, err := os.Open(filepath.Join(dir, file))
		if err != nil {
			t.Error(err)
			continue
		}
		rows, err := csv.NewReader(f).ReadAll()
		f.Close()
		if err != nil || len(rows) != want {
			t.Errorf("%s: %d rows (%v), want %d", file, len(rows), err, want)
		}
	}
}
