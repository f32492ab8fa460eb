package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A short replay of both modes: the report has a row for each and the median table, the
// figures and raw numbers are written, and blind scaling left groups pending that
// placement-aware scaling did not (the bench's claim, in small).
func TestSmokeBothModesRunAndReport(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two control planes and the whole system (about 2 minutes); make test runs it")
	}
	klogQuiet()
	c := defaults()
	c.lowFor, c.highFor = 5*time.Second, 25*time.Second
	c.log = testWriter{t}
	results, err := runAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 || results[0].mode != modeAware || results[1].mode != modeBlind {
		t.Fatalf("want one aware and one blind replay, got %d results", len(results))
	}
	for _, r := range results {
		if len(r.requests) == 0 || len(r.samples) == 0 {
			t.Fatalf("%s: %d requests, %d samples", r.mode, len(r.requests), len(r.samples))
		}
		if r.failed > 0 {
			t.Errorf("%s: %d requests failed, the first: %v", r.mode, r.failed, r.firstErr)
		}
	}
	aware, blind := results[0], results[1]
	if blind.pendingGroupSeconds <= aware.pendingGroupSeconds {
		t.Errorf("pending group-seconds: blind %.1f, aware %.1f; blind scaling should leave the cheap pool's overflow pending", blind.pendingGroupSeconds, aware.pendingGroupSeconds)
	}
	text := report(c, results)
	t.Log("\n" + text)
	for _, want := range []string{"| 1 | aware |", "| 1 | blind |", "| pending group-seconds |", "aware ÷ blind"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	dir := t.TempDir()
	if err := writeFigures(dir, c, results); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"replicas.svg", "ttft.svg", "timeline.csv", "requests.csv"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s not written (%v)", f, err)
		}
	}
}

// testWriter sends the bench's progress lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
