// Package topology is the berth-scheduler plugin that keeps a serving group inside one
// network domain.
//
// The network is a set of tiers of domains (switches), read from Volcano HyperNodes when
// any exist and otherwise from node labels listed in the plugin args. A group's PodGroup
// says how high its pods may spread (spec.networkTopology: hard or soft, highestTierAllowed
// or highestTierName); a subGroupPolicy entry may say the same for each subgroup, the way
// Kthena's rolePolicy reaches it: every role replica inside one domain of its tier, all of
// them inside the group's domain. Before the first pod of a group is placed, the plugin
// chooses the domain for the whole group: the lowest tier with a domain that holds every
// pod of the group's minimum, best packed, with a domain for each such subgroup inside it.
// The rest of the group stays inside it (hard) or is steered there (soft). A
// ModelServing's topologySpreadConstraints spread its groups, counting groups rather than
// pods.
package topology

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	fwk "k8s.io/kube-scheduler/framework"
	volcanoclient "volcano.sh/apis/pkg/client/clientset/versioned"
	volcanoinformers "volcano.sh/apis/pkg/client/informers/externalversions"
	topologylisters "volcano.sh/apis/pkg/client/listers/topology/v1alpha1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/fabric"
	"github.com/berth-sh/berth/pkg/plugins/placement"
	"github.com/berth-sh/berth/pkg/plugins/podgroups"
)

// Name is the plugin name used in the scheduler profile.
const Name = "BerthTopology"

const (
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

	// The network's tiers, rebuilt when a HyperNode or a node's labels change (fabric.go).
	fabricMu    sync.Mutex
	fabric      *fabric.Fabric
	fabricDirty bool

	mu     sync.Mutex
	groups map[string]*groupState // by group key
}

// groupState is the plugin's memory of one group between scheduling cycles; the group's
// plan itself lives in the placement model.
type groupState struct {
	announced string               // the domain the last DomainChosen event named
	avoid     map[string]time.Time // domain -> until when it is tried last
}

var (
	_ fwk.PreFilterPlugin   = &Topology{}
	_ fwk.FilterPlugin      = &Topology{}
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
	if err := t.watchFabric(hnInformer.Informer(), nodeInformer.Informer()); err != nil {
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

func (t *Topology) stateLocked(key string) *groupState {
	st := t.groups[key]
	if st == nil {
		st = &groupState{avoid: map[string]time.Time{}}
		t.groups[key] = st
	}
	return st
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
