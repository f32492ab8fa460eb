package figure

import (
	"encoding/csv"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// saved draws f into a temporary SVG and returns its text.
func saved(t *testing.T, f Figure) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sub", "f.svg")
	if err := Save(path, f); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if !strings.Contains(s, "<svg") || !strings.HasSuffix(strings.TrimSpace(s), "</svg>") {
		t.Fatalf("not an SVG document: %.200s", s)
	}
	return s
}

func mustContain(t *testing.T, svg string, texts ...string) {
	t.Helper()
	for _, x := range texts {
		if !strings.Contains(svg, x) {
			t.Errorf("figure lacks %q", x)
		}
	}
}

func TestLineDrawsEverySeriesWithItsName(t *testing.T) {
	svg := saved(t, Line{
		Title: "pods bound", XLabel: "seconds", YLabel: "pods",
		Series: []Series{
			{Name: "berth", X: []float64{0, 1, 2}, Y: []float64{0, 50, 100}},
			{Name: "default", X: []float64{0, 1, 2, 3}, Y: []float64{0, 20, 60, 100}},
		},
	})
	mustContain(t, svg, "pods bound", "seconds", "berth", "default")
}

func TestLineLogAxisLeavesOutNonPositivePoints(t *testing.T) {
	svg := saved(t, Line{Title: "t", LogY: true, Series: []Series{{Name: "s", X: []float64{0, 1, 2}, Y: []float64{0, 10, 1000}}}})
	mustContain(t, svg, "1000")
	if _, err := (Line{LogY: true, Series: []Series{{X: []float64{1}, Y: []float64{0}}}}).Plot(); err == nil {
		t.Error("a log plot with no positive point was drawn")
	}
}

func TestLineRejectsMismatchedSeries(t *testing.T) {
	_, err := Line{Series: []Series{{Name: "bad", X: []float64{1, 2}, Y: []float64{1}}}}.Plot()
	if err == nil || !strings.Contains(err.Error(), `"bad"`) {
		t.Errorf("error %v, want one naming series \"bad\"", err)
	}
}

// A run's worth of latencies (a million samples) draws as a figure small enough to commit.
func TestCDFOfManySamplesStaysSmall(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	a, b := make([]float64, 1_000_000), make([]float64, 1_000_000)
	for i := range a {
		a[i] = r.ExpFloat64() * 0.01
		b[i] = r.ExpFloat64() * 0.02
	}
	svg := saved(t, CDF{Title: "latency", XLabel: "seconds", LogX: true, Samples: []Sample{{Name: "berth", Values: a}, {Name: "nginx", Values: b}}})
	mustContain(t, svg, "berth", "nginx", "fraction at or below")
	if len(svg) > MaxBytes/2 {
		t.Errorf("CDF of 2M samples is %d bytes", len(svg))
	}
}

func TestECDFEndsAtTheLargestValueAndOne(t *testing.T) {
	xys := ecdf([]float64{3, 1, 2, math.NaN()}, false)
	last := xys[len(xys)-1]
	if last.X != 3 || last.Y != 1 {
		t.Errorf("last point %v, want (3, 1)", last)
	}
	if first := xys[0]; first.X != 1 || first.Y != 0 {
		t.Errorf("first point %v, want (1, 0)", first)
	}
}

func TestBarsGroupsOneBarPerSeriesAndCategory(t *testing.T) {
	svg := saved(t, Bars{
		Title: "throughput", YLabel: "pods/s",
		Categories: []string{"8 pods", "64 pods"},
		Series:     []BarSeries{{Name: "berth", Values: []float64{10, 20}}, {Name: "default", Values: []float64{8, math.NaN()}}},
	})
	mustContain(t, svg, "throughput", "8 pods", "64 pods", "berth", "default")
	_, err := Bars{Categories: []string{"a"}, Series: []BarSeries{{Name: "short", Values: nil}}}.Plot()
	if err == nil || !strings.Contains(err.Error(), `"short"`) {
		t.Errorf("error %v, want one naming series \"short\"", err)
	}
}

// A placement map of a large fabric (64 leaves of 72 nodes) with groups packed in runs fits.
func TestGridPlacementMapOfALargeFabricStaysSmall(t *testing.T) {
	cells := make([][]int, 64)
	names := []string{}
	for r := range cells {
		cells[r] = make([]int, 72)
		for c := range cells[r] {
			cells[r][c] = -1
			if c < 64 {
				cells[r][c] = r*4 + c/16
			}
		}
	}
	for i := 0; i < 256; i++ {
		names = append(names, "g")
	}
	svg := saved(t, Grid{Title: "placement", XLabel: "node", YLabel: "leaf", Cells: cells, Names: names})
	mustContain(t, svg, "placement", "leaf")
}

func TestGridLegendNamesGroups(t *testing.T) {
	svg := saved(t, Grid{Title: "map", Cells: [][]int{{0, 0, 1}, {-1, 1, 1}}, Names: []string{"group-a", "group-b"}, RowLabels: []string{"leaf-0", "leaf-1"}})
	mustContain(t, svg, "group-a", "group-b", "leaf-1")
}

func TestGridValuesShowTheirRange(t *testing.T) {
	svg := saved(t, Grid{Title: "heat", Values: [][]float64{{1, 2}, {math.NaN(), 7.5}}})
	mustContain(t, svg, ">1<", ">7.5<")
}

func TestGridRejectsBadShapes(t *testing.T) {
	for name, g := range map[string]Grid{
		"both":       {Cells: [][]int{{0}}, Values: [][]float64{{1}}},
		"neither":    {},
		"ragged":     {Cells: [][]int{{0, 0}, {0}}},
		"unnamed":    {Cells: [][]int{{2}}, Names: []string{"a"}},
		"row labels": {Cells: [][]int{{0}}, RowLabels: []string{"a", "b"}},
		"no cell":    {Values: [][]float64{}},
	} {
		if _, err := g.Plot(); err == nil {
			t.Errorf("%s: grid drawn, want an error", name)
		}
	}
}

func TestSaveRefusesAnOversizedFigure(t *testing.T) {
	// Every cell its own colour defeats the run merging: 400 × 400 rectangles.
	cells := make([][]int, 400)
	for r := range cells {
		cells[r] = make([]int, 400)
		for c := range cells[r] {
			cells[r][c] = (r + c) % 2
		}
	}
	path := filepath.Join(t.TempDir(), "big.svg")
	err := Save(path, Grid{Cells: cells})
	if err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("error %v, want the size limit", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("oversized figure was written (stat: %v)", err)
	}
}

func TestTableWritesRawNumbers(t *testing.T) {
	tab := NewTable("mode", "pods", "seconds", "rate")
	tab.Add("berth", 64, 1500*time.Millisecond, 1.0/3)
	tab.Add("default, no gang", 64, time.Second, math.NaN())
	path := filepath.Join(t.TempDir(), "d", "x.csv")
	if err := tab.WriteFile(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"mode", "pods", "seconds", "rate"},
		{"berth", "64", "1.5", "0.3333333333333333"},
		{"default, no gang", "64", "1", ""},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows %q, want %q", rows, want)
	}
	for i := range want {
		if strings.Join(rows[i], "|") != strings.Join(want[i], "|") {
			t.Errorf("row %d %q, want %q", i, rows[i], want[i])
		}
	}
	tab.Add("short")
	if err := tab.WriteFile(path); err == nil {
		t.Error("a row shorter than the header was written")
	}
}
