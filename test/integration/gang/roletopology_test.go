package gang

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/pkg/sim"
)

// The role-topology tests give berth-scheduler PodGroups that carry Kthena 1.0's rolePolicy
// the way Volcano reads it, spec.subGroupPolicy[].networkTopology (one instance per role
// replica), beside a group policy in spec.networkTopology, on GPU pools wired as leaves
// under spines. The shipped profile reads the tiers from the network.berth.sh/leaf and
// network.berth.sh/spine node labels (no HyperNode exists in this package).

// subgroupDomainsMetric counts the domains chosen for role replicas, by tier and result.
const subgroupDomainsMetric = "berth_topology_subgroup_domains_chosen_total"

func tierPolicy(mode volcanov1beta1.NetworkTopologyMode, tier string) *volcanov1beta1.NetworkTopologySpec {
	return &volcanov1beta1.NetworkTopologySpec{Mode: mode, HighestTierName: tier}
}

// A seeded stream of random groups on two pools, each group with a hard spine policy and a
// hard leaf policy per role (2-4 roles, 1-2 replicas each, an entry and 0-2 workers per
// replica, a minimum below the replicas now and then), about 1.5 times each pool's GPUs,
// one every 100-300 ms; now and then the group placed first finishes (its pods are
// deleted), so arrivals meet freed capacity. A watch over the whole run asserts that every
// bound pod of a role replica shares its leaf with the replica's other bound pods and every
// group stays in one spine, and (as in the contention test) that no group stays partly
// bound and no replica split. Then placed groups are deleted one at a time until every
// group has had its minimum bound. BERTH_SEED=<n> replays a stream.
func TestRoleTopologyRandomGroups(t *testing.T) {
	seed, notes := contentionSeed(t)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5851f42d4c957f2d))
	w := newWorld(t)
	w.startScheduler(30, 1)
	a := w.newNetPool("rt-a", true, 3, 3, 2)  // 18 nodes: leaves of 16 GPUs, spines of 48
	b := w.newNetPool("rt-b", false, 2, 2, 3) // 12 nodes: leaves of 24 GPUs, spines of 48
	w.waitSchedulerReady(a.gpuPool)
	w.waitSchedulerReady(b.gpuPool)

	specs := roleTopologyStream(rng, a, b)
	for _, s := range specs {
		t.Logf("  %s pool=%s %s; minimum %s", s.name, s.pool.name, s.shape(), s.minimum())
	}
	gangs := w.watchGangs(seed)
	gangs.notes = notes
	topo := w.watchTopology(seed, notes, a, b)
	opts := gangOpts{topology: tierPolicy(volcanov1beta1.HardNetworkTopologyMode, "spine"),
		roleTopology: tierPolicy(volcanov1beta1.HardNetworkTopologyMode, "leaf")}

	start := time.Now()
	finished := 0
	for i, s := range specs {
		if i > 0 {
			time.Sleep(time.Duration(100+rng.IntN(201)) * time.Millisecond)
		}
		gangs.register(s)
		topo.register(s.name, true)
		w.createGangWith(s.name, s.minRole, opts, s.roles...)
		if rng.IntN(3) == 0 {
			if done := gangs.oldestPlaced(func(string) bool { return true }); done != "" {
				gangs.retire(done)
				w.deleteGroupPods(done)
				finished++
			}
		}
	}
	t.Logf("seed=%d: %d groups created in %s, %d finished meanwhile", seed, len(specs), time.Since(start).Round(time.Millisecond), finished)
	topo.requireNoViolations(t)
	gangs.requireNoViolations(t)

	drainRoleGroups(t, w, seed, specs, gangs, topo)
	topo.requireNoViolations(t)
	gangs.requireNoViolations(t)
	spread := topo.groupsAcrossLeaves()
	t.Logf("seed=%d: %d groups were placed across more than one leaf, every replica in one; done in %s", seed, spread, time.Since(start).Round(time.Millisecond))
	require.Positive(t, spread, "seed=%d: no group needed more than one leaf: the stream did not test the per-role rule", seed)
}

// A soft rolePolicy still places a replica no leaf can hold, inside the group's spine,
// where a hard one refuses it and says which replica; a soft replica that fits a leaf
// stays in one. Two spines of two leaves of two 8-GPU nodes.
func TestRoleTopologySoftReplicaSpreadsWhenNoLeafHoldsIt(t *testing.T) {
	w := newWorld(t)
	w.startScheduler(30, 1)
	p := w.newNetPool("soft", false, 2, 2, 2)
	w.waitSchedulerReady(p.gpuPool)
	topo := w.watchTopology(0, nil, p)
	spine := tierPolicy(volcanov1beta1.HardNetworkTopologyMode, "spine")

	// server-0 is an entry and two workers of 8 GPUs: three whole nodes, and a leaf has two.
	server := role{name: "server", replicas: 1, workers: 2, gpus: 8, nodeSelector: p.selector}
	topo.register("hard", true)
	w.createGangWith("hard", nil, gangOpts{topology: spine, roleTopology: tierPolicy(volcanov1beta1.HardNetworkTopologyMode, "leaf")}, server)
	w.eventually("the hard group refused, naming the replica no leaf can hold", 30*time.Second, func() bool {
		return strings.Contains(unschedulableMessage(w.podGroup("hard")), "no leaf in it can hold server-0 (3 pods)")
	})
	n, _ := w.bound("hard")
	require.Zero(t, n, "a pod of the hard group bound although no leaf can hold its replica: %s", unschedulableMessage(w.podGroup("hard")))
	t.Logf("hard: %s", unschedulableMessage(w.podGroup("hard")))
	w.deleteGroupPods("hard")
	require.NoError(t, w.vc.SchedulingV1beta1().PodGroups(w.ns).Delete(w.ctx, "hard", metav1.DeleteOptions{}))

	aboveBefore, _ := counterValue(t, subgroupDomainsMetric, map[string]string{"result": "above_tier"})
	softLeaf := tierPolicy(volcanov1beta1.SoftNetworkTopologyMode, "leaf")
	decode := role{name: "decode", replicas: 1, gpus: 8, nodeSelector: p.selector}
	topo.register("spread", false)
	w.createGangWith("spread", nil, gangOpts{topology: spine, roleTopology: softLeaf}, server, decode)
	w.eventually("the soft group bound", 30*time.Second, func() bool {
		n, _ := w.bound("spread")
		return n == 4 && topo.seenBound("spread") == 4
	})
	leaves := topo.leavesOf("spread", "server-0")
	require.Len(t, leaves, 2, "server-0 should spread over the two leaves of one spine, as no leaf holds it")
	w.eventually("a DomainChosen event that says server-0 spread", 10*time.Second, func() bool {
		evs, err := w.kube.EventsV1().Events(w.ns).List(w.ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, e := range evs.Items {
			if e.Regarding.Name == "spread" && e.Reason == "DomainChosen" && strings.Contains(e.Note, "server-0 across spine") &&
				strings.Contains(e.Note, "(no leaf could hold it)") {
				t.Logf("DomainChosen: %s", e.Note)
				return true
			}
		}
		return false
	})
	aboveAfter, _ := counterValue(t, subgroupDomainsMetric, map[string]string{"result": "above_tier"})
	require.Greater(t, aboveAfter, aboveBefore, "%s{result=\"above_tier\"} did not count the soft replica that spread", subgroupDomainsMetric)

	// The other spine is empty: a soft replica of two whole nodes finds a leaf there.
	fits := role{name: "server", replicas: 1, workers: 1, gpus: 8, nodeSelector: p.selector}
	topo.register("fits", true)
	w.createGangWith("fits", nil, gangOpts{topology: spine, roleTopology: softLeaf}, fits)
	w.eventually("the soft group that fits a leaf bound", 30*time.Second, func() bool {
		n, _ := w.bound("fits")
		return n == 2
	})
	topo.requireNoViolations(t)
}

// kube-scheduler tries a pod's status.nominatedNodeName first, through Filter alone,
// before the nodes PreFilter returned. Preemption sets that field, and so does an attempt
// that waits in Permit; a gang released a moment later can leave it behind (the scheduler
// clears it only if its copy of the pod already shows it). A replica (an entry and a
// worker of 8 GPUs, leaf rolePolicy) whose entry pod is nominated to a node of a leaf that
// can no longer hold the replica must still be placed whole, in the other leaf.
func TestRoleTopologyIgnoresANominatedNodeOutsideTheReplicasLeaf(t *testing.T) {
	w := newWorld(t)
	w.startScheduler(30, 1)
	p := w.newNetPool("nnn", false, 1, 2, 2)
	w.waitSchedulerReady(p.gpuPool)
	topo := w.watchTopology(0, nil, p)
	topo.register("tp", true)
	// Leaf 0 keeps one whole node, nominated below; leaf 1 has two.
	nominated := p.nodes[0]
	w.createBoundPod("filler", p.nodes[1], 8)
	entry, worker := "tp-server-0-0", "tp-server-0-1"
	w.gated = map[string]bool{entry: true, worker: true}
	w.createGangWith("tp", nil, gangOpts{topology: tierPolicy(volcanov1beta1.HardNetworkTopologyMode, "spine"),
		roleTopology: tierPolicy(volcanov1beta1.HardNetworkTopologyMode, "leaf")},
		role{name: "server", replicas: 1, workers: 1, gpus: 8, nodeSelector: p.selector})
	pod, err := w.kube.CoreV1().Pods(w.ns).Get(w.ctx, entry, metav1.GetOptions{})
	require.NoError(t, err)
	pod.Status.NominatedNodeName = nominated
	_, err = w.kube.CoreV1().Pods(w.ns).UpdateStatus(w.ctx, pod, metav1.UpdateOptions{})
	require.NoError(t, err)
	w.ungate(entry)
	w.ungate(worker)
	w.eventually("the replica bound", 30*time.Second, func() bool {
		n, _ := w.bound("tp")
		return n == 2 && topo.seenBound("tp") == 2
	})
	leaves := topo.leavesOf("tp", "server-0")
	require.Len(t, leaves, 1, "the replica was split")
	require.NotEqual(t, p.leafOf[nominated], leaves[0], "the entry pod went to its nominated node, in the leaf that cannot hold its replica")
	topo.requireNoViolations(t)
}

// netPool is a GPU pool wired as spines of leaves of 8-GPU nodes.
type netPool struct {
	*gpuPool
	leaves, perLeaf int               // per spine, per leaf
	leafOf, spineOf map[string]string // node -> its leaf, its spine
}

// newNetPool adds spines×leaves×perLeaf nodes of 8 GPUs, labelled with their leaf and
// spine (names unique to the test, as label tiers need).
func (w *world) newNetPool(name string, tainted bool, spines, leaves, perLeaf int) *netPool {
	w.t.Helper()
	p := &netPool{gpuPool: w.newPool(name, tainted), leaves: leaves, perLeaf: perLeaf, leafOf: map[string]string{}, spineOf: map[string]string{}}
	for s := 0; s < spines; s++ {
		spine := fmt.Sprintf("%s-%s-s%d", w.ns, name, s)
		for l := 0; l < leaves; l++ {
			leaf := fmt.Sprintf("%s-l%d", spine, l)
			for i := 0; i < perLeaf; i++ {
				labels := map[string]string{sim.LeafLabel: leaf, sim.SpineLabel: spine}
				for k, v := range p.selector {
					labels[k] = v
				}
				node := w.addNodeWith(fmt.Sprintf("%s-s%dl%dn%d", name, s, l, i), 8, "128", labels, p.taints)
				p.nodes = append(p.nodes, node)
				p.leafOf[node], p.spineOf[node] = leaf, spine
			}
		}
	}
	return p
}

var roleTopologyRoles = []string{"prefill", "decode", "router", "embed"}

// randomRoleGroup draws 2-4 roles of 1-2 replicas, each replica an entry and 0-2 workers
// of 1, 2, 4 or 8 GPUs per pod, with a minimum of 1 to all replicas per role. A shape is
// drawn again until the whole group fits one empty spine of the pool with every replica
// in one leaf, so every group can be placed once its pool has room.
func randomRoleGroup(rng *rand.Rand, p *netPool) *gangSpec {
	for {
		var roles []role
		minRole := map[string]int{}
		for i, n := 0, 2+rng.IntN(3); i < n; i++ {
			r := role{
				name:     roleTopologyRoles[i],
				replicas: 1 + pick(rng, 3, 2),
				workers:  pick(rng, 4, 3, 2),
				gpus:     []int64{1, 2, 4, 8}[pick(rng, 2, 3, 3, 2)],
			}
			minRole[r.name] = 1 + rng.IntN(r.replicas)
			roles = append(roles, r)
		}
		if s := newGangSpec("", p.gpuPool, minRole, roles...); p.spineHolds(s) {
			return s
		}
	}
}

// spineHolds says whether one empty spine of the pool holds every replica of the group,
// each in one leaf: largest replica first, each into the leaf it leaves fullest, pods
// best fit onto nodes (GPU counts are powers of two, so best fit packs a leaf fully).
func (p *netPool) spineHolds(s *gangSpec) bool {
	leaves := make([][]int64, p.leaves)
	for l := range leaves {
		leaves[l] = slices.Repeat([]int64{8}, p.perLeaf)
	}
	type replica struct {
		pods int
		gpus int64
	}
	var replicas []replica
	for _, r := range s.roles {
		for j := 0; j < r.replicas; j++ {
			replicas = append(replicas, replica{1 + r.workers, r.gpus})
		}
	}
	sort.SliceStable(replicas, func(i, j int) bool {
		return int64(replicas[i].pods)*replicas[i].gpus > int64(replicas[j].pods)*replicas[j].gpus
	})
	for _, r := range replicas {
		best, bestFree := -1, int64(0)
		var bestNodes []int64
		for l, nodes := range leaves {
			trial := slices.Clone(nodes)
			if !bestFit(trial, r.pods, r.gpus) {
				continue
			}
			var free int64
			for _, f := range trial {
				free += f
			}
			if best < 0 || free < bestFree {
				best, bestFree, bestNodes = l, free, trial
			}
		}
		if best < 0 {
			return false
		}
		leaves[best] = bestNodes
	}
	return true
}

// bestFit places pods of gpus each onto the nodes' free GPUs, each on the fullest node that
// takes it, and says whether all fit.
func bestFit(free []int64, pods int, gpus int64) bool {
	for k := 0; k < pods; k++ {
		at := -1
		for i, f := range free {
			if f >= gpus && (at < 0 || f < free[at]) {
				at = i
			}
		}
		if at < 0 {
			return false
		}
		free[at] -= gpus
	}
	return true
}

// roleTopologyStream draws groups for each pool until they ask for 1.5 times its GPUs,
// interleaved at random and named in arrival order.
func roleTopologyStream(rng *rand.Rand, pools ...*netPool) []*gangSpec {
	var queues [][]*gangSpec
	for _, p := range pools {
		var q []*gangSpec
		for demand := int64(0); demand < poolGPUs(p.gpuPool)*3/2; {
			s := randomRoleGroup(rng, p)
			q = append(q, s)
			demand += s.allGPUs
		}
		queues = append(queues, q)
	}
	var out []*gangSpec
	for {
		left := 0
		for _, q := range queues {
			left += len(q)
		}
		if left == 0 {
			break
		}
		n := rng.IntN(left)
		for i, q := range queues {
			if n < len(q) {
				out = append(out, q[0])
				queues[i] = q[1:]
				break
			}
			n -= len(q)
		}
	}
	for i, s := range out {
		s.name = fmt.Sprintf("r%02d-%s", i, s.pool.name)
	}
	return out
}

// drainRoleGroups deletes placed groups one at a time, the one placed first in a pool
// where a group waits, until every group has had its minimum bound.
func drainRoleGroups(t *testing.T, w *world, seed int64, specs []*gangSpec, gangs *gangWatch, topo *topologyWatch) {
	t.Helper()
	start, deleted := time.Now(), 0
	for {
		topo.requireNoViolations(t)
		gangs.requireNoViolations(t)
		waiting := map[*gpuPool][]string{}
		for _, s := range specs {
			if !gangs.hasReached(s.name) {
				waiting[s.pool] = append(waiting[s.pool], s.name)
			}
		}
		if len(waiting) == 0 {
			t.Logf("seed=%d: every group had its minimum bound after %d deletions in %s", seed, deleted, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > drainWithin {
			for _, s := range specs {
				if !gangs.hasReached(s.name) {
					t.Logf("waiting: %s pool=%s %s; minimum %s; Unschedulable: %q", s.name, s.pool.name, s.shape(), s.minimum(), unschedulableMessage(w.podGroup(s.name)))
				}
			}
			t.Fatalf("seed=%d: after %s and %d deletions, groups never had their minimum bound: %v", seed, drainWithin, deleted, waiting)
		}
		victim := gangs.oldestPlaced(func(group string) bool {
			for _, s := range specs {
				if s.name == group {
					return len(waiting[s.pool]) > 0
				}
			}
			return false
		})
		if victim == "" {
			time.Sleep(time.Second)
			continue
		}
		gangs.retire(victim)
		w.deleteGroupPods(victim)
		deleted++
		// Give the scheduler time to place what the deletion freed: at least 1.5 s, then
		// until no pod has bound for a second, at most 6 s.
		for at := time.Now(); ; {
			time.Sleep(200 * time.Millisecond)
			if e := time.Since(at); e >= 6*time.Second || (e >= 1500*time.Millisecond && time.Since(gangs.lastBindTime()) >= time.Second) {
				break
			}
		}
	}
}

// topologyWatch follows every pod of the namespace for the whole run and records each
// bound pod that breaks a group's network topology: a pod in another spine than its
// group's other bound pods, or (for a hard leaf rolePolicy) in another leaf than its role
// replica's. Bound pods never move, so no grace applies: the first such pod is a
// violation.
type topologyWatch struct {
	seed  int64
	notes *failNotes

	mu         sync.Mutex
	leafOf     map[string]string
	spineOf    map[string]string
	hardLeaf   map[string]bool                         // group -> its rolePolicy is a hard leaf
	bound      map[string]map[string]map[string]string // group -> role replica -> pod -> node
	multiLeaf  map[string]bool                         // groups seen on more than one leaf
	flagged    map[string]bool
	violations []string
}

func (w *world) watchTopology(seed int64, notes *failNotes, pools ...*netPool) *topologyWatch {
	w.t.Helper()
	tw := &topologyWatch{seed: seed, notes: notes, leafOf: map[string]string{}, spineOf: map[string]string{}, hardLeaf: map[string]bool{},
		bound: map[string]map[string]map[string]string{}, multiLeaf: map[string]bool{}, flagged: map[string]bool{}}
	for _, p := range pools {
		for n, l := range p.leafOf {
			tw.leafOf[n], tw.spineOf[n] = l, p.spineOf[n]
		}
	}
	_, stop := w.watchPods(tw.observe)
	w.t.Cleanup(stop)
	return tw
}

// register says how to judge a group: hardLeaf when every role replica must keep to one leaf.
func (tw *topologyWatch) register(group string, hardLeaf bool) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.hardLeaf[group] = hardLeaf
}

func (tw *topologyWatch) observe(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	group, replica := p.Annotations[groupNameKey], p.Labels[labelRoleID]
	if group == "" {
		return
	}
	tw.mu.Lock()
	defer tw.mu.Unlock()
	byReplica := tw.bound[group]
	if byReplica == nil {
		byReplica = map[string]map[string]string{}
		tw.bound[group] = byReplica
	}
	pods := byReplica[replica]
	if pods == nil {
		pods = map[string]string{}
		byReplica[replica] = pods
	}
	if deleted || p.Spec.NodeName == "" || p.DeletionTimestamp != nil {
		delete(pods, p.Name)
		return
	}
	pods[p.Name] = p.Spec.NodeName
	tw.checkLocked(group, p.Name)
}

// checkLocked judges the group after one of its pods was seen bound.
func (tw *topologyWatch) checkLocked(group, pod string) {
	spines, leaves := map[string][]string{}, map[string]bool{}
	for replica, pods := range tw.bound[group] {
		replicaLeaves := map[string][]string{}
		for name, node := range pods {
			leaf, spine := tw.leafOf[node], tw.spineOf[node]
			if leaf == "" {
				tw.flagLocked(group+"/"+name, fmt.Sprintf("pod %s of group %s bound to node %s, outside the test's pools", name, group, node))
				continue
			}
			spines[spine] = append(spines[spine], name)
			replicaLeaves[leaf] = append(replicaLeaves[leaf], name)
			leaves[leaf] = true
		}
		if len(replicaLeaves) > 1 && tw.hardLeaf[group] {
			tw.flagLocked(group+"/"+replica, fmt.Sprintf("role replica %s of group %s is in %d leaves (its rolePolicy is a hard leaf), seen when %s bound: %s",
				replica, group, len(replicaLeaves), pod, describeDomains(replicaLeaves)))
		}
	}
	if len(spines) > 1 {
		tw.flagLocked(group, fmt.Sprintf("group %s is in %d spines (its policy is a hard spine), seen when %s bound: %s", group, len(spines), pod, describeDomains(spines)))
	}
	if len(leaves) > 1 {
		tw.multiLeaf[group] = true
	}
}

func (tw *topologyWatch) flagLocked(key, msg string) {
	if tw.flagged[key] {
		return
	}
	tw.flagged[key] = true
	tw.violations = append(tw.violations, fmt.Sprintf("seed=%d: %s", tw.seed, msg))
}

func describeDomains(m map[string][]string) string {
	var parts []string
	for _, d := range sortedNames(m) {
		pods := slices.Clone(m[d])
		sort.Strings(pods)
		parts = append(parts, fmt.Sprintf("%s %v", d, pods))
	}
	return strings.Join(parts, ", ")
}

func (tw *topologyWatch) requireNoViolations(t *testing.T) {
	t.Helper()
	tw.mu.Lock()
	v := slices.Clone(tw.violations)
	tw.mu.Unlock()
	if len(v) > 0 {
		msg := fmt.Sprintf("seed=%d: the network topology was broken:\n  %s", tw.seed, strings.Join(v, "\n  "))
		tw.notes.add(msg)
		t.Fatal(msg)
	}
}

// seenBound counts the group's pods the watch has seen bound. A test reads the watch's
// leaves only after it has seen every binding the API already shows: the watch can lag.
func (tw *topologyWatch) seenBound(group string) int {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	n := 0
	for _, pods := range tw.bound[group] {
		n += len(pods)
	}
	return n
}

// leavesOf lists the leaves of a role replica's bound pods.
func (tw *topologyWatch) leavesOf(group, replica string) []string {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	set := map[string]bool{}
	for _, node := range tw.bound[group][replica] {
		set[tw.leafOf[node]] = true
	}
	return sortedNames(set)
}

// groupsAcrossLeaves counts the groups seen with bound pods in more than one leaf.
func (tw *topologyWatch) groupsAcrossLeaves() int {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return len(tw.multiLeaf)
}
