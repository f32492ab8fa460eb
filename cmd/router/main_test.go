package main

import (
	"flag"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-sh/berth/internal/cmdtest"
	"github.com/berth-sh/berth/internal/flagdoc"
	"github.com/berth-sh/berth/pkg/version"
)

// The test binary is also the command (cmdtest.Output starts it so).
func TestMain(m *testing.M) { cmdtest.MainOrTests(m, main) }

// --version prints the version and exits 0, before anything needs a cluster.
func TestVersionFlag(t *testing.T) {
	assert.Equal(t, "berth-router "+version.Get().String()+"\n", cmdtest.Output(t, "--version"))
}

var updateDocs = flag.Bool("update-docs", false, "write the flag tables into docs/flags.md")

// docs/flags.md lists berth-router's flags as the code defines them.
func TestFlagsDoc(t *testing.T) {
	fs := flag.NewFlagSet("berth-router", flag.ContinueOnError)
	bindFlags(fs)
	require.NoError(t, flagdoc.Check("../../docs/flags.md", "berth-router", flagdoc.Markdown(fs), *updateDocs))
}

// Logs are JSON lines by default (zap's production encoder, docs/flags.md), each with its
// level, time and message, errors with the error: here the start line naming the version,
// then the failure to find a cluster, and a non-zero exit. --zap-encoder=console switches
// to text.
func TestLogsAreJSONLines(t *testing.T) {
	cmdtest.CheckJSONLogs(t, "berth-router", version.Get().Version)
}
