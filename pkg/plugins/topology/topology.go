// Package topology is the berth-scheduler plugin that keeps a serving group inside one
// network domain.
//
// The network is a set of tiers of domains (switches), read from Volcano HyperNodes when
// any exist and otherwise from node labels listed in the plugin args. A group's PodGroup
// says how high its pods may spread (spec.networkTopology: hard or soft, highestTierAllowed
// or highestTierName); a subGroupPolicy entry may say the same for each subgroup. Before the
// first pod of a group is placed, the plugin chooses the domain for the whole group: the
// lowest tier with a domain that holds every pod of the group's minimum, best packed. The
// rest of the group stays inside it (hard) or is steered there (soft). A ModelServing's
// topologySpreadConstraints spread its groups, counting groups rather than pods.
package topology

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"
	volcanoinformers "volcano.sh/apis/pkg/client/informers/externalversions"
	topologylisters "volcano.sh/apis/pkg/client/listers/topology/v1alpha1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/plugins/placement"
	"github.com/berth-sh/berth/pkg/plugins/podgroups"
)

// Name is the plugin name used in the scheduler profile.
const Name = "BerthTopology"

const (
	stateKey          fwk.StateKey      = "PreFilter" + Name
	podsByServingIdx                    = "berth-topology-modelserving"
	hyperNodeResource fwk.EventResource = "hypernodes.v1alpha1.topology.volcano.sh"
)

var modelServingGVR = schema.GroupVersionResource{Group: workloadv1alpha1.SchemeGroupVersion.Group, Version: workloadv1alpha1.SchemeGroupVersion.Version, Resource: "modelservings"}

// Topology implements the plugin.
type Topology struct {
	handle     fwk.Handle
	args       *Args
	podGroups  *podgroups.Source
	hnLister   topologylisters.HyperNodeLister
	msLister   cache.GenericLister
	nodeLister corelisters.NodeLister
	pods       cache.Indexer
	model      *placement.Model

	fabricMu    sync.Mutex
	fabric      *Fabric
	fabricDirty bool

	mu     sync.Mutex
	groups map[string]*groupState
}

// groupState is the plugin's memory of one group between scheduling cycles; the group's
// plan itself lives in the placement model.
type groupState struct {
	announced string               // the domain the last DomainChosen event named
	avoid     map[string]time.Time // domain -> until when it is tried last
}

var (
	_ fwk.PreFilterPlugin   = &Topology{}
	_ fwk.PostFilterPlugin  = &Topology{}
	_ fwk.PreScorePlugin    = &Topology{}
	_ fwk.ScorePlugin       = &Topology{}
	_ fwk.ReservePlugin     = &Topology{}
	_ fwk.EnqueueExtensions = &Topology{}

	_ placement.DomainChooser = &Topology{}
)

// Factory returns the plugin factory for a scheduler whose profiles get their placement
// model from models: the plugin becomes the model's domain chooser.
func Factory(models *placement.Models) func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
	return func(ctx context.Context, obj runtime.Object, handle fwk.Handle) (fwk.Plugin, error) {
		m, err := models.For(handle)
		if err != nil {
			return nil, err
		}
		t, err := New(ctx, obj, handle, m)
		if err != nil {
			return nil, err
		}
		return t, nil
	}
}

// New builds the plugin with informers for PodGroups, HyperNodes and ModelServings, and
// makes it the placement model's domain chooser.
func New(ctx context.Context, obj runtime.Object, handle fwk.Handle, model *placement.Model) (*Topology, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, err
	}
	cfg := placement.JSONConfig(handle)
	vc, err := volcanoclient.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("topology: volcano client: %w", err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("topology: dynamic client: %w", err)
	}
	groups, err := model.Groups(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	vf := volcanoinformers.NewSharedInformerFactory(vc, 0)
	hnInformer := vf.Topology().V1alpha1().HyperNodes()
	df := dynamicinformer.NewDynamicSharedInformerFactory(dc, 0)
	msInformer := df.ForResource(modelServingGVR)

	podInformer := handle.SharedInformerFactory().Core().V1().Pods().Informer()
	if err := placement.EnsureGroupIndex(podInformer); err != nil {
		return nil, fmt.Errorf("topology: index pods by group: %w", err)
	}
	if err := podInformer.AddIndexers(cache.Indexers{podsByServingIdx: indexByModelServing}); err != nil {
		return nil, fmt.Errorf("topology: index pods by ModelServing: %w", err)
	}
	nodeInformer := handle.SharedInformerFactory().Core().V1().Nodes()

	t := &Topology{
		handle:      handle,
		args:        args,
		podGroups:   groups,
		hnLister:    hnInformer.Lister(),
		msLister:    msInformer.Lister(),
		nodeLister:  nodeInformer.Lister(),
		pods:        podInformer.GetIndexer(),
		model:       model,
		fabricDirty: true,
		groups:      map[string]*groupState{},
	}
	dirty := func() { t.fabricMu.Lock(); t.fabricDirty = true; t.fabricMu.Unlock() }
	if _, err := hnInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { dirty() }, UpdateFunc: func(any, any) { dirty() }, DeleteFunc: func(any) { dirty() },
	}); err != nil {
		return nil, err
	}
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { dirty() },
		DeleteFunc: func(any) { dirty() },
		UpdateFunc: func(o, n any) {
			on, ok1 := o.(*corev1.Node)
			nn, ok2 := n.(*corev1.Node)
			if !ok1 || !ok2 || !maps.Equal(on.Labels, nn.Labels) {
				dirty()
			}
		},
	}); err != nil {
		return nil, err
	}
	// A group's memory goes once no pod of it is left.
	if _, err := podInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				t.forget(p)
			}
		},
	}); err != nil {
		return nil, err
	}

	vf.Start(ctx.Done())
	df.Start(ctx.Done())
	for typ, ok := range vf.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("topology: %v informer did not sync", typ)
		}
	}
	for typ, ok := range df.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("topology: %v informer did not sync", typ)
		}
	}
	model.SetDomainChooser(t)
	return t, nil
}

// Name returns the plugin name.
func (t *Topology) Name() string { return Name }

func indexByModelServing(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	if ms := pod.Labels[workloadv1alpha1.ModelServingNameLabel]; ms != "" {
		return []string{pod.Namespace + "/" + ms}, nil
	}
	return nil, nil
}

// currentFabric rebuilds the tiers after a HyperNode or node label change.
func (t *Topology) currentFabric() (*Fabric, error) {
	t.fabricMu.Lock()
	defer t.fabricMu.Unlock()
	if !t.fabricDirty && t.fabric != nil {
		return t.fabric, nil
	}
	nodes, err := t.nodeLister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	hns, err := t.hnLister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	if len(hns) > 0 {
		f, problems := FabricFromHyperNodes(hns, nodes)
		for _, p := range problems {
			klog.Background().Info("HyperNode topology problem", "plugin", Name, "err", p)
		}
		t.fabric = f
	} else {
		t.fabric = FabricFromLabels(t.args.NodeLabelTiers, nodes)
	}
	t.fabricDirty = false
	return t.fabric, nil
}

// cycleState carries the pod's target from PreFilter to Score.
type cycleState struct {
	fabric *Fabric
	target *placement.Target
	anchor string // a node of the target, to find the target's domains at higher tiers
	key    string // the group
}

// Clone returns the state itself: it is never modified after PreFilter.
func (c *cycleState) Clone() fwk.StateData { return c }

func readCycleState(state fwk.CycleState) (*cycleState, error) {
	data, err := state.Read(stateKey)
	if err != nil {
		return nil, fmt.Errorf("reading %q from cycle state: %w", stateKey, err)
	}
	s, ok := data.(*cycleState)
	if !ok {
		return nil, fmt.Errorf("%q has type %T", stateKey, data)
	}
	return s, nil
}

// groupRule is what a group asks for: its network constraint, its subgroups' constraints
// and its ModelServing's spread rules.
type groupRule struct {
	group  *constraint
	subs   map[int]*constraint // by subGroupPolicy index
	spread []spreadRule
}

func (r *groupRule) empty() bool { return r.group == nil && len(r.subs) == 0 && len(r.spread) == 0 }

// resolve turns a NetworkTopologySpec into a constraint on the fabric's tiers.
func resolve(nt *volcanov1beta1.NetworkTopologySpec, f *Fabric, field string) (*constraint, error) {
	if nt == nil {
		return nil, nil
	}
	c := &constraint{hard: nt.Mode != volcanov1beta1.SoftNetworkTopologyMode, limit: 1}
	switch {
	case nt.HighestTierName != "":
		tier, ok := f.TierNames[nt.HighestTierName]
		if !ok {
			tier, ok = f.TierKeys[nt.HighestTierName]
		}
		if !ok {
			if !c.hard {
				return &constraint{}, nil // soft: nothing to honour
			}
			return nil, fmt.Errorf("%s.highestTierName %q is not a tier of the network (%s)", field, nt.HighestTierName, describeTiers(f))
		}
		c.limit = tier
	case nt.HighestTierAllowed != nil:
		c.limit = *nt.HighestTierAllowed
	}
	if c.hard && len(f.Tiers) == 0 {
		return nil, fmt.Errorf("%s asks for a hard network topology, but no network tiers are known: create HyperNodes or set the plugin's nodeLabelTiers", field)
	}
	return c, nil
}

func describeTiers(f *Fabric) string {
	if len(f.Tiers) == 0 {
		return "no tiers known"
	}
	out := f.Source + ":"
	for i, tier := range f.Tiers {
		if i > 0 {
			out += ","
		}
		out += fmt.Sprintf(" %d=%s", tier, f.TierName(tier))
	}
	return out
}

// rules reads the group's constraints from its PodGroup and ModelServing.
func (t *Topology) rules(pod *corev1.Pod, pg *volcanov1beta1.PodGroup, f *Fabric) (*groupRule, error) {
	r := &groupRule{subs: map[int]*constraint{}}
	var err error
	if r.group, err = resolve(pg.Spec.NetworkTopology, f, "PodGroup spec.networkTopology"); err != nil {
		return nil, err
	}
	for i := range pg.Spec.SubGroupPolicy {
		c, err := resolve(pg.Spec.SubGroupPolicy[i].NetworkTopology, f, fmt.Sprintf("PodGroup spec.subGroupPolicy[%d].networkTopology", i))
		if err != nil {
			return nil, err
		}
		if c != nil {
			r.subs[i] = c
		}
	}
	if msName := pod.Labels[workloadv1alpha1.ModelServingNameLabel]; msName != "" && pod.Labels[workloadv1alpha1.GroupNameLabel] != "" {
		obj, err := t.msLister.ByNamespace(pod.Namespace).Get(msName)
		if u, ok := obj.(*unstructured.Unstructured); err == nil && ok {
			// Only the spread constraints are read: converting a whole ModelServing (two
			// PodSpecs per role) for every pod would cost more than the rest of PreFilter.
			raw, found, _ := unstructured.NestedSlice(u.Object, "spec", "topologySpreadConstraints")
			if found && len(raw) > 0 {
				ms := &workloadv1alpha1.ModelServing{}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(map[string]any{"spec": map[string]any{"topologySpreadConstraints": raw}}, ms); err != nil {
					return nil, fmt.Errorf("ModelServing %s spec.topologySpreadConstraints: %w", msName, err)
				}
				ms.Name, ms.Namespace = u.GetName(), u.GetNamespace()
				if r.spread, err = spreadRules(ms); err != nil {
					return nil, err
				}
			}
		}
	}
	return r, nil
}

// asksForNothing is the cheap exit for gangs without a network topology that are not
// ModelServing groups (which may have spread constraints).
func asksForNothing(pod *corev1.Pod, pg *volcanov1beta1.PodGroup) bool {
	return pg.Spec.NetworkTopology == nil && !hasSubTopology(pg) && pod.Labels[workloadv1alpha1.GroupNameLabel] == ""
}

// PreFilter confines the pod to its group's domain, which the placement model chose for
// the whole group (through ChooseDomain) when it planned the group.
func (t *Topology) PreFilter(_ context.Context, state fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	key := placement.GroupKey(pod)
	if key == "" {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	pg, err := t.podGroups.Get(pod)
	if err != nil || asksForNothing(pod, pg) {
		return nil, fwk.NewStatus(fwk.Skip) // the gang plugin explains a missing PodGroup
	}
	req, err := placement.NewRequirement(pg)
	if err != nil {
		return nil, fwk.NewStatus(fwk.UnschedulableAndUnresolvable, err.Error())
	}
	// The gang plugin planned the group earlier in this cycle; this returns that plan, and
	// plans only when the profile has no gang plugin.
	out, err := t.model.PlanFor(pod, pg, req, defaultPlanTTL)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	if out.Plan == nil {
		return nil, fwk.NewStatus(fwk.Unschedulable, fmt.Sprintf("gang %s: %s", key, out.Refusal))
	}
	tgt := out.Plan.Domain
	if len(out.Plan.Sub) > 0 {
		// The pod's subgroup is found by unit key, so a pod recreated after the plan was
		// made still joins its subgroup's domain.
		for _, u := range req.Units(t.model.GroupPods(key)) {
			if s := out.Plan.Sub[u.Key]; s != nil && containsPod(u.Pods, pod) {
				tgt = s
			}
		}
	}
	if tgt == nil {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	f, err := t.currentFabric()
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	cs := &cycleState{fabric: f, target: tgt, key: key}
	if len(tgt.List) > 0 {
		cs.anchor = tgt.List[0]
	}
	state.Write(stateKey, cs)
	// Hard constraints confine the pod to its target. Soft ones steer it there the same way
	// while the plan says the group fits: kube-scheduler scores only a sample of the nodes
	// in a large cluster, and a preference the sample misses is no preference. If the pod
	// still fails there, PostFilter gives the domain up and the next attempt looks elsewhere.
	return &fwk.PreFilterResult{NodeNames: tgt.Nodes.Clone()}, nil
}

// defaultPlanTTL bounds a plan the topology plugin makes itself (without the gang plugin).
const defaultPlanTTL = time.Minute

// PostFilter runs when the pod fit no node it was allowed: the group's next attempt tries
// another domain first (and, in soft mode, anywhere once no domain is left).
func (t *Topology) PostFilter(_ context.Context, state fwk.CycleState, _ *corev1.Pod, _ fwk.NodeToStatusReader) (*fwk.PostFilterResult, *fwk.Status) {
	cs, err := readCycleState(state)
	if err != nil {
		return nil, fwk.NewStatus(fwk.Unschedulable)
	}
	t.mu.Lock()
	if cs.target.Tier > 0 && t.args.retryOtherDomain() > 0 {
		t.stateLocked(cs.key).avoid[cs.target.Name] = time.Now().Add(t.args.retryOtherDomain())
	}
	t.mu.Unlock()
	t.model.Drop(cs.key)
	return nil, fwk.NewStatus(fwk.Unschedulable)
}

func hasSubTopology(pg *volcanov1beta1.PodGroup) bool {
	for _, sg := range pg.Spec.SubGroupPolicy {
		if sg.NetworkTopology != nil {
			return true
		}
	}
	return false
}

func containsPod(pods []*corev1.Pod, pod *corev1.Pod) bool {
	for _, p := range pods {
		if p.UID == pod.UID {
			return true
		}
	}
	return false
}

// ChooseDomain is the placement model's domain choice: the network domain (and spread
// domain) that holds the group's units, with each pod's node in it.
func (t *Topology) ChooseDomain(r *placement.Request) (*placement.Plan, bool, string, error) {
	pod, pg := r.Pod, r.PodGroup
	if asksForNothing(pod, pg) {
		return nil, false, "", nil
	}
	f, err := t.currentFabric()
	if err != nil {
		return nil, true, "", err
	}
	rule, err := t.rules(pod, pg, f)
	if err != nil {
		if !r.Reserving {
			groupsRefused.WithLabelValues("invalid").Inc()
		}
		return nil, true, err.Error(), nil
	}
	if rule.empty() {
		return nil, false, "", nil
	}
	key := placement.GroupKey(pod)
	placedNodes := make([]string, 0, len(r.Placed))
	for _, p := range r.Placed {
		placedNodes = append(placedNodes, p.Node)
	}
	avoid := sets.New[string]()
	now := time.Now()
	t.mu.Lock()
	st := t.stateLocked(key)
	for d, until := range st.avoid {
		if now.Before(until) {
			avoid.Insert(d)
		} else {
			delete(st.avoid, d)
		}
	}
	t.mu.Unlock()

	c := &choice{fabric: f, avoid: avoid, placed: placedNodes, pool: r.Pool}
	if rule.group != nil {
		c.group = *rule.group
	}
	for _, u := range r.Units {
		tp := unitToPlace{key: u.Key, pods: u.Pods, reqs: u.Requests, along: u.Along}
		if u.Rule >= 0 {
			tp.sub = rule.subs[u.Rule]
		}
		c.units = append(c.units, tp)
	}
	if len(rule.spread) > 0 {
		nodes, err := t.nodeLister.List(labels.Everything())
		if err != nil {
			return nil, true, "", err
		}
		zones, counts := spreadZones(rule.spread, pod.Labels[workloadv1alpha1.GroupNameLabel], nodes, t.servingPlaced(pod))
		hardSpread := false
		for _, s := range rule.spread {
			hardSpread = hardSpread || s.hard
		}
		if !hardSpread {
			zones = append(zones, nil) // ScheduleAnyway: anywhere, as a last resort
		}
		if len(zones) == 0 {
			if !r.Reserving {
				groupsRefused.WithLabelValues("spread").Inc()
			}
			return nil, true, fmt.Sprintf("no %s domain may take another group within maxSkew %d (groups per domain: %s)",
				rule.spread[0].key, rule.spread[0].maxSkew, describeCounts(counts)), nil
		}
		c.zones = zones
	}
	p, msg := chooseDomain(c)
	if r.Reserving {
		return p, true, msg, nil
	}
	if p == nil {
		groupsRefused.WithLabelValues("no_domain").Inc()
		return nil, true, msg, nil
	}
	where := "anywhere"
	if p.Domain != nil {
		where = p.Domain.Name
	}
	t.mu.Lock()
	st = t.stateLocked(key)
	announce := len(r.Placed) == 0 && st.announced != where
	if announce {
		st.announced = where
	}
	t.mu.Unlock()
	if announce {
		// One event per new choice, not per retry: a decision the user can see on the PodGroup.
		tierName, note := "anywhere", "no domain can hold the group; it goes wherever it fits"
		if p.Domain != nil {
			tierName = f.TierName(p.Domain.Tier)
			if p.Domain.Tier == 0 {
				tierName = "spread domain"
			}
			note = fmt.Sprintf("%s %s holds the group's %d pods", tierName, p.Domain.Name, countPods(c.units))
		}
		domainsChosen.WithLabelValues(tierName).Inc()
		t.handle.EventRecorder().Eventf(podGroupRef(pg), nil, corev1.EventTypeNormal, "DomainChosen", "Scheduling", note)
		klog.Background().V(4).Info("Chose a domain for the group", "plugin", Name, "group", key, "domain", where)
	}
	return p, true, "", nil
}

func podGroupRef(pg *volcanov1beta1.PodGroup) *corev1.ObjectReference { return podgroups.ObjectRef(pg) }

// servingPlaced returns every bound or held pod of the pod's ModelServing.
func (t *Topology) servingPlaced(pod *corev1.Pod) []placement.PlacedPod {
	ms := pod.Labels[workloadv1alpha1.ModelServingNameLabel]
	objs, _ := t.pods.ByIndex(podsByServingIdx, pod.Namespace+"/"+ms)
	var out []placement.PlacedPod
	seen := sets.New[types.UID]()
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
			out = append(out, placement.PlacedPod{Pod: p, Node: p.Spec.NodeName})
			seen.Insert(p.UID)
		}
	}
	for _, h := range t.model.Held("") {
		if !seen.Has(h.Pod.UID) && h.Pod.Namespace == pod.Namespace && h.Pod.Labels[workloadv1alpha1.ModelServingNameLabel] == ms {
			out = append(out, h)
		}
	}
	return out
}

func (t *Topology) stateLocked(key string) *groupState {
	st := t.groups[key]
	if st == nil {
		st = &groupState{avoid: map[string]time.Time{}}
		t.groups[key] = st
	}
	return st
}

// PreFilterExtensions is not needed: the plugin keeps no per-node state in a cycle.
func (t *Topology) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// PreScore skips scoring for pods the plugin has nothing to say about.
func (t *Topology) PreScore(_ context.Context, state fwk.CycleState, _ *corev1.Pod, _ []fwk.NodeInfo) *fwk.Status {
	if _, err := readCycleState(state); err != nil {
		return fwk.NewStatus(fwk.Skip)
	}
	return nil
}

// Score is 100 inside the pod's target domain and falls with every tier a node is further
// away, so soft-mode pods land as close as the free capacity allows.
func (t *Topology) Score(_ context.Context, state fwk.CycleState, _ *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	cs, err := readCycleState(state)
	if err != nil {
		return 0, fwk.AsStatus(err)
	}
	node := ni.Node().Name
	tgt := cs.target
	if tgt.Nodes.Has(node) {
		return fwk.MaxNodeScore, nil
	}
	if tgt.Tier == 0 {
		return 0, nil
	}
	top := cs.fabric.Top()
	for _, tier := range cs.fabric.Tiers {
		if tier <= tgt.Tier {
			continue
		}
		if d := cs.fabric.DomainOf(cs.anchor, tier); d != nil && d == cs.fabric.DomainOf(node, tier) {
			return fwk.MaxNodeScore * int64(top+1-tier) / int64(top+1-tgt.Tier+1), nil
		}
	}
	return 0, nil
}

// ScoreExtensions is not needed: scores are already in range.
func (t *Topology) ScoreExtensions() fwk.ScoreExtensions { return nil }

// Reserve tells the placement model where the group's pod went (idempotent with the gang
// plugin, so a profile without it still counts held pods).
func (t *Topology) Reserve(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, nodeName string) *fwk.Status {
	if placement.GroupKey(pod) != "" {
		t.model.Reserve(pod, nodeName)
	}
	return nil
}

// Unreserve forgets the pod. When the group's whole attempt is given back, the domain it
// was meant for goes to the back of the line for a while, so the next attempt tries another.
func (t *Topology) Unreserve(_ context.Context, _ fwk.CycleState, pod *corev1.Pod, _ string) {
	key := placement.GroupKey(pod)
	if key == "" {
		return
	}
	t.model.Unreserve(pod)
	if len(t.model.Held(key)) > 0 {
		return
	}
	for _, q := range t.model.GroupPods(key) {
		if q.Spec.NodeName != "" {
			return
		}
	}
	p := t.model.Plan(key)
	if p != nil && !p.Reservation && p.Domain != nil && p.Domain.Tier > 0 && t.args.retryOtherDomain() > 0 {
		t.mu.Lock()
		t.stateLocked(key).avoid[p.Domain.Name] = time.Now().Add(t.args.retryOtherDomain())
		t.mu.Unlock()
	}
	t.model.Drop(key)
}

// forget drops the group's state once no pod of it is left.
func (t *Topology) forget(pod *corev1.Pod) {
	key := placement.GroupKey(pod)
	if key == "" || len(t.model.GroupPods(key)) > 0 {
		return
	}
	t.mu.Lock()
	delete(t.groups, key)
	t.mu.Unlock()
}

// EventsToRegister: a group refused for want of room in a domain can fit after capacity is
// freed or added, or after the network description changes.
func (t *Topology) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}},
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAllocatable | fwk.UpdateNodeLabel | fwk.UpdateNodeTaint}},
		{Event: fwk.ClusterEvent{Resource: hyperNodeResource, ActionType: fwk.All}},
	}, nil
}
