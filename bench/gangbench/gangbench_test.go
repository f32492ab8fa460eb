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

// TestSmallRunOfEveryMode runs gangbench in small: one upstream-shaped workload (20 gangs of 3
// pods on 50 nodes) once in every mode, on one control plane, so make test keeps the
// benchmark working. Every mode must bind every pod, the table must carry a number for each
// mode and berth's ratios to the others, and the figure and its CSV must be written.
func TestSmallRunOfEveryMode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane and four schedulers in turn (about a minute); runs in make test, which does not pass -short")
	}
	quietLogs()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cp, err := startControlPlane(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	b := newBench(cp)
	if err := b.ensureCPUNodes(ctx, 50); err != nil {
		t.Fatal(err)
	}
	w := workload{name: "50Nodes_20Gangs_60Pods", gangs: 20, podsPerGroup: 3}
	res, err := b.throughput(ctx, []workload{w}, allModes, 1, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range allModes {
		if rs := res.rates[w.name][m]; len(rs) != 1 || rs[0] <= 0 {
			t.Errorf("%s: pods/s %v, want one positive run", m, rs)
		}
	}
	table := res.table(50)
	t.Log("\n" + table)
	lines := strings.Split(strings.TrimSpace(table), "\n")
	header, row := lines[len(lines)-3], lines[len(lines)-1]
	for _, col := range []string{"native pods/s", "berth pods/s", "berth-nogang pods/s", "default-nogang pods/s", "berth/berth-nogang", "berth/default-nogang"} {
		if !strings.Contains(header, "| "+col+" |") {
			t.Errorf("table header lacks %q: %s", col, header)
		}
	}
	cells := strings.Split(strings.Trim(row, "| "), " | ")
	if len(cells) != 10 || cells[0] != w.name || cells[1] != "60" {
		t.Fatalf("row %q: want 10 cells for %s, 60 pods", row, w.name)
	}
	for i, c := range cells[2:9] {
		if c == "–" || c == "" {
			t.Errorf("row %q: cell %d empty although every mode ran", row, i+2)
		}
	}
	if strings.Contains(strings.ToLower(table), "ceiling pods/s") {
		t.Error("the table still has a \"ceiling\" column")
	}

	dir := t.TempDir()
	if err := res.writeFigures(dir); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(filepath.Join(dir, "throughput.svg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range allModes {
		if !strings.Contains(string(svg), string(m)) {
			t.Errorf("throughput.svg has no bar labelled %s", m)
		}
	}
	f, err := os.Open(filepath.Join(dir, "throughput.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1+len(allModes) {
		t.Errorf("throughput.csv has %d rows, want a header and one per mode: %v", len(rows), rows)
	}

	// The contention and preemption workloads, in small: both gang modes run, and their
	// tables, figures and CSVs have a row for each.
	c := contentionOptions{sizes: []int{4}, seed: 1, demand: 2, perNode: 250 * time.Millisecond,
		quiet: 2 * time.Second, settleCap: 20 * time.Second, partialWindow: 2 * time.Second}
	ctable, cfigs, err := b.contention(ctx, c, allModes, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + ctable)
	ptable, pfigs, err := b.preemption(ctx, preemptionOptions{sizes: []int{4}, share: 0.25, seed: 1, timeout: time.Minute}, allModes, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + ptable)
	for _, table := range []string{ctable, ptable} {
		for _, m := range []mode{native, berth} {
			if !strings.Contains(table, "| 4 × 8 GPUs | "+string(m)+" |") {
				t.Errorf("no %s row for the 4-node pool in:\n%s", m, table)
			}
		}
	}
	if err := cfigs.write(dir); err != nil {
		t.Fatal(err)
	}
	if err := pfigs.write(dir); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]int{"contention.csv": 3, "preemption.csv": 3} {
		f, err := os.Open(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(f).ReadAll()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != want {
			t.Errorf("%s has %d rows, want a header and one run per gang mode: %v", file, len(rows), rows)
		}
	}
	for _, file := range []string{"contention.svg", "preemption.svg", "preemption-evicted.svg"} {
		svg, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range []mode{native, berth} {
			if !strings.Contains(string(svg), string(m)) {
				t.Errorf("%s has no bar labelled %s", file, m)
			}
		}
	}
}

func TestModesRefuseTheOldCeilingName(t *testing.T) {
	if _, err := parseModes("native,ceiling"); err == nil || !strings.Contains(err.Error(), string(berthNoGang)) {
		t.Errorf("parseModes(ceiling) = %v, want an error naming %s", err, berthNoGang)
	}
	ms, err := parseModes(" berth , berth-nogang,default-nogang,native")
	if err != nil || len(ms) != 4 {
		t.Errorf("parseModes = %v, %v", ms, err)
	}
}
