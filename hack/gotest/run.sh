#!/usr/bin/env bash
# hack/gotest/run.sh: go test "$@", with the whole output kept and a summary of what failed
# printed last. CI shows only the tail of a run, and the integration packages' control planes
# log thousands of lines after a failing test's own report; without this summary a failure in
# CI names its package but not its test.
set -uo pipefail
log=$(mktemp "${TMPDIR:-/tmp}/berth-gotest.XXXXXX.log")
"${GO:-go}" test "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  echo
  echo "==== what failed (go test $*; whole output in $log) ===="
  # The failing tests, their file:line reports and testify's Error/Messages lines, panics and
  # timeouts, without the control planes' klog lines (they start with I/W/E and a date).
  grep -E -- '--- FAIL|^FAIL|^panic:|panic: test timed out|_test\.go:[0-9]+:|Error Trace:|^\s+Error:|^\s+Messages:|^\s+Test:|expected:|actual  :' "$log" \
    | grep -v -E '^[IWE][0-9]{4} ' | head -200
fi
exit "$rc"
