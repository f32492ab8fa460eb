// Package ha runs berth-scheduler and berth-controller as they ship, two replicas each with
// leader election, and kills the leader with SIGKILL in the middle of its work: the standby
// must take over within the lease duration, and nothing may be duplicated, orphaned or
// partly bound. Each replica is a separate process (this test binary, re-executed), so a kill
// is a real crash: no deferred call runs and the lease is not released.
package ha

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/yaml"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/scheduler"
)

var cp *controlplane.ControlPlane

// In a re-executed test binary, roleEnv names the component to run (scheduler or
// controller) against the kubeconfig kubeconfigEnv names, until SIGTERM.
const (
	roleEnv       = "BERTH_HA_ROLE"
	kubeconfigEnv = "BERTH_HA_KUBECONFIG"
)

// The leases are shorter than the shipped defaults (15 s, 10 s, 2 s) to keep the tests short,
// and long enough that a replica on this loaded 2-core machine does not lose its lease
// without being killed (the test fails if a replica exits on its own).
const (
	leaseDuration = 5 * time.Second
	renewDeadline = 4 * time.Second
	retryPeriod   = 500 * time.Millisecond
	leaseNS       = "berth-system"
)

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "scheduler":
		os.Exit(runScheduler(os.Getenv(kubeconfigEnv)))
	case "controller":
		os.Exit(runController(os.Getenv(kubeconfigEnv)))
	}
	ctrl.SetLogger(klog.NewKlogr())
	cptest.Main(m, &cp)
}

// runScheduler is a berth-scheduler replica: the shipped configuration, leader election on
// (lease berth-system/berth-scheduler, as shipped) with the short lease above.
func runScheduler(kubeconfig string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	raw, err := scheduler.InProcessConfig(kubeconfig, map[string]any{"permitWaitingTimeSeconds": 30, "backoffSeconds": 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, "berth-scheduler:", err)
		return 1
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "berth-scheduler:", err)
		return 1
	}
	cfg["leaderElection"] = map[string]any{"leaderElect": true, "resourceName": scheduler.SchedulerName, "resourceNamespace": leaseNS,
		"leaseDuration": leaseDuration.String(), "renewDeadline": renewDeadline.String(), "retryPeriod": retryPeriod.String()}
	raw, err = yaml.Marshal(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "berth-scheduler:", err)
		return 1
	}
	path := filepath.Join(filepath.Dir(kubeconfig), fmt.Sprintf("scheduler-%d.yaml", os.Getpid()))
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "berth-scheduler:", err)
		return 1
	}
	if err := scheduler.Run(ctx, scheduler.Options{ConfigFile: path}); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "berth-scheduler:", err)
		return 1
	}
	return 0
}

// runController is a berth-controller replica: leader election on (lease
// berth-system/berth-controller, as shipped) with the short lease above.
func runController(kubeconfig string) int {
	ctrl.SetLogger(klog.NewKlogr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, "berth-controller:", err)
		return 1
	}
	mgr, err := controller.NewManager(cfg, controller.Options{MetricsAddr: "0", LeaderElection: true, LeaderElectionNS: leaseNS,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod})
	if err != nil {
		fmt.Fprintln(os.Stderr, "berth-controller:", err)
		return 1
	}
	if err := mgr.Start(ctx); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "berth-controller:", err)
		return 1
	}
	return 0
}

// acquiredMarker is what client-go's leader election logs when a replica becomes leader;
// both kube-scheduler and controller-runtime elect through it.
const acquiredMarker = "successfully acquired lease" // compared case-insensitively

// replica is one running process of a component.
type replica struct {
	name    string
	cmd     *exec.Cmd
	leading chan struct{} // closed when the replica's log says it acquired the lease
	ledAt   atomic.Pointer[time.Time]
	exited  chan struct{}
	killed  atomic.Bool // by the test: its exit is expected
	logPath string
}

// startReplica starts the test binary as a replica of role. It is stopped (SIGTERM, then
// SIGKILL) when the test ends; its log is printed if the test failed.
func startReplica(t *testing.T, role string, n int) *replica {
	t.Helper()
	ensureLeaseNamespace(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	require.NoError(t, cp.WriteKubeconfig(kubeconfig))
	exe, err := os.Executable()
	require.NoError(t, err)
	r := &replica{name: fmt.Sprintf("%s-%d", role, n), leading: make(chan struct{}), exited: make(chan struct{}),
		logPath: filepath.Join(dir, "log")}
	logFile, err := os.Create(r.logPath)
	require.NoError(t, err)
	r.cmd = exec.Command(exe, "-test.run=^$")
	r.cmd.Env = append(os.Environ(), roleEnv+"="+role, kubeconfigEnv+"="+kubeconfig)
	r.cmd.Stdout = logFile
	stderr, err := r.cmd.StderrPipe()
	require.NoError(t, err)
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, r.cmd.Start())
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		r.scan(stderr, logFile)
	}()
	go func() {
		<-scanned // Wait closes the pipe; read it to the end first
		_ = r.cmd.Wait()
		close(r.exited)
	}()
	t.Cleanup(func() {
		r.killed.Store(true)
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(20 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
		_ = logFile.Close()
		if t.Failed() {
			if out, err := os.ReadFile(r.logPath); err == nil {
				lines := strings.Split(string(out), "\n")
				t.Logf("%s log (last 40 lines):\n%s", r.name, strings.Join(lines[max(0, len(lines)-40):], "\n"))
			}
		}
	})
	return r
}

func (r *replica) scan(stderr io.Reader, log io.Writer) {
	s := bufio.NewScanner(stderr)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	var once sync.Once
	for s.Scan() {
		line := s.Text()
		fmt.Fprintln(log, line)
		if strings.Contains(strings.ToLower(line), acquiredMarker) {
			once.Do(func() {
				now := time.Now()
				r.ledAt.Store(&now)
				close(r.leading)
			})
		}
	}
}

// kill stops the replica as a crash would (SIGKILL) and waits until it is gone.
func (r *replica) kill() time.Time {
	r.killed.Store(true)
	_ = r.cmd.Process.Kill()
	<-r.exited
	return time.Now()
}

// diedOnItsOwn says whether the replica exited without the test stopping it (a lost lease
// makes kube-scheduler and controller-runtime exit).
func (r *replica) diedOnItsOwn() bool {
	select {
	case <-r.exited:
		return !r.killed.Load()
	default:
		return false
	}
}

// leader waits until one of the replicas leads and returns it.
func leader(t *testing.T, replicas ...*replica) *replica {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		for _, r := range replicas {
			select {
			case <-r.leading:
				return r
			default:
			}
		}
		select {
		case <-deadline:
			t.Fatalf("no replica of %s became leader within 2 minutes", replicas[0].name)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// requireTakeover waits until standby leads and checks it did so within the lease duration
// of the kill, plus what client-go adds: the standby retries every retryPeriod (with up to
// 20% jitter), and a second for the apiserver round trips on this loaded machine.
func requireTakeover(t *testing.T, standby *replica, killed time.Time) time.Duration {
	t.Helper()
	select {
	case <-standby.leading:
	case <-time.After(leaseDuration + time.Minute):
		t.Fatalf("%s did not take over within %s of the leader's kill", standby.name, leaseDuration+time.Minute)
	}
	took := standby.ledAt.Load().Sub(killed)
	t.Logf("%s took over %s after the leader was killed (lease %s, retry %s)", standby.name, took.Round(time.Millisecond), leaseDuration, retryPeriod)
	require.LessOrEqual(t, took, leaseDuration+2*retryPeriod+time.Second, "the standby takes over within the lease duration")
	return took
}

var leaseNSOnce sync.Once

// ensureLeaseNamespace creates berth-system, where the shipped leases live.
func ensureLeaseNamespace(t *testing.T) {
	leaseNSOnce.Do(func() {
		_, err := kubeClient(t).CoreV1().Namespaces().Create(context.Background(),
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: leaseNS}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %s: %v", leaseNS, err)
		}
	})
}
