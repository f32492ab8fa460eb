// Package capacity answers, off berth-scheduler's scheduling path, how many more whole
// ServingGroups of each ModelServing the cluster can place now, and publishes the answer on
// the ModelServing for the autoscaler (docs/autoscaling.md, "Placement-aware scale-up").
// The count uses the scheduler's own placement model (pkg/plugins/placement) over the
// scheduler's informer view, so the autoscaler never adds a replica the scheduler could not
// place, and the controller still never picks a node.
package capacity

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/plugins/placement"
	"github.com/berth-sh/berth/pkg/workload"
)

// DefaultLimit caps a count: the autoscaler rarely adds more groups than this in one step,
// and each further group costs a placement of all its pods.
const DefaultLimit = 8

// Cluster is what one round of counting sees: every node and every pod, from the
// scheduler's informers, and the profile's accelerator rules.
type Cluster struct {
	Nodes []*corev1.Node
	Pods  []*corev1.Pod
	Acc   placement.Accelerators
}

// Counter counts groups over one view of the cluster. The pods still pending are placed
// first, once, so every ModelServing's count sees the capacity they will take.
type Counter struct {
	pool  *placement.Pool
	base  *placement.Simulation
	nodes []string
}

// NewCounter builds the free capacity of c: each schedulable node's allocatable less what
// its bound pods request, then the pending pods placed where they fit.
//
// Pending pods are an approximation: each is placed alone where the simulation finds room
// (a pending gang that cannot fit whole uses nothing, since it waits rather than runs), not
// where the scheduler will put it; pods that fit nowhere take nothing.
func NewCounter(c Cluster) *Counter {
	used := map[string]placement.Resources{}
	var pending []*corev1.Pod
	for _, p := range c.Pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
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
	pool := placement.NewPool(placement.StaticSource(static...), c.Acc, nil)
	sim := pool.Simulate()
	nodes := pool.Nodes()
	for _, p := range pending {
		sim.PlaceUnit([]*corev1.Pod{p}, []placement.Resources{placement.PodRequests(p)}, nodes)
	}
	return &Counter{pool: pool, base: sim, nodes: nodes}
}

// Fits is how many more whole groups of ms's current template fit, at most limit. A group
// fits when every role replica of it (its entry and workers together, as the gang's
// subgroups place them) fits, after the groups counted before it; replicas above a gang
// policy's minimum count too, since the controller creates them all.
//
// Not counted: network topology and spread domains (a group is placed over every node
// eligible for its pods) and DRA claims; resources, node selectors and affinity, taints and
// the accelerator classes the profile configures are.
func (c *Counter) Fits(ms *workloadv1alpha1.ModelServing, limit int) int {
	units := groupUnits(ms)
	if len(units) == 0 {
		return 0
	}
	sim := c.base.Clone()
	n := 0
	for n < limit {
		try := sim.Clone()
		ok := true
		for _, u := range units {
			if _, placed := try.PlaceUnit(u.pods, u.reqs, c.nodes); !placed {
				ok = false
				break
			}
		}
		if !ok {
			break
		}
		sim = try
		n++
	}
	return n
}

type unit struct {
	pods []*corev1.Pod
	reqs []placement.Resources
}

// groupUnits are the role replicas of one would-be group of ms, built by the controller's
// own pod builder so the pods carry the template's requests, selectors, tolerations and
// accelerator annotations exactly as the pods it would create. The group index is past any
// real one; its pods are never created.
func groupUnits(ms *workloadv1alpha1.ModelServing) []unit {
	const index = 1 << 20
	var out []unit
	for ri := range ms.Spec.Template.Roles {
		r := &ms.Spec.Template.Roles[ri]
		replicas := 1
		if r.Replicas != nil {
			replicas = int(*r.Replicas)
		}
		for j := 0; j < replicas; j++ {
			var u unit
			for k := 0; k <= int(r.WorkerReplicas); k++ {
				p := workload.BuildPod(ms, "capacity", index, r, j, k)
				p.UID = types.UID(fmt.Sprintf("capacity/%s/%s/%s/%d/%d", ms.Namespace, ms.Name, r.Name, j, k))
				defaultRequests(p)
				u.pods = append(u.pods, p)
				u.reqs = append(u.reqs, placement.PodRequests(p))
			}
			out = append(out, u)
		}
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
