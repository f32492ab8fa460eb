package figure

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Table is the raw numbers behind a figure, written as CSV beside it: one header, then
// one row per observation, so that anyone can redraw or re-check a figure.
type Table struct {
	Header []string
	Rows   [][]string
}

// NewTable is a table with these column names.
func NewTable(header ...string) *Table {
	return &Table{Header: header}
}

// Add appends a row. Numbers are written in full (no rounding: these are the raw numbers);
// durations in seconds, so that a column has one unit; NaN as an empty field.
func (t *Table) Add(values ...any) {
	row := make([]string, len(values))
	for i, v := range values {
		row[i] = field(v)
	}
	t.Rows = append(t.Rows, row)
}

func field(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case float64:
		if math.IsNaN(v) {
			return ""
		}
		return strconv.FormatFloat(v, 'g', -1, 64)
	case float32:
		return field(float64(v))
	case time.Duration:
		return field(v.Seconds())
	case bool:
		return strconv.FormatBool(v)
	default:
		return fmt.Sprint(v)
	}
}

// WriteFile writes the table to path as CSV, creating path's directory. Every row must
// have as many fields as the header.
func (t *Table) WriteFile(path string) error {
	for i, r := range t.Rows {
		if len(r) != len(t.Header) {
			return fmt.Errorf("csv %s: row %d has %d fields, the header %d", path, i, len(r), len(t.Header))
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(t.Header)
	_ = w.WriteAll(t.Rows) // WriteAll flushes
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("csv %s: %w", path, err)
	}
	return f.Close()
}
