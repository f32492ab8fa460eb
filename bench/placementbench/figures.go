package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/berth-sh/berth/bench/internal/figure"
)

// writeFigures writes, into dir:
//   - map-<mode>.svg: the fabric at the first failure of the first seed, one row per leaf
//     (rack on nvl72), each GPU (or, when that would not fit in a figure, each node)
//     coloured by the group holding it, so groups kept inside one leaf show as one colour
//     in one row and spread groups as a colour scattered over rows;
//   - runs.csv: every run's figures, the numbers behind the table;
//   - placements.csv: every group placed whole in every run, with its nodes and leaves.
func writeFigures(dir string, f *fabric, modes []mode, results map[mode][]result) error {
	runs := figure.NewTable("mode", "seed", "groups_placed_before_first_failure", "first_failure", "gpus_at_first_failure", "gpus_total",
		"multi_pod_groups", "one_leaf", "one_nvlink_domain", "many_spines", "free_nodes_at_first_failure", "gpus_at_first_whole_node_failure",
		"pods_placed_before_first_failure", "feeding_seconds", "groups_placed_after_first_failure", "groups_fed", "gpus_at_end",
		"feasible_failures", "run_seconds", "spans_groups", "spans_create_seconds", "spans_to_first_bind_seconds", "spans_first_to_last_bind_seconds")
	placements := figure.NewTable("mode", "seed", "group", "pods", "gpus_per_pod", "before_first_failure", "nodes", "leaves", "spines")
	for _, m := range modes {
		for _, r := range results[m] {
			first := ""
			if r.firstFailure != nil {
				first = fmt.Sprintf("#%d %s", r.firstFailure.index, r.firstFailure)
			}
			atBig := ""
			if r.bigFailure != nil {
				atBig = fmt.Sprint(r.gpusAtBig)
			}
			runs.Add(string(m), r.seed, r.groupsPlaced, first, r.gpusAtFirst, f.totalGPUs(),
				r.spread.multiPod, r.spread.oneLeaf, r.spread.oneDomain, r.spread.manySpines, r.freeNodesAtFirst, atBig,
				r.podsPlaced, r.feeding, r.placedAfter, r.groupsFed, r.gpusAtEnd, r.feasibleFailures, r.elapsed,
				r.spans.groups, r.spans.create, r.spans.first, r.spans.spread)
			for i, p := range r.placed {
				leaves, spines := map[string]bool{}, map[string]bool{}
				for _, n := range p.nodes {
					leaves[f.leaf[n]], spines[f.spine[n]] = true, true
				}
				placements.Add(string(m), r.seed, p.spec.index, p.spec.pods, p.spec.gpus, i < r.placedAtFirst,
					strings.Join(p.nodes, " "), len(leaves), len(spines))
			}
		}
	}
	if err := runs.WriteFile(filepath.Join(dir, "runs.csv")); err != nil {
		return err
	}
	if err := placements.WriteFile(filepath.Join(dir, "placements.csv")); err != nil {
		return err
	}
	for _, m := range modes {
		if len(results[m]) == 0 {
			continue
		}
		if err := writeMap(filepath.Join(dir, fmt.Sprintf("map-%s.svg", m)), f, results[m][0]); err != nil {
			return err
		}
	}
	return nil
}

// writeMap draws one run's placement at its first failure: one cell per GPU when the figure
// stays small enough, else one per node coloured by the group with the most GPUs on it.
func writeMap(path string, f *fabric, r result) error {
	title := fmt.Sprintf("%s, seed %d: %d groups placed before the first failure", r.mode, r.seed, r.placedAtFirst)
	if r.firstFailure != nil {
		title = fmt.Sprintf("%s, seed %d: at the first failure (#%d, %s), %d groups placed", r.mode, r.seed, r.firstFailure.index, r.firstFailure, r.placedAtFirst)
	}
	g := placementGrid(f, r.placed[:r.placedAtFirst], true)
	g.Title = title
	err := figure.Save(path, g)
	if err == nil || !strings.Contains(err.Error(), "limit") {
		return err
	}
	g = placementGrid(f, r.placed[:r.placedAtFirst], false)
	g.Title = title
	if err := figure.Save(path, g); err != nil {
		return errors.Join(fmt.Errorf("placement map too large per GPU and per node"), err)
	}
	return nil
}

// placementGrid lays the fabric out by leaf (rows, in fabric order) and node within the
// leaf (columns); perGPU gives each node gpusPerNode columns, one per GPU, filled in the
// order the groups were placed. A cell's category is the placed group's number in placed
// order, so neighbouring groups get different colours.
func placementGrid(f *fabric, placed []placement, perGPU bool) figure.Grid {
	var leaves []string
	col := map[string]int{} // node → its column within its leaf
	row := map[string]int{}
	width := 0
	for _, n := range f.nodes {
		l := f.leaf[n]
		if _, ok := row[l]; !ok {
			row[l] = len(leaves)
			leaves = append(leaves, l)
		}
	}
	perLeaf := map[string]int{}
	for _, n := range f.nodes {
		col[n] = perLeaf[f.leaf[n]]
		perLeaf[f.leaf[n]]++
		width = max(width, perLeaf[f.leaf[n]])
	}
	slots := 1
	if perGPU {
		slots = f.gpusPerNode
	}
	cells := make([][]int, len(leaves))
	for i := range cells {
		cells[i] = make([]int, width*slots)
		for j := range cells[i] {
			cells[i][j] = -1
		}
	}
	used := map[string]int{}         // node → GPUs filled so far
	most := map[string]map[int]int{} // node → group → GPUs, for the per-node map
	for gi, p := range placed {
		for _, n := range p.nodes {
			if perGPU {
				r, c := row[f.leaf[n]], col[n]*slots+used[n]
				for k := 0; k < p.spec.gpus && used[n]+k < slots; k++ {
					cells[r][c+k] = gi
				}
			} else {
				if most[n] == nil {
					most[n] = map[int]int{}
				}
				most[n][gi] += p.spec.gpus
			}
			used[n] += p.spec.gpus
		}
	}
	if !perGPU {
		for n, byGroup := range most {
			best, bestGPUs := -1, 0
			for gi, gpus := range byGroup {
				if gpus > bestGPUs || (gpus == bestGPUs && gi < best) {
					best, bestGPUs = gi, gpus
				}
			}
			cells[row[f.leaf[n]]][col[n]] = best
		}
	}
	x := "node within the leaf (one cell per node: the group with most GPUs on it; grey: no GPU allocated)"
	if perGPU {
		x = fmt.Sprintf("GPU within the leaf (%d per node; grey: free)", slots)
	}
	y := "leaf"
	if f.hasDomains() {
		y = "rack (leaf, one NVLink domain)"
	}
	return figure.Grid{XLabel: x, YLabel: y, Cells: cells, RowLabels: leaves}
}
