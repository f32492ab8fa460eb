package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSmallRun runs both modes at a tiny size (4 objects × 8 pods) and checks that each
// brought every pod to Available, with its own controller's CPU counted, and the report and
// figures.
func TestSmallRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane, berth-scheduler and both controllers (about a minute); runs in make test, which does not pass -short")
	}
	c := config{count: 4, groups: 2, modes: []string{modePeer, modeBerth}, timeout: 3 * time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	results, err := run(ctx, c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 2 || results[0].mode != modePeer || results[1].mode != modeBerth {
		t.Fatalf("results %+v, want peer then berth", results)
	}
	for _, r := range results {
		if r.pods != 32 || r.available <= 0 || r.controllerCPU <= 0 || r.totalCPU < r.controllerCPU {
			t.Errorf("%s: %d pods in %s, controller CPU %.2f s of %.2f s", r.mode, r.pods, r.available, r.controllerCPU, r.totalCPU)
		}
		if last := r.progress[len(r.progress)-1]; last.pods != r.pods {
			t.Errorf("%s: progress ends at %d pods, want %d", r.mode, last.pods, r.pods)
		}
	}
	text := report(c, results)
	for _, want := range []string{"| peer | kube-controller-manager (Deployment, ReplicaSet) | 32 |", "| berth | berth-controller | 32 |", "berth/peer: time to Available", "QPS 1000, burst 2000"} {
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
	if s := string(raw); !strings.HasPrefix(s, "mode,seconds,pods_available\n") || !strings.Contains(s, "\npeer,") || !strings.Contains(s, "\nberth,") {
		t.Errorf("progress.csv:\n%s", s)
	}
	if fi, err := os.Stat(filepath.Join(dir, "progress.svg")); err != nil || fi.Size() == 0 {
		t.Errorf("progress.svg: %v", err)
	}
	t.Logf("\n%s", text)
}
