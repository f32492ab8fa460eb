package gang

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/utils/ptr"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/sim"
)

// The contention tests load berth-scheduler with a stream of randomly shaped gangs on a
// selected, tainted GPU pool (and a second pool beside it) and check its core promise:
// no group is ever partly bound, no role replica is ever split, capacity a waiting group
// fits is not left idle, and no group starves.

const (
	poolLabel = "pool"
	// reservationAnnotation is what the scheduler writes on the PodGroup it keeps capacity
	// for (head-of-line reservation): JSON {node: {resource: quantity}}.
	reservationAnnotation = "gang.berth.sh/reservation"
	// fastPathMetric counts, by result, pods sent straight to the node their group's plan
	// chose ("hit") or whose plan no longer held ("stale").
	fastPathMetric = "berth_gang_fast_path_total"
	// partialGrace is how long the watch tolerates a group partly bound (or a role replica
	// split). Binding is not atomic: a released gang's pods leave Permit together and bind
	// with one API call each, in parallel, so a watch sees the group partly bound for a few
	// tens of milliseconds. A scheduler that binds a gang's pods as they come, or lets them
	// out of Permit one at a time, leaves it partly bound for seconds: a partial state that
	// lasts longer than this, ended or not, is a violation. 2 s leaves room for a loaded
	// 2-core machine (the informer's delivery lag is common to all of a group's pods).
	partialGrace = 2 * time.Second * raceTimeScale
	// workConservingWithin is how long after the stream stops every waiting group whose
	// minimum fits the free capacity of its pool must have been placed.
	workConservingWithin = 30 * time.Second * raceTimeScale
	// drainStepWithin is the same for the capacity each deletion of the drain frees.
	drainStepWithin = 20 * time.Second * raceTimeScale
	// drainWithin bounds the no-starvation phase.
	drainWithin = 4 * time.Minute * raceTimeScale
)

// A seeded stream of random gangs, mostly on a 12-node tainted pool (about twice its GPUs in
// demand) and some on a 6-node pool beside it (about 3/4 of its GPUs), one every 100-300 ms.
// A watch over the whole run asserts that no group is ever partly bound and no role replica
// split. Within 30 s of the last arrival no waiting group may fit its pool's free GPUs (less
// what the scheduler reserves for a blocked group, which is trusted only as far as it is
// bounded: one reserving group per pool, keeping no more GPUs than its minimum misses); then placed gangs are deleted one at a
// time until every gang, the large one included, has had its minimum bound. The scheduler
// must have sent pods down its plan's fast path. BERTH_SEED=<n> replays a stream's shapes.
func TestContentionRandomGangStream(t *testing.T) {
	seed, notes := contentionSeed(t)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
	w := newWorld(t)
	hitBefore, _ := counterValue(t, fastPathMetric, map[string]string{"result": "hit"})
	w.startScheduler(60, 2) // the shipped permit wait and backoff

	mainPool := w.newPool("contention", true)
	for i := 0; i < 12; i++ {
		w.addPoolNode(mainPool, fmt.Sprintf("gpu-%02d", i), 8)
	}
	other := w.newPool("general", false)
	for i := 0; i < 6; i++ {
		w.addPoolNode(other, fmt.Sprintf("gen-%02d", i), 8)
	}
	w.addNode("cpu-0", 0, "64")
	w.addNode("cpu-1", 0, "64")

	specs := contentionStream(rng, mainPool, other)
	c := &contention{w: w, seed: seed, notes: notes, specs: specs, pools: []*gpuPool{mainPool, other}}
	start := c.run(rng, hitBefore)
	t.Logf("seed=%d: done in %s", seed, time.Since(start).Round(time.Millisecond))
}

// run feeds the stream, one gang every 100-300 ms, under a watch for the whole run, then
// checks that the scheduler is work-conserving once the stream stops, drains the placed
// gangs until every gang has been placed (no starvation) and that the fast path was used.
// It returns when the stream began.
func (c *contention) run(rng *rand.Rand, hitBefore float64) time.Time {
	w, t := c.w, c.w.t
	c.logStream()
	c.watch = w.watchGangs(c.seed)
	c.watch.notes = c.notes
	start := time.Now()
	for i, s := range c.specs {
		if i > 0 {
			time.Sleep(time.Duration(100+rng.IntN(201)) * time.Millisecond)
		}
		c.watch.register(s)
		w.createGang(s.name, s.minRole, s.roles...)
		s.created = time.Since(start)
		c.checkPodGroup(s)
	}
	t.Logf("seed=%d: %d gangs created in %s", c.seed, len(c.specs), time.Since(start).Round(time.Millisecond))
	c.requireNoViolations()

	if !c.workConserving(workConservingWithin, "the stream stopped", true) {
		c.checkFastPath(hitBefore)
		t.FailNow()
	}
	c.requireNoViolations()
	c.drain()
	c.requireNoViolations()
	c.checkFastPath(hitBefore)
	return start
}

// The same stream, with DRA GPUs: the main pool mixes nodes whose GPUs are DRA devices
// (gpu.nvidia.com ResourceSlices) with device-plugin nodes, half each, and half its gangs
// (the large one among them) take their GPUs from ResourceClaimTemplates; the pool beside it
// is DRA only. The same watch and the same checks: no group partly bound, work-conserving
// (a waiting gang counts as fitting only on nodes of its kind), no starvation.
func TestContentionDRA(t *testing.T) {
	seed, notes := contentionSeed(t)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
	w := newWorld(t)
	w.ensureGPUTemplates()
	hitBefore, _ := counterValue(t, fastPathMetric, map[string]string{"result": "hit"})
	w.startScheduler(60, 2)

	mainPool := w.newPool("contention", true)
	for i := 0; i < 12; i++ {
		if i%2 == 0 {
			w.addPoolNodeDRA(mainPool, fmt.Sprintf("dra-%02d", i), 8)
		} else {
			w.addPoolNode(mainPool, fmt.Sprintf("gpu-%02d", i), 8)
		}
	}
	other := w.newPool("general", false)
	for i := 0; i < 6; i++ {
		w.addPoolNodeDRA(other, fmt.Sprintf("gen-%02d", i), 8)
	}
	w.addNode("cpu-0", 0, "64")

	specs := contentionStream(rng, mainPool, other)
	for _, s := range specs {
		if s.large || s.pool == other || rng.IntN(2) == 0 {
			s.useDRA()
		}
	}
	agreeBefore, _ := counterValue(t, "berth_placement_dra_allocation_checks_total", map[string]string{"result": "agree"})
	differBefore, _ := counterValue(t, "berth_placement_dra_allocation_checks_total", map[string]string{"result": "disagree"})
	c := &contention{w: w, seed: seed, notes: notes, specs: specs, pools: []*gpuPool{mainPool, other}}
	start := c.run(rng, hitBefore)
	checked, _ := counterValue(t, "berth_placement_dra_allocation_checks_total", map[string]string{"result": "agree"})
	differ, _ := counterValue(t, "berth_placement_dra_allocation_checks_total", map[string]string{"result": "disagree"})
	checked, differ = checked-agreeBefore, differ-differBefore
	assert.Zero(t, differ, "the DynamicResources plugin allocated what the plans chose")
	assert.Positive(t, checked, "DRA pods went through their plans")
	t.Logf("seed=%d: done in %s; allocations compared with the plan: %v agree, %v disagree", seed, time.Since(start).Round(time.Millisecond), checked, differ)
}

// A plan that no longer holds falls back to the full pass. A gang of two 8-GPU pods on n1,
// n2 (8 GPUs) and n3 (16): the plan puts them on n1 and n2 (best fit keeps n3 whole), the
// first is held in Permit while the second is gated. Pods bound directly then take n1 and
// n2 (one overcommits the node of the held pod). Ungated, the second pod's planned node is
// full: it must fall back to n3, the gang must complete, and the stale fast path is counted.
func TestContentionStalePlanFallsBack(t *testing.T) {
	w := newWorld(t)
	staleBefore, _ := counterValue(t, fastPathMetric, map[string]string{"result": "stale"})
	w.startScheduler(30, 1)
	pool := w.newPool("stale", true)
	n1 := w.addPoolNode(pool, "n1", 8)
	n2 := w.addPoolNode(pool, "n2", 8)
	n3 := w.addPoolNode(pool, "n3", 16)
	w.waitSchedulerReady(pool)

	watch := w.watchGangs(0)
	spec := newGangSpec("fallback", pool, map[string]int{"server": 2}, role{name: "server", replicas: 2, gpus: 8})
	watch.register(spec)
	first, second := "fallback-server-0-0", "fallback-server-1-0"
	w.gated = map[string]bool{second: true}
	w.createGang(spec.name, spec.minRole, spec.roles...)

	// The scheduler has looked at the gang: its first pod is held in Permit
	// (berth_gang_waiting_pods), and nothing of it bound.
	w.eventually("the first pod is held in Permit", 30*time.Second, func() bool {
		held, _ := counterValue(t, "berth_gang_waiting_pods", nil)
		return held >= 1
	})
	n, _ := w.bound(spec.name)
	require.Zero(t, n, "a pod of the gang bound while its second pod was gated")
	w.createBoundPod("filler-n1", n1, 8)
	w.createBoundPod("filler-n2", n2, 8)
	// The scheduler's informer has seen the fillers before the second pod is tried: its
	// cache (scheduler_cache_size{type="pods"}, refreshed every second) holds every pod the
	// API shows bound, fillers included, and the held one.
	w.eventually("the scheduler's cache holds the fillers", 30*time.Second, func() bool {
		cached, _ := counterValue(t, "scheduler_cache_size", map[string]string{"type": "pods"})
		pods, err := w.kube.CoreV1().Pods(metav1.NamespaceAll).List(w.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName!="})
		require.NoError(t, err)
		return cached >= float64(len(pods.Items)+1)
	})
	n, _ = w.bound(spec.name)
	require.Zero(t, n, "a pod of the gang bound while its second pod was still gated")
	w.ungate(second)

	w.eventually("both pods of the gang bind", 30*time.Second, func() bool {
		n, _ := w.bound(spec.name)
		return n == 2
	})
	nodeOf := func(name string) string {
		p, err := w.kube.CoreV1().Pods(w.ns).Get(w.ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		return p.Spec.NodeName
	}
	t.Logf("first pod bound on %s, second on %s", shortNode(w, nodeOf(first)), shortNode(w, nodeOf(second)))
	require.Equal(t, n3, nodeOf(second), "the second pod's planned node was full; it should have fallen back to n3, the only node with 8 free GPUs")
	staleAfter, _ := counterValue(t, fastPathMetric, map[string]string{"result": "stale"})
	require.Greater(t, staleAfter, staleBefore, "%s{result=\"stale\"} did not increase (%v before, %v after): the second pod's plan went stale and should have been counted", fastPathMetric, staleBefore, staleAfter)
	watch.requireNoViolations(t)
}

// contentionSeed is the seed of the random shapes: from the clock unless BERTH_SEED is set.
// It is logged at the start and again, with what failed, at the very end of a failed test.
func contentionSeed(t *testing.T) (int64, *failNotes) {
	t.Helper()
	seed := time.Now().UnixNano()
	if s := os.Getenv("BERTH_SEED"); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err, "BERTH_SEED")
		seed = v
	}
	t.Logf("seed=%d (rerun with BERTH_SEED=%d)", seed, seed)
	// Registered before newWorld, so it runs after the world's dump: the last lines of a
	// failed run name the seed and what failed.
	notes := &failNotes{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("FAILED with seed=%d (rerun with BERTH_SEED=%d)%s", seed, seed, notes.String())
		}
	})
	return seed, notes
}

// failNotes repeats failure messages at the end of a failed test, after the world's dump.
type failNotes struct {
	mu    sync.Mutex
	notes []string
}

func (n *failNotes) add(msg string) {
	if n == nil {
		return
	}
	lines := strings.Split(msg, "\n")
	if len(lines) > 16 {
		lines = append(lines[:16], fmt.Sprintf("  ... (%d more lines above)", len(lines)-16))
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.notes = append(n.notes, strings.Join(lines, "\n"))
}

func (n *failNotes) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.notes) == 0 {
		return ""
	}
	return ":\n" + strings.Join(n.notes, "\n")
}

// gpuPool is a set of GPU nodes a gang selects with a nodeSelector (and tolerates, when the
// pool is tainted).
type gpuPool struct {
	name        string
	selector    map[string]string
	tolerations []corev1.Toleration
	taints      []corev1.Taint
	nodes       []string // full node names, in creation order
	// dra marks the nodes whose GPUs are DRA devices (gpu.nvidia.com ResourceSlices) rather
	// than the nvidia.com/gpu extended resource.
	dra map[string]bool
}

// addPoolNodeDRA adds a node whose GPUs are published as a ResourceSlice of the simulated
// gpu.nvidia.com driver (no kubelet runs here, so the test publishes it).
func (w *world) addPoolNodeDRA(p *gpuPool, name string, gpus int64) string {
	w.t.Helper()
	all := map[string]string{"berth.test/owner": w.ns}
	for k, v := range p.selector {
		all[k] = v
	}
	node := sim.NewNode(w.ns+"-"+name, sim.NodeShape{CPU: "128", Memory: "512Gi", DRAGPUs: gpus}, all)
	node.Spec.Taints = p.taints
	created, err := w.kube.CoreV1().Nodes().Create(w.ctx, node, metav1.CreateOptions{})
	require.NoError(w.t, err)
	_, err = w.kube.ResourceV1().ResourceSlices().Create(w.ctx, sim.GPUResourceSlice(created), metav1.CreateOptions{})
	require.NoError(w.t, err)
	p.nodes = append(p.nodes, created.Name)
	if p.dra == nil {
		p.dra = map[string]bool{}
	}
	p.dra[created.Name] = true
	return created.Name
}

func (w *world) newPool(name string, tainted bool) *gpuPool {
	p := &gpuPool{name: name, selector: map[string]string{poolLabel: name}}
	if tainted {
		p.taints = []corev1.Taint{{Key: poolLabel, Value: name, Effect: corev1.TaintEffectNoSchedule}}
		p.tolerations = []corev1.Toleration{{Key: poolLabel, Operator: corev1.TolerationOpEqual, Value: name, Effect: corev1.TaintEffectNoSchedule}}
	}
	return p
}

func (w *world) addPoolNode(p *gpuPool, name string, gpus int64) string {
	w.t.Helper()
	node := w.addNodeWith(name, gpus, "128", p.selector, p.taints)
	p.nodes = append(p.nodes, node)
	return node
}

// gangSpec is one gang of the stream and what its PodGroup's minimum means.
type gangSpec struct {
	name    string
	pool    *gpuPool
	roles   []role
	minRole map[string]int
	large   bool
	created time.Duration // after the stream began

	minMember int
	minTask   map[string]int // role replica -> pods the minimum needs of it
	unitSize  map[string]int // role replica -> its pods, for every replica with workers
	minGPUs   []int64        // GPUs of each pod of the minimum
	allGPUs   int64          // GPUs of all the gang's pods
	pods      int
	// dra: the gang's pods get their GPUs from DRA claims, so only its pool's DRA nodes
	// can hold it.
	dra bool
}

// useDRA makes every pod of the gang ask for its GPUs through a ResourceClaimTemplate.
func (s *gangSpec) useDRA() {
	s.dra = true
	for i := range s.roles {
		s.roles[i].dra = true
	}
}

// newGangSpec derives the minimum the way berth-controller (and createGang) writes it; the
// roles get the pool's nodeSelector and tolerations.
func newGangSpec(name string, pool *gpuPool, minRole map[string]int, roles ...role) *gangSpec {
	s := &gangSpec{name: name, pool: pool, minRole: minRole, minTask: map[string]int{}, unitSize: map[string]int{}}
	for _, r := range roles {
		r.nodeSelector, r.tolerations = pool.selector, pool.tolerations
		s.roles = append(s.roles, r)
		minReplicas := r.replicas
		if m, ok := minRole[r.name]; ok {
			minReplicas = m
		}
		size := 1 + r.workers
		for j := 0; j < r.replicas; j++ {
			task := fmt.Sprintf("%s-%d", r.name, j)
			if r.workers > 0 {
				s.unitSize[task] = size
			}
			if j < minReplicas {
				s.minTask[task] = size
				s.minMember += size
				for k := 0; k < size; k++ {
					s.minGPUs = append(s.minGPUs, r.gpus)
				}
			}
			s.allGPUs += int64(size) * r.gpus
			s.pods += size
		}
	}
	return s
}

// missingMinGPUs is the GPUs of the minimum's pods that are not bound yet: the most a
// reservation for the group may keep.
func (s *gangSpec) missingMinGPUs(bound map[string]string) int64 {
	per := perTask(bound)
	var n int64
	for _, r := range s.roles {
		for j := 0; j < r.replicas; j++ {
			task := fmt.Sprintf("%s-%d", r.name, j)
			n += int64(max(0, s.minTask[task]-per[task])) * r.gpus
		}
	}
	return n
}

func (s *gangSpec) minGPUTotal() int64 {
	var n int64
	for _, g := range s.minGPUs {
		n += g
	}
	return n
}

// satisfied says whether bound pods (pod -> role replica) meet the group's minimum.
func (s *gangSpec) satisfied(bound map[string]string) bool {
	if len(bound) < s.minMember {
		return false
	}
	per := perTask(bound)
	for task, n := range s.minTask {
		if per[task] < n {
			return false
		}
	}
	return true
}

// shape is e.g. "prefill 2x(1+1)x4GPU min 1, decode 3x8GPU min 2".
func (s *gangSpec) shape() string {
	var parts []string
	for _, r := range s.roles {
		pods := "1"
		if r.workers > 0 {
			pods = fmt.Sprintf("(1+%d)", r.workers)
		}
		minReplicas := r.replicas
		if m, ok := s.minRole[r.name]; ok {
			minReplicas = m
		}
		parts = append(parts, fmt.Sprintf("%s %dx%sx%dGPU min %d", r.name, r.replicas, pods, r.gpus, minReplicas))
	}
	return strings.Join(parts, ", ")
}

func (s *gangSpec) minimum() string {
	return fmt.Sprintf("minMember=%d minTaskMember={%s} (%d GPUs)", s.minMember, sortedCounts(s.minTask), s.minGPUTotal())
}

func perTask(bound map[string]string) map[string]int {
	out := map[string]int{}
	for _, task := range bound {
		out[task]++
	}
	return out
}

// pick returns an index with probability proportional to its weight.
func pick(rng *rand.Rand, weights ...int) int {
	total := 0
	for _, w := range weights {
		total += w
	}
	n := rng.IntN(total)
	for i, w := range weights {
		if n < w {
			return i
		}
		n -= w
	}
	return len(weights) - 1
}

var roleNames = []string{"server", "prefill", "decode"}

// randomGang draws 1-3 roles of 1-3 replicas of an entry and 0-3 workers, 1/2/4/8 GPUs per
// pod, with a random minimum per role; smaller shapes are likelier, and shapes whose
// minimum or total is above the caps are drawn again.
func randomGang(rng *rand.Rand, pool *gpuPool, maxMinGPUs, maxAllGPUs int64) *gangSpec {
	for {
		var roles []role
		minRole := map[string]int{}
		for i, n := 0, 1+pick(rng, 5, 3, 2); i < n; i++ {
			r := role{
				name:     roleNames[i],
				replicas: 1 + pick(rng, 5, 3, 2),
				workers:  pick(rng, 4, 3, 2, 1),
				gpus:     []int64{1, 2, 4, 8}[pick(rng, 3, 3, 2, 2)],
			}
			minRole[r.name] = 1 + rng.IntN(r.replicas)
			roles = append(roles, r)
		}
		if s := newGangSpec("", pool, minRole, roles...); s.minGPUTotal() <= maxMinGPUs && s.allGPUs <= maxAllGPUs {
			return s
		}
	}
}

// largeGang needs at least 40% of a 96-GPU pool for its minimum, in whole 8-GPU pods.
func largeGang(rng *rand.Rand, pool *gpuPool) *gangSpec {
	var s *gangSpec
	switch rng.IntN(3) {
	case 0: // five single-node servers, and one more beyond the minimum
		s = newGangSpec("", pool, map[string]int{"server": 5}, role{name: "server", replicas: 6, gpus: 8})
	case 1: // two replicas of an entry and two workers
		s = newGangSpec("", pool, map[string]int{"server": 2}, role{name: "server", replicas: 2, workers: 2, gpus: 8})
	default: // one prefill replica of two nodes, three decode nodes
		s = newGangSpec("", pool, map[string]int{"prefill": 1, "decode": 3},
			role{name: "prefill", replicas: 1, workers: 1, gpus: 8}, role{name: "decode", replicas: 3, gpus: 8})
	}
	s.large = true
	return s
}

// poolGPUs is the GPUs of a pool of 8-GPU nodes.
func poolGPUs(p *gpuPool) int64 { return int64(len(p.nodes)) * 8 }

// contentionStream draws the gangs: on main, about twice its GPUs in all, with the large gang
// once the gangs before it ask for 60% of the pool (early, and likely blocked on arrival);
// on other, about 3/4 of its GPUs: busy, but with headroom beside the saturated pool, which
// is where a scheduler that counts capacity its pods may not use goes wrong. The two are
// interleaved at random and named in arrival order.
func contentionStream(rng *rand.Rand, main, other *gpuPool) []*gangSpec {
	mainCap, otherCap := poolGPUs(main), poolGPUs(other)
	large := largeGang(rng, main)
	var a []*gangSpec
	for demand := large.allGPUs; demand < 2*mainCap; {
		s := randomGang(rng, main, 40, 48)
		a = append(a, s)
		demand += s.allGPUs
	}
	at := 0
	for before := int64(0); at < len(a) && before < mainCap*6/10; at++ {
		before += a[at].allGPUs
	}
	a = slices.Insert(a, at, large)
	var b []*gangSpec
	for demand := int64(0); demand < otherCap*3/4; {
		s := randomGang(rng, other, 24, 24)
		b = append(b, s)
		demand += s.allGPUs
	}
	var out []*gangSpec
	for i, j := 0, 0; i < len(a) || j < len(b); {
		if j == len(b) || (i < len(a) && rng.IntN(len(a)-i+len(b)-j) < len(a)-i) {
			out = append(out, a[i])
			i++
		} else {
			out = append(out, b[j])
			j++
		}
	}
	for i, s := range out {
		s.name = fmt.Sprintf("s%02d", i)
		switch {
		case s.large:
			s.name += "-big"
		case s.pool == other:
			s.name += "-gen"
		}
	}
	return out
}

// contention is the state of one run of TestContentionRandomGangStream.
type contention struct {
	w     *world
	seed  int64
	notes *failNotes
	specs []*gangSpec
	pools []*gpuPool
	watch *gangWatch
}

func (c *contention) logStream() {
	t := c.w.t
	demand := map[string]int64{}
	for _, s := range c.specs {
		demand[s.pool.name] += s.allGPUs
	}
	for _, p := range c.pools {
		t.Logf("seed=%d: pool %s: %d nodes, %d GPUs, demand %d GPUs", c.seed, p.name, len(p.nodes), poolGPUs(p), demand[p.name])
	}
	for _, s := range c.specs {
		t.Logf("  %-8s pool=%-10s %2d pods %3d GPUs; minimum %2d pods %3d GPUs: %s", s.name, s.pool.name, s.pods, s.allGPUs, s.minMember, s.minGPUTotal(), s.shape())
	}
}

// checkPodGroup makes sure the oracle's minimum is the one createGang wrote.
func (c *contention) checkPodGroup(s *gangSpec) {
	pg := c.w.podGroup(s.name)
	got := map[string]int{}
	for k, v := range pg.Spec.MinTaskMember {
		got[k] = int(v)
	}
	require.Equal(c.w.t, s.minMember, int(pg.Spec.MinMember), "seed=%d: %s minMember", c.seed, s.name)
	require.Equal(c.w.t, s.minTask, got, "seed=%d: %s minTaskMember", c.seed, s.name)
}

func (c *contention) requireNoViolations() { c.watch.requireNoViolations(c.w.t) }

// workConserving polls, every second for up to within, for a state with no waiting group
// whose minimum fits its pool's free GPUs (less what the scheduler reserves for waiting
// groups). Free GPUs only shrink while nothing is deleted, so once that holds it stays. It
// reports every offender of the last poll when the state did not come.
func (c *contention) workConserving(within time.Duration, after string, logPass bool) bool {
	t := c.w.t
	start := time.Now()
	var last []string
	var lastSnap *gpuSnapshot
	for {
		snap := c.w.gpuSnapshot(c.specs, c.watch.isRetired)
		offenders := c.waitingThatFit(snap)
		offenders = append(offenders, c.overReserved(snap)...)
		offenders = append(offenders, snap.errs...)
		if len(offenders) == 0 {
			if logPass {
				t.Logf("seed=%d: work-conserving %s after %s: %s", c.seed, time.Since(start).Round(time.Millisecond), after, c.summary(snap))
			}
			return true
		}
		last, lastSnap = offenders, snap
		if v := c.watch.violationList(); len(v) > 0 {
			c.watch.requireNoViolations(t)
		}
		if time.Since(start) >= within {
			break
		}
		time.Sleep(time.Second)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "seed=%d: not work-conserving: %s after %s, %d waiting group(s) still fit the free GPUs of their pool (%s):",
		c.seed, within, after, len(last), c.summary(lastSnap))
	for _, o := range last {
		b.WriteString("\n  - " + o)
	}
	for _, p := range c.pools {
		fmt.Fprintf(&b, "\n  pool %s free GPUs (after reservations): %s", p.name, lastSnap.freeString(c.w, p))
	}
	fmt.Fprintf(&b, "\n  reservations: %s", lastSnap.reservationString())
	c.fail(b.String())
	return false
}

// waitingThatFit lists the groups whose minimum is not bound, that reserve nothing, and
// whose minimum fits the free GPUs of their pool, packed first-fit decreasing.
func (c *contention) waitingThatFit(snap *gpuSnapshot) []string {
	var out []string
	for _, s := range c.specs {
		if c.watch.isRetired(s.name) || s.satisfied(snap.bound[s.name]) {
			continue
		}
		if _, ok := snap.reserving[s.name]; ok {
			continue
		}
		if fitsFFD(s.minGPUs, snap.freeFor(s.pool, s.dra)) {
			out = append(out, fmt.Sprintf("%s (pool %s, created at +%s) waits with %d/%d pods bound; its minimum %s [GPUs per pod %v] fits; PodGroup Unschedulable: %q",
				s.name, s.pool.name, s.created.Round(time.Millisecond), len(snap.bound[s.name]), s.pods, s.minimum(), s.minGPUs, pgMessage(snap.pgs[s.name])))
		}
	}
	return out
}

// overReserved lists what makes the scheduler's reservations more than waiting needs, so
// that trusting them (waitingThatFit subtracts them) could hide idle capacity: more than one
// group reserving in a pool, or a group reserving more GPUs than its minimum still misses.
func (c *contention) overReserved(snap *gpuSnapshot) []string {
	var out []string
	perPool := map[*gpuPool][]string{}
	for _, s := range c.specs {
		n, ok := snap.reservedBy[s.name]
		if !ok {
			continue
		}
		perPool[s.pool] = append(perPool[s.pool], s.name)
		if missing := s.missingMinGPUs(snap.bound[s.name]); n > missing {
			out = append(out, fmt.Sprintf("%s (pool %s) reserves %d GPUs, more than the %d GPUs its minimum still misses (%d/%d pods bound; minimum %s): %s",
				s.name, s.pool.name, n, missing, len(snap.bound[s.name]), s.pods, s.minimum(), snap.reserving[s.name]))
		}
	}
	for _, p := range c.pools {
		if groups := perPool[p]; len(groups) > 1 {
			sort.Strings(groups)
			out = append(out, fmt.Sprintf("pool %s: %d groups reserve capacity at once (%s); at most one, the one waiting longest, may", p.name, len(groups), strings.Join(groups, ", ")))
		}
	}
	return out
}

func (c *contention) summary(snap *gpuSnapshot) string {
	var parts []string
	for _, p := range c.pools {
		placed, waiting := 0, 0
		for _, s := range c.specs {
			if s.pool != p || c.watch.isRetired(s.name) {
				continue
			}
			if s.satisfied(snap.bound[s.name]) {
				placed++
			} else {
				waiting++
			}
		}
		var free, reserved int64
		for _, n := range p.nodes {
			free += max(0, snap.alloc[n]-snap.used[n])
			reserved += snap.reserved[n]
		}
		parts = append(parts, fmt.Sprintf("pool %s: %d groups placed, %d waiting, %d/%d GPUs free, %d reserved",
			p.name, placed, waiting, free, poolGPUs(p), reserved))
	}
	return strings.Join(parts, "; ")
}

// drain deletes placed gangs one at a time, oldest placed first and only in pools where a
// group still waits, until every gang has had its minimum bound. After each deletion the
// freed capacity must be used as after the stream (workConserving).
func (c *contention) drain() {
	t := c.w.t
	start := time.Now()
	deleted := 0
	for {
		c.requireNoViolations()
		var waiting []*gangSpec
		for _, s := range c.specs {
			if !c.watch.hasReached(s.name) {
				waiting = append(waiting, s)
			}
		}
		if len(waiting) == 0 {
			break
		}
		if time.Since(start) > drainWithin {
			c.dumpGroups(fmt.Sprintf("seed=%d: starvation: after %s and %d gangs deleted, %d gang(s) never had their minimum bound",
				c.seed, drainWithin, deleted, len(waiting)))
			t.FailNow()
		}
		victim := c.oldestPlaced(waiting)
		if victim == "" {
			// Nothing left to delete in the pools that wait: the scheduler has to place
			// what waits on the capacity there is.
			time.Sleep(time.Second)
			continue
		}
		c.watch.retire(victim)
		c.w.deleteGroupPods(victim)
		deleted++
		c.settle()
		// What the deletion freed must not sit idle either.
		if !c.workConserving(drainStepWithin, fmt.Sprintf("deleting gang %s (deletion %d of the drain)", victim, deleted), false) {
			t.FailNow()
		}
	}
	for _, s := range c.specs {
		if s.large {
			if !c.watch.hasReached(s.name) {
				c.fail(fmt.Sprintf("seed=%d: the large gang %s was never placed", c.seed, s.name))
				t.FailNow()
			}
		}
	}
	t.Logf("seed=%d: every gang had its minimum bound after %d deletions, %s after the work-conserving check",
		c.seed, deleted, time.Since(start).Round(time.Millisecond))
}

// oldestPlaced returns the gang placed first among those with a bound pod, not yet
// deleted, in a pool where a group waits.
func (c *contention) oldestPlaced(waiting []*gangSpec) string {
	pools := map[*gpuPool]bool{}
	for _, s := range waiting {
		pools[s.pool] = true
	}
	return c.watch.oldestPlaced(func(group string) bool {
		for _, s := range c.specs {
			if s.name == group {
				return pools[s.pool]
			}
		}
		return false
	})
}

// settle gives the scheduler time to place what a deletion freed: at least 1.5 s, then until
// no pod has bound for a second, at most 6 s.
func (c *contention) settle() {
	start := time.Now()
	for {
		time.Sleep(200 * time.Millisecond)
		elapsed := time.Since(start)
		if elapsed >= 6*time.Second || (elapsed >= 1500*time.Millisecond && time.Since(c.watch.lastBindTime()) >= time.Second) {
			return
		}
	}
}

func (c *contention) dumpGroups(headline string) {
	snap := c.w.gpuSnapshot(c.specs, c.watch.isRetired)
	var b strings.Builder
	b.WriteString(headline)
	for _, s := range c.specs {
		state := "waiting"
		switch {
		case c.watch.isRetired(s.name):
			state = "placed, deleted"
		case c.watch.hasReached(s.name):
			state = "placed"
		}
		fmt.Fprintf(&b, "\n  %-8s pool=%-10s %-15s bound %d/%d pods; minimum %s; %s; Unschedulable: %q",
			s.name, s.pool.name, state, len(snap.bound[s.name]), s.pods, s.minimum(), s.shape(), pgMessage(snap.pgs[s.name]))
		if pg := snap.pgs[s.name]; pg != nil && pg.Annotations[reservationAnnotation] != "" {
			fmt.Fprintf(&b, " reservation=%s", pg.Annotations[reservationAnnotation])
		}
	}
	for _, p := range c.pools {
		fmt.Fprintf(&b, "\n  pool %s free GPUs (after reservations): %s", p.name, snap.freeString(c.w, p))
	}
	c.fail(b.String())
}

// fail reports msg now and again at the end of the test.
func (c *contention) fail(msg string) {
	c.w.t.Helper()
	c.w.t.Error(msg)
	c.notes.add(msg)
}

func (c *contention) checkFastPath(before float64) {
	after, found := counterValue(c.w.t, fastPathMetric, map[string]string{"result": "hit"})
	if after <= before {
		why := ""
		if !found {
			why = " (no such series in legacyregistry)"
		}
		c.fail(fmt.Sprintf("seed=%d: %s{result=\"hit\"} did not increase during the test: %v before, %v after%s",
			c.seed, fastPathMetric, before, after, why))
	} else {
		c.w.t.Logf("seed=%d: %s{result=\"hit\"} rose by %v", c.seed, fastPathMetric, after-before)
	}
}

// gpuSnapshot is the cluster's GPUs as the API shows them at one moment.
type gpuSnapshot struct {
	alloc      map[string]int64             // node -> allocatable GPUs
	used       map[string]int64             // node -> GPUs of its bound, live pods
	reserved   map[string]int64             // node -> GPUs waiting groups reserve there
	reserving  map[string]string            // waiting group -> its reservation annotation
	reservedBy map[string]int64             // waiting group -> GPUs its reservation keeps
	stale      map[string]string            // group placed or deleted -> its leftover reservation
	bound      map[string]map[string]string // group -> bound pod -> role replica
	pgs        map[string]*volcanov1beta1.PodGroup
	errs       []string
}

// gpuSnapshot reads nodes, pods and PodGroups. A reservation counts only for a group that
// waits: not for one whose minimum is bound, nor one the test deleted (retired).
func (w *world) gpuSnapshot(specs []*gangSpec, retired func(string) bool) *gpuSnapshot {
	t := w.t
	snap := &gpuSnapshot{alloc: map[string]int64{}, used: map[string]int64{}, reserved: map[string]int64{},
		reserving: map[string]string{}, reservedBy: map[string]int64{}, stale: map[string]string{}, bound: map[string]map[string]string{},
		pgs: map[string]*volcanov1beta1.PodGroup{}}
	nodes, err := w.kube.CoreV1().Nodes().List(w.ctx, metav1.ListOptions{LabelSelector: "berth.test/owner=" + w.ns})
	require.NoError(t, err)
	for _, n := range nodes.Items {
		q := n.Status.Allocatable[gpu]
		snap.alloc[n.Name] = q.Value() + int64(sim.DRAGPUs(&n))
	}
	pods, err := w.kube.CoreV1().Pods(metav1.NamespaceAll).List(w.ctx, metav1.ListOptions{})
	require.NoError(t, err)
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if _, ours := snap.alloc[p.Spec.NodeName]; ours {
			snap.used[p.Spec.NodeName] += gpuRequest(p)
		}
		if g := p.Annotations[groupNameKey]; g != "" && p.Namespace == w.ns {
			if snap.bound[g] == nil {
				snap.bound[g] = map[string]string{}
			}
			snap.bound[g][p.Name] = p.Annotations[taskSpecKey]
		}
	}
	pgs, err := w.vc.SchedulingV1beta1().PodGroups(w.ns).List(w.ctx, metav1.ListOptions{})
	require.NoError(t, err)
	specOf := map[string]*gangSpec{}
	for _, s := range specs {
		specOf[s.name] = s
	}
	for i := range pgs.Items {
		pg := &pgs.Items[i]
		snap.pgs[pg.Name] = pg
		raw, ok := pg.Annotations[reservationAnnotation]
		if !ok {
			continue
		}
		if s := specOf[pg.Name]; s != nil && (s.satisfied(snap.bound[pg.Name]) || retired(pg.Name)) {
			snap.stale[pg.Name] = raw // nothing to wait for: not subtracted
			continue
		}
		var res map[string]map[string]string
		if err := json.Unmarshal([]byte(raw), &res); err != nil {
			snap.errs = append(snap.errs, fmt.Sprintf("PodGroup %s: annotation %s=%q is not {node: {resource: quantity}}: %v", pg.Name, reservationAnnotation, raw, err))
			continue
		}
		snap.reserving[pg.Name] = raw
		for node, list := range res {
			// A device a DRA group's reservation keeps is one GPU, named
			// dra.berth.sh/<driver>/<pool>/<device>.
			for k := range list {
				if strings.HasPrefix(k, "dra.berth.sh/") {
					snap.reserved[node]++
					snap.reservedBy[pg.Name]++
				}
			}
			v, ok := list[string(gpu)]
			if !ok {
				continue
			}
			q, err := resource.ParseQuantity(v)
			if err != nil {
				snap.errs = append(snap.errs, fmt.Sprintf("PodGroup %s: annotation %s: node %s: %s %q: %v", pg.Name, reservationAnnotation, node, gpu, v, err))
				continue
			}
			snap.reserved[node] += q.Value()
			snap.reservedBy[pg.Name] += q.Value()
		}
	}
	return snap
}

// freeAfterReservations is the pool's free GPUs per node, less what waiting groups reserve.
func (s *gpuSnapshot) freeAfterReservations(p *gpuPool) []int64 {
	out := make([]int64, len(p.nodes))
	for i, n := range p.nodes {
		out[i] = max(0, s.alloc[n]-s.used[n]-s.reserved[n])
	}
	return out
}

// freeFor is freeAfterReservations on the pool's nodes of one kind: DRA nodes for a gang
// whose pods use claims, device-plugin nodes for the others.
func (s *gpuSnapshot) freeFor(p *gpuPool, dra bool) []int64 {
	var out []int64
	for _, n := range p.nodes {
		if p.dra[n] == dra {
			out = append(out, max(0, s.alloc[n]-s.used[n]-s.reserved[n]))
		}
	}
	return out
}

func (s *gpuSnapshot) freeString(w *world, p *gpuPool) string {
	free := s.freeAfterReservations(p)
	parts := make([]string, len(p.nodes))
	for i, n := range p.nodes {
		parts[i] = fmt.Sprintf("%s=%d", shortNode(w, n), free[i])
		if r := s.reserved[n]; r > 0 {
			parts[i] += fmt.Sprintf("(%d reserved)", r)
		}
	}
	return strings.Join(parts, " ")
}

func (s *gpuSnapshot) reservationString() string {
	if len(s.reserving) == 0 && len(s.stale) == 0 {
		return "none"
	}
	var parts []string
	for _, g := range sortedNames(s.reserving) {
		parts = append(parts, fmt.Sprintf("%s %s", g, s.reserving[g]))
	}
	for _, g := range sortedNames(s.stale) {
		parts = append(parts, fmt.Sprintf("%s %s (its minimum is bound or it was deleted: not subtracted)", g, s.stale[g]))
	}
	return strings.Join(parts, "; ")
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedCounts(m map[string]int) string {
	var parts []string
	for _, k := range sortedNames(m) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// pgMessage is the PodGroup's Unschedulable message, "" when there is none (or no PodGroup).
func pgMessage(pg *volcanov1beta1.PodGroup) string {
	if pg == nil {
		return ""
	}
	return unschedulableMessage(pg)
}

func shortNode(w *world, node string) string { return strings.TrimPrefix(node, w.ns+"-") }

func gpuRequest(p *corev1.Pod) int64 {
	var n int64
	for _, c := range p.Spec.Containers {
		if q, ok := c.Resources.Requests[gpu]; ok {
			n += q.Value()
		}
	}
	for _, c := range p.Spec.ResourceClaims {
		var k int64
		if c.ResourceClaimTemplateName != nil {
			if _, err := fmt.Sscanf(*c.ResourceClaimTemplateName, "gpus-%d", &k); err == nil {
				n += k
			}
		}
	}
	return n
}

// fitsFFD packs pods (GPUs each) onto free GPUs per node, first-fit decreasing. With sizes
// 1, 2, 4, 8 (each divides the next) it finds a packing whenever one exists: placing a pod of
// size s anywhere it fits leaves the same number of free blocks of every size ≤ s.
func fitsFFD(pods, free []int64) bool {
	sizes := slices.Clone(pods)
	slices.SortFunc(sizes, func(a, b int64) int { return int(b - a) })
	bins := slices.Clone(free)
	for _, s := range sizes {
		placed := false
		for i := range bins {
			if bins[i] >= s {
				bins[i] -= s
				placed = true
				break
			}
		}
		if !placed {
			return false
		}
	}
	return true
}

// gangWatch follows every pod of the namespace for the whole run and records violations of
// the all-or-nothing promise: a group partly bound, or a role replica with workers split,
// for longer than partialGrace.
type gangWatch struct {
	seed  int64
	notes *failNotes // where violations are repeated at the end, if set

	mu           sync.Mutex
	specs        map[string]*gangSpec
	bound        map[string]map[string]string // group -> bound pod -> role replica
	partialSince map[string]time.Time         // "group" or "group/replica" -> since when
	reached      map[string]time.Time         // group -> when its minimum was first bound
	retired      map[string]bool              // groups the test deletes: no longer judged
	flagged      map[string]bool
	violations   []string
	lastBind     time.Time
	transients   int
	longest      time.Duration
	longestKey   string
}

func (w *world) watchGangs(seed int64) *gangWatch {
	w.t.Helper()
	gw := &gangWatch{seed: seed, specs: map[string]*gangSpec{}, bound: map[string]map[string]string{},
		partialSince: map[string]time.Time{}, reached: map[string]time.Time{}, retired: map[string]bool{}, flagged: map[string]bool{}}
	ctx, stop := w.watchPods(gw.observe)
	done := make(chan struct{})
	go func() {
		defer close(done)
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
		stop()
		<-done
		gw.logStats(w.t)
	})
	return gw
}

// watchPods calls observe for every pod of the namespace that is added, changes or is
// deleted, from a synced informer, until stop.
func (w *world) watchPods(observe func(obj any, deleted bool)) (ctx context.Context, stop func()) {
	w.t.Helper()
	factory := informers.NewSharedInformerFactoryWithOptions(w.kube, 0, informers.WithNamespace(w.ns))
	_, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { observe(obj, false) },
		UpdateFunc: func(_, obj any) { observe(obj, false) },
		DeleteFunc: func(obj any) { observe(obj, true) },
	})
	require.NoError(w.t, err)
	ctx, cancel := context.WithCancel(w.ctx)
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		require.True(w.t, ok, "%v informer did not sync", typ)
	}
	return ctx, func() { cancel(); factory.Shutdown() }
}

// register makes the watch judge a group; call it before the group's pods exist.
func (gw *gangWatch) register(s *gangSpec) {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	gw.specs[s.name] = s
	gw.evaluateLocked(s.name, time.Now())
}

func (gw *gangWatch) observe(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	group := p.Annotations[groupNameKey]
	if group == "" {
		return
	}
	now := time.Now()
	gw.mu.Lock()
	defer gw.mu.Unlock()
	b := gw.bound[group]
	if b == nil {
		b = map[string]string{}
		gw.bound[group] = b
	}
	_, was := b[p.Name]
	live := p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
	if !deleted && p.Spec.NodeName != "" && live {
		if !was {
			b[p.Name] = p.Annotations[taskSpecKey]
			gw.lastBind = now
		}
	} else {
		delete(b, p.Name)
	}
	gw.evaluateLocked(group, now)
}

// evaluateLocked updates since when the group (and each of its role replicas with workers)
// has been partly bound.
func (gw *gangWatch) evaluateLocked(group string, now time.Time) {
	s := gw.specs[group]
	if s == nil || gw.retired[group] {
		return
	}
	b := gw.bound[group]
	ok := s.satisfied(b)
	if _, done := gw.reached[group]; ok && !done {
		gw.reached[group] = now
	}
	gw.trackLocked(group, len(b) > 0 && !ok, now)
	per := perTask(b)
	for task, size := range s.unitSize {
		n := per[task]
		gw.trackLocked(group+"/"+task, n > 0 && n < size, now)
	}
}

func (gw *gangWatch) trackLocked(key string, partial bool, now time.Time) {
	since, was := gw.partialSince[key]
	switch {
	case partial && !was:
		gw.partialSince[key] = now
	case !partial && was:
		delete(gw.partialSince, key)
		gw.transients++
		d := now.Sub(since)
		if d > gw.longest {
			gw.longest, gw.longestKey = d, key
		}
		// A partial state that ended between two ticks of overdue is judged here.
		if d > partialGrace && !gw.flagged[key] {
			gw.flagged[key] = true
			gw.violations = append(gw.violations, fmt.Sprintf("seed=%d: %s was partly bound for %s (more than %s) before it completed or emptied",
				gw.seed, key, d.Round(time.Millisecond), partialGrace))
		}
	}
}

// overdue turns a partial state older than partialGrace into a violation.
func (gw *gangWatch) overdue(now time.Time) {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	for key, since := range gw.partialSince {
		if now.Sub(since) <= partialGrace || gw.flagged[key] {
			continue
		}
		gw.flagged[key] = true
		group, task, isReplica := strings.Cut(key, "/")
		s, b := gw.specs[group], gw.bound[group]
		var pods []string
		for pod, tk := range b {
			if !isReplica || tk == task {
				pods = append(pods, pod)
			}
		}
		sort.Strings(pods)
		if isReplica {
			gw.violations = append(gw.violations, fmt.Sprintf("seed=%d: role replica %s of group %s split for over %s: %d of its %d pods bound %v",
				gw.seed, task, group, partialGrace, len(pods), s.unitSize[task], pods))
		} else {
			gw.violations = append(gw.violations, fmt.Sprintf("seed=%d: group %s partly bound for over %s: %d pods bound %v, its minimum is %s",
				gw.seed, group, partialGrace, len(pods), pods, s.minimum()))
		}
	}
}

func (gw *gangWatch) violationList() []string {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	return slices.Clone(gw.violations)
}

func (gw *gangWatch) requireNoViolations(t *testing.T) {
	t.Helper()
	if v := gw.violationList(); len(v) > 0 {
		msg := fmt.Sprintf("seed=%d: the all-or-nothing promise was broken:\n  %s", gw.seed, strings.Join(v, "\n  "))
		gw.notes.add(msg)
		t.Fatal(msg)
	}
}

// retire stops judging a group the test is about to delete.
func (gw *gangWatch) retire(group string) {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	gw.retired[group] = true
	for key := range gw.partialSince {
		if g, _, _ := strings.Cut(key, "/"); g == group {
			delete(gw.partialSince, key)
		}
	}
}

func (gw *gangWatch) isRetired(group string) bool {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	return gw.retired[group]
}

func (gw *gangWatch) hasReached(group string) bool {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	_, ok := gw.reached[group]
	return ok
}

func (gw *gangWatch) lastBindTime() time.Time {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	return gw.lastBind
}

// oldestPlaced returns the group whose minimum was bound first among those not retired,
// with a pod bound, for which eligible holds.
func (gw *gangWatch) oldestPlaced(eligible func(string) bool) string {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	best, bestAt := "", time.Time{}
	for group, at := range gw.reached {
		if gw.retired[group] || len(gw.bound[group]) == 0 || !eligible(group) {
			continue
		}
		if best == "" || at.Before(bestAt) || (at.Equal(bestAt) && group < best) {
			best, bestAt = group, at
		}
	}
	return best
}

func (gw *gangWatch) logStats(t *testing.T) {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	t.Logf("seed=%d: the watch saw %d transient partial states (binding one pod at a time), the longest %s (%s)",
		gw.seed, gw.transients, gw.longest.Round(time.Millisecond), gw.longestKey)
}

// counterValue sums the samples of a counter (or gauge) in legacyregistry whose labels include want;
// found says whether any sample matched.
func counterValue(t *testing.T, name string, want map[string]string) (value float64, found bool) {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	require.NoError(t, err)
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			match := true
			for k, v := range want {
				if labels[k] != v {
					match = false
				}
			}
			if match {
				value += m.GetCounter().GetValue() + m.GetGauge().GetValue() // one of them is set
				found = true
			}
		}
	}
	return value, found
}

// waitSchedulerReady binds a small probe pod through berth-scheduler onto the pool and
// deletes it, so a test that depends on timing starts with the scheduler up.
func (w *world) waitSchedulerReady(p *gpuPool) {
	w.t.Helper()
	probe := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "probe"},
		Spec: corev1.PodSpec{
			SchedulerName: workloadv1alpha1.BerthSchedulerName, NodeSelector: p.selector, Tolerations: p.tolerations,
			Containers: []corev1.Container{{Name: "c", Image: "probe",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")}}}},
		},
	}
	_, err := w.kube.CoreV1().Pods(w.ns).Create(w.ctx, probe, metav1.CreateOptions{})
	require.NoError(w.t, err)
	w.eventually("berth-scheduler binds a probe pod", 60*time.Second, func() bool {
		got, err := w.kube.CoreV1().Pods(w.ns).Get(w.ctx, "probe", metav1.GetOptions{})
		return err == nil && got.Spec.NodeName != ""
	})
	require.NoError(w.t, w.kube.CoreV1().Pods(w.ns).Delete(w.ctx, "probe", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
}

// createBoundPod creates a pod already bound to node (no scheduler involved) that requests
// gpus GPUs, as a pod of another scheduler would be.
func (w *world) createBoundPod(name, node string, gpus int64) {
	w.t.Helper()
	q := *resource.NewQuantity(gpus, resource.DecimalSI)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: name},
		Spec: corev1.PodSpec{
			NodeName:    node,
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "c", Image: "filler", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{gpu: q, corev1.ResourceCPU: resource.MustParse("100m")},
				Limits:   corev1.ResourceList{gpu: q},
			}}},
		},
	}
	_, err := w.kube.CoreV1().Pods(w.ns).Create(w.ctx, p, metav1.CreateOptions{})
	require.NoError(w.t, err)
}

// ungate removes a pod's scheduling gates.
func (w *world) ungate(name string) {
	w.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := w.kube.CoreV1().Pods(w.ns).Get(w.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Spec.SchedulingGates = nil
		_, err = w.kube.CoreV1().Pods(w.ns).Update(w.ctx, p, metav1.UpdateOptions{})
		return err
	})
	require.NoError(w.t, err)
}
