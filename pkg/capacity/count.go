// Package capacity answers, off berth-scheduler's scheduling path, how many more whole
// ServingGroups of each ModelServing the cluster can place now, and publishes the answer on
// the ModelServing for the autoscaler (docs/autoscaling.md, "Placement-aware scale-up").
// The count uses the scheduler's own placement model (pkg/plugins/placement) over the
// scheduler's informer view, so the autoscaler never adds a replica the scheduler could not
// place, and the controller still never picks a node.
package capacity

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/plugins/placement"
	"github.com/berth-sh/berth/pkg/workload"
)

// DefaultLimit caps a count: the autoscaler rarely adds more groups than this in one step,
// and each further group costs a placement of all its pods.
const DefaultLimit = 8

// Cluster is what one round of counting sees: every node and every pod, from the
// scheduler's informers, and the profile's placement model.
type Cluster struct {
	Nodes []*corev1.Node
	Pods  []*corev1.Pod
	// Model is the profile's placement model: its accelerator rules, its DRA view (a
	// group's ResourceClaims get devices as the DynamicResources plugin would allocate
	// them) and its domain choice (the topology plugin: a group with a network topology is
	// counted inside one domain of its tier). nil: Acc's rules, no claims planned, every
	// group anywhere it fits (unit tests).
	Model *placement.Model
	Acc   placement.Accelerators
}

// Counter counts groups over one view of the cluster. The pending pods are placed first,
// once, so every ModelServing's count sees the capacity they will take.
type Counter struct {
	base    *placement.Simulation
	chooser placement.DomainChooser
	// placed are the bound pods of each ServingGroup, by namespace/group name: a role
	// replica added to a group goes into the group's domain, around them.
	placed map[types.NamespacedName][]placement.PlacedPod
	// present are the role replicas (role-id labels) of each ServingGroup that have a pod,
	// placed or not.
	present map[types.NamespacedName]map[string]bool
	// alike are the counts made so far, by alikeKey: a hundred ModelServings of one
	// template are counted once (bench/scalebench's fill spent more of berth-scheduler's
	// CPU counting than scheduling).
	alike map[string]fitsCount
}

// NewCounter builds the free capacity of c: each schedulable node's allocatable less what
// its bound pods request, then the pending pods placed where they fit.
//
// Pending pods are an approximation: each is placed alone where the simulation finds room
// (a pending gang that cannot fit whole uses nothing, since it waits rather than runs), not
// where the scheduler will put it; pods that fit nowhere take nothing.
func NewCounter(c Cluster) *Counter {
	used := map[string]placement.Resources{}
	placed := map[types.NamespacedName][]placement.PlacedPod{}
	present := map[types.NamespacedName]map[string]bool{}
	var pending []*corev1.Pod
	for _, p := range c.Pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		var group types.NamespacedName // of a ServingGroup's pod that is not going
		if g := p.Labels[workloadv1alpha1.GroupNameLabel]; g != "" && p.DeletionTimestamp == nil {
			group = types.NamespacedName{Namespace: p.Namespace, Name: g}
			if present[group] == nil {
				present[group] = map[string]bool{}
			}
			present[group][p.Labels[workloadv1alpha1.RoleIDLabel]] = true
		}
		if p.Spec.NodeName == "" {
			if p.DeletionTimestamp == nil {
				pending = append(pending, p)
			}
			continue
		}
		u := used[p.Spec.NodeName]
		if u == nil {
			u = placement.Resources{}
			used[p.Spec.NodeName] = u
		}
		for k, v := range placement.PodRequests(p) {
			u[k] += v
		}
		if group.Name != "" {
			placed[group] = append(placed[group], placement.PlacedPod{Pod: p, Node: p.Spec.NodeName})
		}
	}
	var static []placement.StaticNode
	for _, n := range c.Nodes {
		sn := placement.StaticNode{Node: n}
		if !n.Spec.Unschedulable {
			alloc := placement.Resources{}
			for name, q := range n.Status.Allocatable {
				alloc[name] = placement.QuantityValue(name, q)
			}
			free := placement.Resources{}
			for k, v := range alloc {
				free[k] = v - used[n.Name][k]
			}
			sn.Free, sn.Allocatable = free, alloc
		}
		static = append(static, sn)
	}
	var pool *placement.Pool
	var chooser placement.DomainChooser
	if c.Model != nil {
		pool, chooser = c.Model.PoolOver(placement.StaticSource(static...)), c.Model.Chooser()
	} else {
		pool = placement.NewPool(placement.StaticSource(static...), c.Acc, nil)
	}
	sim := pool.Simulate()
	nodes := pool.Nodes()
	for _, p := range pending {
		sim.PlaceUnit([]*corev1.Pod{p}, []placement.Resources{placement.PodRequests(p)}, nodes)
	}
	return &Counter{base: sim, chooser: chooser, placed: placed, present: present}
}

// wouldBe is the first would-be group index: past any real one. Would-be groups and
// their pods are never created.
const wouldBe = 1 << 20

// Fits is how many more whole groups of ms's current template fit, at most limit. A group
// fits when every role replica of it (its entry and workers together, as the gang's
// subgroups place them) fits after the groups counted before it, inside one domain of the
// tier its network topology asks for (and each role replica inside one of its role
// policy's), as berth-scheduler would plan it; replicas above a gang policy's minimum
// count too, since the controller creates them all.
//
// Not counted: a spread constraint's skew between the would-be groups themselves (each is
// judged against the groups that exist).
func (c *Counter) Fits(ms *workloadv1alpha1.ModelServing, limit int) int {
	if len(ms.Spec.Template.Roles) == 0 {
		return 0
	}
	key, shared := alikeKey(ms)
	if shared {
		if f, ok := c.alike[key]; ok && (f.n < f.limit || limit <= f.limit) {
			return min(f.n, limit)
		}
	}
	n := c.fits(ms, limit)
	if shared {
		if c.alike == nil {
			c.alike = map[string]fitsCount{}
		}
		c.alike[key] = fitsCount{n: n, limit: limit}
	}
	return n
}

// fitsCount is a count Fits made, and the limit it was made under.
type fitsCount struct{ n, limit int }

// alikeKey says which ModelServings Fits counts alike: those of one namespace whose specs
// (but for replicas and images), labels and annotations (but for the counts' own) are the same build
// the same would-be groups, so one count is theirs. A ModelServing with topology spread
// constraints is judged against its own groups and is not shared (shared false).
func alikeKey(ms *workloadv1alpha1.ModelServing) (string, bool) {
	if len(ms.Spec.TopologySpreadConstraints) > 0 {
		return "", false
	}
	spec := *ms.Spec.DeepCopy()
	spec.Replicas = nil
	// Images do not place a pod (a rollout changes nothing the count reads).
	for i := range spec.Template.Roles {
		r := &spec.Template.Roles[i]
		for _, t := range []*workloadv1alpha1.PodTemplateSpec{&r.EntryTemplate, r.WorkerTemplate} {
			if t == nil {
				continue
			}
			for j := range t.Spec.Containers {
				t.Spec.Containers[j].Image = ""
			}
			for j := range t.Spec.InitContainers {
				t.Spec.InitContainers[j].Image = ""
			}
		}
	}
	annotations := make(map[string]string, len(ms.Annotations))
	for k, v := range ms.Annotations {
		switch k {
		case workloadv1alpha1.GroupsThatFitAnnotation, workloadv1alpha1.GroupsThatFitUntilAnnotation,
			workloadv1alpha1.GroupsThatFitReplicasAnnotation, workloadv1alpha1.RoleReplicasThatFitAnnotation:
			continue
		}
		annotations[k] = v
	}
	b, err := json.Marshal(struct {
		Namespace   string
		Spec        workloadv1alpha1.ModelServingSpec
		Labels      map[string]string
		Annotations map[string]string
	}{ms.Namespace, spec, ms.Labels, annotations})
	if err != nil {
		return "", false
	}
	return string(b), true
}

// fits is Fits without sharing.
func (c *Counter) fits(ms *workloadv1alpha1.ModelServing, limit int) int {
	sim := c.base
	n := 0
	for n < limit {
		index := wouldBe + n
		var pods []*corev1.Pod
		for ri := range ms.Spec.Template.Roles {
			r := &ms.Spec.Template.Roles[ri]
			for j := 0; j < roleReplicas(r); j++ {
				pods = append(pods, rolePods(ms, index, r, j)...)
			}
		}
		next, _, _, err := placement.PlanOn(sim, c.chooser, workload.BuildPodGroup(ms, index), pods, nil)
		if err != nil || next == nil {
			break
		}
		sim = next
		n++
	}
	return n
}

// RoleFits is how many more replicas of role (index ri in ms's roles) every group of ms
// whose pods are placed can take, at most limit: one step adds a replica of the role to
// each such group, inside the group's domain, around its placed pods. This is what a
// disaggregatedTarget's scale-up of the role needs (the controller adds the replica to
// every group). Groups with no placed pod are left out: Fits's groups that do not exist
// yet count their capacity.
func (c *Counter) RoleFits(ms *workloadv1alpha1.ModelServing, ri, limit int) int {
	return len(c.addRole(ms, ri, c.start(ms), limit))
}

// Alongside is, for k = 0 … RoleFits(ms, a), how many more replicas of role b every
// placed group can take once it has k more of role a (at most limit): the pairs of
// scale-ups that fit together, where each count alone would overcommit a shared pool.
func (c *Counter) Alongside(ms *workloadv1alpha1.ModelServing, a, b, limit int) []int {
	start := c.start(ms)
	out := []int{len(c.addRole(ms, b, start, limit))}
	for _, st := range c.addRole(ms, a, start, limit) {
		out = append(out, len(c.addRole(ms, b, st, limit)))
	}
	return out
}

// roleState is a count's simulation with the groups' pods placed so far.
type roleState struct {
	sim    *placement.Simulation
	groups []roleGroup
	full   bool // the role replicas the spec has but whose pods do not exist yet do not fit
}

type roleGroup struct {
	index  int
	pg     *volcanov1beta1.PodGroup // built once per group, for every planning of it
	placed []placement.PlacedPod
}

// start is the state before any role replica is added: ms's groups with placed pods, and
// in them the role replicas the spec has whose pods do not exist yet (a scale-up the
// controller has not acted on: their capacity is taken, as the count is made against the
// spec's replicas).
func (c *Counter) start(ms *workloadv1alpha1.ModelServing) roleState {
	st := roleState{sim: c.base}
	for i := 0; i < int(ptr.Deref(ms.Spec.Replicas, 1)); i++ {
		key := types.NamespacedName{Namespace: ms.Namespace, Name: workloadv1alpha1.ServingGroupName(ms.Name, i)}
		placed := c.placed[key]
		if len(placed) == 0 {
			continue
		}
		pg := workload.BuildPodGroup(ms, i)
		var missing []*corev1.Pod
		for ri := range ms.Spec.Template.Roles {
			r := &ms.Spec.Template.Roles[ri]
			for j := 0; j < roleReplicas(r); j++ {
				if !c.present[key][workloadv1alpha1.RoleReplicaName(r.Name, j)] {
					missing = append(missing, rolePods(ms, i, r, j)...)
				}
			}
		}
		if len(missing) > 0 {
			sim, went, _, err := placement.PlanOn(st.sim, c.chooser, pg, missing, placed)
			if err != nil || sim == nil {
				return roleState{full: true}
			}
			st.sim, placed = sim, append(placed[:len(placed):len(placed)], went...)
		}
		st.groups = append(st.groups, roleGroup{index: i, pg: pg, placed: placed})
	}
	return st
}

// addRole adds replicas of role ri to every group of st, one step at a time, at most
// limit steps; it returns the state after each step that fit. st holds no replica of ri
// added before (it is start's, or another role's step), so step n adds replica
// template's + n.
func (c *Counter) addRole(ms *workloadv1alpha1.ModelServing, ri int, st roleState, limit int) []roleState {
	if len(st.groups) == 0 || st.full {
		return nil
	}
	r := &ms.Spec.Template.Roles[ri]
	var out []roleState
	for n := 0; n < limit; n++ {
		next := roleState{sim: st.sim, groups: make([]roleGroup, len(st.groups))}
		for gi, g := range st.groups {
			pods := rolePods(ms, g.index, r, roleReplicas(r)+n)
			sim, went, _, err := placement.PlanOn(next.sim, c.chooser, g.pg, pods, g.placed)
			if err != nil || sim == nil {
				return out
			}
			next.sim = sim
			// The next step's replica goes around this one too.
			g.placed = append(g.placed[:len(g.placed):len(g.placed)], went...)
			next.groups[gi] = g
		}
		out = append(out, next)
		st = next
	}
	return out
}

// roleCounts are, for every role of ms, the replicas every placed group can take
// (RoleFits) and, for each role named after it, Alongside: one start and one series of
// steps per role, shared by the pairs.
func (c *Counter) roleCounts(ms *workloadv1alpha1.ModelServing, limit int) (fits []int, alongside []map[int][]int) {
	roles := ms.Spec.Template.Roles
	start := c.start(ms)
	steps := make([][]roleState, len(roles))
	fits = make([]int, len(roles))
	for ri := range roles {
		steps[ri] = c.addRole(ms, ri, start, limit)
		fits[ri] = len(steps[ri])
	}
	alongside = make([]map[int][]int, len(roles))
	for a := range roles {
		for b := range roles {
			if roles[b].Name <= roles[a].Name || fits[a] == 0 {
				continue
			}
			if alongside[a] == nil {
				alongside[a] = map[int][]int{}
			}
			along := []int{fits[b]}
			for _, st := range steps[a] {
				along = append(along, len(c.addRole(ms, b, st, limit)))
			}
			alongside[a][b] = along
		}
	}
	return fits, alongside
}

func roleReplicas(r *workloadv1alpha1.Role) int { return int(ptr.Deref(r.Replicas, 1)) }

// rolePods are the pods of role replica j of group index, built by the controller's own
// pod builder so they carry the template's requests, selectors, tolerations, claims and
// accelerator annotations exactly as the pods it would create.
func rolePods(ms *workloadv1alpha1.ModelServing, index int, r *workloadv1alpha1.Role, j int) []*corev1.Pod {
	var out []*corev1.Pod
	for k := 0; k <= int(r.WorkerReplicas); k++ {
		p := workload.BuildPod(ms, "capacity", index, r, j, k)
		p.UID = types.UID(fmt.Sprintf("capacity/%s/%s", ms.Namespace, p.Name))
		defaultRequests(p)
		out = append(out, p)
	}
	return out
}

// defaultRequests gives each container the requests the apiserver's defaulting would: a
// resource with a limit and no request requests its limit (a template asking for
// nvidia.com/gpu in limits only is the common case).
func defaultRequests(p *corev1.Pod) {
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			res := &cs[i].Resources
			for name, q := range res.Limits {
				if _, ok := res.Requests[name]; !ok {
					if res.Requests == nil {
						res.Requests = corev1.ResourceList{}
					}
					res.Requests[name] = q.DeepCopy()
				}
			}
		}
	}
}
