// Package replicas runs Berth's components as separate processes for tests that kill them:
// the test binary re-executes itself as a berth-scheduler, berth-controller or berth-router
// replica, so a kill is a real crash (SIGKILL: no deferred call runs, no lease is released,
// in-flight connections break). berth-scheduler and berth-controller replicas elect a leader
// through the shipped lease names with short leases.
//
// A test package using it calls RunIfReplica first thing in its TestMain.
package replicas

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
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/inprocess"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/router"
)

// Roles a replica can have.
const (
	Scheduler  = "scheduler"
	Controller = "controller"
	Router     = "router"
)

// In a re-executed test binary, roleEnv names the component to run against the kubeconfig
// kubeconfigEnv names, until SIGTERM; addrEnv is a router's listen address.
const (
	roleEnv       = "BERTH_REPLICA_ROLE"
	kubeconfigEnv = "BERTH_REPLICA_KUBECONFIG"
	addrEnv       = "BERTH_REPLICA_ADDR"
)

// The leases are shorter than the shipped defaults (15 s, 10 s, 2 s) to keep tests short, and
// long enough that a replica on a loaded 2-core machine does not lose its lease without
// being killed (a replica exiting on its own is reported by DiedOnItsOwn).
const (
	LeaseDuration = 5 * time.Second
	RenewDeadline = 4 * time.Second
	RetryPeriod   = 500 * time.Millisecond
	// LeaseNamespace is where the shipped leases live.
	LeaseNamespace = "berth-system"
)

// RunIfReplica runs the component this process was started as (by Start) and exits; in the
// test binary proper it returns at once.
func RunIfReplica() {
	role := os.Getenv(roleEnv)
	if role == "" {
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	kubeconfig := os.Getenv(kubeconfigEnv)
	var err error
	switch role {
	case Scheduler:
		err = runScheduler(ctx, kubeconfig)
	case Controller:
		err = runController(ctx, kubeconfig)
	case Router:
		err = runRouter(ctx, kubeconfig, os.Getenv(addrEnv))
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(os.Stderr, "berth-%s: %v\n", role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runScheduler: the shipped configuration, leader election on (lease
// berth-system/berth-scheduler, as shipped) with the short lease above.
func runScheduler(ctx context.Context, kubeconfig string) error {
	return inprocess.RunScheduler(ctx, filepath.Dir(kubeconfig), kubeconfig, inprocess.SchedulerOptions{
		GangArgs: map[string]any{"permitWaitingTimeSeconds": 30, "backoffSeconds": 1},
		LeaderElection: map[string]any{"leaderElect": true, "resourceName": workloadv1alpha1.BerthSchedulerName, "resourceNamespace": LeaseNamespace,
			"leaseDuration": LeaseDuration.String(), "renewDeadline": RenewDeadline.String(), "retryPeriod": RetryPeriod.String()},
	})
}

// runController: leader election on (lease berth-system/berth-controller, as shipped) with
// the short lease above.
func runController(ctx context.Context, kubeconfig string) error {
	ctrl.SetLogger(klog.NewKlogr())
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	mgr, err := controller.NewManager(cfg, controller.Options{MetricsAddr: "0", LeaderElection: true, LeaderElectionNS: LeaseNamespace,
		LeaseDuration: LeaseDuration, RenewDeadline: RenewDeadline, RetryPeriod: RetryPeriod})
	if err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// runRouter: a berth-router on addr with a fast scrape and a short drain.
func runRouter(ctx context.Context, kubeconfig, addr string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	r, err := router.New(cfg, router.Options{Addr: addr, ScrapeInterval: 100 * time.Millisecond, MaxBodyBytes: 1 << 20,
		ShutdownTimeout: 5 * time.Second}, klog.Background().WithName("router"))
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// Markers in a replica's log: client-go's leader election (kube-scheduler and
// controller-runtime both elect through it), and the router's start.
const (
	acquiredMarker = "successfully acquired lease" // compared case-insensitively
	servingMarker  = "berth-router serving"
)

// Replica is one running process of a component.
type Replica struct {
	Name    string
	Addr    string // a router's API address
	role    string
	kube    kubernetes.Interface
	cmd     *exec.Cmd
	leading chan struct{} // closed when the log says it acquired the lease, or a router serves
	ledAt   atomic.Pointer[time.Time]
	exited  chan struct{}
	killed  atomic.Bool // by the test: its exit is expected
	logPath string
	// leaseAtKill is the role's Lease read just before Kill (a leader's holder and last
	// renewal), for RequireTakeover.
	leaseAtKill *coordinationv1.Lease
}

// Start starts the test binary as a replica of role named name against cp (a router listens
// on addr). It is stopped (SIGTERM, then SIGKILL) when the test ends; its log is printed if
// the test failed.
func Start(t *testing.T, cp *controlplane.ControlPlane, role, name, addr string) *Replica {
	t.Helper()
	return StartWith(t, cp, role, name, addr, Options{})
}

// Options change how StartWith runs a replica.
type Options struct {
	// As, when set, is who the replica acts as (impersonated through the admin
	// credentials): a ServiceAccount, so the apiserver's RBAC judges its every request.
	As *rest.ImpersonationConfig
	// Cleanup registers the replica's stop; t.Cleanup when nil. A package that shares one
	// replica across its tests passes cptest.BeforeStop.
	Cleanup func(func())
}

// StartWith is Start with options.
func StartWith(t *testing.T, cp *controlplane.ControlPlane, role, name, addr string, o Options) *Replica {
	t.Helper()
	ensureLeaseNamespace(t, cp)
	dir, err := os.MkdirTemp("", "berth-replica-")
	require.NoError(t, err)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	require.NoError(t, cp.WriteKubeconfig(kubeconfig))
	if o.As != nil {
		kc, err := clientcmd.LoadFromFile(kubeconfig)
		require.NoError(t, err)
		for _, user := range kc.AuthInfos {
			user.Impersonate, user.ImpersonateGroups = o.As.UserName, o.As.Groups
		}
		require.NoError(t, clientcmd.WriteToFile(*kc, kubeconfig))
	}
	cleanup := o.Cleanup
	if cleanup == nil {
		cleanup = t.Cleanup
	}
	exe, err := os.Executable()
	require.NoError(t, err)
	r := &Replica{Name: name, Addr: addr, role: role, kube: kubernetes.NewForConfigOrDie(cp.RESTConfig()),
		leading: make(chan struct{}), exited: make(chan struct{}), logPath: filepath.Join(dir, "log")}
	logFile, err := os.Create(r.logPath)
	require.NoError(t, err)
	r.cmd = exec.Command(exe, "-test.run=^$")
	r.cmd.Env = append(os.Environ(), roleEnv+"="+role, kubeconfigEnv+"="+kubeconfig, addrEnv+"="+addr)
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
		<-scanned // Wait closes the pipe: read it to the end first
		_ = r.cmd.Wait()
		close(r.exited)
	}()
	cleanup(func() {
		defer os.RemoveAll(dir)
		r.killed.Store(true)
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.exited:
		case <-time.After(20 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
		_ = logFile.Close()
		if o.Cleanup == nil && t.Failed() {
			if out, err := os.ReadFile(r.logPath); err == nil {
				lines := strings.Split(string(out), "\n")
				t.Logf("%s log (last 40 lines):\n%s", r.Name, strings.Join(lines[max(0, len(lines)-40):], "\n"))
			}
		}
	})
	return r
}

func (r *Replica) scan(stderr io.Reader, log io.Writer) {
	s := bufio.NewScanner(stderr)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	var once sync.Once
	for s.Scan() {
		line := s.Text()
		fmt.Fprintln(log, line)
		if l := strings.ToLower(line); strings.Contains(l, acquiredMarker) || strings.Contains(l, servingMarker) {
			once.Do(func() {
				now := time.Now()
				r.ledAt.Store(&now)
				close(r.leading)
			})
		}
	}
}

// Leading is closed once the replica leads (a router: once it serves).
func (r *Replica) Leading() <-chan struct{} { return r.leading }

// Kill stops the replica as a crash would (SIGKILL) and waits until it is gone. A scheduler
// or controller replica's Lease is read first, for RequireTakeover.
func (r *Replica) Kill() time.Time {
	if name := leaseName(r.role); name != "" {
		r.leaseAtKill, _ = r.kube.CoordinationV1().Leases(LeaseNamespace).Get(context.Background(), name, metav1.GetOptions{})
	}
	r.killed.Store(true)
	_ = r.cmd.Process.Kill()
	<-r.exited
	return time.Now()
}

// Killed says whether the test killed (or stopped) the replica.
func (r *Replica) Killed() bool { return r.killed.Load() }

// DiedOnItsOwn says whether the replica exited without the test stopping it (a lost lease
// makes kube-scheduler and controller-runtime exit).
func (r *Replica) DiedOnItsOwn() bool {
	select {
	case <-r.exited:
		return !r.killed.Load()
	default:
		return false
	}
}

// Leader waits until one of the replicas leads and returns it.
func Leader(t *testing.T, replicas ...*Replica) *Replica {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		for _, r := range replicas {
			if r.Killed() {
				continue
			}
			select {
			case <-r.leading:
				return r
			default:
			}
		}
		select {
		case <-deadline:
			t.Fatalf("no replica of %s became leader within 2 minutes", replicas[0].Name)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// leaseName is the Lease role's replicas elect their leader through ("" for routers).
func leaseName(role string) string {
	switch role {
	case Scheduler:
		return workloadv1alpha1.BerthSchedulerName
	case Controller:
		return controller.LeaseName
	}
	return ""
}

// RequireTakeover waits until the Lease the killed leader held names another holder (the
// standby: no other replica runs) and checks the takeover from the Lease's own times, which
// the replicas write as they act (no log line read late on a loaded machine decides it):
//   - not before the lease expired: the new holder acquired it at least LeaseDuration after
//     the killed leader's last renewal, less the wall clock's drift from the monotonic one
//     (earlier, two leaders would act at once);
//   - soon after: within LeaseDuration of that renewal plus two of the standby's retries
//     (RetryPeriod with client-go's 20% jitter: one to see the last renewal, one to find the
//     lease expired) and a second for apiserver round trips.
//
// It returns how long after the last renewal the standby took over.
func RequireTakeover(t *testing.T, killed, standby *Replica) time.Duration {
	t.Helper()
	before := killed.leaseAtKill
	require.NotNil(t, before, "%s was not killed with Kill, or its Lease could not be read then", killed.Name)
	holder := ptr.Deref(before.Spec.HolderIdentity, "")
	require.NotEmpty(t, holder, "%s was killed while its Lease named no holder: it did not lead", killed.Name)
	require.NotNil(t, before.Spec.RenewTime)
	var after *coordinationv1.Lease
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, LeaseDuration+time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := standby.kube.CoordinationV1().Leases(LeaseNamespace).Get(ctx, before.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		after = l
		h := ptr.Deref(l.Spec.HolderIdentity, "")
		return h != "" && h != holder, nil
	})
	require.NoError(t, err, "%s did not take over Lease %s from %s within %s of the kill", standby.Name, before.Name, killed.Name, LeaseDuration+time.Minute)
	require.NotNil(t, after.Spec.AcquireTime)
	took := after.Spec.AcquireTime.Sub(before.Spec.RenewTime.Time)
	t.Logf("%s took over Lease %s %s after %s's last renewal (lease %s, retry %s)", standby.Name, before.Name, took.Round(time.Millisecond),
		killed.Name, LeaseDuration, RetryPeriod)
	// The Lease's times are wall-clock readings; client-go decides expiry on the monotonic
	// clock, from when the standby saw the last renewal (after it was written). Only an
	// adjustment of the wall clock during the lease (a slewing time daemon moves it up to
	// 83 ms a second; a VM's clock is corrected by its host) makes the two disagree: CI saw
	// a takeover 4.895 s after a 5 s lease's last renewal. A standby that ignored the lease
	// would take it within a retry or two.
	const wallClockSlack = 400 * time.Millisecond
	require.GreaterOrEqual(t, took, LeaseDuration-wallClockSlack, "the standby took the Lease before it expired")
	require.LessOrEqual(t, took, LeaseDuration+2*RetryPeriod*12/10+time.Second, "the standby takes over once the lease expires")
	select {
	case <-standby.leading:
	case <-time.After(time.Minute):
		t.Fatalf("%s holds the Lease but did not log that it leads", standby.Name)
	}
	return took
}

var leaseNSOnce sync.Once

// ensureLeaseNamespace creates berth-system, where the shipped leases live.
func ensureLeaseNamespace(t *testing.T, cp *controlplane.ControlPlane) {
	leaseNSOnce.Do(func() {
		kube := kubernetes.NewForConfigOrDie(cp.RESTConfig())
		_, err := kube.CoreV1().Namespaces().Create(context.Background(),
			&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: LeaseNamespace}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %s: %v", LeaseNamespace, err)
		}
	})
}
