// Package redistest starts a real redis-server on a free loopback port for
// tests. redis-server must be on PATH; .ci/run installs it from Debian's
// redis-server package. Tests fail (never skip) without it, so a missing
// dependency cannot pass unnoticed.
package redistest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is a running redis-server. Use Start in a test, or New and Close
// in TestMain to share one server across a package.
type Server struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	once sync.Once
}

// Start starts a redis-server for t and stops it when t ends. It returns
// the server's "127.0.0.1:port" address.
func Start(t testing.TB) (addr string) {
	t.Helper()
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s.Addr()
}

// New starts a redis-server and waits until it answers PING.
func New() (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redistest: redis-server not found on PATH; " +
			".ci/run installs it from Debian's redis-server package (apt-get install redis-server)")
	}
	var lastErr error
	for range 3 { // the free port may be taken between probing and binding
		s, err := start(bin)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// Addr returns the server's "127.0.0.1:port" address.
func (s *Server) Addr() string { return s.addr }

// Close stops the server and removes its directory. It is idempotent.
func (s *Server) Close() {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(os.Interrupt)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
		_ = os.RemoveAll(s.dir)
	})
}

func start(bin string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, err
	}
	s := &Server{
		addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		dir:  dir,
		out:  new(syncBuffer),
		done: make(chan struct{}),
	}
	s.cmd = exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--logfile", "")
	s.cmd.Dir = dir
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("redistest: start redis-server: %w", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()

	deadline := time.Now().Add(10 * time.Second)
	for {
		if ping(s.addr) == nil {
			return s, nil
		}
		select {
		case <-s.done:
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redistest: redis-server on port %d exited:\n%s", port, s.out.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Close()
			return nil, fmt.Errorf("redistest: redis-server on port %d did not answer PING:\n%s", port, s.out.String())
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ping sends an inline PING and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redistest: PING answered %q", line)
	}
	return nil
}

// syncBuffer collects the server's output for error messages.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
