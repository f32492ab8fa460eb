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

// CheckJSONLogs runs the command (named name in its start line) with no cluster to find and
// checks what a user of its logs relies on (docs/flags.md): JSON lines by default, each
// with its level, time and message; first "starting <name>" with the version, last an
// error about the kubeconfig with the error; a non-zero exit; and text instead with
// --zap-encoder=console.
func CheckJSONLogs(t *testing.T, name, version string) {
	t.Helper()
	t.Setenv("KUBECONFIG", "/nonexistent")
	t.Setenv("KUBERNETES_SERVICE_HOST", "") // not in a pod either
	out, code := Run(t, time.Minute)
	if code == 0 {
		t.Errorf("exited 0 without a cluster: %s", out)
	}
	lines := JSONLines(t, out)
	if len(lines) == 0 {
		t.Fatalf("logged nothing: %s", out)
	}
	for _, l := range lines {
		for _, key := range []string{"level", "ts", "msg"} {
			if _, ok := l[key]; !ok {
				t.Errorf("log line without %q: %v", key, l)
			}
		}
	}
	first, last := lines[0], lines[len(lines)-1]
	if first["msg"] != "starting "+name || first["level"] != "info" || first["version"] != version {
		t.Errorf("first line: want info \"starting %s\" with version %s, got %v", name, version, first)
	}
	if msg, _ := last["msg"].(string); last["level"] != "error" || !strings.Contains(msg, "kubeconfig") || last["error"] == nil || last["error"] == "" {
		t.Errorf("last line: want an error about the kubeconfig with the error, got %v", last)
	}

	out, _ = Run(t, time.Minute, "--zap-encoder=console")
	head, _, _ := strings.Cut(out, "\n")
	if json.Valid([]byte(head)) || !strings.Contains(head, "starting "+name) {
		t.Errorf("with --zap-encoder=console, want a text start line, got: %s", head)
	}
}
