package placement

import (
	"context"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// TestPlacement runs every scenario twice: with tiers from node labels (no HyperNode
// exists), then with HyperNodes that group the same nodes differently.
func TestPlacement(t *testing.T) {
	startSystem(t)
	ctx := context.Background()
	for _, fab := range []struct {
		name   string
		fabric *fabric
		setup  func(*testing.T)
	}{
		{"labels", labelFabric(), func(*testing.T) { deleteHyperNodes(ctx) }},
		{"hypernodes", hyperNodeFabric(), func(t *testing.T) { createHyperNodes(t, ctx) }},
	} {
		t.Run(fab.name, func(t *testing.T) {
			fab.setup(t)
			t.Cleanup(func() { deleteHyperNodes(ctx) })
			t.Run("hard groups never cross the allowed tier", func(t *testing.T) { hardNeverCrosses(t, fab.fabric) })
			t.Run("soft groups stay in one leaf when one can hold them", func(t *testing.T) { softStaysInLeaf(t, fab.fabric) })
			t.Run("a group that fits only across leaves", func(t *testing.T) { onlyAcrossLeaves(t, fab.fabric) })
			t.Run("subgroups keep their own leaf inside the group's spine", func(t *testing.T) { subgroupsInLeaves(t, fab.fabric) })
			t.Run("an 8-GPU pod finds a whole node after 200 one-GPU pods", tensorParallelPodFindsWholeNode)
			t.Run("accelerator product, family, memory and the cheaper class", acceleratorClass)
			t.Run("ServingGroups spread across zones, counted as groups", servingGroupsSpreadAcrossZones)
		})
	}
}

func hard(tier int) *volcanov1beta1.NetworkTopologySpec {
	return &volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.HardNetworkTopologyMode, HighestTierAllowed: ptr.To(tier)}
}

func soft(tier int) *volcanov1beta1.NetworkTopologySpec {
	return &volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.SoftNetworkTopologyMode, HighestTierAllowed: ptr.To(tier)}
}

var gpuSizes = []int64{1, 2, 4, 8}

// hardNeverCrosses: 100 random hard groups, in waves of 20 that overfill the fabric; every
// group that is bound is bound whole and sits inside one domain of its allowed tier,
// checked on every pod.
func hardNeverCrosses(t *testing.T, f *fabric) {
	rng := rand.New(rand.NewSource(42))
	placedGroups, crossed := 0, 0
	for wave := 0; wave < 5; wave++ {
		w := newWorld(t)
		tiers, sizes := map[string]int{}, map[string]int{}
		for i := 0; i < 20; i++ {
			tier := 1 + rng.Intn(2)
			g := group{name: fmt.Sprintf("g%d-%d", wave, i), pods: 1 + rng.Intn(6), gpus: gpuSizes[rng.Intn(len(gpuSizes))], nt: hard(tier)}
			if tier == 2 {
				// Tier names work as well as numbers.
				g.nt = &volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.HardNetworkTopologyMode, HighestTierName: "spine"}
			}
			tiers[g.name], sizes[g.name] = tier, g.pods
			w.create(g)
		}
		w.settled(90 * time.Second)
		// Each group's minimum is all its pods: a group with a pod bound has them all bound.
		// Without this, a gang bound in part would pass on the pods it has.
		byGroup := w.wholeGroups(sizes, 30*time.Second)
		for name, nodes := range byGroup {
			placedGroups++
			if !spansAtMost(f, tiers[name], nodes) {
				crossed++
				t.Errorf("group %s (tier %d) crossed it: %v", name, tiers[name], domains(f, tiers[name], nodes))
			}
		}
		w.clear()
	}
	t.Logf("%d of 100 hard groups placed, %d crossed their tier", placedGroups, crossed)
	assert.Greater(t, placedGroups, 40, "most groups should find room")
}

func domains(f *fabric, tier int, nodes []string) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n+"@"+f.domain(n, tier))
	}
	return out
}

// softStaysInLeaf feeds soft groups one at a time; whenever a leaf could hold a group when
// it was created, the group must land in one leaf. A soft group goes anywhere once no leaf
// can hold it, so every group the free GPUs can hold must be bound, whole.
func softStaysInLeaf(t *testing.T, f *fabric) {
	w := newWorld(t)
	rng := rand.New(rand.NewSource(7))
	couldHold, kept := 0, 0
	for i := 0; i < 30; i++ {
		g := group{name: fmt.Sprintf("soft-%d", i), pods: 1 + rng.Intn(4), gpus: gpuSizes[rng.Intn(len(gpuSizes))], nt: soft(1)}
		free := freeGPUs(t, w.ctx)
		if !fabricCanHold(free, g) {
			// The fabric is too full or too fragmented for this group anywhere: it would only
			// wait. It is not created, and the next, perhaps smaller, group is tried.
			t.Logf("group %s (%d×%d GPUs) fits nowhere in the free GPUs; not created", g.name, g.pods, g.gpus)
			continue
		}
		fits := domainCanHold(f, 1, free, g)
		w.create(g)
		// Every group created fits, so each must be bound whole. Stopping quietly at the
		// first that is not would pass however many groups were left pending.
		w.eventually(fmt.Sprintf("soft group %s (%d×%d GPUs), which the free GPUs can hold, bound whole", g.name, g.pods, g.gpus), 30*time.Second, func() bool {
			byGroup, _ := w.placement()
			return len(byGroup[g.name]) == g.pods
		})
		byGroup, _ := w.placement()
		nodes := byGroup[g.name]
		if fits {
			couldHold++
			if spansAtMost(f, 1, nodes) {
				kept++
			} else {
				t.Errorf("group %s (%d×%d GPUs) spread over leaves %v although one leaf could hold it", g.name, g.pods, g.gpus, domains(f, 1, nodes))
			}
		}
	}
	t.Logf("%d/%d soft groups that one leaf could hold were kept in one leaf", kept, couldHold)
	assert.Greater(t, couldHold, 10)
}

// onlyAcrossLeaves: every leaf has one whole free node left, so a group of two 8-GPU pods
// fits only across leaves: hard tier 1 keeps it pending with a reason, hard tier 2 and soft
// place it.
func onlyAcrossLeaves(t *testing.T, f *fabric) {
	w := newWorld(t)
	// Fill all but one node of every leaf with pods bound directly to their nodes.
	kept := map[string]bool{}
	for i := 0; i < numNodes; i++ {
		n := nodeName(i)
		leaf := f.domain(n, 1)
		if !kept[leaf] {
			kept[leaf] = true
			continue
		}
		w.createPod("filler-"+n, gpusEach, nil, n)
	}
	w.create(group{name: "hard-leaf", pods: 2, gpus: 8, nt: hard(1)})
	w.eventually("the hard group refused with a reason", 30*time.Second, func() bool {
		pg, err := vc.SchedulingV1beta1().PodGroups(w.ns).Get(w.ctx, "hard-leaf", metav1.GetOptions{})
		require.NoError(t, err)
		for _, c := range pg.Status.Conditions {
			if c.Status == corev1.ConditionTrue && strings.Contains(c.Message, "no leaf (tier 1) can hold the group's 2 pods") {
				return true
			}
		}
		return false
	})
	// It must stay pending however often it is tried, not just on the first try: wait until
	// the gang plugin has refused it three more times, each after a backoff, and check it is
	// still unbound and still refused for its tier. hard-leaf is the only group the scheduler
	// has to place meanwhile: the fillers are bound by name and earlier tests' namespaces are
	// gone, so the scheduler's count of refusals counts this group's rounds.
	refusals := gangRejections(t)
	w.eventually("three more backoff rounds of hard-leaf, each ending in a refusal", 60*time.Second, func() bool {
		return gangRejections(t) >= refusals+3
	})
	byGroup, _ := w.placement()
	assert.Empty(t, byGroup["hard-leaf"], "a hard tier-1 group that fits only across leaves must stay pending")
	pg, err := vc.SchedulingV1beta1().PodGroups(w.ns).Get(w.ctx, "hard-leaf", metav1.GetOptions{})
	require.NoError(t, err)
	refused := false
	for _, c := range pg.Status.Conditions {
		if c.Type == volcanov1beta1.PodGroupUnschedulableType && c.Status == corev1.ConditionTrue &&
			strings.Contains(c.Message, "no leaf (tier 1) can hold the group's 2 pods") {
			refused = true
		}
	}
	assert.True(t, refused, "after its backoff rounds hard-leaf is still refused for its tier: %+v", pg.Status.Conditions)

	_ = vc.SchedulingV1beta1().PodGroups(w.ns).Delete(w.ctx, "hard-leaf", metav1.DeleteOptions{})
	for k := 0; k < 2; k++ {
		_ = kube.CoreV1().Pods(w.ns).Delete(w.ctx, fmt.Sprintf("hard-leaf-%d", k), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}
	w.create(group{name: "soft-leaf", pods: 2, gpus: 8, nt: soft(1)})
	w.create(group{name: "hard-spine", pods: 2, gpus: 8, nt: hard(2)})
	w.eventually("the soft and the hard tier-2 groups bound", 30*time.Second, func() bool {
		byGroup, _ := w.placement()
		return len(byGroup["soft-leaf"]) == 2 && len(byGroup["hard-spine"]) == 2
	})
	byGroup, _ = w.placement()
	assert.True(t, spansAtMost(f, 2, byGroup["hard-spine"]), "hard tier 2 stays in a spine: %v", domains(f, 2, byGroup["hard-spine"]))
	assert.False(t, spansAtMost(f, 1, byGroup["soft-leaf"]), "soft crosses leaves when it must")

	// The choice is an event on the PodGroup.
	w.eventually("a DomainChosen event naming a spine", 10*time.Second, func() bool {
		evs, err := kube.EventsV1().Events(w.ns).List(w.ctx, metav1.ListOptions{})
		require.NoError(t, err)
		for _, e := range evs.Items {
			if e.Regarding.Name == "hard-spine" && e.Reason == "DomainChosen" && strings.HasPrefix(e.Note, "spine ") {
				return true
			}
		}
		return false
	})
}

// subgroupsInLeaves: every leaf has two whole nodes left, so a group of two replicas of two
// 8-GPU pods fits no leaf; with the group allowed a spine and each replica (a subgroup) only
// a leaf, each replica must take both whole nodes of one leaf, in one spine.
func subgroupsInLeaves(t *testing.T, f *fabric) {
	w := newWorld(t)
	kept := map[string]int{}
	for i := 0; i < numNodes; i++ {
		n := nodeName(i)
		if leaf := f.domain(n, 1); kept[leaf] < 2 {
			kept[leaf]++
			continue
		}
		w.createPod("filler-"+n, gpusEach, nil, n)
	}
	const replicaLabel = "berth.test/replica"
	pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Name: "tp", Namespace: w.ns},
		Spec: volcanov1beta1.PodGroupSpec{MinMember: 4, NetworkTopology: hard(2),
			SubGroupPolicy: []volcanov1beta1.SubGroupPolicySpec{{Name: "replica", SubGroupSize: ptr.To[int32](2), MinSubGroups: ptr.To[int32](2),
				MatchLabelKeys: []string{replicaLabel}, NetworkTopology: hard(1)}}}}
	_, err := vc.SchedulingV1beta1().PodGroups(w.ns).Create(w.ctx, pg, metav1.CreateOptions{})
	require.NoError(t, err)
	for r := 0; r < 2; r++ {
		for k := 0; k < 2; k++ {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("tp-%d-%d", r, k), Namespace: w.ns,
				Labels:      map[string]string{replicaLabel: fmt.Sprint(r)},
				Annotations: map[string]string{"scheduling.k8s.io/group-name": "tp", "volcano.sh/task-spec": fmt.Sprintf("replica-%d", r)}},
				Spec: podSpec(8)}
			_, err := kube.CoreV1().Pods(w.ns).Create(w.ctx, p, metav1.CreateOptions{})
			require.NoError(t, err)
		}
	}
	w.eventually("the group bound", 30*time.Second, func() bool {
		byGroup, _ := w.placement()
		return len(byGroup["tp"]) == 4
	})
	var all []string
	for r := 0; r < 2; r++ {
		nodes := []string{w.node(fmt.Sprintf("tp-%d-0", r)), w.node(fmt.Sprintf("tp-%d-1", r))}
		assert.True(t, spansAtMost(f, 1, nodes), "replica %d split across leaves: %v", r, domains(f, 1, nodes))
		all = append(all, nodes...)
	}
	assert.True(t, spansAtMost(f, 2, all), "the group crossed its spine: %v", domains(f, 2, all))
}

// tensorParallelPodFindsWholeNode: after 200 single-GPU pods, an 8-GPU pod still finds a
// whole node, because small pods are packed onto partly used nodes.
func tensorParallelPodFindsWholeNode(t *testing.T) {
	w := newWorld(t)
	for i := 0; i < 200; i++ {
		w.createPod(fmt.Sprintf("small-%d", i), 1, nil, "")
	}
	w.eventually("200 single-GPU pods bound", 60*time.Second, func() bool {
		byGroup, pending := w.placement()
		return len(byGroup) == 200 && len(pending) == 0
	})
	w.createPod("tp8", 8, nil, "")
	w.eventually("the 8-GPU pod bound", 30*time.Second, func() bool { return w.node("tp8") != "" })
	whole := 0
	for _, v := range freeGPUs(t, w.ctx) {
		if v == gpusEach {
			whole++
		}
	}
	t.Logf("whole free nodes left: %d", whole)
	assert.GreaterOrEqual(t, whole, 6, "200 one-GPU pods should fill 25 nodes, leaving 7 whole")
}

// acceleratorClass: spine 0 has A100 40GB nodes, spine 1 H100 80GB. Product, family and
// memory requirements are honoured; with none, the cheaper A100 is chosen.
func acceleratorClass(t *testing.T) {
	w := newWorld(t)
	w.createPod("wants-h100", 2, map[string]string{"accelerator.berth.sh/products": h100}, "")
	w.createPod("wants-80gi", 2, map[string]string{"accelerator.berth.sh/min-memory": "80Gi"}, "")
	w.createPod("wants-ampere", 2, map[string]string{"accelerator.berth.sh/families": "ampere"}, "")
	w.createPod("any-gpu", 2, nil, "")
	w.createPod("impossible", 2, map[string]string{"accelerator.berth.sh/min-memory": "141Gi"}, "")
	product := func(pod string) string {
		n, err := kube.CoreV1().Nodes().Get(w.ctx, w.node(pod), metav1.GetOptions{})
		require.NoError(t, err)
		return n.Labels["nvidia.com/gpu.product"]
	}
	w.eventually("four pods bound", 30*time.Second, func() bool {
		for _, p := range []string{"wants-h100", "wants-80gi", "wants-ampere", "any-gpu"} {
			if w.node(p) == "" {
				return false
			}
		}
		return true
	})
	assert.Equal(t, h100, product("wants-h100"))
	assert.Equal(t, h100, product("wants-80gi"))
	assert.Equal(t, a100, product("wants-ampere"))
	assert.Equal(t, a100, product("any-gpu"), "the cheaper class wins when both fit")
	w.settled(30 * time.Second)
	_, pending := w.placement()
	assert.Contains(t, pending["impossible"], "nvidia.com/gpu.memory", "the refusal names the label that falls short")
}

// servingGroupsSpreadAcrossZones: a ModelServing of 4 groups with maxSkew 1 across two
// zones puts two whole groups in each zone: groups are counted, not pods, and a group is not
// split across zones. Once with an entry and a worker per group (4 GPUs each), once with a
// single pod per group (the controller then creates a PodGroup only for the spread).
func servingGroupsSpreadAcrossZones(t *testing.T) {
	for _, workers := range []int32{1, 0} {
		t.Run(fmt.Sprintf("%d worker(s)", workers), func(t *testing.T) { spreadGroups(t, workers) })
	}
}

func spreadGroups(t *testing.T, workers int32) {
	w := newWorld(t)
	role := workloadv1alpha1.Role{Name: "server", Replicas: ptr.To[int32](1), WorkerReplicas: workers,
		EntryTemplate: workloadv1alpha1.PodTemplateSpec{Spec: podSpec(4)}}
	if workers > 0 {
		role.WorkerTemplate = &workloadv1alpha1.PodTemplateSpec{Spec: podSpec(4)}
	}
	ms := &workloadv1alpha1.ModelServing{
		ObjectMeta: metav1.ObjectMeta{Name: "spread", Namespace: w.ns},
		Spec: workloadv1alpha1.ModelServingSpec{
			Replicas:      ptr.To[int32](4),
			SchedulerName: workloadv1alpha1.BerthSchedulerName,
			TopologySpreadConstraints: []workloadv1alpha1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: zoneLabel, WhenUnsatisfiable: corev1.DoNotSchedule,
			}},
			Template: workloadv1alpha1.ServingGroup{Roles: []workloadv1alpha1.Role{role}},
		},
	}
	require.NoError(t, cl.Create(w.ctx, ms))
	want := 4 * int(1+workers)
	w.eventually(fmt.Sprintf("%d pods bound", want), 60*time.Second, func() bool {
		pods, err := kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{})
		require.NoError(t, err)
		bound := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return bound == want
	})
	pods, err := kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{})
	require.NoError(t, err)
	groupZones := map[string]map[string]bool{}
	for _, p := range pods.Items {
		g := p.Labels[workloadv1alpha1.GroupNameLabel]
		if groupZones[g] == nil {
			groupZones[g] = map[string]bool{}
		}
		groupZones[g][zoneOf(p.Spec.NodeName)] = true
	}
	perZone := map[string]int{}
	for g, zs := range groupZones {
		assert.Len(t, zs, 1, "group %s is split across zones %v", g, zs)
		for z := range zs {
			perZone[z]++
		}
	}
	var counts []int
	for _, c := range perZone {
		counts = append(counts, c)
	}
	sort.Ints(counts)
	assert.Equal(t, []int{2, 2}, counts, "groups per zone: %v", perZone)
}

func zoneOf(node string) string {
	var i int
	_, _ = fmt.Sscanf(node, "node-%d", &i)
	return fmt.Sprintf("zone-%d", i/(perLeaf*leaves))
}

var _ = resource.MustParse
