package accelerator

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
)

// A device pod's raw score carries two keys in one int64 so that NormalizeScore, which sees
// every feasible node at once, can rank classes against each other: the class cost (in
// thousandths) above packingBits, and how well the node would be packed below.
const (
	packingBits = 20
	packingMax  = 1<<packingBits - 1
)

type scoreState struct {
	// res is nil for a pod that requests no accelerator: Score then prefers nodes
	// without accelerators and NormalizeScore leaves the scores alone.
	res   *AcceleratorResource
	count int64
}

func (s *scoreState) Clone() fwk.StateData { return s }

// PreScore decides how the pod is scored. A pod that requests no accelerator is not scored
// at all unless preferNodesWithoutAccelerators is on.
func (pl *Accelerator) PreScore(_ context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	var s scoreState
	if req, err := readRequirement(state); err == nil {
		s.res, s.count = req.res, req.count
	} else {
		// PreFilter skipped the pod (no accelerator, no annotations), or is not enabled.
		s.res, s.count = pl.acc.deviceRequest(pod)
	}
	if s.res == nil || s.count <= 0 {
		if !*pl.args.PreferNodesWithoutAccelerators || !pl.anyOffersAccelerator(nodes) {
			// Nothing to prefer when no candidate node has an accelerator: skipping saves
			// a Score call per node for every CPU-only pod of a CPU-only cluster.
			return fwk.NewStatus(fwk.Skip)
		}
		s.res, s.count = nil, 0
	}
	state.Write(preScoreStateKey, &s)
	return nil
}

func readScoreState(state fwk.CycleState) (*scoreState, *fwk.Status) {
	data, err := state.Read(preScoreStateKey)
	if err != nil {
		return nil, fwk.AsStatus(err)
	}
	s, ok := data.(*scoreState)
	if !ok {
		return nil, fwk.AsStatus(fmt.Errorf("%q has type %T", preScoreStateKey, data))
	}
	return s, nil
}

// Score returns, for a device pod, the node's class cost and packing packed into one raw
// value (see NormalizeScore); for any other pod, MaxScore on nodes without accelerators
// and 0 on the rest.
func (pl *Accelerator) Score(_ context.Context, state fwk.CycleState, _ *corev1.Pod, node fwk.NodeInfo) (int64, *fwk.Status) {
	s, status := readScoreState(state)
	if status != nil {
		return 0, status
	}
	if s.res == nil {
		if pl.offersAccelerator(node) {
			return fwk.MinScore, nil
		}
		return fwk.MaxScore, nil
	}
	// Best fit: the fewer devices the node has left after this pod, the better, so that
	// partly used nodes fill up before whole ones are broken into.
	free, _ := freeDevices(node, s.res.Name)
	left := min(max(free-s.count, 0), packingMax)
	return pl.classCost(node.Node(), s.res)<<packingBits | (packingMax - left), nil
}

// classCost is the cost of one device on the node in thousandths: its product's entry in
// classCosts, or the most expensive entry for a product that has none.
func (pl *Accelerator) classCost(node *corev1.Node, res *AcceleratorResource) int64 {
	if len(pl.costs) == 0 {
		return 0
	}
	if res.ProductLabel != "" {
		if c, ok := pl.costs[node.Labels[res.ProductLabel]]; ok {
			return c
		}
	}
	return pl.maxCost
}

// ScoreExtensions returns the plugin itself: scores need normalizing across nodes.
func (pl *Accelerator) ScoreExtensions() fwk.ScoreExtensions { return pl }

// NormalizeScore turns a device pod's raw scores into 0..100 so that cost dominates: the
// distinct class costs among the feasible nodes split the range into equal bands that do
// not overlap, the cheapest class on top, and within its band each node is placed by its
// packing relative to the other nodes of its class. So any node of a cheaper class ends
// above any node of a pricier one, however well the pricier node packs. With more classes
// than the 101 score values can separate, the most expensive ones share 0.
func (pl *Accelerator) NormalizeScore(_ context.Context, state fwk.CycleState, _ *corev1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	s, status := readScoreState(state)
	if status != nil {
		return status
	}
	if s.res == nil || len(scores) == 0 {
		return nil // already MinScore or MaxScore
	}
	classes := make([]int64, len(scores))
	for i := range scores {
		classes[i] = scores[i].Score >> packingBits
	}
	slices.Sort(classes)
	classes = slices.Compact(classes)

	lo := make([]int64, len(classes))
	hi := make([]int64, len(classes))
	for i := range lo {
		lo[i], hi[i] = packingMax, 0
	}
	index := make([]int, len(scores))
	for i := range scores {
		c, _ := slices.BinarySearch(classes, scores[i].Score>>packingBits)
		p := scores[i].Score & packingMax
		index[i] = c
		lo[c], hi[c] = min(lo[c], p), max(hi[c], p)
	}

	width := (fwk.MaxScore - fwk.MinScore + 1) / int64(len(classes))
	if width < 1 {
		width = 1
	}
	for i := range scores {
		c := index[i]
		top := fwk.MaxScore - int64(c)*width
		if top < fwk.MinScore {
			scores[i].Score = fwk.MinScore
			continue
		}
		p := scores[i].Score & packingMax
		if hi[c] == lo[c] {
			scores[i].Score = top
			continue
		}
		bottom := top - (width - 1)
		scores[i].Score = bottom + (p-lo[c])*(width-1)/(hi[c]-lo[c])
	}
	return nil
}

func (pl *Accelerator) anyOffersAccelerator(nodes []fwk.NodeInfo) bool {
	for _, n := range nodes {
		if pl.offersAccelerator(n) {
			return true
		}
	}
	return false
}
