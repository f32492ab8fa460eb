package view

import (
	"context"
	"maps"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	topologyv1alpha1 "volcano.sh/apis/pkg/apis/topology/v1alpha1"

	"github.com/berth-sh/berth/pkg/fabric"
)

// fabricSource is set by EnableFabric: the view then reads Nodes (their labels only) and,
// where served, Volcano HyperNodes, and every Server carries the fabric they describe, so
// the router can pair a prefill endpoint with a decode endpoint near it.
type fabricSource struct {
	tiers      []fabric.LabelTier
	hyperNodes bool
	// dirty is set by node and HyperNode events; the next rebuild reads the fabric again
	// (pod events, by far the most frequent, reuse it).
	dirty   atomic.Bool
	current *fabric.Fabric // used by the Run goroutine only
}

// EnableFabric makes the view read the network fabric as berth-scheduler does: from the
// HyperNodes when there is any (hyperNodes says the apiserver serves them), else from the
// node labels of tiers. Call before Run.
func (v *View) EnableFabric(tiers []fabric.LabelTier, hyperNodes bool) {
	v.fabric = &fabricSource{tiers: tiers, hyperNodes: hyperNodes}
	v.fabric.dirty.Store(true)
}

// watchFabric adds the Node (and HyperNode) informers. A node's status changes often and
// says nothing of where it sits: only a node added, removed or relabelled counts.
func (v *View) watchFabric(ctx context.Context) error {
	changed := func() { v.fabric.dirty.Store(true); v.markStale() }
	inf, err := v.cache.GetInformer(ctx, &corev1.Node{})
	if err != nil {
		return err
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { changed() },
		DeleteFunc: func(any) { changed() },
		UpdateFunc: func(o, n any) {
			on, ok1 := o.(*corev1.Node)
			nn, ok2 := n.(*corev1.Node)
			if !ok1 || !ok2 || !maps.Equal(on.Labels, nn.Labels) {
				changed()
			}
		},
	}); err != nil {
		return err
	}
	if !v.fabric.hyperNodes {
		return nil
	}
	hinf, err := v.cache.GetInformer(ctx, &topologyv1alpha1.HyperNode{})
	if err != nil {
		return err
	}
	_, err = hinf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { changed() }, UpdateFunc: func(any, any) { changed() }, DeleteFunc: func(any) { changed() },
	})
	return err
}

// currentFabric is the fabric, read again after a node or HyperNode event.
func (v *View) currentFabric(ctx context.Context) (*fabric.Fabric, error) {
	src := v.fabric
	if !src.dirty.Swap(false) && src.current != nil {
		return src.current, nil
	}
	var nodes corev1.NodeList
	if err := v.cache.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		src.dirty.Store(true)
		return nil, err
	}
	nptrs := make([]*corev1.Node, len(nodes.Items))
	for i := range nodes.Items {
		nptrs[i] = &nodes.Items[i]
	}
	var hptrs []*topologyv1alpha1.HyperNode
	if src.hyperNodes {
		var hns topologyv1alpha1.HyperNodeList
		if err := v.cache.List(ctx, &hns, client.UnsafeDisableDeepCopy); err != nil {
			src.dirty.Store(true)
			return nil, err
		}
		for i := range hns.Items {
			hptrs = append(hptrs, &hns.Items[i])
		}
	}
	f, problems := fabric.Build(hptrs, nptrs, src.tiers)
	for _, p := range problems {
		v.log.Info("HyperNode topology problem", "err", p.Error())
	}
	src.current = f
	return f, nil
}

// slimNode keeps of a Node what the fabric needs: its name and labels.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{TypeMeta: n.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels,
	}}, nil
}
