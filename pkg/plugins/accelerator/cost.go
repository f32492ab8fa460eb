package accelerator

import (
	corev1 "k8s.io/api/core/v1"
)

// The placement model plans whole groups before any pod of them is scored, so it must know
// what this plugin will prefer and refuse: the plugin hands itself, as the profile's
// placement.Accelerators, to the profile's model (see Factory). Match and Cost are the
// profile's rules; the package-level Match and DeviceRequest use the default resources.

// Match reports whether the node's accelerator labels satisfy the pod's annotations, with
// this profile's resources and label keys.
func (pl *Accelerator) Match(pod *corev1.Pod, node *corev1.Node) (bool, string) {
	return pl.acc.match(pod, node)
}

// Cost is the configured cost of one device on the node, in thousandths (its product's
// classCosts entry, or the most expensive entry for an unlisted product), and 0 for a node
// without accelerators or when no costs are configured.
func (pl *Accelerator) Cost(node *corev1.Node) int64 {
	if len(pl.costs) == 0 {
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
