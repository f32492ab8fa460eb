package figure

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Series is one named line: Y[i] at X[i].
type Series struct {
	Name string
	X, Y []float64
}

// Line is a line plot of one or more series, such as progress over time per mode.
type Line struct {
	Title, XLabel, YLabel string
	Series                []Series
	// LogX and LogY put an axis on a log scale; points <= 0 on it are left out.
	LogX, LogY bool
}

// Plot implements Figure.
func (l Line) Plot() (*plot.Plot, error) {
	if len(l.Series) == 0 {
		return nil, errors.New("line plot has no series")
	}
	p := newPlot(l.Title, l.XLabel, l.YLabel)
	if l.LogX {
		logAxis(&p.X)
	}
	if l.LogY {
		logAxis(&p.Y)
	}
	drawn := 0
	for i, s := range l.Series {
		if len(s.X) != len(s.Y) {
			return nil, fmt.Errorf("series %q has %d x values and %d y values", s.Name, len(s.X), len(s.Y))
		}
		xys := make(plotter.XYs, 0, len(s.X))
		for j := range s.X {
			x, y := s.X[j], s.Y[j]
			if bad(x, l.LogX) || bad(y, l.LogY) {
				continue
			}
			xys = append(xys, plotter.XY{X: x, Y: y})
		}
		if len(xys) == 0 {
			continue
		}
		if err := addLine(p, s.Name, thin(xys), i); err != nil {
			return nil, err
		}
		drawn++
	}
	if drawn == 0 {
		return nil, errors.New("line plot has no point to draw")
	}
	return p, nil
}

// bad is whether a value cannot be drawn: not a number, or not positive on a log axis.
func bad(v float64, log bool) bool {
	return math.IsNaN(v) || math.IsInf(v, 0) || (log && v <= 0)
}

// addLine adds a solid line in series i's colour, with a dash pattern per series as well so
// that the lines stay apart in grey print.
func addLine(p *plot.Plot, name string, xys plotter.XYs, i int) error {
	ln, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("series %q: %w", name, err)
	}
	ln.Color = palette(i)
	ln.Width = vg.Points(1.5)
	dashes := [][]vg.Length{nil, {vg.Points(6), vg.Points(3)}, {vg.Points(2), vg.Points(2)}, {vg.Points(8), vg.Points(2), vg.Points(2), vg.Points(2)}}
	ln.Dashes = dashes[i%len(dashes)]
	p.Add(ln)
	if name != "" {
		p.Legend.Add(name, ln)
	}
	return nil
}

// thin keeps at most maxPoints of xys, evenly spaced, always with the first and the last:
// a figure's file grows with its points, and the eye cannot tell more apart.
func thin(xys plotter.XYs) plotter.XYs {
	if len(xys) <= maxPoints {
		return xys
	}
	out := make(plotter.XYs, 0, maxPoints)
	step := float64(len(xys)-1) / float64(maxPoints-1)
	for k := 0; k < maxPoints; k++ {
		out = append(out, xys[int(math.Round(float64(k)*step))])
	}
	return out
}

// Sample is a named set of observations, such as one policy's request latencies.
type Sample struct {
	Name   string
	Values []float64
}

// CDF plots the empirical cumulative distribution of each sample: the fraction of
// observations at or below x. Tail latencies read straight off it.
type CDF struct {
	Title, XLabel string
	Samples       []Sample
	// LogX puts the values on a log scale (latencies spanning decades); values <= 0 are left out.
	LogX bool
}

// Plot implements Figure.
func (c CDF) Plot() (*plot.Plot, error) {
	if len(c.Samples) == 0 {
		return nil, errors.New("CDF has no sample")
	}
	p := newPlot(c.Title, c.XLabel, "fraction at or below")
	if c.LogX {
		logAxis(&p.X)
	}
	p.Y.Min, p.Y.Max = 0, 1
	drawn := 0
	for i, s := range c.Samples {
		xys := ecdf(s.Values, c.LogX)
		if len(xys) == 0 {
			continue
		}
		if err := addLine(p, s.Name, xys, i); err != nil {
			return nil, err
		}
		drawn++
	}
	if drawn == 0 {
		return nil, errors.New("CDF has no value to draw")
	}
	return p, nil
}

// ecdf is the step curve of the empirical CDF of values, at no more than maxPoints
// quantiles (always the smallest and the largest value, so the tails are exact).
func ecdf(values []float64, log bool) plotter.XYs {
	v := make([]float64, 0, len(values))
	for _, x := range values {
		if !bad(x, log) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return nil
	}
	sort.Float64s(v)
	n := len(v)
	points := n
	if points > maxPoints/2 {
		points = maxPoints / 2
	}
	xys := make(plotter.XYs, 0, 2*points)
	prev := 0.0
	for k := 1; k <= points; k++ {
		// The k-th of points evenly spaced ranks, the last being n.
		rank := int(math.Ceil(float64(k) * float64(n) / float64(points)))
		x := v[rank-1]
		// A vertical step at x from the fraction below it to the fraction at or below it.
		xys = append(xys, plotter.XY{X: x, Y: prev}, plotter.XY{X: x, Y: float64(rank) / float64(n)})
		prev = float64(rank) / float64(n)
	}
	return xys
}
