package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/inprocess"
	"github.com/berth-sh/berth/pkg/controller"
)

// A component process is this binary with componentEnv naming its role and kubeconfigEnv
// its apiserver; it prints a statsPrefix line with its goroutines and heap every second.
const (
	componentEnv  = "SCALEBENCH_COMPONENT"
	kubeconfigEnv = "SCALEBENCH_KUBECONFIG"
	statsPrefix   = "scalebench-stats "
	// profileEnv, when set, is a directory each component writes its CPU profile to.
	profileEnv = "SCALEBENCH_PROFILE_DIR"
	// controllerQPS and controllerBurst are both controllers' client rate.
	controllerQPS   = 1000
	controllerBurst = 2000
)

// runIfComponent runs the component this process was started as and reports true, or
// reports false in the benchmark's own process.
func runIfComponent() bool {
	role := os.Getenv(componentEnv)
	if role == "" {
		return false
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() {
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			fmt.Fprintf(os.Stderr, "%sgoroutines=%d heap=%d\n", statsPrefix, runtime.NumGoroutine(), m.HeapInuse)
			time.Sleep(time.Second)
		}
	}()
	if d := os.Getenv(profileEnv); d != "" {
		// A CPU profile of the whole run, written when the component stops.
		f, err := os.Create(filepath.Join(d, role+".cpu.pprof"))
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
	}
	kubeconfig := os.Getenv(kubeconfigEnv)
	dir := filepath.Dir(kubeconfig)
	// Both schedulers run at the shipped configuration's client rate: what a user's
	// berth-scheduler gets, and the same for kube-scheduler.
	rate, err := inprocess.ShippedRate()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", role, err)
		os.Exit(1)
	}
	switch role {
	case "berth-scheduler":
		err = inprocess.RunScheduler(ctx, dir, kubeconfig, inprocess.SchedulerOptions{Rate: rate})
	case "kube-scheduler":
		err = inprocess.RunDefaultScheduler(ctx, dir, kubeconfig, rate)
	case "berth-controller", "kube-controller-manager":
		cfg, cerr := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if cerr != nil {
			err = cerr
			break
		}
		// Both controllers get the same client rate (kube-controller-manager's loops in
		// internal/controlplane run at it whatever cfg says).
		cfg.QPS, cfg.Burst = controllerQPS, controllerBurst
		// Count their requests by verb and resource (a copied config keeps the wrapper).
		counter := newRequestCounter()
		cfg.Wrap(counter.wrap)
		go reportRequests(ctx, counter)
		if role == "kube-controller-manager" {
			err = controlplane.RunControllers(ctx, cfg)
			break
		}
		mgr, merr := controller.NewManager(cfg, controller.Options{MetricsAddr: "0"})
		if merr != nil {
			err = merr
			break
		}
		err = mgr.Start(ctx)
	default:
		err = fmt.Errorf("unknown component %q", role)
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", role, err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
	return true
}

// reportRequests prints the counter's counts every 200 ms.
func reportRequests(ctx context.Context, counter *requestCounter) {
	for ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		fmt.Fprintf(os.Stderr, "%s%s\n", requestsPrefix, counter.snapshot())
	}
}

// stats is a component's self-report, plus its CPU seconds from /proc at that moment.
type stats struct {
	goroutines int
	heap       uint64
	cpu        float64
	// requests is the API requests the component made so far by verb and resource
	// (controllers only).
	requests map[string]int
}

// component is a running component process.
type component struct {
	role string
	cmd  *exec.Cmd
	mu   sync.Mutex
	last stats
	peak uint64 // VmHWM, read while the process runs
	// requests is the latest of the process's request counts (requestsPrefix lines),
	// received at requestsAt.
	requests   map[string]int
	requestsAt time.Time
	marks      map[string]stats
	done       chan struct{}
}

func startComponent(ctx context.Context, cp *controlplane.ControlPlane, dir, role string) (*component, error) {
	kubeconfig := filepath.Join(dir, role+".kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	c := &component{role: role, marks: map[string]stats{}, done: make(chan struct{})}
	c.cmd = exec.CommandContext(ctx, exe)
	c.cmd.Env = append(os.Environ(), componentEnv+"="+role, kubeconfigEnv+"="+kubeconfig)
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := c.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		s := bufio.NewScanner(stderr)
		s.Buffer(make([]byte, 64<<10), 1<<20)
		for s.Scan() {
			if raw, ok := strings.CutPrefix(s.Text(), requestsPrefix); ok {
				var counts map[string]int
				if json.Unmarshal([]byte(raw), &counts) == nil {
					c.mu.Lock()
					c.requests, c.requestsAt = counts, time.Now()
					c.mu.Unlock()
				}
				continue
			}
			line, ok := strings.CutPrefix(s.Text(), statsPrefix)
			if !ok {
				continue
			}
			var st stats
			if _, err := fmt.Sscanf(line, "goroutines=%d heap=%d", &st.goroutines, &st.heap); err == nil {
				st.cpu = c.cpuSeconds()
				c.mu.Lock()
				c.last = st
				if hwm := c.rssField("VmHWM:"); hwm > c.peak {
					c.peak = hwm
				}
				c.mu.Unlock()
			}
		}
		_ = c.cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *component) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(20 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

func (c *component) latest() stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.last
}

// mark records the component's stats now under name.
func (c *component) mark(name string) {
	st := c.latest()
	st.cpu = c.cpuSeconds()
	// The request counts the process prints next (within 200 ms): those it had made by now.
	start := time.Now()
	for deadline := start.Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		c.mu.Lock()
		fresh := c.requests == nil || c.requestsAt.After(start)
		c.mu.Unlock()
		if fresh {
			break
		}
	}
	c.mu.Lock()
	st.requests = c.requests
	c.marks[name] = st
	c.mu.Unlock()
}

func (c *component) peakRSS() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak
}

func (c *component) rss() uint64 { return c.rssField("VmRSS:") }

// rssField reads a kB field of /proc/<pid>/status, in bytes.
func (c *component) rssField(field string) uint64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// cpuSeconds is the process's user + system time (/proc/<pid>/stat, in clock ticks of
// 1/100 s on Linux).
func (c *component) cpuSeconds() float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields after its closing parenthesis.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}
