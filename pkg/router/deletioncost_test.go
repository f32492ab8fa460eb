package router

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The published cost is a log2 bucket of prefix blocks plus 16 blocks per open request:
// nothing is 0, and doubling the load moves it by one, so steady traffic rewrites nothing.
func TestDeletionCostBucket(t *testing.T) {
	assert.Equal(t, 0, deletionCostBucket(0, 0), "an idle, cold pod costs nothing")
	assert.Equal(t, 1, deletionCostBucket(0, 1))
	assert.Equal(t, 5, deletionCostBucket(1, 0), "one open request weighs 16 blocks")
	assert.Equal(t, 6, deletionCostBucket(1, 16))
	assert.Equal(t, deletionCostBucket(0, 600), deletionCostBucket(0, 1000), "close loads share a bucket")
	assert.Less(t, deletionCostBucket(0, 100), deletionCostBucket(0, 1000))
	assert.Equal(t, 0, deletionCostBucket(-3, -1), "never below zero")
	assert.LessOrEqual(t, deletionCostBucket(1<<40, 1<<30), 64, "inside the annotation's int32")
}
