package topology

import (
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/berth-sh/berth/pkg/fabric"
)

// The plugin builds its fabric from the listers when first asked and again after a
// HyperNode, or a node's labels, changed.

// watchFabric marks the fabric stale whenever a HyperNode changes or a node is added,
// removed or relabelled.
func (t *Topology) watchFabric(hyperNodes, nodes cache.SharedIndexInformer) error {
	dirty := func() { t.fabricMu.Lock(); t.fabricDirty = true; t.fabricMu.Unlock() }
	if _, err := hyperNodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { dirty() }, UpdateFunc: func(any, any) { dirty() }, DeleteFunc: func(any) { dirty() },
	}); err != nil {
		return err
	}
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
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
		return err
	}
	return nil
}

// currentFabric rebuilds the tiers after a HyperNode or node label change.
func (t *Topology) currentFabric() (*fabric.Fabric, error) {
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
	f, problems := fabric.Build(hns, nodes, t.args.NodeLabelTiers)
	for _, p := range problems {
		klog.Background().Info("HyperNode topology problem", "plugin", Name, "err", p)
	}
	t.fabric = f
	t.fabricDirty = false
	return t.fabric, nil
}
