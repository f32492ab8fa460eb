package redistest

import (
	"net"
	"strings"
	"testing"
)

func TestStartAnswersPingAndStops(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s.Close() // idempotent
	if c, err := net.Dial("tcp", s.Addr()); err == nil {
		c.Close()
		t.Fatal("server still listening after Close")
	}
	if addr := Start(t); ping(addr) != nil {
		t.Fatal("Start: no PING answer")
	}
}

func TestMissingBinaryIsAnError(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := New()
	if err == nil || !strings.Contains(err.Error(), ".ci/run") {
		t.Fatalf("New without redis-server = %v, want an error pointing at .ci/run", err)
	}
}
