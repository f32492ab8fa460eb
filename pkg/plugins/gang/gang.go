// Package gang is the berth-scheduler plugin that places a Volcano PodGroup all or nothing.
//
// A pod names its group with the scheduling.k8s.io/group-name annotation and its task (a
// role replica) with volcano.sh/task-spec. No pod of a group binds until the group's minimum
// (minMember, minTaskMember, subGroupPolicy) is placed: pods are held in Permit and
// released together. A group that cannot complete within its wait timeout, or whose next pod
// fits nowhere, gives back everything it held and backs off, so competing gangs never
// deadlock and never leave a group partly bound.
package gang

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"
	volcanoinformers "volcano.sh/apis/pkg/client/informers/externalversions"
	volcanolisters "volcano.sh/apis/pkg/client/listers/scheduling/v1beta1"
)

// Name is the plugin name used in the scheduler profile.
const Name = "BerthGang"

// podsByGroupIndex indexes the scheduler's pod informer by "<namespace>/<group>".
const podsByGroupIndex = "berth-gang"

// Gang implements the gang plugin. Its state is the pods it has reserved per group (held
// in Permit or binding) and, per group, the wait deadline and backoff; everything else is
// read from informers.
type Gang struct {
	handle   fwk.Handle
	args     *Args
	pgLister volcanolisters.PodGroupLister
	pods     cache.Indexer
	status   *statusWriter

	mu     sync.Mutex
	groups map[string]*groupState
}

// groupState is the plugin's memory of one PodGroup between scheduling cycles.
type groupState struct {
	held         map[types.UID]*corev1.Pod // reserved, not yet seen bound
	deadline     time.Time                 // when the current assembly gives up
	backoffUntil time.Time
	reqVersion   string // PodGroup resourceVersion req was built from
	req          *requirement
}

var (
	_ fwk.PreEnqueuePlugin  = &Gang{}
	_ fwk.QueueSortPlugin   = &Gang{}
	_ fwk.PreFilterPlugin   = &Gang{}
	_ fwk.PostFilterPlugin  = &Gang{}
	_ fwk.ReservePlugin     = &Gang{}
	_ fwk.PermitPlugin      = &Gang{}
	_ fwk.PostBindPlugin    = &Gang{}
	_ fwk.EnqueueExtensions = &Gang{}
)

// New builds the plugin: it starts a PodGroup informer of its own (the scheduler's factory
// only knows core types) and indexes the scheduler's pod informer by group.
func New(ctx context.Context, obj runtime.Object, handle fwk.Handle) (fwk.Plugin, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, err
	}
	vc, err := volcanoclient.NewForConfig(JSONConfig(handle))
	if err != nil {
		return nil, fmt.Errorf("gang: volcano client: %w", err)
	}
	factory := volcanoinformers.NewSharedInformerFactory(vc, 0)
	pgInformer := factory.Scheduling().V1beta1().PodGroups()

	podInformer := handle.SharedInformerFactory().Core().V1().Pods().Informer()
	if err := EnsureGroupIndex(podInformer); err != nil {
		return nil, fmt.Errorf("gang: index pods by group: %w", err)
	}

	g := &Gang{
		handle:   handle,
		args:     args,
		pgLister: pgInformer.Lister(),
		pods:     podInformer.GetIndexer(),
		groups:   map[string]*groupState{},
	}
	g.status = newStatusWriter(vc, g.pgLister, g.pods, handle.EventRecorder())
	// kube-scheduler 1.37 does not retry gated pods when a sibling pod is added (unless the
	// GenericWorkload gate is on), so the pods PreEnqueue held back are put back in the
	// queue here once the group has enough pods.
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName == "" {
				g.activateIfComplete(pod)
			}
		},
		// The PodGroup counts running, succeeded and failed pods: keep them current.
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Pod)
			n, ok2 := newObj.(*corev1.Pod)
			if ok1 && ok2 && o.Status.Phase != n.Status.Phase {
				if key := groupKeyOf(n); key != "" {
					g.status.enqueue(key)
				}
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("gang: watch pods: %w", err)
	}
	// A group's pods often reach the scheduler before its PodGroup does and are held in
	// PreEnqueue; put them back in the queue as soon as the PodGroup (or a change to its
	// minimum) arrives, without waiting for the scheduler's periodic flush.
	if _, err := pgInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pg, ok := obj.(*volcanov1beta1.PodGroup); ok {
				g.activate(pg.Namespace + "/" + pg.Name)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*volcanov1beta1.PodGroup)
			n, ok2 := newObj.(*volcanov1beta1.PodGroup)
			if ok1 && ok2 && o.Generation != n.Generation {
				g.activate(n.Namespace + "/" + n.Name)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("gang: watch PodGroups: %w", err)
	}

	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("gang: %v informer did not sync", typ)
		}
	}
	go g.status.run(ctx)
	return g, nil
}

// Name returns the plugin name.
func (g *Gang) Name() string { return Name }

func indexByGroup(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	if name := groupNameOf(pod); name != "" {
		return []string{pod.Namespace + "/" + name}, nil
	}
	return nil, nil
}

func groupKeyOf(pod *corev1.Pod) string {
	if name := groupNameOf(pod); name != "" {
		return pod.Namespace + "/" + name
	}
	return ""
}

// stateLocked returns the group's state, creating it; g.mu must be held.
func (g *Gang) stateLocked(key string) *groupState {
	st := g.groups[key]
	if st == nil {
		st = &groupState{held: map[types.UID]*corev1.Pod{}}
		g.groups[key] = st
	}
	return st
}

// podGroup returns the group and its requirement, rebuilt only when the PodGroup changed.
func (g *Gang) podGroup(pod *corev1.Pod) (*volcanov1beta1.PodGroup, *requirement, error) {
	pg, err := g.pgLister.PodGroups(pod.Namespace).Get(groupNameOf(pod))
	if err != nil {
		return nil, nil, err
	}
	key := groupKeyOf(pod)
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.stateLocked(key)
	if st.req == nil || st.reqVersion != pg.ResourceVersion {
		req, err := newRequirement(pg)
		if err != nil {
			return nil, nil, err
		}
		st.req, st.reqVersion = req, pg.ResourceVersion
	}
	return pg, st.req, nil
}

// groupPods returns every live pod of the group the scheduler knows of.
func (g *Gang) groupPods(key string) []*corev1.Pod { return GroupPods(g.pods, key) }

// splitBound separates a group's bound pods from those still to be placed.
func splitBound(pods []*corev1.Pod) (bound, pending []*corev1.Pod) {
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			bound = append(bound, p)
		} else {
			pending = append(pending, p)
		}
	}
	return bound, pending
}

// placedPods returns the group's pods that are bound or reserved by this scheduler, plus
// extra (the pod in the current cycle), each once.
func (g *Gang) placedPods(key string, extra *corev1.Pod) []*corev1.Pod {
	all := g.groupPods(key)
	seen := make(map[types.UID]bool, len(all))
	var placed []*corev1.Pod
	for _, p := range all {
		if p.Spec.NodeName != "" {
			placed = append(placed, p)
			seen[p.UID] = true
		}
	}
	g.mu.Lock()
	if st := g.groups[key]; st != nil {
		for uid, p := range st.held {
			if !seen[uid] {
				placed = append(placed, p)
				seen[uid] = true
			}
		}
	}
	g.mu.Unlock()
	if extra != nil && !seen[extra.UID] {
		placed = append(placed, extra)
	}
	return placed
}

// PreEnqueue keeps a group's pods out of the queue until its PodGroup exists and enough of
// its pods exist to meet the minimum; scheduling a partial gang would only hold capacity.
func (g *Gang) PreEnqueue(_ context.Context, pod *corev1.Pod) *fwk.Status {
	key := groupKeyOf(pod)
	if key == "" {
		return nil
	}
	pg, req, err := g.podGroup(pod)
	if err != nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("waiting for PodGroup %s: %v", key, err))
	}
	if pg.DeletionTimestamp != nil {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("PodGroup %s is being deleted", key))
	}
	if v := req.enough(g.groupPods(key)); !v.ok {
		return fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("gang %s is incomplete: %s", key, v.reason))
	}
	return nil
}

// Less orders the queue by priority, then by group (oldest group first), then by pod, so
// the pods of one gang leave the queue back to back instead of interleaving with another.
func (g *Gang) Less(a, b fwk.QueuedEntityInfo) bool {
	if pa, pb := a.GetPriority(), b.GetPriority(); pa != pb {
		return pa > pb
	}
	ta, ka, pa := g.queueTime(a)
	tb, kb, pb := g.queueTime(b)
	if !ta.Equal(tb) {
		return ta.Before(tb)
	}
	if ka != kb {
		return ka < kb
	}
	if ka != "" && pa != nil && pb != nil {
		// Within a gang, a role replica's pods leave together and lower replicas (those
		// the minimum counts first) go first, so an assembly is not spread over replicas.
		if c := compareNatural(taskOf(pa), taskOf(pb)); c != 0 {
			return c < 0
		}
		return compareNatural(pa.Name, pb.Name) < 0
	}
	return a.GetTimestamp().Before(b.GetTimestamp())
}

// compareNatural orders "x-2" before "x-10".
func compareNatural(a, b string) int {
	for a != "" && b != "" {
		da, db := leadingDigits(a), leadingDigits(b)
		if da > 0 && db > 0 {
			na, nb := strings.TrimLeft(a[:da], "0"), strings.TrimLeft(b[:db], "0")
			if len(na) != len(nb) {
				return len(na) - len(nb)
			}
			if na != nb {
				return strings.Compare(na, nb)
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func leadingDigits(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

type podInfoGetter interface{ GetPodInfo() fwk.PodInfo }

// queueTime is the group's creation time for gang pods and the queue time for others,
// with the group key and the pod.
func (g *Gang) queueTime(e fwk.QueuedEntityInfo) (time.Time, string, *corev1.Pod) {
	pi, ok := e.(podInfoGetter)
	if !ok || pi.GetPodInfo() == nil {
		return e.GetTimestamp(), "", nil
	}
	pod := pi.GetPodInfo().GetPod()
	if name := groupNameOf(pod); name != "" {
		if pg, err := g.pgLister.PodGroups(pod.Namespace).Get(name); err == nil {
			return pg.CreationTimestamp.Time, pod.Namespace + "/" + name, pod
		}
	}
	return e.GetTimestamp(), "", pod
}

// PreFilter rejects a group's pod at once when the group is backing off, and, for the first
// pod of an attempt, when the group's missing pods cannot fit the free capacity at all.
func (g *Gang) PreFilter(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	key := groupKeyOf(pod)
	if key == "" {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	pg, req, err := g.podGroup(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, fmt.Sprintf("PodGroup %s: %v", key, err))
	}
	now := time.Now()
	g.mu.Lock()
	st := g.stateLocked(key)
	backoff, holding := st.backoffUntil, len(st.held) > 0
	g.mu.Unlock()
	if now.Before(backoff) {
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s is backing off for %s after it could not be placed", key, backoff.Sub(now).Round(time.Millisecond)))
	}
	if holding {
		return nil, nil // an assembly is under way; Permit decides
	}
	placed, pending := splitBound(g.groupPods(key))
	if req.check(placed).ok && len(req.subGroups) == 0 {
		return nil, nil // the minimum is already bound; this pod is an extra
	}
	nodes, err := g.freeCapacity()
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	if f := checkFeasible(req, placed, pending, nodes); !f.ok {
		g.rejectGroup(pg, key, reasonNotEnoughResources, f.message)
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s cannot be placed: %s", key, f.message))
	}
	// Packing names the short role, so it goes first; minResources can still refuse a
	// group whose declared minimum is larger than its pods ask for.
	if len(placed) == 0 && pg.Spec.MinResources != nil {
		if f := checkMinResources(*pg.Spec.MinResources, nodes); !f.ok {
			g.rejectGroup(pg, key, reasonNotEnoughResources, f.message)
			return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s cannot be placed: %s", key, f.message))
		}
	}
	return nil, nil
}

// PreFilterExtensions is not needed: the plugin does not track per-node state in a cycle.
func (g *Gang) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// freeCapacity reads the cycle snapshot (which counts pods held in Permit as placed).
func (g *Gang) freeCapacity() (capacity, error) {
	infos, err := g.handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil {
		return nil, err
	}
	return &snapshotCapacity{infos: infos, cache: map[int]map[corev1.ResourceName]int64{}}, nil
}

// snapshotCapacity computes a node's free capacity the first time packing looks at it.
type snapshotCapacity struct {
	infos []fwk.NodeInfo
	cache map[int]map[corev1.ResourceName]int64
}

func (c *snapshotCapacity) len() int { return len(c.infos) }

func (c *snapshotCapacity) free(i int) map[corev1.ResourceName]int64 {
	if f, ok := c.cache[i]; ok {
		return f
	}
	f := FreeOf(c.infos[i])
	c.cache[i] = f
	return f
}

// FreeOf is a node's allocatable minus what its pods request (pods held in Permit
// included), cpu in millicores; nil for a node that takes no new pods. The topology plugin
// simulates placements on the same numbers.
func FreeOf(ni fwk.NodeInfo) map[corev1.ResourceName]int64 {
	node := ni.Node()
	if node == nil || node.Spec.Unschedulable {
		return nil
	}
	alloc, used := ni.GetAllocatable(), ni.GetRequested()
	free := map[corev1.ResourceName]int64{
		corev1.ResourceCPU:    alloc.GetMilliCPU() - used.GetMilliCPU(),
		corev1.ResourceMemory: alloc.GetMemory() - used.GetMemory(),
		corev1.ResourcePods:   int64(alloc.GetAllowedPodNumber() - len(ni.GetPods())),
	}
	if es := alloc.GetEphemeralStorage(); es > 0 {
		free[corev1.ResourceEphemeralStorage] = es - used.GetEphemeralStorage()
	}
	usedScalar := used.GetScalarResources()
	for name, v := range alloc.GetScalarResources() {
		free[name] = v - usedScalar[name]
	}
	return free
}

// PostFilter runs when a pod of the group fits no node. Unless the group's minimum is
// already bound, the pods it holds in Permit can never be joined by this one: release them
// now rather than at the timeout, so the capacity goes to a group that can complete.
func (g *Gang) PostFilter(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, statuses fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	key := groupKeyOf(pod)
	if key == "" {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	pg, req, err := g.podGroup(pod)
	if err != nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	if req.check(g.placedPods(key, nil)).ok {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	msg := fmt.Sprintf("pod %s fits no node", pod.Name)
	if m := refusal(g.handle, statuses); m != "" {
		// A PreFilter refusal (for example the topology plugin's "no leaf can hold the
		// group") applies to every node and says more than "fits no node".
		msg = m
	}
	if nodes, err := g.freeCapacity(); err == nil {
		placed, pending := splitBound(g.groupPods(key))
		if f := checkFeasible(req, placed, pending, nodes); !f.ok {
			msg = f.message
		}
	}
	g.rejectGroup(pg, key, reasonNotEnoughResources, msg)
	return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s released: %s", key, msg))
}

// refusal returns the message a PreFilter plugin refused the pod with, read off any node's
// status (a PreFilter refusal is recorded for all of them), or "" when nodes were refused
// one by one in Filter.
func refusal(handle fwk.Handle, statuses fwk.NodeToStatusReader) string {
	infos, err := handle.SnapshotSharedLister().NodeInfos().List()
	if err != nil || len(infos) == 0 || infos[0].Node() == nil {
		return ""
	}
	st := statuses.Get(infos[0].Node().Name)
	if st == nil || st.Plugin() == "" || st.Plugin() == Name {
		return ""
	}
	if len(infos) > 1 && infos[1].Node() != nil {
		// Filter refusals differ per node; a PreFilter refusal is the same for all.
		if other := statuses.Get(infos[1].Node().Name); other == nil || other.Message() != st.Message() {
			return ""
		}
	}
	return st.Message()
}

// Reserve remembers the pod as held by its group until it is seen bound or released.
func (g *Gang) Reserve(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, nodeName string) *fwk.Status {
	key := groupKeyOf(pod)
	if key == "" {
		return nil
	}
	held := pod.DeepCopy()
	held.Spec.NodeName = nodeName
	g.mu.Lock()
	g.stateLocked(key).held[pod.UID] = held
	g.mu.Unlock()
	return nil
}

// Unreserve runs when a held pod is rejected (timeout, a sibling's failure) or fails to
// bind. A group that has not reached its minimum releases every sibling with it.
func (g *Gang) Unreserve(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, _ string) {
	key := groupKeyOf(pod)
	if key == "" {
		return
	}
	g.mu.Lock()
	st := g.stateLocked(key)
	delete(st.held, pod.UID)
	timedOut := !st.deadline.IsZero() && !time.Now().Before(st.deadline)
	g.mu.Unlock()

	pg, req, err := g.podGroup(pod)
	if err != nil || req.check(g.placedPods(key, nil)).ok {
		return
	}
	if timedOut {
		g.rejectGroup(pg, key, reasonTimeout, fmt.Sprintf("the group's minimum was not placed within %s", g.args.waitTimeout(pg)))
		return
	}
	g.rejectGroup(pg, key, reasonNotEnoughResources, fmt.Sprintf("pod %s was released", pod.Name))
}

// Permit holds the pod until the group's minimum is placed, then lets every held sibling go.
func (g *Gang) Permit(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, _ string) (*fwk.Status, time.Duration) {
	key := groupKeyOf(pod)
	if key == "" {
		return nil, 0
	}
	pg, req, err := g.podGroup(pod)
	if err != nil {
		return fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("PodGroup %s: %v", key, err)), 0
	}
	if v := req.check(g.placedPods(key, pod)); v.ok {
		g.allowGroup(pg, key)
		return nil, 0
	}
	now := time.Now()
	g.mu.Lock()
	st := g.stateLocked(key)
	if st.deadline.IsZero() || now.After(st.deadline) {
		st.deadline = now.Add(g.args.waitTimeout(pg))
	}
	wait := st.deadline.Sub(now)
	g.mu.Unlock()
	return fwk.NewStatus(fwk.Wait, fmt.Sprintf("waiting for gang %s", key)), wait
}

// PostBind forgets a bound pod: from now on the informer reports it.
func (g *Gang) PostBind(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, _ string) {
	key := groupKeyOf(pod)
	if key == "" {
		return
	}
	g.mu.Lock()
	if st := g.groups[key]; st != nil {
		delete(st.held, pod.UID)
	}
	g.mu.Unlock()
}

// allowGroup releases every held sibling to bind.
func (g *Gang) allowGroup(pg *volcanov1beta1.PodGroup, key string) {
	g.mu.Lock()
	st := g.stateLocked(key)
	st.deadline = time.Time{}
	g.mu.Unlock()
	g.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if groupKeyOf(wp.GetPod()) == key {
			wp.Allow(Name)
		}
	})
	g.status.scheduled(pg)
	gangsScheduled.Inc()
}

// rejectGroup releases every held sibling, starts the backoff and records why.
func (g *Gang) rejectGroup(pg *volcanov1beta1.PodGroup, key, reason, msg string) {
	backoff := g.args.backoff()
	g.mu.Lock()
	st := g.stateLocked(key)
	st.deadline = time.Time{}
	alreadyBackingOff := time.Now().Before(st.backoffUntil)
	if !alreadyBackingOff {
		st.backoffUntil = time.Now().Add(backoff)
	}
	g.mu.Unlock()
	g.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if groupKeyOf(wp.GetPod()) == key {
			wp.Reject(Name, fmt.Sprintf("gang %s released: %s", key, msg))
		}
	})
	if alreadyBackingOff {
		return
	}
	gangsRejected.WithLabelValues(reason).Inc()
	g.status.unschedulable(pg, reason, msg)
	if backoff > 0 {
		time.AfterFunc(backoff, func() { g.activate(key) })
	}
}

// activateIfComplete re-queues a group's held-back pods once the pod just added makes the
// group large enough to meet its minimum.
func (g *Gang) activateIfComplete(pod *corev1.Pod) {
	key := groupKeyOf(pod)
	if key == "" {
		return
	}
	_, req, err := g.podGroup(pod)
	if err != nil {
		return
	}
	if req.enough(g.groupPods(key)).ok {
		g.activate(key)
	}
}

// activate puts the group's pending pods back in the active queue once its backoff is over.
func (g *Gang) activate(key string) {
	pods := map[string]*corev1.Pod{}
	for _, p := range g.groupPods(key) {
		if p.Spec.NodeName == "" {
			pods[p.Namespace+"/"+p.Name] = p
		}
	}
	if len(pods) > 0 {
		g.handle.Activate(klog.Background(), pods)
	}
}
