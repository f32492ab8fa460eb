// Package cmdtest runs a command's main in its own test binary: the binary re-executes
// itself as the command, so a test sees what a user of the command would (output, exit).
package cmdtest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// asMain is set in the environment of a test binary started as its command.
const asMain = "BERTH_TEST_MAIN"

// MainOrTests is a command package's TestMain: when Output started this binary, it is the
// command (main runs with the arguments); otherwise the tests run.
func MainOrTests(m *testing.M, main func()) {
	AsCommand(main)
	os.Exit(m.Run())
}

// AsCommand runs main and exits when Output or Run started this binary as the command, and
// returns otherwise: call it first in a TestMain that does more than run the tests.
func AsCommand(main func()) {
	if os.Getenv(asMain) != "" {
		main()
		os.Exit(0)
	}
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

// Run runs the command with args and returns what it wrote (standard output and error) and
// its exit status; the test fails if it is still running after timeout.
func Run(t *testing.T, timeout time.Duration, args ...string) (output string, exitCode int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), asMain+"=1")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%v: still running after %s; output: %s", args, timeout, out)
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("%v: %v", args, err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}

// JSONLines parses every non-empty line of output as one JSON object (a structured log
// line); the test fails on a line that is not one.
func JSONLines(t *testing.T, output string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for l := range strings.SplitSeq(output, "\n") {
		if strings.TrimSpace(l) == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("not a JSON log line (%v): %s", err, l)
			continue
		}
		lines = append(lines, m)
	}
	return lines
}
