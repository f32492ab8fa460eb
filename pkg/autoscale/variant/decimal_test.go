package variant

import (
	"math"
	"testing"
)

func TestFormatDecimal(t *testing.T) {
	for _, tc := range []struct {
		x    float64
		want string
	}{
		{0, "0.00"},
		{40, "40.00"},
		{99.0224828934506, "99.02"},
		{12.3456, "12.35"},
		{1e21, "1000000000000000000000.00"}, // no exponent
		{1e-7, "0.00"},
		{-0.001, "0.00"}, // would be "-0.00"
		{-5, "0.00"},
		{math.NaN(), "0.00"},
		{math.Inf(1), "0.00"},
		{math.Inf(-1), "0.00"},
	} {
		got := FormatDecimal(tc.x)
		if got != tc.want {
			t.Errorf("FormatDecimal(%v) = %q, want %q", tc.x, got, tc.want)
		}
		if !decimalPattern.MatchString(got) {
			t.Errorf("FormatDecimal(%v) = %q does not match %s", tc.x, got, decimalPattern)
		}
	}
}

func TestParseDecimal(t *testing.T) {
	for s, want := range map[string]float64{"20.58": 20.58, "0.41": 0.41, "7": 7, "0040.500": 40.5} {
		got, err := ParseDecimal(s)
		if err != nil || got != want {
			t.Errorf("ParseDecimal(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "-1", "1e3", ".5", "1.", " 1", "NaN", "1,5"} {
		if _, err := ParseDecimal(s); err == nil {
			t.Errorf("ParseDecimal(%q) accepted", s)
		}
	}
	_, err := ParseDecimal("1e3")
	if want := `"1e3" is not a decimal: want digits with an optional fraction, such as "12.50"`; err == nil || err.Error() != want {
		t.Errorf("error = %v, want %q", err, want)
	}
}
