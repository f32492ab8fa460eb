package placement

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	"github.com/berth-sh/berth/pkg/plugins/podgroups"
)

// DefaultReserveAfter is how long the oldest blocked group waits before capacity is kept
// for it.
const DefaultReserveAfter = 10 * time.Second

// blockedGroupTTL forgets a blocked group that has not been tried for this long (its pods
// are gone, or no longer scheduled by this profile).
const blockedGroupTTL = 2 * time.Minute

// Model is one scheduler profile's placement model: the plans in force for groups being
// placed, the pods it holds for them, and the capacity kept for the oldest blocked group.
// The profile's plugins share it (see Models); it is safe for concurrent use.
type Model struct {
	// nodes reads the current scheduling cycle's snapshot.
	nodes func() NodeSource
	pods  cache.Indexer

	mu           sync.Mutex
	acc          Accelerators
	chooser      DomainChooser
	reserveAfter time.Duration // < 0: never keep capacity for a blocked group
	onHead       []func(old, new string)
	plans        map[string]*Plan
	keptByPlan   map[string]map[string]Resources // group -> node -> kept
	kept         map[string]Resources            // node -> kept by all plans
	held         map[string]map[types.UID]PlacedPod
	blocked      map[string]*blockedGroup
	head         string
	// excluded are nodes a group's pod was refused on by a Filter the model does not
	// model (pod affinity, ports, volumes), kept out of the group's plans for a while.
	excluded  map[string]map[string]time.Time
	lastSweep time.Time

	// dra plans pods' DRA claims (nil: not planned); expected are the devices the plan
	// gave each pod the scheduler holds, until PostBind compares them with its claims.
	dra      *DRA
	expected map[types.UID][]structured.DeviceID

	groupsOnce sync.Once
	groups     *podgroups.Source
	groupsErr  error
}

// Groups is the profile's reader of gangs in every API the cluster serves, started by the
// first plugin that asks (with that plugin's context and client config).
func (m *Model) Groups(ctx context.Context, cfg *rest.Config) (*podgroups.Source, error) {
	m.groupsOnce.Do(func() { m.groups, m.groupsErr = podgroups.Start(ctx, cfg) })
	return m.groups, m.groupsErr
}

// exclusionTime is how long a node that refused a planned pod stays out of its group's plans:
// long enough that a refusal the model cannot foresee (inter-pod affinity, host ports,
// volumes) does not send the group back to the node at every retry (a backoff is 2 s), short
// enough that a refusal that was only a moment's (the node's capacity changing under the
// plan) does not keep the group off the one node with room for long. At 30 s a group in a
// full pool waited half a minute beside free GPUs (TestContentionDRA's work-conserving check
// saw it: "0/11 nodes its pods may use", one of 12 excluded).
const exclusionTime = 10 * time.Second

// blockedGroup is a group that could not be planned, in the order groups are owed capacity.
type blockedGroup struct {
	priority    int32
	created     time.Time
	since, last time.Time
	// never: the group does not fit even on empty nodes, so no capacity is kept for it.
	never bool
}

// NewModel builds the model for a profile from its framework handle.
func NewModel(handle fwk.Handle) (*Model, error) {
	podInformer := handle.SharedInformerFactory().Core().V1().Pods().Informer()
	if err := EnsureGroupIndex(podInformer); err != nil {
		return nil, fmt.Errorf("placement: index pods by group: %w", err)
	}
	m := newModel(podInformer.GetIndexer(), func() NodeSource {
		return SnapshotSource(handle.SnapshotSharedLister().NodeInfos())
	})
	m.dra = NewDRA(handle)
	// The model keeps a held pod until the informer shows it bound, so no moment passes in
	// which it is neither; and a group whose pods are all gone leaves nothing behind.
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(*corev1.Pod)
			n, ok2 := newObj.(*corev1.Pod)
			if ok1 && ok2 && o.Spec.NodeName == "" && n.Spec.NodeName != "" {
				m.Unreserve(n)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				m.mu.Lock()
				delete(m.expected, pod.UID)
				m.mu.Unlock()
				if key := GroupKey(pod); key != "" && len(m.GroupPods(key)) == 0 {
					m.Forget(key)
				}
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("placement: watch pods: %w", err)
	}
	return m, nil
}

func newModel(pods cache.Indexer, nodes func() NodeSource) *Model {
	return &Model{
		nodes:        nodes,
		pods:         pods,
		acc:          anyAccelerator{},
		reserveAfter: DefaultReserveAfter,
		plans:        map[string]*Plan{},
		keptByPlan:   map[string]map[string]Resources{},
		kept:         map[string]Resources{},
		held:         map[string]map[types.UID]PlacedPod{},
		blocked:      map[string]*blockedGroup{},
		excluded:     map[string]map[string]time.Time{},
		expected:     map[types.UID][]structured.DeviceID{},
	}
}

// SetAccelerators hands the model the profile's accelerator rules.
func (m *Model) SetAccelerators(a Accelerators) {
	m.mu.Lock()
	m.acc = a
	m.mu.Unlock()
}

// Accelerators are the profile's accelerator rules (every node matches without them).
func (m *Model) Accelerators() Accelerators {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.acc
}

// SetDomainChooser hands the model the profile's domain choice (the topology plugin).
func (m *Model) SetDomainChooser(c DomainChooser) {
	m.mu.Lock()
	m.chooser = c
	m.mu.Unlock()
}

// SetReserveAfter sets how long the oldest blocked group waits before capacity is kept for
// it; negative turns keeping capacity off.
func (m *Model) SetReserveAfter(d time.Duration) {
	m.mu.Lock()
	m.reserveAfter = d
	m.mu.Unlock()
}

// OnHeadChange registers f to learn which group capacity is kept for ("" for none).
func (m *Model) OnHeadChange(f func(old, new string)) {
	m.mu.Lock()
	m.onHead = append(m.onHead, f)
	m.mu.Unlock()
}

// Pool is this cycle's free capacity as the group except sees it: other groups' plans
// count as used, and nodes that refused the group's pods lately are left out.
func (m *Model) Pool(except string) *Pool {
	p := NewPool(m.nodes(), m.Accelerators(), func(node string) Resources { return m.KeptOn(node, except) })
	p.dra = m.dra
	m.exclude(p, except)
	return p
}

// exclude leaves the nodes that refused the group's pods lately out of the pool.
func (m *Model) exclude(p *Pool, key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for node, until := range m.excluded[key] {
		if now.Before(until) {
			if p.excluded == nil {
				p.excluded = map[string]bool{}
			}
			p.excluded[node] = true
		}
	}
}

// Exclude keeps node out of the group's plans for a while: a Filter the model does not
// model refused one of its pods there. It returns when the node is back in them.
func (m *Model) Exclude(key, node string) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.excluded[key] == nil {
		m.excluded[key] = map[string]time.Time{}
	}
	until := time.Now().Add(exclusionTime)
	m.excluded[key][node] = until
	return until
}

// KeptOn is what plans other than except's keep on the node; nil when nothing.
func (m *Model) KeptOn(node, except string) Resources {
	m.mu.Lock()
	defer m.mu.Unlock()
	total := m.kept[node]
	if len(total) == 0 {
		return nil
	}
	own := m.keptByPlan[except][node]
	if len(own) == 0 {
		return total
	}
	out := make(Resources, len(total))
	for k, v := range total {
		out[k] = v - own[k]
	}
	return out
}

// keptForPlacing is what plans other than except's keep on the node, leaving out the
// reservation of the group capacity is kept for: what a new reservation plans around,
// since it replaces that one.
func (m *Model) keptForPlacing(node, except string) Resources {
	m.mu.Lock()
	defer m.mu.Unlock()
	total := m.kept[node]
	if len(total) == 0 {
		return nil
	}
	out := make(Resources, len(total))
	for k, v := range total {
		out[k] = v - m.keptByPlan[except][node][k]
	}
	if m.head != "" && m.head != except {
		if p := m.plans[m.head]; p != nil && p.Reservation {
			addTo(out, m.keptByPlan[m.head][node], -1)
		}
	}
	return out
}

// Keeping reports whether any plan keeps capacity anywhere.
func (m *Model) Keeping() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.kept) > 0
}

// Plan is the group's plan in force, or nil.
func (m *Model) Plan(key string) *Plan {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.plans[key]
}

// Reservation is what is kept for the group while it is the oldest blocked one, per node;
// nil otherwise.
func (m *Model) Reservation(key string) map[string]Resources {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.plans[key]; p != nil && p.Reservation {
		return copyKept(m.keptByPlan[key])
	}
	return nil
}

// Head is the group capacity is kept for, or "".
func (m *Model) Head() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.head
}

func copyKept(in map[string]Resources) map[string]Resources {
	out := make(map[string]Resources, len(in))
	for n, r := range in {
		c := make(Resources, len(r))
		for k, v := range r {
			c[k] = v
		}
		out[n] = c
	}
	return out
}

// setPlanLocked puts p in force for its group, replacing what the group had.
func (m *Model) setPlanLocked(p *Plan) {
	m.dropPlanLocked(p.Group)
	m.plans[p.Group] = p
	byNode := p.Kept()
	m.keptByPlan[p.Group] = byNode
	for node, r := range byNode {
		k := m.kept[node]
		if k == nil {
			k = Resources{}
			m.kept[node] = k
		}
		addTo(k, r, 1)
	}
}

func (m *Model) dropPlanLocked(key string) {
	for node, r := range m.keptByPlan[key] {
		m.unkeepLocked(node, r)
	}
	delete(m.keptByPlan, key)
	delete(m.plans, key)
}

func (m *Model) unkeepLocked(node string, r Resources) {
	k := m.kept[node]
	if k == nil {
		return
	}
	addTo(k, r, -1)
	for _, v := range k {
		if v != 0 {
			return
		}
	}
	delete(m.kept, node)
}

// Drop ends the group's plan (its attempt was given up); a reservation stays.
func (m *Model) Drop(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.plans[key]; p != nil && !p.Reservation {
		m.dropPlanLocked(key)
	}
}

// Forget drops everything about a group whose pods are gone.
func (m *Model) Forget(key string) {
	m.mu.Lock()
	m.dropPlanLocked(key)
	delete(m.held, key)
	delete(m.blocked, key)
	delete(m.excluded, key)
	old := m.head
	if m.head == key {
		m.head = ""
	}
	hooks := m.onHead
	m.mu.Unlock()
	if old == key {
		for _, f := range hooks {
			f(old, "")
		}
	}
}

// Sizes are how many groups each of the model's per-group maps holds an entry for, and
// the nodes capacity is kept on, by map: plans (plans in force, nominations and the
// reservation included, with what each keeps per node), held (groups with pods held),
// blocked (refused groups, in the order capacity is owed), excluded (groups with nodes
// left out of their plans), keptNodes (nodes any plan keeps capacity on) and expected
// (pods placed with DRA devices whose claims PostBind has yet to compare with the plan).
type Sizes struct{ Plans, KeptByPlan, Held, Blocked, Excluded, KeptNodes, Expected int }

// Sizes reports the size of each per-group map, so what the model remembers can be checked
// against the groups that exist.
func (m *Model) Sizes() Sizes {
	m.mu.Lock()
	defer m.mu.Unlock()
	return Sizes{Plans: len(m.plans), KeptByPlan: len(m.keptByPlan), Held: len(m.held), Blocked: len(m.blocked),
		Excluded: len(m.excluded), KeptNodes: len(m.kept), Expected: len(m.expected)}
}

// Keys lists every group the model remembers anything about, so a caller that learns a
// group is gone only by looking (a pod deleted while a cycle of its group was in flight
// can leave an entry behind after Forget) can Forget it.
func (m *Model) Keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	for k := range m.plans {
		seen[k] = true
	}
	for k := range m.keptByPlan {
		seen[k] = true
	}
	for k := range m.held {
		seen[k] = true
	}
	for k := range m.blocked {
		seen[k] = true
	}
	for k := range m.excluded {
		seen[k] = true
	}
	if m.head != "" {
		seen[m.head] = true
	}
	return SortedKeys(seen)
}

// Reserve records that the scheduler holds the pod on node (Reserve): the pod now counts
// in the snapshot, so its plan stops keeping room for it.
func (m *Model) Reserve(pod *corev1.Pod, node string) {
	key := GroupKey(pod)
	if key == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.held[key]
	if h == nil {
		h = map[types.UID]PlacedPod{}
		m.held[key] = h
	}
	h[pod.UID] = PlacedPod{Pod: pod, Node: node}
	p := m.plans[key]
	if p == nil || p.Reservation {
		return
	}
	planned, ok := p.Nodes[pod.UID]
	if !ok {
		return
	}
	req := p.requests[pod.UID]
	if ids := p.devices[pod.UID]; len(ids) > 0 && planned == node {
		m.expected[pod.UID] = ids
	}
	delete(p.Nodes, pod.UID)
	delete(p.requests, pod.UID)
	delete(p.devices, pod.UID)
	if byNode := m.keptByPlan[key]; byNode != nil && byNode[planned] != nil {
		addTo(byNode[planned], req, -1)
		m.unkeepLocked(planned, req)
	}
	if len(p.Nodes) == 0 && p.Domain == nil {
		// Consumed, and nothing for extra pods to recall: the plan has done its work.
		m.dropPlanLocked(key)
	}
}

// Unreserve forgets a held pod that was released or failed to bind; a group left holding
// nothing leaves no entry, so the map of held pods is as large as the groups holding pods.
func (m *Model) Unreserve(pod *corev1.Pod) {
	key := GroupKey(pod)
	m.mu.Lock()
	if h := m.held[key]; h != nil {
		delete(h, pod.UID)
		if len(h) == 0 {
			delete(m.held, key)
		}
	}
	m.mu.Unlock()
}

// Held lists the pods held for the group, or for every group when key is "".
func (m *Model) Held(key string) []PlacedPod {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []PlacedPod
	for k, h := range m.held {
		if key != "" && k != key {
			continue
		}
		for _, p := range h {
			out = append(out, p)
		}
	}
	return out
}

// Split separates a group's pods into those bound or held, and those still to place.
func (m *Model) Split(key string, all []*corev1.Pod) (placed []PlacedPod, pending []*corev1.Pod) {
	m.mu.Lock()
	h := m.held[key]
	for _, p := range all {
		switch {
		case p.Spec.NodeName != "":
			placed = append(placed, PlacedPod{Pod: p, Node: p.Spec.NodeName})
		case h[p.UID].Node != "":
			placed = append(placed, h[p.UID])
		default:
			pending = append(pending, p)
		}
	}
	m.mu.Unlock()
	return placed, pending
}

// GroupPods returns the group's live pods.
func (m *Model) GroupPods(key string) []*corev1.Pod { return GroupPods(m.pods, key) }

// Outcome is what PlanFor decided for a pod's group.
type Outcome struct {
	// Plan is the group's plan; nil with a Refusal.
	Plan *Plan
	// Refusal says why the group cannot be placed now.
	Refusal string
	// Stale: the plan in force no longer held for this pod and was made again.
	Stale bool
	// MinPlaced: the group's minimum is already bound or held; the pod is an extra.
	MinPlaced bool
	// NewAttempt: the plan was made in this cycle for a group with nothing placed.
	NewAttempt bool
	// Reservation is set when the refused group is the one capacity is kept for.
	Reservation *Plan
	// Waiting: the group's plan comes from a preemption whose victims have not left yet;
	// the pod waits (Refusal says for what) and the plan stays in force.
	Waiting bool
}

// Node is the pod's planned node, or "".
func (o Outcome) Node(pod *corev1.Pod) string {
	if o.Plan == nil {
		return ""
	}
	return o.Plan.Nodes[pod.UID]
}

// PlanFor returns the plan of the pod's group, making one when the group has none in force
// or its plan no longer holds: every pod the group's minimum still needs gets a node it may
// use that has room, inside the group's domain, or the group is refused with the reason.
// ttl bounds how long a plan keeps capacity for pods that do not come.
func (m *Model) PlanFor(pod *corev1.Pod, pg *volcanov1beta1.PodGroup, req *Requirement, ttl time.Duration) (Outcome, error) {
	key := GroupKey(pod)
	now := time.Now()
	m.sweep(now)
	pool := m.Pool(key)
	var out Outcome
	p := m.Plan(key)
	if p != nil && !p.Reservation {
		if node, planned := p.Nodes[pod.UID]; planned {
			if pool.Eligible(pod, node) && fitsIn(pool.Free(node), nil, p.requests[pod.UID]) && m.refreshDevices(pool, p, pod, node) {
				out.Plan = p // the fast path: nothing else to look at
				return out, nil
			}
			if p.Nominated && now.Before(p.expires) {
				// The pods preempted for the group still hold the node: wait for them,
				// keeping the room, rather than plan around them.
				out.Waiting = true
				out.Refusal = fmt.Sprintf("waiting for the pods preempted for it to leave node %s", node)
				return out, nil
			}
			out.Stale = true // the node changed under the plan: plan again around what is placed
			plansMade.WithLabelValues("stale").Inc()
		}
	}
	all := m.GroupPods(key)
	placed, _ := m.Split(key, all)
	placedPods := make([]*corev1.Pod, 0, len(placed))
	for _, pp := range placed {
		placedPods = append(placedPods, pp.Pod)
	}
	minMet := req.Check(placedPods).OK
	out.MinPlaced = minMet
	if p != nil && !p.Reservation && !out.Stale && !minMet && req.Check(append(placedPods, planPods(all, p)...)).OK {
		out.Plan = p // the plan still completes the minimum; this pod is not part of it
		return out, nil
	}
	// An extra pod (the minimum is placed) that the plan in force gives no node is planned
	// with the group's other pending pods, around what is placed: a new role replica needs
	// nodes that hold it whole, and a domain of its own when its subgroup asks for one,
	// which only planning gives. Sent through the plan made for the minimum, it would go
	// anywhere in the group's domain and could split its replica across the domains of
	// the tier its subgroup asks for.
	r := &Request{Pod: pod, PodGroup: pg, Units: pendingUnits(req, all, placed, !minMet), Placed: placed, Pool: pool}
	p, msg, err := m.plan(r, req, minMet)
	if err != nil {
		return out, err
	}
	if p != nil {
		if refusal := AllocateDevices(pool, p, all); refusal != "" {
			p, msg = nil, refusal
		}
	}
	if p != nil {
		p.Group = key
		if ttl > 0 {
			p.expires = now.Add(ttl)
		}
		m.mu.Lock()
		m.setPlanLocked(p)
		_, wasBlocked := m.blocked[key]
		delete(m.blocked, key)
		wasHead := m.head == key
		if wasHead {
			m.head = ""
		}
		hooks := m.onHead
		m.mu.Unlock()
		if wasHead {
			for _, f := range hooks {
				f(key, "")
			}
		}
		if wasBlocked || !minMet {
			plansMade.WithLabelValues("planned").Inc()
		}
		out.Plan, out.NewAttempt = p, len(placed) == 0
		return out, nil
	}
	plansMade.WithLabelValues("refused").Inc()
	out.Refusal = msg
	m.Drop(key)
	out.Reservation, out.Refusal = m.keepCapacity(pod, pg, req, all, placed, pool, now, msg)
	return out, nil
}

// plan plans the units: inside the group's domain when the chooser says it has one,
// anywhere otherwise. Without minMet the plan must complete the group's minimum.
func (m *Model) plan(r *Request, req *Requirement, minMet bool) (*Plan, string, error) {
	placedPods := make([]*corev1.Pod, 0, len(r.Placed))
	for _, p := range r.Placed {
		placedPods = append(placedPods, p.Pod)
	}
	stop := func(chosen []*corev1.Pod) bool { return !minMet && req.Check(chosen).OK }
	m.mu.Lock()
	chooser := m.chooser
	m.mu.Unlock()
	if chooser != nil {
		p, applies, msg, err := chooser.ChooseDomain(r)
		if err != nil {
			return nil, "", err
		}
		if applies {
			if p == nil {
				return nil, msg, nil
			}
			if p.Nodes == nil {
				anywhere, _, _ := PlaceAnywhere(r, stop)
				p.Nodes, p.requests = anywhere.Nodes, anywhere.requests
			}
			if v := req.Check(append(placedPods, plannedPods(r, p)...)); !minMet && !v.OK {
				_, miss, sim := PlaceAnywhere(r, stop)
				return nil, explain(req, r.Units, plannedUnits(r, p), miss, sim, len(placedPods)+len(p.Nodes), v.Reason), nil
			}
			return p, "", nil
		}
	}
	p, miss, sim := PlaceAnywhere(r, stop)
	if v := req.Check(append(placedPods, plannedPods(r, p)...)); !minMet && !v.OK {
		return nil, explain(req, r.Units, plannedUnits(r, p), miss, sim, len(placedPods)+len(p.Nodes), v.Reason), nil
	}
	return p, "", nil
}

// refreshDevices checks a planned pod's DRA devices against the cluster as it is now, just
// before the pod is sent to its node: what the allocator gives the pod's claims there now
// (devices freed since the plan was made come first in first fit) becomes the plan's
// choice, so the DynamicResources plugin allocates what the plan says. False when the
// claims no longer fit the node, or only on devices another group's plan keeps: the plan
// is stale.
func (m *Model) refreshDevices(pool *Pool, p *Plan, pod *corev1.Pod, node string) bool {
	m.mu.Lock()
	planned := p.devices[pod.UID]
	m.mu.Unlock()
	if len(planned) == 0 {
		return true
	}
	got, ok := pool.Simulate().fitDevices(pod, node)
	if !ok || got == nil {
		return false
	}
	if sameDevices(got.devices, planned) {
		return true
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.plans[p.Group] != p {
		return false
	}
	old := Resources{}
	for _, id := range planned {
		old[DeviceKey(id)] = 1
	}
	if byNode := m.keptByPlan[p.Group]; byNode != nil && byNode[node] != nil {
		addTo(byNode[node], old, -1)
		m.unkeepLocked(node, old)
	}
	req := p.requests[pod.UID]
	for k := range old {
		delete(req, k)
	}
	p.assignDevices(pod.UID, got.devices)
	fresh := Resources{}
	for _, id := range got.devices {
		fresh[DeviceKey(id)] = 1
	}
	if byNode := m.keptByPlan[p.Group]; byNode != nil {
		if byNode[node] == nil {
			byNode[node] = Resources{}
		}
		addTo(byNode[node], fresh, 1)
	}
	if m.kept[node] == nil {
		m.kept[node] = Resources{}
	}
	addTo(m.kept[node], fresh, 1)
	return true
}

func sameDevices(a, b []structured.DeviceID) bool {
	if len(a) != len(b) {
		return false
	}
	in := sets.New(b...)
	for _, id := range a {
		if !in.Has(id) {
			return false
		}
	}
	return true
}

// planPods are the pods of all that the plan gives a node.
func planPods(all []*corev1.Pod, p *Plan) []*corev1.Pod {
	var out []*corev1.Pod
	for _, pod := range all {
		if _, ok := p.Nodes[pod.UID]; ok {
			out = append(out, pod)
		}
	}
	return out
}

func plannedPods(r *Request, p *Plan) []*corev1.Pod {
	var pods []*corev1.Pod
	for i := range r.Units {
		pods = append(pods, r.Units[i].Pods...)
	}
	return planPods(pods, p)
}

func plannedUnits(r *Request, p *Plan) map[string]bool {
	out := map[string]bool{}
	for i := range r.Units {
		u := &r.Units[i]
		if _, ok := p.Nodes[u.Pods[0].UID]; ok {
			out[u.Key] = true
		}
	}
	return out
}

// pendingUnits are the group's units with pods to place: the ones its minimum needs while
// it is not placed, or all of them after. Required units come first, the largest first,
// which wastes the least capacity on fragments.
func pendingUnits(req *Requirement, all []*corev1.Pod, placed []PlacedPod, onlyRequired bool) []PendingUnit {
	placedOn := make(map[types.UID]string, len(placed))
	for _, p := range placed {
		placedOn[p.Pod.UID] = p.Node
	}
	var out []PendingUnit
	for _, u := range req.Units(all) {
		if onlyRequired && !u.Required {
			continue
		}
		pu := PendingUnit{Key: u.Key, Rule: u.Rule, Role: u.Role(), Required: u.Required}
		for _, p := range u.Pods {
			if n := placedOn[p.UID]; n != "" {
				pu.Along = append(pu.Along, n)
				continue
			}
			pu.Pods = append(pu.Pods, p)
			pu.Requests = append(pu.Requests, PodRequests(p))
		}
		if len(pu.Pods) > 0 {
			out = append(out, pu)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Required != out[j].Required {
			return out[i].Required
		}
		return weight(&out[i]) > weight(&out[j])
	})
	return out
}

// sweep drops plans whose pods did not come in time, at most once a second.
func (m *Model) sweep(now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.Sub(m.lastSweep) < time.Second {
		return
	}
	m.lastSweep = now
	for key, ex := range m.excluded {
		for node, until := range ex {
			if now.After(until) {
				delete(ex, node)
			}
		}
		if len(ex) == 0 {
			delete(m.excluded, key)
		}
	}
	for key, p := range m.plans {
		if !p.expires.IsZero() && now.After(p.expires) {
			m.dropPlanLocked(key)
		}
	}
	for key, b := range m.blocked {
		if now.Sub(b.last) > blockedGroupTTL {
			delete(m.blocked, key)
		}
	}
}

// keepCapacity records a refused group and, when it is the group capacity is owed to
// (highest priority, then oldest, blocked for reserveAfter, and able to fit on the nodes
// it may use once they are empty), plans the capacity kept for it: the nodes nearest to
// holding it now. Other groups then plan around that capacity; they backfill only what
// cannot delay it. It returns the reservation and the refusal message to show.
func (m *Model) keepCapacity(pod *corev1.Pod, pg *volcanov1beta1.PodGroup, req *Requirement, all []*corev1.Pod, placed []PlacedPod, pool *Pool, now time.Time, msg string) (*Plan, string) {
	key := GroupKey(pod)
	var prio int32
	if pod.Spec.Priority != nil {
		prio = *pod.Spec.Priority
	}
	m.mu.Lock()
	b := m.blocked[key]
	if b == nil {
		b = &blockedGroup{priority: prio, created: pg.CreationTimestamp.Time, since: now}
		m.blocked[key] = b
	}
	b.last, b.priority = now, prio
	after, head := m.reserveAfter, m.head
	eligible := after >= 0 && !b.never && now.Sub(b.since) >= after
	outranks := head == "" || head == key || m.blocked[head] == nil || b.before(m.blocked[head], key, head)
	existing := m.plans[key]
	m.mu.Unlock()

	if !eligible || !outranks {
		if head != "" && head != key {
			msg += fmt.Sprintf("; capacity is kept for %s, which has waited longest", head)
		}
		return nil, msg
	}
	if existing == nil || !existing.Reservation || !reservationStands(existing, pool) {
		var bound []PlacedPod
		for _, p := range placed {
			if p.Pod.Spec.NodeName != "" {
				bound = append(bound, p)
			}
		}
		around := NewPool(pool.src, pool.acc, func(node string) Resources { return m.keptForPlacing(node, key) })
		around.dra = pool.dra
		empty := around.emptied()
		r := &Request{Pod: pod, PodGroup: pg, Units: pendingUnits(req, all, bound, true), Placed: bound, Pool: empty, Reserving: true}
		p, _, err := m.plan(r, req, false)
		if err == nil && p != nil && AllocateDevices(empty, p, all) != "" {
			p = nil // its devices cannot be kept in the order they would be allocated
		}
		if err != nil || p == nil {
			m.mu.Lock()
			b.never = true
			m.mu.Unlock()
			return nil, msg + "; it does not fit even on empty nodes, so no capacity is kept for it"
		}
		p.Group, p.Reservation = key, true
		existing = p
	}
	m.mu.Lock()
	old := m.head
	if old != "" && old != key {
		if op := m.plans[old]; op != nil && op.Reservation {
			m.dropPlanLocked(old)
		}
	}
	m.head = key
	if m.plans[key] != existing {
		m.setPlanLocked(existing)
	}
	hooks := m.onHead
	nodes := len(m.keptByPlan[key])
	m.mu.Unlock()
	if old != key {
		reservationsMade.Inc()
		for _, f := range hooks {
			f(old, key)
		}
	}
	return existing, msg + fmt.Sprintf("; it has waited longest, so capacity on %d nodes is kept for it while other groups use only what cannot delay it", nodes)
}

// before orders blocked groups: higher priority, then older, then by name.
func (b *blockedGroup) before(o *blockedGroup, key, okey string) bool {
	if b.priority != o.priority {
		return b.priority > o.priority
	}
	if !b.created.Equal(o.created) {
		return b.created.Before(o.created)
	}
	return key < okey
}

// reservationStands: every node of the reservation still exists and takes its pods.
func reservationStands(p *Plan, pool *Pool) bool {
	for _, node := range p.Nodes {
		if pool.Node(node) == nil || pool.Free(node) == nil {
			return false
		}
	}
	return true
}
