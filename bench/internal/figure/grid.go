package figure

import (
	"errors"
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Grid is a map of cells in rows and columns, such as a placement map: one row per leaf
// switch, one column per node in it, each cell coloured by the group placed there.
//
// Cells are either categories (Cells, with -1 for an empty cell and Names for the legend)
// or numbers (Values, shaded from light to dark, NaN for an empty cell); set one of them.
type Grid struct {
	Title, XLabel, YLabel string
	// Cells[row][col] is the category of a cell, an index into Names; -1 is empty.
	Cells [][]int
	// Names are the categories' names. The legend lists them when there are at most
	// maxLegend; more would not fit in the column beside the map.
	Names []string
	// Values[row][col] is a cell's number; NaN is empty.
	Values [][]float64
	// RowLabels name the rows (bottom to top); without them rows are numbered.
	RowLabels []string
}

// maxLegend is how many categories a grid's legend lists at most.
const maxLegend = 20

// maxTicks is how many row labels are written at most; past it every n-th is.
const maxTicks = 32

// empty is the colour of an empty cell.
var empty = color.RGBA{0xee, 0xee, 0xee, 0xff}

// Plot implements Figure.
func (g Grid) Plot() (*plot.Plot, error) {
	rows, cols, err := g.dims()
	if err != nil {
		return nil, err
	}
	p := newPlot(g.Title, g.XLabel, g.YLabel)
	cells := &gridPlotter{rows: rows, cols: cols, colour: g.colour()}
	p.Add(cells)
	p.X.Min, p.X.Max = 0, float64(cols)
	p.Y.Min, p.Y.Max = 0, float64(rows)
	p.X.Tick.Marker = centredTicks(cols, nil)
	p.Y.Tick.Marker = centredTicks(rows, g.RowLabels)
	switch {
	case g.Cells != nil && len(g.Names) <= maxLegend:
		for i, n := range g.Names {
			p.Legend.Add(n, swatch(palette(i)))
		}
	case g.Values != nil:
		lo, hi := g.valueRange()
		p.Legend.Add(fmt.Sprintf("%.4g", lo), swatch(shade(0)))
		p.Legend.Add(fmt.Sprintf("%.4g", hi), swatch(shade(1)))
	}
	return p, nil
}

// dims checks that the grid is rectangular and has exactly one of Cells and Values.
func (g Grid) dims() (rows, cols int, err error) {
	switch {
	case (g.Cells == nil) == (g.Values == nil):
		return 0, 0, errors.New("grid needs exactly one of Cells and Values")
	case g.Cells != nil:
		rows = len(g.Cells)
		if rows > 0 {
			cols = len(g.Cells[0])
		}
		for r, row := range g.Cells {
			if len(row) != cols {
				return 0, 0, fmt.Errorf("grid row %d has %d cells, row 0 has %d", r, len(row), cols)
			}
			for c, v := range row {
				if v < -1 || (g.Names != nil && v >= len(g.Names)) {
					return 0, 0, fmt.Errorf("grid cell (%d, %d) is category %d, which has no name", r, c, v)
				}
			}
		}
	default:
		rows = len(g.Values)
		if rows > 0 {
			cols = len(g.Values[0])
		}
		for r, row := range g.Values {
			if len(row) != cols {
				return 0, 0, fmt.Errorf("grid row %d has %d cells, row 0 has %d", r, len(row), cols)
			}
		}
	}
	if rows == 0 || cols == 0 {
		return 0, 0, errors.New("grid has no cell")
	}
	if g.RowLabels != nil && len(g.RowLabels) != rows {
		return 0, 0, fmt.Errorf("grid has %d row labels for %d rows", len(g.RowLabels), rows)
	}
	return rows, cols, nil
}

// colour is the colour of the cell at (row, col).
func (g Grid) colour() func(r, c int) color.Color {
	if g.Cells != nil {
		return func(r, c int) color.Color {
			if v := g.Cells[r][c]; v >= 0 {
				return palette(v)
			}
			return empty
		}
	}
	lo, hi := g.valueRange()
	return func(r, c int) color.Color {
		v := g.Values[r][c]
		if math.IsNaN(v) {
			return empty
		}
		if hi == lo {
			return shade(1)
		}
		return shade((v - lo) / (hi - lo))
	}
}

// valueRange is the smallest and largest number in Values.
func (g Grid) valueRange() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, row := range g.Values {
		for _, v := range row {
			if !math.IsNaN(v) {
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
		}
	}
	if lo > hi {
		return 0, 0
	}
	return lo, hi
}

// shade is a blue from light (f = 0) to dark (f = 1).
func shade(f float64) color.Color {
	f = math.Max(0, math.Min(1, f))
	mix := func(a, b uint8) uint8 { return uint8(math.Round(float64(a) + f*(float64(b)-float64(a)))) }
	return color.RGBA{mix(0xde, 0x08), mix(0xeb, 0x30), mix(0xf7, 0x6b), 0xff}
}

// centredTicks labels each row or column at its centre: with labels when given, else
// numbered from 0, thinned to at most maxTicks labels.
func centredTicks(n int, labels []string) plot.ConstantTicks {
	every := (n + maxTicks - 1) / maxTicks
	ticks := make(plot.ConstantTicks, 0, n/every+1)
	for i := 0; i < n; i += every {
		label := fmt.Sprint(i)
		if labels != nil {
			label = labels[i]
		}
		ticks = append(ticks, plot.Tick{Value: float64(i) + 0.5, Label: label})
	}
	return ticks
}

// gridPlotter draws the cells. Runs of cells of one colour along a row are drawn as one
// rectangle: a placement map is mostly such runs, and each rectangle costs bytes.
type gridPlotter struct {
	rows, cols int
	colour     func(r, c int) color.Color
}

func (g *gridPlotter) Plot(c draw.Canvas, p *plot.Plot) {
	tx, ty := p.Transforms(&c)
	// A thin white gap between rows keeps the rows apart where neighbours share a colour.
	gap := vg.Points(0.5)
	for r := 0; r < g.rows; r++ {
		for start := 0; start < g.cols; {
			clr := g.colour(r, start)
			end := start + 1
			for end < g.cols && sameColour(g.colour(r, end), clr) {
				end++
			}
			x0, x1 := tx(float64(start)), tx(float64(end))
			y0, y1 := ty(float64(r))+gap, ty(float64(r+1))-gap
			c.FillPolygon(clr, []vg.Point{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}})
			start = end
		}
	}
}

func (g *gridPlotter) DataRange() (xmin, xmax, ymin, ymax float64) {
	return 0, float64(g.cols), 0, float64(g.rows)
}

func sameColour(a, b color.Color) bool {
	ar, ag, ab, aa := a.RGBA()
	br, bg, bb, ba := b.RGBA()
	return ar == br && ag == bg && ab == bb && aa == ba
}

// swatch is a legend entry's filled square.
func swatch(c color.Color) plot.Thumbnailer { return swatchThumb{c} }

type swatchThumb struct{ c color.Color }

func (s swatchThumb) Thumbnail(c *draw.Canvas) {
	pts := []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Min.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Min.X, Y: c.Max.Y}}
	c.FillPolygon(s.c, c.ClipPolygonY(pts))
}
