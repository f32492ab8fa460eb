package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary be a mode or component process too: the benchmark
// re-executes its own binary for each mode and, in it, for each scheduler and controller.
func TestMain(m *testing.M) {
	if runIfChild() {
		return
	}
	os.Exit(m.Run())
}

// TestSmallRun runs both modes on a tiny cluster (4 objects × 4 pods on 10 nodes, 5 s of
// churn; about a minute here) and checks the report and the progress data.
func TestSmallRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two control planes and four component processes (about a minute); runs in make test, which does not pass -short")
	}
	c := config{servings: 4, podsPerServing: 4, nodes: 10, churn: 5 * time.Second, modes: []string{"berth", "peer"}, log: io.Discard}
	results, err := runAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 {
		t.Fatalf("%d results, want one per mode", len(results))
	}
	roles := map[string][]string{"berth": {"berth-scheduler", "berth-controller"}, "peer": {"kube-scheduler", "kube-controller-manager"}}
	for _, r := range results {
		if r.available <= 0 || r.churnOps == 0 {
			t.Errorf("%s: to Available %s, %d churn ops", r.mode, r.available, r.churnOps)
		}
		if len(r.components) != 2 {
			t.Fatalf("%s: %d components", r.mode, len(r.components))
		}
		for i, comp := range r.components {
			if comp.role != roles[r.mode][i] || comp.peakRSS() == 0 || comp.marks["churn"].cpu <= 0 || comp.marks["fill"].goroutines == 0 {
				t.Errorf("%s: component %s (want %s): peak RSS %d, CPU %.2f s, %d goroutines", r.mode, comp.role, roles[r.mode][i],
					comp.peakRSS(), comp.marks["churn"].cpu, comp.marks["fill"].goroutines)
			}
		}
		var fillEnd sample
		for _, s := range r.progress {
			if s.phase == "fill" {
				fillEnd = s
			}
		}
		if want := c.servings * c.podsPerServing; fillEnd.pods != want || fillEnd.bound != want || fillEnd.podsReady != want {
			t.Errorf("%s: at the fill's end %d pods, %d bound, %d Ready; want %d each", r.mode, fillEnd.pods, fillEnd.bound, fillEnd.podsReady, want)
		}
		last := r.progress[len(r.progress)-1]
		if last.phase != "settle" || last.available != c.servings {
			t.Errorf("%s: progress ends at %+v, want all %d Available after the churn", r.mode, last, c.servings)
		}
	}
	text, err := report(c, results)
	if err != nil {
		t.Fatal(err)
	}
	// Each controller's requests: every pod of the fill was created by its controller.
	for _, r := range results {
		ctl := r.components[1]
		if n := ctl.marks["fill"].requests["create pods"]; n < c.servings*c.podsPerServing {
			t.Errorf("%s: %s created %d pods in the fill, want at least %d", r.mode, ctl.role, n, c.servings*c.podsPerServing)
		}
	}
	if n := results[0].components[1].marks["fill"].requests["reconcile modelserving"]; n < c.servings {
		t.Errorf("berth-controller reconciled ModelServings %d times in the fill, want at least once each (%d)", n, c.servings)
	}
	for _, want := range []string{"both schedulers at client QPS 500, burst 1000", "berth-scheduler", "kube-scheduler", "time to Available berth/peer:",
		"berth-controller writes: total", "kube-controller-manager writes: total", "berth-controller reconciles: total"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	dir := t.TempDir()
	if err := writeFigures(dir, results); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "progress.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(string(raw)), "\n"); lines[0] != "mode,phase,seconds,available,pods,bound,ready" || !strings.Contains(string(raw), "\nberth,fill,") || !strings.Contains(string(raw), "\npeer,settle,") {
		t.Errorf("progress.csv:\n%s", raw)
	}
	for _, f := range []string{"progress.svg", "pods.svg", "settle.svg"} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("figure %s: %v", f, err)
		}
	}
	t.Logf("\n%s", text)
}
