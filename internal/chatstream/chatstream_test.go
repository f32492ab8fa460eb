package chatstream

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFirstToken(t *testing.T) {
	start := time.Now()
	d, err := FirstToken(strings.NewReader("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n"+
		"data: {\"choices\":[{\"delta\":{\"content\":\"tok0\"}}]}\n\ndata: [DONE]\n\n"), start)
	require.NoError(t, err)
	assert.Positive(t, d)

	_, err = FirstToken(strings.NewReader("data: {\"choices\":[{\"delta\":{\"content\":\"tok0\"}}]}\n\n"), start)
	assert.ErrorContains(t, err, "stream cut before [DONE]")
	_, err = FirstToken(strings.NewReader("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\ndata: [DONE]\n\n"), start)
	assert.ErrorContains(t, err, "stream ended without content")
}
