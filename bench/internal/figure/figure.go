// Package figure draws a benchmark's figures as SVG (line plots, CDFs, grouped bar charts,
// cell grids) and writes the raw numbers beside them as CSV, so that every table in
// bench/README.md can carry a plot and the data it was drawn from.
//
// SVG rather than PNG because the committed figures are text: small, and a re-run shows up
// in a diff. Fonts are not embedded (a viewer substitutes its own), which keeps a figure at a
// few tens of kilobytes; Save refuses one over MaxBytes rather than commit a bloated file.
package figure

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// MaxBytes is the largest SVG Save writes. Figures are committed to the repository; one
// that grows past this has too many points and should be thinned by its caller.
const MaxBytes = 150 << 10

// Width and Height are the size of every figure: the same size for all, so that figures
// side by side in the README line up.
const (
	Width  = 7 * vg.Inch
	Height = 4.5 * vg.Inch
)

// maxPoints is how many points a line or CDF is thinned to: more cannot be told apart
// at Width, and each point costs bytes.
const maxPoints = 600

// Figure is anything this package can draw.
type Figure interface {
	// Plot builds the plot, or says why the data cannot be drawn.
	Plot() (*plot.Plot, error)
}

// Save draws f into path as SVG, creating path's directory. It fails when the data cannot
// be drawn or the SVG would be larger than MaxBytes; nothing is written then.
func Save(path string, f Figure) error {
	p, err := f.Plot()
	if err != nil {
		return fmt.Errorf("figure %s: %w", path, err)
	}
	c := vgsvg.New(Width, Height)
	drawWithSideLegend(draw.New(c), p)
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return fmt.Errorf("figure %s: %w", path, err)
	}
	if buf.Len() > MaxBytes {
		return fmt.Errorf("figure %s: %d bytes, over the %d-byte limit: draw fewer points or cells", path, buf.Len(), MaxBytes)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// drawWithSideLegend draws p with its legend in a column to the right of the plot rather
// than over it: a legend inside the axes hides bars, cells or a curve's tail, wherever it goes.
func drawWithSideLegend(dc draw.Canvas, p *plot.Plot) {
	leg := p.Legend
	p.Legend = plot.NewLegend()
	size := leg.Rectangle(dc).Size()
	if size.X == 0 {
		p.Draw(dc)
		return
	}
	pad := vg.Points(8)
	p.Draw(draw.Crop(dc, 0, -(size.X + 2*pad), 0, 0))
	leg.Left, leg.Top = true, true
	// Below the title, level with the top of the axes.
	leg.Draw(draw.Crop(dc, Width-size.X-pad, 0, 0, -vg.Points(24)))
}

// newPlot is a plot with the title and axis labels every figure has.
func newPlot(title, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	return p
}

// logAxis turns a on to a log scale; its range must be positive, which callers ensure by
// dropping values <= 0 (a log axis cannot show them).
func logAxis(a *plot.Axis) {
	a.Scale = plot.LogScale{}
	a.Tick.Marker = plot.LogTicks{Prec: -1}
}

// palette is the colour of series i: the first eight from a palette that stays apart for
// readers with the common colour-vision deficiencies (Okabe and Ito), then hues spaced by
// the golden angle so that neighbours in a placement map differ however many groups there are.
func palette(i int) color.Color {
	okabeIto := []color.RGBA{
		{0x00, 0x72, 0xb2, 0xff}, // blue
		{0xe6, 0x9f, 0x00, 0xff}, // orange
		{0x00, 0x9e, 0x73, 0xff}, // bluish green
		{0xd5, 0x5e, 0x00, 0xff}, // vermillion
		{0xcc, 0x79, 0xa7, 0xff}, // reddish purple
		{0x56, 0xb4, 0xe9, 0xff}, // sky blue
		{0xf0, 0xe4, 0x42, 0xff}, // yellow
		{0x00, 0x00, 0x00, 0xff}, // black
	}
	if i < len(okabeIto) {
		return okabeIto[i]
	}
	h := math.Mod(float64(i)*137.508, 360)
	l := 0.45 + 0.15*float64(i%3)
	return hsl(h, 0.65, l)
}

// hsl converts a hue (degrees), saturation and lightness (0..1) to RGB.
func hsl(h, s, l float64) color.RGBA {
	c := (1 - math.Abs(2*l-1)) * s
	x := c * (1 - math.Abs(math.Mod(h/60, 2)-1))
	m := l - c/2
	var r, g, b float64
	switch {
	case h < 60:
		r, g = c, x
	case h < 120:
		r, g = x, c
	case h < 180:
		g, b = c, x
	case h < 240:
		g, b = x, c
	case h < 300:
		r, b = x, c
	default:
		r, b = c, x
	}
	to := func(v float64) uint8 { return uint8(math.Round((v + m) * 255)) }
	return color.RGBA{to(r), to(g), to(b), 0xff}
}
