package figure

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Bars is a grouped bar chart: for each category on the x axis (say a benchmark scenario),
// one bar per series (say a scheduler mode) side by side.
type Bars struct {
	Title, YLabel string
	Categories    []string
	Series        []BarSeries
}

// BarSeries is one bar per category, in the order of Bars.Categories.
type BarSeries struct {
	Name   string
	Values []float64
}

// Plot implements Figure.
func (b Bars) Plot() (*plot.Plot, error) {
	if len(b.Categories) == 0 || len(b.Series) == 0 {
		return nil, errors.New("bar chart needs at least one category and one series")
	}
	p := newPlot(b.Title, "", b.YLabel)
	// The bars of one category share 70% of the space between categories.
	group := (Width - 2.5*vg.Inch) / vg.Length(len(b.Categories)) * 0.7
	w := group / vg.Length(len(b.Series))
	for i, s := range b.Series {
		if len(s.Values) != len(b.Categories) {
			return nil, fmt.Errorf("series %q has %d values for %d categories", s.Name, len(s.Values), len(b.Categories))
		}
		vals := make(plotter.Values, len(s.Values))
		for j, v := range s.Values {
			if math.IsInf(v, 0) {
				return nil, fmt.Errorf("series %q: value %d is infinite", s.Name, j)
			}
			// A missing measurement (NaN) gets no visible bar; the CSV beside the figure
			// says it is missing.
			if math.IsNaN(v) {
				v = 0
			}
			vals[j] = v
		}
		bar, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, fmt.Errorf("series %q: %w", s.Name, err)
		}
		bar.Color = palette(i)
		bar.LineStyle.Width = 0
		bar.Offset = w*vg.Length(i) - group/2 + w/2
		p.Add(bar)
		p.Legend.Add(s.Name, bar)
	}
	p.NominalX(b.Categories...)
	// Half a category's room on either side, so that the outer bars are drawn whole.
	p.X.Min, p.X.Max = -0.5, float64(len(b.Categories))-0.5
	p.Y.Min = 0
	return p, nil
}
