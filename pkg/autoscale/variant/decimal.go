package variant

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
)

// decimalPattern is the pattern the VariantAutoscaling API puts on its decimal strings.
var decimalPattern = regexp.MustCompile(`^\d+(\.\d+)?$`)

// FormatDecimal writes x with two decimals, always matching ^\d+(\.\d+)?$: no sign,
// no exponent. Negative values (including those that would round to "-0.00"), NaN
// and infinities are written as "0.00", as llm-d zeroes such metric values.
func FormatDecimal(x float64) string {
	if !(x >= 0) || math.IsInf(x, 1) {
		x = 0
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}

// ParseDecimal reads a decimal string of the VariantAutoscaling API, such as a
// profile's alpha or beta. It accepts exactly ^\d+(\.\d+)?$.
func ParseDecimal(s string) (float64, error) {
	if !decimalPattern.MatchString(s) {
		return 0, fmt.Errorf("%q is not a decimal: want digits with an optional fraction, such as \"12.50\"", s)
	}
	return strconv.ParseFloat(s, 64)
}
