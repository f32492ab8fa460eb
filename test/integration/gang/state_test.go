package gang

// The state test checks that berth-scheduler forgets what it remembers of a gang once the
// gang is gone: every cache the gang plugin and its placement model keep per group (and
// per preempted pod, and per node kept for a plan) returns to the groups that exist after
// many groups of random shapes, in each gang API, came and went in random ways.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/utils/ptr"
	coschedulingv1alpha1 "sigs.k8s.io/scheduler-plugins/apis/scheduling/v1alpha1"
	coschedulingclient "sigs.k8s.io/scheduler-plugins/pkg/generated/clientset/versioned"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/sim"
)

const (
	// trackedMetric is what berth-scheduler's gang plugin remembers, by cache, summed over
	// the schedulers running in the process (here, the test's own).
	trackedMetric = "berth_gang_tracked_entries"
	// waitingMetric is the gang pods the framework holds in Permit.
	waitingMetric = "berth_gang_waiting_pods"
)

// Every cache of the gang plugin and its placement model, as trackedMetric names them.
// Those keyed by group must come back to at most the groups that exist; the others (pods
// being preempted, nodes kept for plans) to none once no group is left.
var (
	groupCaches = []string{"group_state", "status_decisions", "podgroup_conversions", "plans", "plan_capacity",
		"held_pods", "blocked", "excluded_nodes"}
	allCaches = append(slices.Clone(groupCaches), "preemption_victims", "kept_nodes", "expected_devices")
)

// Groups come and go: a scripted set that puts an entry in every cache (coscheduling gangs
// held in Permit, one of them with DRA devices, a bound gang preempted by a high-priority one and left terminating, a
// gang that waits for capacity kept for it, one that never fits, one whose planned nodes a
// volume's node affinity refuses; gangs deleted, PodGroup first, while their pods wait in
// Permit), then a seeded stream of 40 Volcano and coscheduling gangs
// of random shapes, some held in Permit, each deleted after a while, its pods first, its
// PodGroup first, or both at once. Once all but two are deleted, every per-group cache must
// hold at most two groups; once those go too, every cache must be empty. BERTH_SEED=<n>
// replays a stream.
func TestGangStateStaysBounded(t *testing.T) {
	seed, notes := contentionSeed(t)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	w := newWorld(t)
	s := &stateSoak{world: w, notes: notes, seed: seed, live: map[string]*soakGroup{},
		cc: coschedulingclient.NewForConfigOrDie(cp.RESTConfig()), seen: map[string]float64{}}
	high := w.ns + "-high"
	_, err := w.kube.SchedulingV1().PriorityClasses().Create(w.ctx, &schedulingv1.PriorityClass{
		ObjectMeta: metav1.ObjectMeta{Name: high}, Value: 1000}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = w.kube.SchedulingV1().PriorityClasses().Delete(context.Background(), high, metav1.DeleteOptions{})
	})
	// Capacity is kept for a blocked group after a second, so the reservation is seen soon.
	w.startSchedulerWith(map[string]any{"permitWaitingTimeSeconds": 60, "backoffSeconds": 1, "reserveAfterSeconds": 1})

	// Scripted: each group below puts entries in caches the others may not.
	hold := w.newPool("hold", false)
	w.addPoolNode(hold, "hold-0", 8)
	w.addPoolNode(hold, "hold-1", 8)
	full := w.newPool("full", false)
	w.addPoolNode(full, "full-0", 8)
	w.addPoolNode(full, "full-1", 8)
	vol := w.newPool("vol", false)
	w.addPoolNode(vol, "vol-small-0", 4)
	w.addPoolNode(vol, "vol-small-1", 4)
	diskNode := w.addNodeWith("vol-big", 8, "128", map[string]string{poolLabel: "vol", "berth.test/disk": "yes"}, nil)
	t.Logf("seed=%d: volume node %s", seed, diskNode)

	// A coscheduling gang of two whose second pod is gated: the first is held in Permit
	// (held_pods, group_state's deadline, the plan keeping the second's node) and its
	// PodGroup is read through a conversion (podgroup_conversions).
	s.cosched("cs-held", hold, 2, 8, true, false)
	// The same with GPUs claimed through DRA: the held pod's devices, from its plan, wait
	// for PostBind to compare them with its claim (expected_devices).
	w.ensureGPUTemplates()
	draPool := w.newPool("dra", false)
	s.draNode(draPool, "dra-0", 2)
	s.cosched("cs-dra", draPool, 2, 1, true, true)
	// Two 8-GPU pods fill pool full; a second such gang waits (blocked, status_decisions)
	// and, after a second, has capacity kept for it; a third needs more than the pool.
	s.volcano("filler", full, role{name: "server", replicas: 2, gpus: 8})
	w.eventually("filler binds", 30*time.Second, func() bool { n, _ := w.bound("filler"); return n == 2 })
	s.volcano("wide", full, role{name: "server", replicas: 2, gpus: 8})
	s.volcano("huge", full, role{name: "server", replicas: 3, gpus: 8})
	s.waitCaches("blocked", "status_decisions")
	// A high-priority gang evicts filler (preemption_victims, its nominated plan); with no
	// kubelet here, filler's pods stay terminating until the test deletes them.
	s.volcano("urgent", full, role{name: "server", replicas: 1, gpus: 8, priorityClass: high})
	// A 4-GPU pod whose volume lives on vol-big: its plan picks a 4-GPU node (the tightest
	// fit), the volume's node affinity refuses it there, and the node is excluded from the
	// group's plans (excluded_nodes) until the pod lands on vol-big.
	s.volumeGang("disk", vol)
	s.waitCaches(allCaches...)
	w.eventually("the disk gang binds on the volume's node", 60*time.Second, func() bool {
		p, err := w.kube.CoreV1().Pods(w.ns).Get(w.ctx, "disk-server-0-0", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName == diskNode
	})

	// Gangs deleted while their pods wait in Permit, PodGroup first: the framework rejects
	// each waiting pod as it goes and the plugin's Unreserve runs for it, after the delete
	// event that pruned the group has been handled or before.
	drop := w.newPool("drop", false)
	w.addPoolNode(drop, "drop-0", 8)
	for i := 0; i < 6; i++ {
		name := fmt.Sprintf("drop-%d", i)
		before := waitingPods(t)
		w.gated = map[string]bool{name + "-server-2-0": true}
		s.volcano(name, drop, role{name: "server", replicas: 3, gpus: 1})
		w.gated = nil
		w.eventually(name+"'s two ungated pods wait in Permit", 30*time.Second, func() bool { return waitingPods(t) == before+2 })
		s.removeInOrder(name, 1)
	}

	// The seeded stream, on a pool of its own.
	churn := w.newPool("churn", false)
	for i := 0; i < 4; i++ {
		w.addPoolNode(churn, fmt.Sprintf("churn-%d", i), 8)
	}
	const groups = 40
	for i := 0; i < groups; i++ {
		name := fmt.Sprintf("r%02d", i)
		gated := rng.IntN(4) == 0
		if rng.IntN(4) == 0 {
			s.cosched(name, churn, 1+rng.IntN(3), []int64{1, 2, 4, 8}[rng.IntN(4)], gated, false)
		} else {
			spec := randomGang(rng, churn, 24, 32)
			if gated {
				// The first replica's entry: the rest of its minimum is placed and held.
				w.gated = map[string]bool{fmt.Sprintf("%s-%s-0-0", name, spec.roles[0].name): true}
			}
			s.volcano(name, churn, spec.roles...)
			w.gated = nil
		}
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		for len(s.live) > 8 || (len(s.live) > 2 && rng.IntN(3) == 0) {
			s.remove(s.pick(rng), rng)
		}
	}
	s.logTracked("after the stream")

	// Keep two of the stream's groups; the scripted ones and the rest go.
	var keep []string
	for _, name := range s.names() {
		if strings.HasPrefix(name, "r") && len(keep) < 2 {
			keep = append(keep, name)
			continue
		}
		s.remove(name, rng)
	}
	s.requireBounded(len(keep), groupCaches)
	for _, name := range keep {
		s.remove(name, rng)
	}
	s.requireBounded(0, allCaches)
	require.Zero(t, waitingPods(t), "%s with no group left", waitingMetric)
	s.logTracked("at the end")
	// The soak checks every cache the plugin reports (pkg/plugins/gang's
	// TestTrackedReportsEveryContainer checks it reports every one it has): a cache Tracked
	// gains must be put in an entry of here, and in allCaches.
	require.ElementsMatch(t, allCaches, sortedNames(s.seen), "the caches %s reports and the ones this soak checks", trackedMetric)
}

// stateSoak is one run of TestGangStateStaysBounded: the groups that exist, and the
// largest size of each cache seen.
type stateSoak struct {
	*world
	notes *failNotes
	seed  int64
	cc    coschedulingclient.Interface
	live  map[string]*soakGroup
	seen  map[string]float64
}

// soakGroup is a group the test created and has not deleted yet.
type soakGroup struct{ cosched bool }

func (s *stateSoak) names() []string {
	out := make([]string, 0, len(s.live))
	for name := range s.live {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

func (s *stateSoak) pick(rng *rand.Rand) string {
	names := s.names()
	return names[rng.IntN(len(names))]
}

// volcano creates a Volcano gang on the pool; pods named in w.gated are gated.
func (s *stateSoak) volcano(name string, p *gpuPool, roles ...role) {
	s.t.Helper()
	for i := range roles {
		roles[i].nodeSelector, roles[i].tolerations = p.selector, p.tolerations
	}
	s.createGang(name, nil, roles...)
	s.live[name] = &soakGroup{}
}

// cosched creates a scheduler-plugins PodGroup of pods single pods of gpus GPUs, all in its
// minimum, on the pool; with gated, its last pod is gated.
func (s *stateSoak) cosched(name string, p *gpuPool, pods int, gpus int64, gated, dra bool) {
	s.t.Helper()
	_, err := s.cc.SchedulingV1alpha1().PodGroups(s.ns).Create(s.ctx, &coschedulingv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns},
		Spec:       coschedulingv1alpha1.PodGroupSpec{MinMember: int32(pods)},
	}, metav1.CreateOptions{})
	require.NoError(s.t, err)
	for i := 0; i < pods; i++ {
		q := *resource.NewQuantity(gpus, resource.DecimalSI)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: fmt.Sprintf("%s-%d", name, i),
				Labels: map[string]string{coschedulingv1alpha1.PodGroupLabel: name, labelGroup: name}},
			Spec: corev1.PodSpec{
				SchedulerName: workloadv1alpha1.BerthSchedulerName, NodeSelector: p.selector, Tolerations: p.tolerations,
				Containers: []corev1.Container{{Name: "engine", Image: "engine", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{gpu: q, corev1.ResourceCPU: resource.MustParse("100m")},
					Limits:   corev1.ResourceList{gpu: q},
				}}},
			},
		}
		if dra {
			c := &pod.Spec.Containers[0]
			c.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}
			pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(fmt.Sprintf("gpus-%d", gpus))}}
			c.Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
		}
		if gated && i == pods-1 {
			pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "test.berth.sh/hold"}}
		}
		_, err := s.kube.CoreV1().Pods(s.ns).Create(s.ctx, pod, metav1.CreateOptions{})
		require.NoError(s.t, err)
	}
	s.live[name] = &soakGroup{cosched: true}
}

// draNode adds a node of the pool with gpus GPUs published through DRA, and its
// ResourceSlice, as the node's kubelet plugin would (there is no kubelet here).
func (s *stateSoak) draNode(p *gpuPool, name string, gpus int64) {
	s.t.Helper()
	all := map[string]string{"berth.test/owner": s.ns}
	for k, v := range p.selector {
		all[k] = v
	}
	node, err := s.kube.CoreV1().Nodes().Create(s.ctx, sim.NewNode(s.ns+"-"+name, sim.NodeShape{CPU: "128", Memory: "512Gi", DRAGPUs: gpus}, all), metav1.CreateOptions{})
	require.NoError(s.t, err)
	p.nodes = append(p.nodes, node.Name)
	_, err = s.kube.ResourceV1().ResourceSlices().Create(s.ctx, sim.GPUResourceSlice(node), metav1.CreateOptions{})
	require.NoError(s.t, err)
	s.t.Cleanup(func() {
		_ = s.kube.ResourceV1().ResourceSlices().Delete(context.Background(), sim.GPUSliceName(node.Name), metav1.DeleteOptions{})
	})
}

// volumeGang creates a Volcano gang of one 4-GPU pod on the pool that mounts a claim bound
// to a local volume on the node labelled berth.test/disk=yes, which the placement model
// does not know of and the scheduler's VolumeBinding filter does.
func (s *stateSoak) volumeGang(name string, p *gpuPool) {
	s.t.Helper()
	pvName := s.ns + "-" + name
	storage := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	_, err := s.kube.CoreV1().PersistentVolumes().Create(s.ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               storage,
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/data"}},
			ClaimRef:               &corev1.ObjectReference{Namespace: s.ns, Name: name},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "berth.test/disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"yes"}}},
			}}}},
		},
	}, metav1.CreateOptions{})
	require.NoError(s.t, err)
	s.t.Cleanup(func() {
		_ = s.kube.CoreV1().PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{})
	})
	// Bound as the PV controller would leave it (none runs here).
	_, err = s.kube.CoreV1().PersistentVolumeClaims(s.ns).Create(s.ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"pv.kubernetes.io/bind-completed": "yes"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: ptr.To(""),
			VolumeName: pvName, Resources: corev1.VolumeResourceRequirements{Requests: storage},
		},
	}, metav1.CreateOptions{})
	require.NoError(s.t, err)
	r := role{name: "server", replicas: 1, gpus: 4, nodeSelector: p.selector}
	pg := &volcanov1beta1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: s.ns, Name: name},
		Spec: volcanov1beta1.PodGroupSpec{MinMember: 1, MinTaskMember: map[string]int32{"server-0": 1}}}
	_, err = s.vc.SchedulingV1beta1().PodGroups(s.ns).Create(s.ctx, pg, metav1.CreateOptions{})
	require.NoError(s.t, err)
	pod := s.gangPod(name, r, "server-0", 0)
	pod.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}}
	_, err = s.kube.CoreV1().Pods(s.ns).Create(s.ctx, pod, metav1.CreateOptions{})
	require.NoError(s.t, err)
	s.live[name] = &soakGroup{}
}

// remove deletes a group in one of three orders: its pods, then its PodGroup; its PodGroup,
// then its pods; or both at once. Pods go at once (grace 0), terminating ones included.
func (s *stateSoak) remove(name string, rng *rand.Rand) {
	s.t.Helper()
	s.removeInOrder(name, rng.IntN(3))
}

// removeInOrder is remove in a given order: 0 pods first, 1 PodGroup first, 2 both at once.
func (s *stateSoak) removeInOrder(name string, order int) {
	s.t.Helper()
	g := s.live[name]
	delete(s.live, name)
	zero := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}
	pods := func() error {
		return s.kube.CoreV1().Pods(s.ns).DeleteCollection(s.ctx, zero, metav1.ListOptions{LabelSelector: labelGroup + "=" + name})
	}
	podGroup := func() error {
		if g.cosched {
			return s.cc.SchedulingV1alpha1().PodGroups(s.ns).Delete(s.ctx, name, metav1.DeleteOptions{})
		}
		return s.vc.SchedulingV1beta1().PodGroups(s.ns).Delete(s.ctx, name, metav1.DeleteOptions{})
	}
	switch order {
	case 0:
		require.NoError(s.t, pods())
		require.NoError(s.t, podGroup())
	case 1:
		require.NoError(s.t, podGroup())
		require.NoError(s.t, pods())
	default:
		errs := make(chan error, 1)
		go func() { errs <- podGroup() }()
		require.NoError(s.t, pods())
		require.NoError(s.t, <-errs)
	}
}

// tracked reads trackedMetric by cache and notes the largest value of each.
func (s *stateSoak) tracked() map[string]float64 {
	got := gauges(s.t, trackedMetric, "cache")
	for cache, v := range got {
		s.seen[cache] = max(s.seen[cache], v)
	}
	return got
}

// waitCaches waits until each cache has held an entry: a cache never used would pass the
// bound below without proving anything.
func (s *stateSoak) waitCaches(caches ...string) {
	s.t.Helper()
	s.eventually(fmt.Sprintf("each of %v holds an entry", caches), 60*time.Second, func() bool {
		s.tracked()
		for _, c := range caches {
			if s.seen[c] == 0 {
				return false
			}
		}
		return true
	})
}

// requireBounded waits until every cache of caches holds at most limit entries.
func (s *stateSoak) requireBounded(limit int, caches []string) {
	s.t.Helper()
	var over []string
	err := pollFor(s.ctx, 60*time.Second, func() bool {
		got := s.tracked()
		over = over[:0]
		for _, c := range caches {
			if v, ok := got[c]; !ok || v > float64(limit) {
				over = append(over, fmt.Sprintf("%s=%v", c, got[c]))
			}
		}
		return len(over) == 0
	})
	if err != nil {
		msg := fmt.Sprintf("seed=%d: with %d groups left (%v), these caches of the gang plugin still hold more than %d entries after a minute: %s (largest seen: %s)",
			s.seed, len(s.live), s.names(), limit, strings.Join(over, " "), s.seenString())
		s.notes.add(msg)
		s.t.Fatal(msg)
	}
	s.t.Logf("seed=%d: with %d groups left, every cache of %v holds at most %d entries: %v", s.seed, len(s.live), caches, limit, s.tracked())
}

func (s *stateSoak) logTracked(when string) {
	s.t.Logf("seed=%d: %s: %s=%v, largest seen: %s", s.seed, when, trackedMetric, s.tracked(), s.seenString())
}

func (s *stateSoak) seenString() string {
	var parts []string
	for _, c := range sortedNames(s.seen) {
		parts = append(parts, fmt.Sprintf("%s=%v", c, s.seen[c]))
	}
	return strings.Join(parts, " ")
}

// pollFor polls cond every 100 ms until it holds or within passes.
func pollFor(ctx context.Context, within time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		if cond() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// gauges returns the samples of a gauge in legacyregistry by the value of label ("" when the
// gauge has no labels).
func gauges(t *testing.T, name, label string) map[string]float64 {
	t.Helper()
	families, err := legacyregistry.DefaultGatherer.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					key = l.GetValue()
				}
			}
			out[key] += m.GetGauge().GetValue()
		}
	}
	return out
}

// waitingPods is waitingMetric now: -1 when no scheduler is running to report it.
func waitingPods(t *testing.T) int {
	t.Helper()
	v, ok := gauges(t, waitingMetric, "")[""]
	if !ok {
		return -1
	}
	return int(v)
}
