// Package accelerator is the berth-scheduler plugin for GPU and NPU placement.
//
// It filters nodes by the accelerator a pod requests (an extended resource such as
// nvidia.com/gpu) and by what the pod states in annotations about the device (product,
// family, minimum memory per device, read from the vendors' node labels), and it scores
// feasible nodes so that the cheapest accelerator class that satisfies the pod wins, and,
// within a class, the node left with the fewest free devices: whole nodes stay free for
// the large tensor-parallel pods that need them.
//
// The plugin hands its rules (Match, Cost) to the profile's placement model, which plans
// whole groups before any of their pods is filtered or scored.
package accelerator

import (
	"context"
	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/berth-sh/berth/pkg/plugins/placement"
)

// Name is the plugin name used in the scheduler profile.
const Name = "BerthAccelerator"

// Accelerator implements the plugin. It keeps no state between cycles: everything it
// decides comes from the pod, the node and its args.
type Accelerator struct {
	args *Args
	acc  *accelerators
	// costs holds classCosts in thousandths; maxCost is the largest, what an unlisted
	// product costs.
	costs   map[string]int64
	maxCost int64
}

var (
	_ fwk.PreFilterPlugin   = &Accelerator{}
	_ fwk.FilterPlugin      = &Accelerator{}
	_ fwk.PreScorePlugin    = &Accelerator{}
	_ fwk.ScorePlugin       = &Accelerator{}
	_ fwk.ScoreExtensions   = &Accelerator{}
	_ fwk.EnqueueExtensions = &Accelerator{}
	_ fwk.SignPlugin        = &Accelerator{}

	_ placement.Accelerators = &Accelerator{}
)

// New builds the plugin from its args. It needs nothing from the handle: no informers, no
// API calls, so Filter and Score stay pure functions of the cycle's snapshot.
func New(_ context.Context, obj runtime.Object, _ fwk.Handle) (fwk.Plugin, error) {
	args, err := decodeArgs(obj)
	if err != nil {
		return nil, err
	}
	return newAccelerator(args), nil
}

// Factory returns the plugin factory for a scheduler whose profiles get their placement
// model from models: the plugin's rules become the profile model's accelerators.
func Factory(models *placement.Models) func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
	return func(ctx context.Context, obj runtime.Object, handle fwk.Handle) (fwk.Plugin, error) {
		pl, err := New(ctx, obj, handle)
		if err != nil {
			return nil, err
		}
		m, err := models.For(handle)
		if err != nil {
			return nil, err
		}
		m.SetAccelerators(pl.(*Accelerator))
		return pl, nil
	}
}

func newAccelerator(args *Args) *Accelerator {
	pl := &Accelerator{
		args:  args,
		acc:   &accelerators{resources: args.Resources},
		costs: make(map[string]int64, len(args.ClassCosts)),
	}
	for product, cost := range args.ClassCosts {
		milli := int64(math.Round(cost * 1000))
		pl.costs[product] = milli
		pl.maxCost = max(pl.maxCost, milli)
	}
	return pl
}

// Name returns the plugin name.
func (pl *Accelerator) Name() string { return Name }

// preFilterStateKey holds the pod's parsed requirement for Filter and Score.
const preFilterStateKey fwk.StateKey = "PreFilter" + Name

// preScoreStateKey holds what Score needs, also for pods PreFilter skipped.
const preScoreStateKey fwk.StateKey = "PreScore" + Name

type requirementState struct{ req requirement }

// Clone returns the state itself: it is never modified after PreFilter.
func (s *requirementState) Clone() fwk.StateData { return s }

func readRequirement(state fwk.CycleState) (*requirement, error) {
	data, err := state.Read(preFilterStateKey)
	if err != nil {
		return nil, fmt.Errorf("reading %q from cycle state: %w", preFilterStateKey, err)
	}
	s, ok := data.(*requirementState)
	if !ok {
		return nil, fmt.Errorf("%q has type %T", preFilterStateKey, data)
	}
	return &s.req, nil
}

// deviceOnNode is the accelerator the pod uses on a node: the one it requests, or for a
// pod that requests none, the first one the node offers (what its annotations describe).
func (pl *Accelerator) deviceOnNode(r *requirement, node fwk.NodeInfo) *AcceleratorResource {
	if r.res != nil {
		return r.res
	}
	alloc := node.GetAllocatable().GetScalarResources()
	return pl.acc.firstOffered(func(name corev1.ResourceName) bool { return alloc[name] > 0 })
}

// offersAccelerator reports whether the node has any allocatable configured accelerator.
func (pl *Accelerator) offersAccelerator(node fwk.NodeInfo) bool {
	alloc := node.GetAllocatable().GetScalarResources()
	for i := range pl.acc.resources {
		if alloc[pl.acc.resources[i].Name] > 0 {
			return true
		}
	}
	return false
}

// freeDevices is allocatable minus what the node's pods (bound, assumed, and nominated
// ones the framework added for this evaluation) request.
func freeDevices(node fwk.NodeInfo, name corev1.ResourceName) (free, allocatable int64) {
	allocatable = node.GetAllocatable().GetScalarResources()[name]
	return allocatable - node.GetRequested().GetScalarResources()[name], allocatable
}
