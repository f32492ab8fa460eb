// Package placement runs berth-scheduler (with the controller where a ModelServing is
// needed) against a real apiserver on a simulated fabric of 2 spines × 4 leaves × 4 nodes ×
// 8 GPUs, and checks where groups land: inside their network domain, packed, on the right
// accelerator, spread by group.
package placement

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	topologyv1alpha1 "volcano.sh/apis/pkg/apis/topology/v1alpha1"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"

	"github.com/berth-sh/berth/internal/controlplane"
	"github.com/berth-sh/berth/internal/controlplane/cptest"
	"github.com/berth-sh/berth/internal/inprocess"
	"github.com/berth-sh/berth/internal/systemtest"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/controller"
	"github.com/berth-sh/berth/pkg/plugins/placement"
	"github.com/berth-sh/berth/pkg/sim"
)

var cp *controlplane.ControlPlane

func TestMain(m *testing.M) { cptest.Main(m, &cp) }

const (
	gpu        = corev1.ResourceName("nvidia.com/gpu")
	leafLabel  = sim.LeafLabel
	spineLabel = sim.SpineLabel
	zoneLabel  = "topology.kubernetes.io/zone"
	hnLeaf     = "hn.berth.test/leaf" // used by one HyperNode's labelMatch
	spines     = 2
	leaves     = 4 // per spine
	perLeaf    = 4
	gpusEach   = 8
	numNodes   = spines * leaves * perLeaf
	a100       = "NVIDIA-A100-SXM4-40GB"
	h100       = "NVIDIA-H100-80GB-HBM3"
)

var (
	startOnce sync.Once
	kube      kubernetes.Interface
	vc        volcanoclient.Interface
	cl        client.Client
	nsCount   atomic.Int32
	// simKubelet runs the pods and is every node's DRA GPU driver.
	simKubelet *sim.Kubelet
)

// startSystem starts, once per package, the fabric's nodes, berth-scheduler with the shipped
// profile (short gang timeouts), berth-controller and the simulated kubelet.
func startSystem(t *testing.T) {
	startOnce.Do(func() {
		ctx := context.Background()
		cfg := cp.RESTConfig()
		cfg.QPS, cfg.Burst = 500, 1000
		kube = kubernetes.NewForConfigOrDie(cfg)
		vc = volcanoclient.NewForConfigOrDie(cfg)
		var err error
		cl, err = client.New(cfg, client.Options{Scheme: controller.Scheme()})
		require.NoError(t, err)
		for i := 0; i < numNodes; i++ {
			_, err := kube.CoreV1().Nodes().Create(ctx, fabricNode(i), metav1.CreateOptions{})
			require.NoError(t, err)
		}

		dir, err := os.MkdirTemp("", "berth-placement-test")
		require.NoError(t, err)
		kubeconfig := filepath.Join(dir, "kubeconfig")
		require.NoError(t, cp.WriteKubeconfig(kubeconfig))
		sys, err := inprocess.Start(context.Background(), cp.RESTConfig(), inprocess.Options{Dir: dir, Kubeconfig: kubeconfig,
			Scheduler:  &inprocess.SchedulerOptions{GangArgs: map[string]any{"permitWaitingTimeSeconds": 5, "backoffSeconds": 1}},
			Controller: &controller.Options{},
			Kubelet:    &inprocess.KubeletOptions{PodStartDelay: 50 * time.Millisecond, Client: kube},
			// kube-scheduler's default profile, beside berth-scheduler as on every cluster:
			// what berth places and it does not is shown side by side (TestDRA).
			DefaultScheduler: true,
		})
		require.NoError(t, err)
		simKubelet = sys.Kubelet
		cptest.BeforeStop(sys.Stop)
		go func() { panic(fmt.Sprintf("%v", <-sys.Failed())) }()
	})
}

// fabricNode is node i of the fabric. Its labels put it in leaf i/4 and spine i/16; the
// HyperNodes (see createHyperNodes) group the same nodes differently, so a test can tell
// which source of tiers the scheduler used. Spine 0 has A100 40GB GPUs, spine 1 H100 80GB.
func fabricNode(i int) *corev1.Node {
	leaf, spine := i/perLeaf, i/(perLeaf*leaves)
	shape := sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: gpusEach, GPUProduct: a100, GPUMemoryMiB: 40960, GPUFamily: "ampere"}
	if spine == 1 {
		shape.GPUProduct, shape.GPUMemoryMiB, shape.GPUFamily = h100, 81920, "hopper"
	}
	return sim.NewNode(nodeName(i), shape, map[string]string{
		leafLabel:  fmt.Sprintf("leaf-%d", leaf),
		spineLabel: fmt.Sprintf("spine-%d", spine),
		zoneLabel:  fmt.Sprintf("zone-%d", spine),
		hnLeaf:     fmt.Sprint(i % (spines * leaves)),
	})
}

func nodeName(i int) string { return fmt.Sprintf("node-%02d", i) }

// fabric maps nodes to their domain per tier, as the test expects the scheduler to see it.
type fabric struct {
	name  string
	leaf  map[string]string
	spine map[string]string
}

// domain returns the node's domain at tier 1 (leaf) or 2 (spine).
func (f *fabric) domain(node string, tier int) string {
	if tier == 1 {
		return f.leaf[node]
	}
	return f.spine[node]
}

// labelFabric is what the node labels say.
func labelFabric() *fabric {
	f := &fabric{name: "node labels", leaf: map[string]string{}, spine: map[string]string{}}
	for i := 0; i < numNodes; i++ {
		f.leaf[nodeName(i)] = fmt.Sprintf("leaf-%d", i/perLeaf)
		f.spine[nodeName(i)] = fmt.Sprintf("spine-%d", i/(perLeaf*leaves))
	}
	return f
}

// hyperNodeFabric is what createHyperNodes builds: leaf k holds the nodes i with i%8 == k,
// spine j the leaves k with k%2 == j (so every HyperNode leaf mixes label leaves).
func hyperNodeFabric() *fabric {
	f := &fabric{name: "HyperNodes", leaf: map[string]string{}, spine: map[string]string{}}
	for i := 0; i < numNodes; i++ {
		k := i % (spines * leaves)
		f.leaf[nodeName(i)] = fmt.Sprintf("hn-leaf-%d", k)
		f.spine[nodeName(i)] = fmt.Sprintf("hn-spine-%d", k%2)
	}
	return f
}

// createHyperNodes builds the HyperNode fabric with every kind of member selector: exact
// node names, a node-name regex, a node label match, nested HyperNodes by name and by regex.
func createHyperNodes(t *testing.T, ctx context.Context) {
	nleaves := spines * leaves
	for k := 0; k < nleaves; k++ {
		var members []topologyv1alpha1.MemberSpec
		switch k {
		case 0:
			var names []string
			for i := k; i < numNodes; i += nleaves {
				names = append(names, nodeName(i))
			}
			members = []topologyv1alpha1.MemberSpec{{Type: topologyv1alpha1.MemberTypeNode,
				Selector: topologyv1alpha1.MemberSelector{RegexMatch: &topologyv1alpha1.RegexMatch{Pattern: "^(" + strings.Join(names, "|") + ")$"}}}}
		case 1:
			members = []topologyv1alpha1.MemberSpec{{Type: topologyv1alpha1.MemberTypeNode,
				Selector: topologyv1alpha1.MemberSelector{LabelMatch: &metav1.LabelSelector{MatchLabels: map[string]string{hnLeaf: "1"}}}}}
		default:
			for i := k; i < numNodes; i += nleaves {
				members = append(members, topologyv1alpha1.MemberSpec{Type: topologyv1alpha1.MemberTypeNode,
					Selector: topologyv1alpha1.MemberSelector{ExactMatch: &topologyv1alpha1.ExactMatch{Name: nodeName(i)}}})
			}
		}
		createHyperNode(t, ctx, fmt.Sprintf("hn-leaf-%d", k), 1, "leaf", members)
	}
	// spine 0 by exact names, spine 1 by a regex over HyperNode names.
	var spine0 []topologyv1alpha1.MemberSpec
	for k := 0; k < nleaves; k += 2 {
		spine0 = append(spine0, topologyv1alpha1.MemberSpec{Type: topologyv1alpha1.MemberTypeHyperNode,
			Selector: topologyv1alpha1.MemberSelector{ExactMatch: &topologyv1alpha1.ExactMatch{Name: fmt.Sprintf("hn-leaf-%d", k)}}})
	}
	createHyperNode(t, ctx, "hn-spine-0", 2, "spine", spine0)
	createHyperNode(t, ctx, "hn-spine-1", 2, "spine", []topologyv1alpha1.MemberSpec{{Type: topologyv1alpha1.MemberTypeHyperNode,
		Selector: topologyv1alpha1.MemberSelector{RegexMatch: &topologyv1alpha1.RegexMatch{Pattern: "^hn-leaf-[1357]$"}}}})
}

func createHyperNode(t *testing.T, ctx context.Context, name string, tier int, tierName string, members []topologyv1alpha1.MemberSpec) {
	hn := &topologyv1alpha1.HyperNode{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: topologyv1alpha1.HyperNodeSpec{Tier: tier, TierName: tierName, Members: members}}
	_, err := vc.TopologyV1alpha1().HyperNodes().Create(ctx, hn, metav1.CreateOptions{})
	require.NoError(t, err)
}

func deleteHyperNodes(ctx context.Context) {
	_ = vc.TopologyV1alpha1().HyperNodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
}

// world is one test's namespace.
type world struct {
	t   *testing.T
	ctx context.Context
	ns  string
}

func newWorld(t *testing.T) *world {
	startSystem(t)
	w := &world{t: t, ctx: context.Background(), ns: fmt.Sprintf("place-%d", nsCount.Add(1))}
	_, err := kube.CoreV1().Namespaces().Create(w.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			w.dump()
		}
		w.clear()
	})
	return w
}

// clear deletes the test's namespace; the namespace controller empties it (the simulated
// kubelet finishes the bound pods), so the nodes are empty again when it returns.
func (w *world) clear() {
	require.NoError(w.t, systemtest.RemoveNamespace(kube, w.ns), "the test's namespace is removed with everything in it")
}

func (w *world) dump() {
	pods, err := kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		msg := ""
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
				msg = c.Message
			}
		}
		w.t.Logf("pod %s group=%s node=%q %s", p.Name, placement.GroupName(&p), p.Spec.NodeName, msg)
	}
}

// podSpec is a pod asking for gpus GPUs (and a little CPU) from berth-scheduler.
func podSpec(gpus int64) corev1.PodSpec {
	req := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	if gpus > 0 {
		req[gpu] = *resource.NewQuantity(gpus, resource.DecimalSI)
	}
	return corev1.PodSpec{
		SchedulerName:                 workloadv1alpha1.BerthSchedulerName,
		TerminationGracePeriodSeconds: ptr.To[int64](0),
		Containers:                    []corev1.Container{{Name: "engine", Image: "vllm/vllm-openai", Resources: corev1.ResourceRequirements{Requests: req, Limits: req}}},
	}
}

// group is a gang of pods, every pod asking for the same number of GPUs.
type group struct {
	name string
	pods int
	gpus int64
	nt   *volcanov1beta1.NetworkTopologySpec
}

// create makes the group's PodGroup and pods.
func (w *world) create(g group) {
	w.t.Helper()
	pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: g.name, Namespace: w.ns},
		Spec: volcanov1beta1.PodGroupSpec{MinMember: int32(g.pods), NetworkTopology: g.nt}}
	_, err := vc.SchedulingV1beta1().PodGroups(w.ns).Create(w.ctx, pg, metav1.CreateOptions{})
	require.NoError(w.t, err)
	for k := 0; k < g.pods; k++ {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", g.name, k), Namespace: w.ns,
			Annotations: map[string]string{placement.GroupNameKey: g.name, placement.TaskSpecKey: fmt.Sprintf("worker-%d", k)}},
			Spec: podSpec(g.gpus)}
		_, err := kube.CoreV1().Pods(w.ns).Create(w.ctx, p, metav1.CreateOptions{})
		require.NoError(w.t, err)
	}
}

// createPod makes one pod without a group.
func (w *world) createPod(name string, gpus int64, annotations map[string]string, nodeName string) {
	w.t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns, Annotations: annotations}, Spec: podSpec(gpus)}
	p.Spec.NodeName = nodeName
	_, err := kube.CoreV1().Pods(w.ns).Create(w.ctx, p, metav1.CreateOptions{})
	require.NoError(w.t, err)
}

// placement returns, per group (or per pod for pods without one), the nodes of its bound pods.
func (w *world) placement() (byGroup map[string][]string, pending map[string]string) {
	pods, err := kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{})
	require.NoError(w.t, err)
	byGroup, pending = map[string][]string{}, map[string]string{}
	for _, p := range pods.Items {
		g := placement.GroupName(&p)
		if g == "" {
			g = p.Name
		}
		if p.Spec.NodeName == "" {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled {
					pending[p.Name] = c.Message
				}
			}
			if _, ok := pending[p.Name]; !ok {
				pending[p.Name] = ""
			}
			continue
		}
		byGroup[g] = append(byGroup[g], p.Spec.NodeName)
	}
	return byGroup, pending
}

// settled waits until every pod of the namespace is bound or has been refused by the
// scheduler at least once.
func (w *world) settled(timeout time.Duration) {
	w.t.Helper()
	w.eventually("every pod bound or refused", timeout, func() bool {
		_, pending := w.placement()
		for _, msg := range pending {
			if msg == "" {
				return false
			}
		}
		return true
	})
}

func (w *world) eventually(what string, timeout time.Duration, cond func() bool) {
	w.t.Helper()
	err := wait.PollUntilContextTimeout(w.ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond(), nil })
	require.NoError(w.t, err, "waiting for %s", what)
}

func (w *world) node(pod string) string {
	p, err := kube.CoreV1().Pods(w.ns).Get(w.ctx, pod, metav1.GetOptions{})
	require.NoError(w.t, err)
	return p.Spec.NodeName
}

// freeGPUs is every node's free GPUs, counting all pods bound anywhere.
func freeGPUs(t *testing.T, ctx context.Context) map[string]int64 {
	free := map[string]int64{}
	for i := 0; i < numNodes; i++ {
		free[nodeName(i)] = gpusEach
	}
	pods, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Spec.Containers {
			q := c.Resources.Requests[gpu]
			free[p.Spec.NodeName] -= q.Value()
		}
	}
	return free
}

// domainCanHold says whether some domain of the tier could take every pod of g, packing
// whole pods onto nodes.
func domainCanHold(f *fabric, tier int, free map[string]int64, g group) bool {
	byDomain := map[string][]int64{}
	for n, v := range free {
		d := f.domain(n, tier)
		byDomain[d] = append(byDomain[d], v)
	}
	for _, frees := range byDomain {
		if canHold(frees, g) {
			return true
		}
	}
	return false
}

// fabricCanHold says whether the fabric's nodes together could take every pod of g, packing
// whole pods onto nodes, wherever they are.
func fabricCanHold(free map[string]int64, g group) bool {
	var frees []int64
	for _, v := range free {
		frees = append(frees, v)
	}
	return canHold(frees, g)
}

// canHold says whether nodes with these free GPUs could take every pod of g, best fit.
// The pods are all the same size, so best fit places as many as any packing does.
func canHold(frees []int64, g group) bool {
	left := append([]int64(nil), frees...)
	sort.Slice(left, func(i, j int) bool { return left[i] < left[j] })
	for k := 0; k < g.pods; k++ {
		ok := false
		for i := range left {
			if left[i] >= g.gpus {
				left[i] -= g.gpus
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// wholeGroups waits until each of the groups (name to number of pods) has all its pods
// bound or none, and returns the placement. The gang plugin releases a group's pods to
// bind together, so a group seen part-bound may be between two binds; one still part-bound
// at the timeout is a broken gang, reported by name. Groups with no pod bound are left to
// the caller.
func (w *world) wholeGroups(size map[string]int, timeout time.Duration) map[string][]string {
	w.t.Helper()
	var byGroup map[string][]string
	partial := func() []string {
		byGroup, _ = w.placement()
		var out []string
		for name, nodes := range byGroup {
			if n, ok := size[name]; ok && len(nodes) != n {
				out = append(out, name)
			}
		}
		sort.Strings(out)
		return out
	}
	err := wait.PollUntilContextTimeout(w.ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return len(partial()) == 0, nil
	})
	if err != nil {
		for _, name := range partial() {
			w.t.Errorf("group %s has %d of its %d pods bound after %s: a gang binds whole or not at all", name, len(byGroup[name]), size[name], timeout)
		}
	}
	return byGroup
}

// gangRejections is how many times berth-scheduler's gang plugin has refused a group and
// put it in backoff, read from the scheduler's metrics (berth_gang_groups_rejected_total,
// summed over reasons). The scheduler runs in this process, so its registry is this
// process's.
func gangRejections(t *testing.T) float64 {
	byReason, err := testutil.GetCounterValuesFromGatherer(legacyregistry.DefaultGatherer, "berth_gang_groups_rejected_total", nil, "reason")
	require.NoError(t, err)
	total := 0.0
	for _, v := range byReason {
		total += v
	}
	return total
}

// spansAtMost says whether nodes all sit in one domain of the tier.
func spansAtMost(f *fabric, tier int, nodes []string) bool {
	for _, n := range nodes[1:] {
		if f.domain(n, tier) != f.domain(nodes[0], tier) {
			return false
		}
	}
	return true
}
