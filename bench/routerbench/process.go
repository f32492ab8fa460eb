package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/berth-sh/berth/pkg/router/pick"
)

// buildRouter compiles cmd/router into dir, so the overhead experiment can run berth-router
// as its own process, the way nginx runs: then neither proxy shares a Go runtime (and its
// garbage collector) with the load generator and the engines.
func buildRouter(dir string) (string, error) {
	bin := filepath.Join(dir, "berth-router")
	// By import path, so that it builds from any directory of the module (a test runs in its package's).
	cmd := exec.Command("go", "build", "-o", bin, "github.com/berth-sh/berth/cmd/router")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building cmd/router: %w", err)
	}
	return bin, nil
}

// startRouterProcess runs the berth-router binary against the benchmark's control plane
// and waits until it answers a request.
func (c *cluster) startRouterProcess(ctx context.Context, bin, dir string, policy pick.Policy, scorers string, probeBody []byte) (*routerHandle, error) {
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := c.cp.WriteKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	args := []string{"--kubeconfig", kubeconfig, "--addr", addr, "--admin-addr", "", "--policy", string(policy)}
	if scorers != "" {
		args = append(args, "--scorers", scorers)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = nil // its log lines would drown the progress output
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	h := &routerHandle{url: "http://" + addr + "/v1/chat/completions", stop: stop,
		cpuSeconds: func() float64 { return processCPUSeconds(pid) }}
	cl := newHTTPClient(0)
	defer cl.CloseIdleConnections()
	for deadline := time.Now().Add(60 * time.Second); ; {
		if err := doRequest(cl, h.url, probeBody); err == nil {
			return h, nil
		} else if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("berth-router process at %s does not serve: %w", addr, err)
		}
		select {
		case <-exited:
			return nil, fmt.Errorf("berth-router process exited before serving")
		case <-time.After(100 * time.Millisecond):
		}
	}
}
