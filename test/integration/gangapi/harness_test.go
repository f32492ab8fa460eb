// Package gangapi checks that berth-scheduler keeps its gang guarantees for every gang API
// users write: Volcano's PodGroup, scheduler-plugins' coscheduling PodGroup and kube-scheduler
// 1.37's native PodGroup (Workload API).
//
// The apiserver here serves scheduling.k8s.io/v1beta1 with the GenericWorkload gate on, as a
// cluster that uses the native API does. Feature gates are process-wide, so berth-scheduler
// runs as a separate process (this test binary, re-executed) with its own gates at their
// defaults, as it does in a cluster: were the gate on in berth-scheduler too, kube-scheduler's
// framework would run its own pod-group cycle for these pods instead of Berth's rules.
package gangapi

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	coschedulingv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	coschedulingclient "sigs.k8s.io/scheduler-plugins/pkg/generated/clientset/versioned"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/inprocess"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/sim"
)

var cp *controlplane.ControlPlane

// schedulerEnv, set in a re-executed test binary, makes it run berth-scheduler with the
// kubeconfig it names instead of tests.
const schedulerEnv = "BERTH_GANGAPI_SCHEDULER_KUBECONFIG"

func TestMain(m *testing.M) {
	if kubeconfig := os.Getenv(schedulerEnv); kubeconfig != "" {
		os.Exit(runScheduler(kubeconfig))
	}
	flags := append(controlplane.DefaultAPIServerFlags(),
		"--runtime-config=scheduling.k8s.io/v1beta1=true",
		"--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true")
	cptest.MainWithOptions(m, &cp, controlplane.Options{APIServerFlags: flags})
}

// runScheduler is the scheduler process: the shipped profile with short gang timeouts,
// until SIGTERM.
func runScheduler(kubeconfig string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := inprocess.RunScheduler(ctx, filepath.Dir(kubeconfig), kubeconfig, inprocess.SchedulerOptions{GangArgs: map[string]any{"permitWaitingTimeSeconds": 30, "backoffSeconds": 1}})
	if err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, "berth-scheduler:", err)
		return 1
	}
	return 0
}

// API names a gang API in the tests.
type API string

const (
	volcano  API = "volcano"
	cosched  API = "coscheduling"
	workload API = "workload"
)

var apis = []API{volcano, cosched, workload}

const (
	gpu       = corev1.ResourceName("nvidia.com/gpu")
	poolLabel = "pool"
	leafLabel = "network.berth.sh/leaf"
	// groupLabel names a pod's gang for the tests' own bookkeeping, whatever its API.
	groupLabel = "berth.test/gang"
)

var worldCount atomic.Int32

type world struct {
	t    *testing.T
	ctx  context.Context
	kube kubernetes.Interface
	vc   volcanoclient.Interface
	cc   coschedulingclient.Interface
	ns   string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	cfg := cp.RESTConfig()
	cfg.QPS, cfg.Burst = 500, 1000
	w := &world{t: t, ctx: ctx, kube: kubernetes.NewForConfigOrDie(cfg), vc: volcanoclient.NewForConfigOrDie(cfg),
		cc: coschedulingclient.NewForConfigOrDie(cfg), ns: fmt.Sprintf("gangapi-%d", worldCount.Add(1))}
	_, err := w.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(w.cleanup)
	t.Cleanup(w.dumpOnFailure)
	return w
}

func (w *world) cleanup() {
	ctx := context.Background()
	zero := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	_ = w.kube.CoreV1().Pods(w.ns).DeleteCollection(ctx, zero, metav1.ListOptions{})
	_ = w.kube.CoreV1().Nodes().DeleteCollection(ctx, zero, metav1.ListOptions{LabelSelector: "berth.test/owner=" + w.ns})
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		nodes, err := w.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "berth.test/owner=" + w.ns})
		return err == nil && len(nodes.Items) == 0, nil
	})
}

func (w *world) dumpOnFailure() {
	if !w.t.Failed() {
		return
	}
	ctx := context.Background()
	if pods, err := w.kube.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			cond := ""
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled {
					cond = fmt.Sprintf("%s %s: %s", c.Status, c.Reason, c.Message)
				}
			}
			w.t.Logf("pod %s node=%q scheduled=%s", p.Name, p.Spec.NodeName, cond)
		}
	}
}

// startScheduler runs berth-scheduler in a child process until the test ends; its log goes
// to the test log when the test fails.
func (w *world) startScheduler() {
	t := w.t
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	require.NoError(t, cp.WriteKubeconfig(kubeconfig))
	logPath := filepath.Join(dir, "scheduler.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), schedulerEnv+"="+kubeconfig)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = logFile.Close()
		if t.Failed() {
			if out, err := os.ReadFile(logPath); err == nil {
				lines := strings.Split(string(out), "\n")
				t.Logf("berth-scheduler log (last 60 lines):\n%s", strings.Join(lines[max(0, len(lines)-60):], "\n"))
			}
		}
	})
}

// pool is a set of 8-GPU nodes gangs select by label (and tolerate, when tainted).
type pool struct {
	name    string
	tainted bool
	nodes   []string
}

func (w *world) newPool(name string, tainted bool, leaves ...int) *pool {
	w.t.Helper()
	p := &pool{name: name, tainted: tainted}
	i := 0
	for leaf, n := range leaves {
		for j := 0; j < n; j++ {
			labels := map[string]string{"berth.test/owner": w.ns, poolLabel: name, leafLabel: fmt.Sprintf("%s-leaf-%d", name, leaf)}
			node := sim.NewNode(fmt.Sprintf("%s-%s-%d", w.ns, name, i), sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: 8}, labels)
			if tainted {
				node.Spec.Taints = []corev1.Taint{{Key: poolLabel, Value: name, Effect: corev1.TaintEffectNoSchedule}}
			}
			_, err := w.kube.CoreV1().Nodes().Create(w.ctx, node, metav1.CreateOptions{})
			require.NoError(w.t, err)
			p.nodes = append(p.nodes, node.Name)
			i++
		}
	}
	return p
}

// gang is one gang of the tests in one API.
type gang struct {
	api      API
	name     string
	pool     *pool
	pods     int
	min      int
	gpus     int64
	priority string // PriorityClass of the group (on its PodGroup and its pods)
	leaf     bool   // a hard constraint: all pods in one leaf
}

func (g *gang) String() string {
	return fmt.Sprintf("%s %s (%d pods x %d GPUs, min %d, pool %s)", g.api, g.name, g.pods, g.gpus, g.min, g.pool.name)
}

// create writes the gang's PodGroup in its API's own shape, then its pods, the way a user of
// that API writes them.
func (w *world) create(g *gang) {
	w.t.Helper()
	switch g.api {
	case volcano:
		pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: g.name},
			Spec: volcanov1beta1.PodGroupSpec{MinMember: int32(g.min), PriorityClassName: g.priority}}
		if g.leaf {
			pg.Spec.NetworkTopology = &volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.HardNetworkTopologyMode, HighestTierName: "leaf"}
		}
		_, err := w.vc.SchedulingV1beta1().PodGroups(w.ns).Create(w.ctx, pg, metav1.CreateOptions{})
		require.NoError(w.t, err)
	case cosched:
		pg := &coschedulingv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: g.name},
			Spec: coschedulingv1alpha1.PodGroupSpec{MinMember: int32(g.min), ScheduleTimeoutSeconds: ptr.To[int32](30)}}
		_, err := w.cc.SchedulingV1alpha1().PodGroups(w.ns).Create(w.ctx, pg, metav1.CreateOptions{})
		require.NoError(w.t, err)
	case workload:
		pg := &schedulingv1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: g.name},
			Spec: schedulingv1beta1.PodGroupSpec{PriorityClassName: g.priority, SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
				Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: int32(g.min)}}}}
		if g.leaf {
			pg.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{
				Topology: []schedulingv1beta1.TopologyConstraint{{Key: leafLabel}}}
		}
		_, err := w.kube.SchedulingV1beta1().PodGroups(w.ns).Create(w.ctx, pg, metav1.CreateOptions{})
		require.NoError(w.t, err)
	}
	for i := 0; i < g.pods; i++ {
		_, err := w.kube.CoreV1().Pods(w.ns).Create(w.ctx, w.pod(g, i), metav1.CreateOptions{})
		require.NoError(w.t, err)
	}
}

func (w *world) pod(g *gang, i int) *corev1.Pod {
	q := *resource.NewQuantity(g.gpus, resource.DecimalSI)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: fmt.Sprintf("%s-%d", g.name, i),
			Labels: map[string]string{groupLabel: g.name}},
		Spec: corev1.PodSpec{
			SchedulerName:     workloadv1alpha1.BerthSchedulerName,
			PriorityClassName: g.priority,
			NodeSelector:      map[string]string{poolLabel: g.pool.name},
			Containers: []corev1.Container{{Name: "engine", Image: "vllm/vllm-openai:v0.11.0", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{gpu: q, corev1.ResourceCPU: resource.MustParse("1")},
				Limits:   corev1.ResourceList{gpu: q}}}},
		},
	}
	if g.pool.tainted {
		p.Spec.Tolerations = []corev1.Toleration{{Key: poolLabel, Operator: corev1.TolerationOpEqual, Value: g.pool.name, Effect: corev1.TaintEffectNoSchedule}}
	}
	switch g.api {
	case volcano:
		p.Annotations = map[string]string{volcanov1beta1.KubeGroupNameAnnotationKey: g.name}
	case cosched:
		p.Labels[coschedulingv1alpha1.PodGroupLabel] = g.name
	case workload:
		p.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(g.name)}
	}
	return p
}

// remove deletes a gang's pods and its PodGroup.
func (w *world) remove(g *gang) {
	w.t.Helper()
	zero := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	require.NoError(w.t, w.kube.CoreV1().Pods(w.ns).DeleteCollection(w.ctx, zero, metav1.ListOptions{LabelSelector: groupLabel + "=" + g.name}))
	var err error
	switch g.api {
	case volcano:
		err = w.vc.SchedulingV1beta1().PodGroups(w.ns).Delete(w.ctx, g.name, zero)
	case cosched:
		err = w.cc.SchedulingV1alpha1().PodGroups(w.ns).Delete(w.ctx, g.name, zero)
	case workload:
		err = w.kube.SchedulingV1beta1().PodGroups(w.ns).Delete(w.ctx, g.name, zero)
	}
	require.NoError(w.t, err)
}

func (w *world) eventually(what string, timeout time.Duration, cond func() bool) {
	w.t.Helper()
	err := wait.PollUntilContextTimeout(w.ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond(), nil })
	require.NoError(w.t, err, "timed out after %s waiting until %s", timeout, what)
}

// waitReady binds a probe pod through berth-scheduler, so the scheduler is up and synced.
func (w *world) waitReady(p *pool) {
	w.t.Helper()
	g := &gang{api: volcano, name: "probe", pool: p, pods: 1, min: 1, gpus: 1}
	w.create(g)
	w.eventually("berth-scheduler binds a probe gang", 90*time.Second, func() bool { return w.watchBound(g) == 1 })
	w.remove(g)
}

func (w *world) watchBound(g *gang) int {
	pods, err := w.kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{LabelSelector: groupLabel + "=" + g.name})
	require.NoError(w.t, err)
	n := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// gangWatch follows every pod of the namespace for the whole test and records each group
// that stays partly bound (some pods bound, fewer than its minimum) beyond a moment, and the
// nodes each group's pods were bound on.
type gangWatch struct {
	mu           sync.Mutex
	gangs        map[string]*gang
	bound        map[string]map[string]string // gang -> pod -> node
	everOn       map[string]map[string]bool   // gang -> every node its pods were bound on while judged
	reached      map[string]bool              // gangs whose minimum was ever bound
	partialSince map[string]time.Time
	violations   []string
	// transients counts partial states that ended in time; longest is the longest of them.
	transients  int
	longest     time.Duration
	longestGang string
}

// partialGrace: a released gang's pods leave Permit together and bind with one API call
// each, in parallel, so a watch sees the gang partly bound for tens of milliseconds. A gang
// partly bound for longer than this, ended or not, is a violation: a scheduler that let its
// pods out of Permit one by one (or bound them as they came) leaves it so for seconds. 2 s
// leaves room for a loaded 2-core machine.
const partialGrace = 2 * time.Second

func (w *world) watch() *gangWatch {
	w.t.Helper()
	gw := &gangWatch{gangs: map[string]*gang{}, bound: map[string]map[string]string{}, everOn: map[string]map[string]bool{}, reached: map[string]bool{}, partialSince: map[string]time.Time{}}
	factory := informers.NewSharedInformerFactoryWithOptions(w.kube, 0, informers.WithNamespace(w.ns))
	_, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { gw.observe(o, false) },
		UpdateFunc: func(_, o any) { gw.observe(o, false) },
		DeleteFunc: func(o any) { gw.observe(o, true) },
	})
	require.NoError(w.t, err)
	ctx, cancel := context.WithCancel(w.ctx)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go func() {
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				gw.overdue(now)
			}
		}
	}()
	w.t.Cleanup(func() {
		cancel()
		factory.Shutdown()
		gw.mu.Lock()
		defer gw.mu.Unlock()
		w.t.Logf("the watch saw %d transient partial states (binding one pod at a time), the longest %s (%s); a violation past %s",
			gw.transients, gw.longest.Round(time.Millisecond), gw.longestGang, partialGrace)
	})
	return gw
}

func (gw *gangWatch) register(g *gang) {
	gw.mu.Lock()
	gw.gangs[g.name] = g
	gw.mu.Unlock()
}

// retire stops judging a gang the test deletes.
func (gw *gangWatch) retire(g *gang) {
	gw.mu.Lock()
	delete(gw.gangs, g.name)
	delete(gw.partialSince, g.name)
	gw.mu.Unlock()
}

func (gw *gangWatch) observe(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Labels[groupLabel] == "" {
		return
	}
	name := p.Labels[groupLabel]
	gw.mu.Lock()
	defer gw.mu.Unlock()
	if gw.bound[name] == nil {
		gw.bound[name] = map[string]string{}
	}
	if !deleted && p.DeletionTimestamp == nil && p.Spec.NodeName != "" {
		gw.bound[name][p.Name] = p.Spec.NodeName
	} else {
		delete(gw.bound[name], p.Name)
	}
	g := gw.gangs[name]
	if g == nil {
		return
	}
	if node := gw.bound[name][p.Name]; node != "" {
		if gw.everOn[name] == nil {
			gw.everOn[name] = map[string]bool{}
		}
		gw.everOn[name][node] = true
	}
	n := len(gw.bound[name])
	if n >= g.min {
		gw.reached[name] = true
	}
	since, was := gw.partialSince[name]
	switch partial := n > 0 && n < g.min; {
	case partial && !was:
		gw.partialSince[name] = time.Now()
	case !partial && was:
		delete(gw.partialSince, name)
		d := time.Since(since)
		gw.transients++
		if d > gw.longest {
			gw.longest, gw.longestGang = d, name
		}
		// One that ended between two ticks of overdue is judged here (a reported one's
		// since was pushed an hour ahead, so d is negative).
		if d > partialGrace {
			gw.violations = append(gw.violations, fmt.Sprintf("%s was partly bound for %s (more than %s) before it completed or emptied", g, d.Round(time.Millisecond), partialGrace))
		}
	}
}

func (gw *gangWatch) overdue(now time.Time) {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	for name, since := range gw.partialSince {
		if now.Sub(since) > partialGrace {
			gw.violations = append(gw.violations, fmt.Sprintf("%s partly bound for over %s: %d of its minimum %d pods", gw.gangs[name], partialGrace, len(gw.bound[name]), gw.gangs[name].min))
			gw.partialSince[name] = now.Add(time.Hour) // reported once
		}
	}
}

func (gw *gangWatch) requireNoViolations(t *testing.T, seed int64) {
	t.Helper()
	gw.mu.Lock()
	defer gw.mu.Unlock()
	require.Empty(t, gw.violations, "seed=%d: the all-or-nothing promise was broken", seed)
}

func (gw *gangWatch) hasReached(name string) bool {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	return gw.reached[name]
}

// nodes is every node the gang's pods were bound on while the watch judged it (before it
// was retired), so a check after the drain still sees where a deleted gang was.
func (gw *gangWatch) nodes(name string) []string {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	var out []string
	for n := range gw.everOn[name] {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
