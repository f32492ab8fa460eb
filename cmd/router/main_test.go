package main

import (
	"encoding/json"
	"flag"
	"strings"
	"testing"
	"time"

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
	t.Setenv("KUBECONFIG", "/nonexistent")
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a pod either
	out, code := cmdtest.Run(t, time.Minute)
	assert.NotZero(t, code, "no cluster: %s", out)
	lines := cmdtest.JSONLines(t, out)
	require.NotEmpty(t, lines, "logged nothing")
	for _, l := range lines {
		for _, key := range []string{"level", "ts", "msg"} {
			assert.Contains(t, l, key, "%v", l)
		}
	}
	assert.Equal(t, "starting berth-router", lines[0]["msg"])
	assert.Equal(t, "info", lines[0]["level"])
	assert.Equal(t, version.Get().Version, lines[0]["version"], "%v", lines[0])
	last := lines[len(lines)-1]
	assert.Equal(t, "error", last["level"], "%v", last)
	assert.Contains(t, last["msg"], "kubeconfig", "%v", last)
	assert.NotEmpty(t, last["error"], "%v", last)

	out, _ = cmdtest.Run(t, time.Minute, "--zap-encoder=console")
	first, _, _ := strings.Cut(out, "\n")
	assert.False(t, json.Valid([]byte(first)), "with --zap-encoder=console: %s", first)
	assert.Contains(t, first, "starting berth-router")
}
