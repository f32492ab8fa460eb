package main

import (
	"flag"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/berth-sh/berth/internal/flagdoc"
	"github.com/berth-sh/berth/pkg/version"
)

// With BERTH_TEST_MAIN set, this test binary is the command: it runs main with its arguments.
func TestMain(m *testing.M) {
	if os.Getenv("BERTH_TEST_MAIN") != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// --version prints the version and exits 0, before anything needs a cluster.
func TestVersionFlag(t *testing.T) {
	cmd := exec.Command(os.Args[0], "--version")
	cmd.Env = append(os.Environ(), "BERTH_TEST_MAIN=1", "KUBECONFIG=/nonexistent")
	out, err := cmd.Output()
	require.NoError(t, err, "output: %s", out)
	assert.Equal(t, "berth-controller "+version.Get().String()+"\n", string(out))
}

var updateDocs = flag.Bool("update-docs", false, "write the flag tables into docs/flags.md")

// docs/flags.md lists berth-controller's flags as the code defines them.
func TestFlagsDoc(t *testing.T) {
	fs := flag.NewFlagSet("berth-controller", flag.ContinueOnError)
	bindFlags(fs)
	require.NoError(t, flagdoc.Check("../../docs/flags.md", "berth-controller", flagdoc.Markdown(fs), *updateDocs))
}
