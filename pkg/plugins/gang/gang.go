// Package gang is the berth-scheduler plugin that places a gang all or nothing, whichever API
// it is written in: Volcano's PodGroup, scheduler-plugins' coscheduling PodGroup or
// kube-scheduler's native PodGroup (package podgroups reads them all into Volcano's shape).
//
// A Volcano pod names its group with the scheduling.k8s.io/group-name annotation and its task
// (a role replica) with volcano.sh/task-spec. Before a group holds anything, the profile's
// placement model plans its whole minimum (minMember, minTaskMember, subGroupPolicy) on
// nodes each of its pods may use; a group without a plan holds nothing and says why. A
// planned group's pods go straight to their planned nodes (the fast path), are held in
// Permit and released together. Capacity a plan keeps counts as used for every other
// group, and capacity is kept for the oldest blocked group, so competing gangs neither
// livelock nor starve, and no group is ever partly bound. A group without a plan may evict
// whole lower-priority groups to make room (preemption.go).
package gang

import (
	"context"
	"fmt"
	"k8s.io/dynamic-resource-allocation/structured"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	schedulinglisters "k8s.io/client-go/listers/scheduling/v1"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/pkg/plugins/placement"
	"github.com/berth-sh/berth/pkg/plugins/podgroups"
)

// Name is the plugin name used in the scheduler profile.
const Name = "BerthGang"

// Gang implements the gang plugin. Its state is, per group, the wait deadline, the backoff
// and the requirement built from the PodGroup; per pod being preempted, the group it makes
// room for; plans and held pods live in the profile's placement model, the latest verdict
// on each group in the status writer, and everything else is read from informers. All of
// it is dropped once the group is gone (see forget), and Tracked reports how much of it
// there is.
type Gang struct {
	handle fwk.Handle
	args   *Args
	model  *placement.Model
	groups *podgroups.Source
	status *statusWriter
	// Read by preemption: group priorities, disruption budgets and the pods they cover.
	pcLister  schedulinglisters.PriorityClassLister
	pdbLister policylisters.PodDisruptionBudgetLister
	podLister corelisters.PodLister

	mu     sync.Mutex
	states map[string]*groupState
	// releaseMu serialises the plugin's Allow and Reject of held pods. kube-scheduler's
	// waitingPod writes its done flag under a read lock (stopWithStatus), so two Rejects of
	// one pod at once are a data race: the plugin makes its own never overlap, and decides
	// the wait timeout itself (assemblyTimedOut) before the framework's timers would.
	releaseMu sync.Mutex
	// victimOf maps a pod being preempted to the group it makes room for, which is put
	// back in the queue as each victim leaves.
	victimOf map[types.UID]victim
}

// victim is a pod being preempted: where it is and the group it makes room for. With
// devices (DRA), the room is there only once they are freed, which comes after the pod is
// gone: the entry stays, gone set, until then.
type victim struct {
	namespace, name, preemptor string
	devices                    []structured.DeviceID
	gone                       bool
}

// groupState is the plugin's memory of one PodGroup between scheduling cycles; the pods
// it holds are the placement model's.
type groupState struct {
	deadline time.Time // when the current assembly gives up
	// released: the current assembly was rejected; its held pods' Unreserve that follows is
	// the release itself, not a new reason to reject.
	released     bool
	backoffUntil time.Time
	reqVersion   string // PodGroup resourceVersion req was built from
	req          *placement.Requirement
	// roomArrived: the last of the pods preempted for the group has just left (with its
	// DRA devices freed); its next cycle plans on a snapshot that has the room, so it does
	// not preempt again in the cycle that saw them go.
	roomArrived bool
	// early: pods of the current assembly let through Permit ahead of the group because a
	// sibling not yet placed shares one of their ResourceClaims (see permitEarly); they
	// wait in PreBind until the group is allowed or rejected.
	early *earlyRelease
	// probe: once a refused group's backoff ends, the one pod retried for it (the first its
	// queue order would try). Its siblings stay out of the queue, for freed capacity too,
	// until the probe gets a plan: a refused group then costs one scheduling cycle per retry
	// instead of one per pod. Retried pod by pod, a few large refused groups can fill a slow
	// scheduler's every cycle, and, being the oldest, keep the younger groups that fit from
	// ever being tried.
	probe types.UID
}

var (
	_ fwk.PreEnqueuePlugin  = &Gang{}
	_ fwk.QueueSortPlugin   = &Gang{}
	_ fwk.PreFilterPlugin   = &Gang{}
	_ fwk.FilterPlugin      = &Gang{}
	_ fwk.PostFilterPlugin  = &Gang{}
	_ fwk.ReservePlugin     = &Gang{}
	_ fwk.PermitPlugin      = &Gang{}
	_ fwk.PreBindPlugin     = &Gang{}
	_ fwk.PostBindPlugin    = &Gang{}
	_ fwk.EnqueueExtensions = &Gang{}
)

// Factory returns the plugin factory for a scheduler whose profiles get their placement
// model from models.
func Factory(models *placement.Models) func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
	return func(ctx context.Context, obj runtime.Object, handle fwk.Handle) (fwk.Plugin, error) {
		m, err := models.For(handle)
		if err != nil {
			return nil, err
		}
		g, err := New(ctx, obj, handle, m)
		if err != nil {
			return nil, err
		}
		return g, nil
	}
}

// New builds the plugin on the profile's placement model: it starts a PodGroup informer
// of its own (the scheduler's factory only knows core types).
func New(ctx context.Context, obj runtime.Object, handle fwk.Handle, model *placement.Model) (*Gang, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, err
	}
	model.SetReserveAfter(args.reserveAfter())
	groups, err := model.Groups(ctx, placement.JSONConfig(handle))
	if err != nil {
		return nil, fmt.Errorf("gang: %w", err)
	}
	podInformer := handle.SharedInformerFactory().Core().V1().Pods().Informer()

	g := &Gang{
		handle:    handle,
		args:      args,
		model:     model,
		groups:    groups,
		pcLister:  handle.SharedInformerFactory().Scheduling().V1().PriorityClasses().Lister(),
		pdbLister: handle.SharedInformerFactory().Policy().V1().PodDisruptionBudgets().Lister(),
		podLister: handle.SharedInformerFactory().Core().V1().Pods().Lister(),
		states:    map[string]*groupState{},
		victimOf:  map[types.UID]victim{},
	}
	g.status = newStatusWriter(groups, model, handle.EventRecorder())
	profile := handle.ProfileName()
	model.OnHeadChange(func(old, new string) {
		for _, key := range []string{old, new} {
			if key != "" {
				g.status.enqueue(key)
			}
		}
	})
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		// kube-scheduler 1.37 does not retry gated pods when a sibling pod is added (unless
		// the GenericWorkload gate is on), so the pods PreEnqueue held back are put back in
		// the queue here once the group has enough pods.
		AddFunc: func(obj any) {
			if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.NodeName == "" {
				g.activateIfComplete(pod)
			}
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Pod)
			n, ok2 := newObj.(*corev1.Pod)
			if !ok1 || !ok2 {
				return
			}
			// The PodGroup counts running, succeeded and failed pods: keep them current. Only
			// for pods of this profile: the informer holds every scheduler's pods, and a
			// PodGroup whose pods name another scheduler (Volcano's) is that scheduler's to
			// write; writing it here replaced Volcano's phase and conditions with ours.
			if o.Status.Phase != n.Status.Phase && n.Spec.SchedulerName == profile {
				if key := placement.GroupKey(n); key != "" {
					g.status.enqueue(key)
				}
			}
			// And the placed count: a released group's status is written a moment after its
			// release, and a bind that lands later (a slow apiserver) would otherwise leave
			// it saying "2/3 pods placed" for good. Binds within the settle delay share the
			// write already pending.
			if o.Spec.NodeName == "" && n.Spec.NodeName != "" && n.Spec.SchedulerName == profile {
				if key := placement.GroupKey(n); key != "" {
					g.status.enqueueSettled(key)
				}
			}
		},
		// A group whose pods are all gone leaves no state behind.
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				key := placement.GroupKey(pod)
				g.forget(key)
				g.victimGone(pod)
				g.probeGone(pod)
				// The PodGroup counts placed pods: one fewer now (a preempted group's status
				// was written while the cache may still have shown its pods bound).
				if key != "" && pod.Spec.SchedulerName == profile {
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
	groups.OnChange(func(key string, specChanged bool) {
		if specChanged {
			g.model.Drop(key)
			g.activate(key)
		}
	})
	// A preemption's victims' DRA devices are freed after their pods are gone, when the
	// ResourceClaim controller deletes or deallocates their claims: the preemptor tries again
	// then (and, until then, does not preempt again for room already on its way).
	if _, err := handle.SharedInformerFactory().Resource().V1().ResourceClaims().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, _ any) { g.victimDevicesFreed() },
		DeleteFunc: func(any) { g.victimDevicesFreed() },
	}); err != nil {
		return nil, fmt.Errorf("gang: watch ResourceClaims: %w", err)
	}
	// Nor does a group whose PodGroup is deleted, once its pods are gone too.
	groups.OnDelete(g.forget)
	go g.status.run(ctx)
	// Events alone cannot prune everything: a cycle in flight when a group's last pod went
	// (a pod released from Permit because it was deleted, say) can write its group's state
	// after forget ran, and no later event comes for that group.
	go wait.UntilWithContext(ctx, func(context.Context) { g.sweep() }, pruneInterval)
	track(ctx, g)
	return g, nil
}

// Name returns the plugin name.
func (g *Gang) Name() string { return Name }

// stateLocked returns the group's state, creating it; g.mu must be held.
func (g *Gang) stateLocked(key string) *groupState {
	st := g.states[key]
	if st == nil {
		st = &groupState{}
		g.states[key] = st
	}
	return st
}

// podGroup returns the group and its requirement, rebuilt only when the PodGroup changed.
func (g *Gang) podGroup(pod *corev1.Pod) (*volcanov1beta1.PodGroup, *placement.Requirement, error) {
	pg, err := g.groups.Get(pod)
	if err != nil {
		return nil, nil, err
	}
	key := placement.GroupKey(pod)
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.stateLocked(key)
	if st.req == nil || st.reqVersion != pg.ResourceVersion {
		req, err := placement.NewRequirement(pg)
		if err != nil {
			return nil, nil, err
		}
		st.req, st.reqVersion = req, pg.ResourceVersion
	}
	return pg, st.req, nil
}

// groupPods returns every live pod of the group the scheduler knows of.
func (g *Gang) groupPods(key string) []*corev1.Pod { return g.model.GroupPods(key) }

// placedPods returns the group's pods that are bound or held by this scheduler, plus
// extra (the pod in the current cycle), each once.
func (g *Gang) placedPods(key string, extra *corev1.Pod) []*corev1.Pod {
	placed, _ := g.model.Split(key, g.groupPods(key))
	out := make([]*corev1.Pod, 0, len(placed)+1)
	for _, p := range placed {
		if extra != nil && p.Pod.UID == extra.UID {
			extra = nil
		}
		out = append(out, p.Pod)
	}
	if extra != nil {
		out = append(out, extra)
	}
	return out
}

// pruneInterval is how often sweep looks for state left behind by groups that are gone.
const pruneInterval = 5 * time.Second

// forget drops what is remembered of a group that is gone. Once no pod of it is left: its
// scheduling state (the wait deadline, the backoff, the cached requirement, and the model's
// plan, nomination or reservation, held pods, place among blocked groups and excluded
// nodes) and its converted PodGroup. Once its PodGroup is gone too: the latest verdict kept
// for writing the PodGroup's status. A group that still has pods keeps everything.
func (g *Gang) forget(key string) {
	if key == "" || len(g.groupPods(key)) > 0 {
		return
	}
	g.mu.Lock()
	delete(g.states, key)
	g.mu.Unlock()
	g.model.Forget(key)
	g.groups.Forget(key)
	if _, err := g.groups.GetKey(key); err != nil {
		// Not found, or its API is not served: there is no PodGroup to write status on.
		g.status.forget(key)
	}
}

// sweep forgets every group any per-group cache remembers that is gone, and every pod
// being preempted that has left.
func (g *Gang) sweep() {
	keys := map[string]bool{}
	g.mu.Lock()
	for k := range g.states {
		keys[k] = true
	}
	g.mu.Unlock()
	for _, k := range g.status.keys() {
		keys[k] = true
	}
	for _, k := range g.model.Keys() {
		keys[k] = true
	}
	for _, k := range g.groups.Converted() {
		keys[k] = true
	}
	for k := range keys {
		g.forget(k)
	}
	g.victimsLeaving("")
}

// Tracked reports how many entries each of the plugin's caches holds, by cache: groups for
// the per-group ones (group_state, status_decisions, podgroup_conversions, plans,
// plan_capacity, held_pods, blocked, excluded_nodes), pods for preemption_victims and
// expected_devices, nodes for kept_nodes. Each is bounded by the groups (pods, nodes) that
// exist. TestTrackedReportsEveryContainer checks every map of that state is reported here.
func (g *Gang) Tracked() map[string]int {
	g.mu.Lock()
	states, victims := len(g.states), len(g.victimOf)
	g.mu.Unlock()
	m := g.model.Sizes()
	return map[string]int{
		"group_state":          states,
		"status_decisions":     g.status.size(),
		"podgroup_conversions": len(g.groups.Converted()),
		"plans":                m.Plans,
		"plan_capacity":        m.KeptByPlan,
		"held_pods":            m.Held,
		"blocked":              m.Blocked,
		"excluded_nodes":       m.Excluded,
		"preemption_victims":   victims,
		"kept_nodes":           m.KeptNodes,
		"expected_devices":     m.Expected,
	}
}

// waitingPods counts the gang pods the framework holds in Permit.
func (g *Gang) waitingPods() int {
	n := 0
	g.handle.IterateOverWaitingPods(func(wp fwk.WaitingPod) {
		if placement.GroupKey(wp.GetPod()) != "" {
			n++
		}
	})
	return n + g.earlyPods()
}
