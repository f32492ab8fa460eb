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

// TestLeafSpineSmallRunOfBothModes runs the default experiment in small (2 leaves of 4
// nodes of 8 GPUs) with both schedulers, so make test keeps it and its figures working:
// both modes ran and placed groups, berth kept every multi-pod group in one leaf (what the
// benchmark exists to show), the table has a column per mode and the ratio, and the maps
// and CSVs are written with a line per run and per placed group.
func TestLeafSpineSmallRunOfBothModes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and both schedulers (about 30 s); runs in make test, which does not pass -short")
	}
	f := newFabric(1, 2, 4, 8)
	o := options{fabric: f, seed: 1, repeat: 1, weights: "1:40,2:25,4:20,8:15", maxPods: 4, maxGroups: 200,
		modes: []mode{berthMode, defaultMode}, timeout: 30 * time.Second, stopAfter: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	report, results, err := runAll(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + report)
	placed := 0
	for _, m := range o.modes {
		if len(results[m]) != 1 {
			t.Fatalf("%s: %d runs, want 1", m, len(results[m]))
		}
		r := results[m][0]
		if r.groupsPlaced == 0 || r.gpusAtFirst == 0 || len(r.placed) < r.placedAtFirst || r.placedAtFirst != r.groupsPlaced {
			t.Errorf("%s: %d groups placed before the first failure (%d GPUs), %d recorded for the figures (%d before the failure)",
				m, r.groupsPlaced, r.gpusAtFirst, len(r.placed), r.placedAtFirst)
		}
		placed += len(r.placed)
		// Every group placed before the first failure has its span, and the feed's time is
		// at least what the spans add up to.
		if sp := r.spans; sp.groups != r.groupsPlaced || sp.create <= 0 || sp.first+sp.spread <= 0 || sp.create+sp.first+sp.spread > r.feeding {
			t.Errorf("%s: spans of %d groups (of %d placed): create %s, to first bind %s, first to last %s; feeding %s",
				m, sp.groups, r.groupsPlaced, sp.create, sp.first, sp.spread, r.feeding)
		}
	}
	if b := results[berthMode][0].spread; b.multiPod == 0 || b.oneLeaf != b.multiPod {
		t.Errorf("berth: %d of %d multi-pod groups inside one leaf, want all", b.oneLeaf, b.multiPod)
	}
	for _, want := range []string{"| | berth | default | berth/default |", "| groups placed before the first failure |", "| (1) multi-pod groups inside one leaf |",
		"| (4a) ms per group placed: creating its PodGroup and pods |", "| (4c) ms per group placed: first pod bound to the last |"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q", want)
		}
	}

	dir := t.TempDir()
	if err := writeFigures(dir, f, o.modes, results); err != nil {
		t.Fatal(err)
	}
	for _, m := range o.modes {
		svg, err := os.ReadFile(filepath.Join(dir, "map-"+string(m)+".svg"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(svg), string(m)+", seed 1") {
			t.Errorf("map-%s.svg lacks its title", m)
		}
	}
	if rows := readCSV(t, filepath.Join(dir, "runs.csv")); len(rows) != 3 || rows[1][0] != "berth" || rows[2][0] != "default" {
		t.Errorf("runs.csv: %v, want a header and one row per mode", rows)
	}
	if rows := readCSV(t, filepath.Join(dir, "placements.csv")); len(rows) != 1+placed {
		t.Errorf("placements.csv has %d rows, want a header and %d placed groups", len(rows), placed)
	}
}

// A map at GPU resolution of the default 512-node fabric, nearly full of small groups,
// still fits in a committed figure (or falls back to one cell per node).
func TestPlacementMapOfTheFullFabricIsWritten(t *testing.T) {
	f := newFabric(4, 8, 16, 8)
	var placed []placement
	for i, n := range f.nodes {
		// Four 2-GPU groups per node, each across this node and the next leaf's node.
		other := f.nodes[(i+16)%len(f.nodes)]
		for k := 0; k < 2; k++ {
			placed = append(placed, placement{spec: groupSpec{index: len(placed), pods: 2, gpus: 2}, nodes: []string{n, other}})
		}
	}
	r := result{mode: defaultMode, seed: 1, placed: placed, placedAtFirst: len(placed)}
	path := filepath.Join(t.TempDir(), "map.svg")
	if err := writeMap(path, f, r); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(path)
	if err != nil || len(svg) == 0 {
		t.Fatalf("map not written: %v", err)
	}
	if !strings.Contains(string(svg), "node within the leaf") {
		t.Error("a per-GPU map of 512 nodes of fragmented groups should not fit; want the per-node map")
	}
}

func readCSV(t *testing.T, path string) [][]string {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	rows, err := csv.NewReader(fh).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	return rows
}
