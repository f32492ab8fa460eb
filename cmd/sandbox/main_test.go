package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/berth-sh/berth/internal/cmdtest"
	"github.com/berth-sh/berth/pkg/version"
)

// The test binary is also the command (cmdtest.Output starts it so).
func TestMain(m *testing.M) { cmdtest.MainOrTests(m, main) }

// --version prints the version and exits 0, before anything needs a cluster.
func TestVersionFlag(t *testing.T) {
	assert.Equal(t, "berth-sandbox "+version.Get().String()+"\n", cmdtest.Output(t, "--version"))
}
