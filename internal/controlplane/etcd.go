package controlplane

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

const (
	// etcdPortAttempts bounds retries when a port picked as free was taken
	// by someone else before etcd bound it.
	etcdPortAttempts = 5
	// etcdStopGrace is how long etcd gets to exit after SIGTERM before it
	// is killed; with --unsafe-no-fsync it normally exits in milliseconds.
	etcdStopGrace = 10 * time.Second
	// etcdQuotaBytes is the largest quota etcd recommends. It is only a
	// limit, nothing is preallocated, and the default 2GiB could be hit by
	// long-running sandboxes that create many objects.
	etcdQuotaBytes = 8 << 30
)

// etcdProcess is an etcd server running as a child process.
type etcdProcess struct {
	cmd       *exec.Cmd
	clientURL string
	dataDir   string
	logPath   string
	exited    chan struct{} // closed once cmd.Wait has returned
	waitErr   error         // valid after exited is closed
}

// startEtcd starts etcd with its data under dir and waits until it serves.
func startEtcd(ctx context.Context, logger klog.Logger, binary, dir string) (*etcdProcess, error) {
	var lastErr error
	for attempt := 1; attempt <= etcdPortAttempts; attempt++ {
		e, err := startEtcdOnce(ctx, logger, binary, dir, attempt)
		if err == nil {
			return e, nil
		}
		lastErr = err
		if ctx.Err() != nil || !errors.Is(err, errPortInUse) {
			break
		}
		logger.V(1).Info("etcd port clash, retrying with new ports", "attempt", attempt, "err", err)
	}
	return nil, lastErr
}

var errPortInUse = errors.New("etcd port already in use")

func startEtcdOnce(ctx context.Context, logger klog.Logger, binary, dir string, attempt int) (*etcdProcess, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])

	e := &etcdProcess{
		clientURL: clientURL,
		dataDir:   filepath.Join(dir, fmt.Sprintf("etcd-data-%d", attempt)),
		logPath:   filepath.Join(dir, fmt.Sprintf("etcd-%d.log", attempt)),
		exited:    make(chan struct{}),
	}
	// etcd's stderr goes straight to a file (no pipe, no goroutine): it
	// costs nothing while things work and lets errors quote its tail.
	logFile, err := os.Create(e.logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own descriptor

	e.cmd = exec.Command(binary,
		"--name=berth",
		"--data-dir="+e.dataDir,
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=berth="+peerURL,
		// The data is thrown away on Stop, durability buys nothing and
		// fsync dominates apiserver write latency on slow disks.
		"--unsafe-no-fsync",
		// A single member elects itself after the election timeout
		// (randomized, up to 2x): ~1s of startup with the defaults
		// (100ms/1000ms), ~0.1s with these. With no peers, there are no
		// heartbeats to miss, so short timeouts cost nothing.
		"--heartbeat-interval=10",
		"--election-timeout=100",
		"--quota-backend-bytes="+strconv.FormatInt(etcdQuotaBytes, 10),
		"--log-outputs=stderr",
		"--log-level=info",
	)
	e.cmd.Stdout = logFile
	e.cmd.Stderr = logFile
	// Pdeathsig kills etcd when the test binary dies without running Stop
	// (test timeout panic, os.Exit, SIGKILL), so no orphan keeps its ports
	// and data dir busy. Setpgid takes etcd out of the terminal's foreground process
	// group, so Ctrl-C reaches the sandbox (which stops the apiserver, then etcd) and not
	// etcd directly. Linux only, like the rest of this package.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}

	logger.V(1).Info("Starting etcd", "binary", binary, "clientURL", clientURL, "log", e.logPath)
	if err := e.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting etcd: %w", err)
	}
	go func() {
		e.waitErr = e.cmd.Wait()
		close(e.exited)
	}()

	if err := e.waitHealthy(ctx); err != nil {
		e.stop(logger)
		tail := e.logTail(4096)
		os.RemoveAll(e.dataDir)
		if bytes.Contains(tail, []byte("address already in use")) {
			err = fmt.Errorf("%w: %v", errPortInUse, err)
		}
		return nil, fmt.Errorf("%w\netcd log (%s) ends with:\n%s", err, e.logPath, tail)
	}
	return e, nil
}

// waitHealthy polls /health until etcd reports healthy, which implies it has
// elected itself leader and can serve linearizable requests.
func (e *etcdProcess) waitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	var lastErr error
	for {
		select {
		case <-e.exited:
			return fmt.Errorf("etcd exited during startup: %v", e.waitErr)
		default:
		}
		lastErr = e.checkHealth(ctx, client)
		if lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("etcd did not become healthy: %w (last error: %v)", context.Cause(ctx), lastErr)
		case <-e.exited:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (e *etcdProcess) checkHealth(ctx context.Context, client *http.Client) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.clientURL+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"health":"true"`)) {
		return fmt.Errorf("GET /health: %s: %s", resp.Status, bytes.TrimSpace(body))
	}
	return nil
}

// stop terminates etcd gracefully, killing it if it does not exit in time,
// and waits until the process is gone. Safe to call after etcd exited.
func (e *etcdProcess) stop(logger klog.Logger) {
	select {
	case <-e.exited:
		return
	default:
	}
	_ = e.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.exited:
	case <-time.After(etcdStopGrace):
		logger.Info("etcd did not exit after SIGTERM, killing it", "pid", e.cmd.Process.Pid, "grace", etcdStopGrace)
		_ = e.cmd.Process.Kill()
		<-e.exited
	}
}

// logTail returns up to n bytes from the end of etcd's log.
func (e *etcdProcess) logTail(n int64) []byte {
	f, err := os.Open(e.logPath)
	if err != nil {
		return []byte(err.Error())
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > n {
		_, _ = f.Seek(-n, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	return b
}

// freePorts returns n distinct loopback ports that were free a moment ago.
// All listeners are held open until every port is picked so the kernel does
// not hand out the same port twice.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("picking a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
