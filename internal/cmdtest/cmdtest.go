// Package cmdtest runs a command's main in its own test binary: the binary re-executes
// itself as the command, so a test sees what a user of the command would (output, exit).
package cmdtest

import (
	"os"
	"os/exec"
	"testing"
)

// asMain is set in the environment of a test binary started as its command.
const asMain = "BERTH_TEST_MAIN"

// MainOrTests is a command package's TestMain: when Output started this binary, it is the
// command (main runs with the arguments); otherwise the tests run.
func MainOrTests(m *testing.M, main func()) {
	if os.Getenv(asMain) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Output runs the command with args and no reachable cluster, and returns its standard
// output; the test fails if the command does not exit 0.
func Output(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), asMain+"=1", "KUBECONFIG=/nonexistent")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v; output: %s", args, err, out)
	}
	return string(out)
}
