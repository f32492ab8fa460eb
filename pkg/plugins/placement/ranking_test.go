package placement

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// A kept ranking must choose what a full scan of the nodes chooses, whatever the
// simulation did in between: random nodes (free GPUs, CPU, a node selector some pods
// have), pods of a few kinds over a few node lists (a whole pool, overlapping domains),
// placed, some given back, and units that do not fit rolled back. Every BestNode is
// checked against a scan of the same state.
func TestKeptRankingChoosesAsAFullScan(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	var nodes []StaticNode
	var all []string
	for i := range 200 {
		name := fmt.Sprintf("n%03d", i)
		labels := map[string]string{"zone": fmt.Sprint(rng.IntN(3))}
		gpus := int64(rng.IntN(9))
		nodes = append(nodes, StaticNode{Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}},
			Free:        Resources{gpu: gpus, corev1.ResourceCPU: int64(1000 * (1 + rng.IntN(32))), corev1.ResourcePods: 110},
			Allocatable: Resources{gpu: 8, corev1.ResourceCPU: 64000, corev1.ResourcePods: 110}})
		all = append(all, name)
	}
	lists := [][]string{all, all[:120], all[80:], all[50:150]}
	kind := func(k, serial int) (*corev1.Pod, Resources) {
		name := fmt.Sprintf("p%d-%d", k, serial)
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name),
			Labels: map[string]string{workloadv1alpha1.ModelServingNameLabel: "m", workloadv1alpha1.RoleLabel: fmt.Sprint("r", k)}}}
		if k%2 == 1 {
			p.Spec.NodeSelector = map[string]string{"zone": fmt.Sprint(k % 3)}
		}
		return p, Resources{gpu: int64(1 << (k % 3)), corev1.ResourceCPU: int64(500 * (1 + k%3))}
	}
	sim := NewPool(StaticSource(nodes...), nil, nil).Simulate()
	type placed struct {
		pod  *corev1.Pod
		node string
		req  Resources
	}
	var live []placed
	for step := range 3000 {
		switch op := rng.IntN(10); {
		case op < 6: // place one pod
			pod, req := kind(rng.IntN(4), step)
			list := lists[rng.IntN(len(lists))]
			want := fullScan(sim, pod, req, list)
			got := sim.BestNode(pod, req, list)
			if got != want {
				t.Fatalf("seed %d step %d: BestNode chose %q, a full scan %q", seed, step, got, want)
			}
			if got != "" {
				sim.take(got, req)
				live = append(live, placed{pod, got, req})
			}
		case op < 8 && len(live) > 0: // give one back
			i := rng.IntN(len(live))
			sim.give(live[i].node, live[i].req)
			live = append(live[:i], live[i+1:]...)
		default: // a unit of several pods of one kind, rolled back when it does not fit
			k, n := rng.IntN(4), 1+rng.IntN(6)
			var pods []*corev1.Pod
			var reqs []Resources
			for j := range n {
				p, r := kind(k, step*10+j)
				pods, reqs = append(pods, p), append(reqs, r)
			}
			list := lists[rng.IntN(len(lists))]
			if took, ok := sim.PlaceUnit(pods, reqs, list); ok {
				for j, node := range took {
					live = append(live, placed{pods[j], node, reqs[j]})
				}
			}
		}
	}
}

// fullScan is BestNode's choice ranking every node afresh.
func fullScan(s *Simulation, pod *corev1.Pod, req Resources, nodes []string) string {
	eligible := s.pool.eligibleFor(pod)
	best, bestLeft := "", Leftover{}
	for _, node := range nodes {
		if l, _, ok := s.leftover(pod, eligible, req, node); ok && (best == "" || l.Less(bestLeft)) {
			best, bestLeft = node, l
		}
	}
	return best
}
