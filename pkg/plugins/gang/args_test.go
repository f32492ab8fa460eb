package gang

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
)

// Args with several mistakes at once, as the scheduler hands them over: every one is
// reported, each with its path, not only the first.
func TestArgsReportEveryMistake(t *testing.T) {
	_, err := decodeArgs(&runtime.Unknown{ContentType: runtime.ContentTypeJSON, Raw: []byte(`{
		"permitWaitingTimeSeconds": 0,
		"permitWaitingTimeSecond": 60,
		"backoffSeconds": -1,
		"reserveAfterSeconds": 9999999999,
		"reserveAfter": 5
	}`)})
	require.Error(t, err)
	for _, want := range []string{
		`unknown field "permitWaitingTimeSecond"`,
		`unknown field "reserveAfter"`,
		"permitWaitingTimeSeconds: Invalid value: 0: must be positive",
		"backoffSeconds: Invalid value: -1: must not be negative",
		"reserveAfterSeconds: Invalid value: 9999999999: must be between -9223372036 and 9223372036",
	} {
		assert.ErrorContains(t, err, want)
	}

	// Field names match exactly, and a field given twice is refused too.
	_, err = decodeArgs(&runtime.Unknown{Raw: []byte(`{"BackoffSeconds": 1, "backoffSeconds": 1, "backoffSeconds": 2}`)})
	assert.ErrorContains(t, err, `unknown field "BackoffSeconds"`)
	assert.ErrorContains(t, err, `duplicate field "backoffSeconds"`)

	args, err := decodeArgs(&runtime.Unknown{Raw: []byte(`{"permitWaitingTimeSeconds": 30, "backoffSeconds": 0, "reserveAfterSeconds": -1}`)})
	require.NoError(t, err)
	assert.Equal(t, int64(30), *args.PermitWaitingTimeSeconds)
	assert.Equal(t, int64(0), *args.BackoffSeconds)
	assert.Negative(t, args.reserveAfter(), "negative turns keeping capacity off")
}
