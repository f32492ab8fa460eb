package accelerator

import (
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
)

// The topology plugin chooses a whole group's domain before any pod of it is scored, so it
// must know what this plugin will prefer: the profile's class costs are shared with it.
// One process runs one berth-scheduler profile; the plugin built last wins.
var shared atomic.Pointer[Accelerator]

// ClassCost is the configured cost of one device on the node, in thousandths (its
// product's classCosts entry, or the most expensive entry for an unlisted product), and 0
// for a node without accelerators or when no costs are configured.
func ClassCost(node *corev1.Node) int64 {
	pl := shared.Load()
	if pl == nil || len(pl.costs) == 0 {
		return 0
	}
	for i := range pl.args.Resources {
		res := &pl.args.Resources[i]
		if q, ok := node.Status.Allocatable[res.Name]; ok && !q.IsZero() {
			return pl.classCost(node, res)
		}
	}
	return 0
}
