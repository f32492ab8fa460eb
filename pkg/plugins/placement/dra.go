package placement

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/dynamic-resource-allocation/structured"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
)

// DRA is the profile's view of Dynamic Resource Allocation: the same ResourceSlices,
// DeviceClasses and claims (allocations in flight included) that kube-scheduler's
// DynamicResources plugin reads through the framework's SharedDRAManager, and an allocator
// built as that plugin builds it. A plan asks the allocator which devices each pod of a
// group would get on its planned node, in the order the queue hands the pods out; the
// DynamicResources plugin in the profile then allocates and writes the claims itself, and
// since it runs the same allocator on the same state in the same order, it allocates what
// the plan chose (PostBind checks that it did: see CheckAllocation).
type DRA struct {
	mgr       fwk.SharedDRAManager
	templates resourcelisters.ResourceClaimTemplateLister
	features  structured.Features
	// consumable mirrors the plugin: with consumable capacity the allocated state carries
	// shared devices and consumed capacity, not only allocated devices.
	consumable bool
	cel        *cel.Cache
}

// NewDRA builds the profile's DRA view from its framework handle, or nil when the cluster's
// scheduler runs without DRA.
func NewDRA(handle fwk.Handle) *DRA {
	fts := feature.NewSchedulerFeaturesFromGates(utilfeature.DefaultFeatureGate)
	if !fts.EnableDynamicResourceAllocation || handle.SharedDRAManager() == nil {
		return nil
	}
	return &DRA{
		mgr:        handle.SharedDRAManager(),
		templates:  handle.SharedInformerFactory().Resource().V1().ResourceClaimTemplates().Lister(),
		features:   dynamicresources.AllocatorFeatures(fts),
		consumable: fts.EnableDRAConsumableCapacity,
		cel: cel.NewCache(10, cel.Features{
			EnableConsumableCapacity: fts.EnableDRAConsumableCapacity,
			EnableListTypeAttributes: fts.EnableDRAListTypeAttributes,
		}),
	}
}

// HasClaims reports whether the pod asks for devices through DRA.
func HasClaims(pod *corev1.Pod) bool { return len(pod.Spec.ResourceClaims) > 0 }

// deviceKeyPrefix names, in a plan's requests, a device the plan keeps: each kept device
// counts as one unit of a resource of its own, "dra.berth.sh/<driver>/<pool>/<device>", so
// the ledger keeps, releases and hands over DRA devices exactly as it does GPUs of a device
// plugin. No node offers such a resource; fitsIn and IsDevice leave these names out.
const deviceKeyPrefix = "dra.berth.sh/"

// DeviceKey is the name a kept device has in a plan's requests.
func DeviceKey(id structured.DeviceID) corev1.ResourceName {
	return corev1.ResourceName(deviceKeyPrefix + id.String())
}

func isDeviceKey(name corev1.ResourceName) bool {
	return strings.HasPrefix(string(name), deviceKeyPrefix)
}

// deviceOfKey reads a DeviceKey back: driver names and device names hold no "/", pool
// names may.
func deviceOfKey(name corev1.ResourceName) (structured.DeviceID, bool) {
	s := strings.TrimPrefix(string(name), deviceKeyPrefix)
	i, j := strings.IndexByte(s, '/'), strings.LastIndexByte(s, '/')
	if i <= 0 || j <= i {
		return structured.DeviceID{}, false
	}
	return structured.MakeDeviceID(s[:i], s[i+1:j], s[j+1:]), true
}

// keptDevices are the devices named in a node's kept resources.
func keptDevices(kept Resources) []structured.DeviceID {
	var out []structured.DeviceID
	for name, v := range kept {
		if v > 0 && isDeviceKey(name) {
			if id, ok := deviceOfKey(name); ok {
				out = append(out, id)
			}
		}
	}
	return out
}

// podClaims is what a pod asks of DRA: claims still to allocate (a claim its template will
// generate counts, as the template describes it) and claims already allocated, which the
// pod must follow to a node their allocation allows.
type podClaims struct {
	toAllocate []*resourceapi.ResourceClaim
	allocated  []*resourceapi.ResourceClaim
}

// deviceState is the DRA state of one planning: the slices per node and what is allocated,
// read once.
type deviceState struct {
	d *DRA
	// slices by the node they are local to; "" holds slices that are not node-local.
	slices map[string][]*resourceapi.ResourceSlice
	// devices counts the devices of node-local slices, per node.
	devices   map[string]int
	allocated structured.AllocatedState
	// empty plans a reservation: nothing allocated counts, as if the nodes ran nothing;
	// now is then what is allocated today, so the plan prefers devices free now.
	empty  bool
	now    sets.Set[structured.DeviceID]
	claims map[types.UID]*podClaims
	err    error
}

func (d *DRA) state(empty bool, freed sets.Set[structured.DeviceID]) *deviceState {
	s := &deviceState{d: d, slices: map[string][]*resourceapi.ResourceSlice{}, devices: map[string]int{}, empty: empty, claims: map[types.UID]*podClaims{}}
	slices, err := d.mgr.ResourceSlices().ListWithDeviceTaintRules()
	if err != nil {
		s.err = fmt.Errorf("list ResourceSlices: %w", err)
		return s
	}
	for _, sl := range slices {
		node := ""
		if sl.Spec.NodeName != nil {
			node = *sl.Spec.NodeName
			s.devices[node] += len(sl.Spec.Devices)
		}
		s.slices[node] = append(s.slices[node], sl)
	}
	s.allocated = structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	if d.consumable && !empty {
		st, err := d.mgr.ResourceClaims().GatherAllocatedState()
		if err != nil {
			s.err = fmt.Errorf("gather allocated devices: %w", err)
			return s
		}
		s.allocated = *st
		if freed.Len() > 0 {
			// A preemption's victims give their devices back. Devices allocated whole are
			// in AllocatedDevices; a victim's share of a shared device (consumable
			// capacity) is not given back here, so a preemption that needs it finds
			// no room rather than room that is not there.
			s.allocated.AllocatedDevices = st.AllocatedDevices.Difference(freed)
		}
		return s
	}
	ids, err := d.mgr.ResourceClaims().ListAllAllocatedDevices()
	if err != nil {
		s.err = fmt.Errorf("list allocated devices: %w", err)
		return s
	}
	if empty {
		s.now = ids
	} else {
		s.allocated.AllocatedDevices = ids
		if freed.Len() > 0 {
			s.allocated.AllocatedDevices = ids.Difference(freed)
		}
	}
	return s
}

// devicesFreedWith are the devices of the pod's allocated claims that only pods in uids
// use: evicting those pods gives the devices back. Nil without DRA.
func (d *DRA) devicesFreedWith(pod *corev1.Pod, uids map[types.UID]bool) []structured.DeviceID {
	if d == nil || !HasClaims(pod) {
		return nil
	}
	var out []structured.DeviceID
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil || name == nil {
			continue
		}
		claim, err := d.mgr.ResourceClaims().Get(pod.Namespace, *name)
		if err != nil || claim.Status.Allocation == nil {
			continue
		}
		only := true
		for _, c := range claim.Status.ReservedFor {
			if !uids[c.UID] {
				only = false
			}
		}
		if !only {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			out = append(out, structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	return out
}

// claimsOf resolves the pod's claims, once per planning.
func (s *deviceState) claimsOf(pod *corev1.Pod) (*podClaims, error) {
	if pc, ok := s.claims[pod.UID]; ok {
		return pc, nil
	}
	pc := &podClaims{}
	for i := range pod.Spec.ResourceClaims {
		rc := &pod.Spec.ResourceClaims[i]
		name, _, err := resourceclaim.Name(pod, rc)
		if err != nil && !errors.Is(err, resourceclaim.ErrClaimNotFound) {
			return nil, err
		}
		if err == nil && name == nil {
			continue // the pod needs no claim for this entry
		}
		var claim *resourceapi.ResourceClaim
		if err == nil {
			claim, err = s.d.mgr.ResourceClaims().Get(pod.Namespace, *name)
			if err != nil && (!apierrors.IsNotFound(err) || rc.ResourceClaimTemplateName == nil) {
				return nil, fmt.Errorf("ResourceClaim %s/%s: %w", pod.Namespace, *name, err)
			}
		}
		if claim == nil {
			// Not generated yet: plan what the template asks for.
			tmpl, err := s.d.templates.ResourceClaimTemplates(pod.Namespace).Get(*rc.ResourceClaimTemplateName)
			if err != nil {
				return nil, fmt.Errorf("ResourceClaimTemplate %s/%s: %w", pod.Namespace, *rc.ResourceClaimTemplateName, err)
			}
			claim = &resourceapi.ResourceClaim{Spec: tmpl.Spec.Spec}
			claim.Namespace, claim.Name = pod.Namespace, pod.Name+"-"+rc.Name
			claim.UID = types.UID(string(pod.UID) + "/" + rc.Name)
		}
		if claim.Status.Allocation != nil {
			pc.allocated = append(pc.allocated, claim)
		} else {
			pc.toAllocate = append(pc.toAllocate, claim)
		}
	}
	s.claims[pod.UID] = pc
	return pc, nil
}

// slicesFor are the slices the allocator may take devices from on the node.
func (s *deviceState) slicesFor(node string) []*resourceapi.ResourceSlice {
	local, shared := s.slices[node], s.slices[""]
	if len(shared) == 0 {
		return local
	}
	return append(append(make([]*resourceapi.ResourceSlice, 0, len(local)+len(shared)), local...), shared...)
}

// claimAllocation is a claim the simulation allocated: later pods that share the claim
// follow it.
type claimAllocation struct {
	result resourceapi.AllocationResult
}

// podDevices is what one pod gets in a simulation: the claims it allocates and their
// devices.
type podDevices struct {
	claims  map[types.UID]*claimAllocation
	devices []structured.DeviceID
}

// allows reports whether an allocation's node selector admits the node.
func allows(alloc *resourceapi.AllocationResult, node *corev1.Node) (bool, error) {
	if alloc.NodeSelector == nil {
		return true, nil
	}
	sel, err := nodeaffinity.NewNodeSelector(alloc.NodeSelector)
	if err != nil {
		return false, err
	}
	return sel.Match(node), nil
}

// errNoDevices marks a pod whose claims cannot be allocated on a node (as opposed to a
// claim the allocator refuses everywhere: a missing DeviceClass, a bad CEL selector).
var errNoDevices = errors.New("no devices")

// allocate is what the pod's claims get on the node, with taken (devices this simulation
// gave other pods, and devices other groups' plans keep) counted as allocated, and the
// claims this simulation allocated already. errNoDevices when they do not fit there.
func (s *deviceState) allocate(ctx context.Context, pod *corev1.Pod, node *corev1.Node, taken sets.Set[structured.DeviceID], simClaims map[types.UID]*claimAllocation) (*podDevices, error) {
	if s.err != nil {
		return nil, s.err
	}
	pc, err := s.claimsOf(pod)
	if err != nil {
		return nil, err
	}
	out := &podDevices{claims: map[types.UID]*claimAllocation{}}
	for _, c := range pc.allocated {
		ok, err := allows(c.Status.Allocation, node)
		if err != nil {
			return nil, fmt.Errorf("ResourceClaim %s: %w", c.Name, err)
		}
		if !ok {
			return nil, errNoDevices
		}
	}
	var claims []*resourceapi.ResourceClaim
	for _, c := range pc.toAllocate {
		if a := simClaims[c.UID]; a != nil {
			if ok, err := allows(&a.result, node); err != nil || !ok {
				return nil, errNoDevices
			}
			continue
		}
		claims = append(claims, c)
	}
	if len(claims) == 0 {
		return out, nil
	}
	slices := s.slicesFor(node.Name)
	st := s.allocated
	if taken.Len() > 0 {
		// The allocator looks up only the devices of the slices it is given: copy the
		// allocated ones among those, not the whole cluster's set, for each node tried.
		busy := taken.Clone()
		for _, sl := range slices {
			for _, d := range sl.Spec.Devices {
				if id := structured.MakeDeviceID(sl.Spec.Driver, sl.Spec.Pool.Name, d.Name); s.allocated.AllocatedDevices.Has(id) {
					busy.Insert(id)
				}
			}
		}
		st.AllocatedDevices = busy
	}
	alloc, err := structured.NewAllocator(ctx, s.d.features, st, s.d.mgr.DeviceClasses(), slices, s.d.cel)
	if err != nil {
		return nil, err
	}
	results, err := alloc.Allocate(ctx, node, claims)
	if errors.Is(err, structured.ErrFailedAllocationOnNode) || (err == nil && len(results) != len(claims)) {
		return nil, errNoDevices
	}
	if err != nil {
		return nil, err
	}
	for i, c := range claims {
		out.claims[c.UID] = &claimAllocation{result: results[i]}
		for _, r := range results[i].Devices.Results {
			out.devices = append(out.devices, structured.MakeDeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	return out, nil
}

// busyNow counts the devices that are allocated today (a reservation waits for them).
func (s *deviceState) busyNow(devices []structured.DeviceID) int64 {
	var n int64
	for _, id := range devices {
		if s.now.Has(id) {
			n++
		}
	}
	return n
}

// freeDevices counts the node-local devices of the node nothing holds.
func (s *deviceState) freeDevices(node string, taken sets.Set[structured.DeviceID]) int64 {
	n := int64(s.devices[node])
	if n == 0 {
		return 0
	}
	for _, sl := range s.slices[node] {
		for _, d := range sl.Spec.Devices {
			id := structured.MakeDeviceID(sl.Spec.Driver, sl.Spec.Pool.Name, d.Name)
			if s.allocated.AllocatedDevices.Has(id) || taken.Has(id) {
				n--
			}
		}
	}
	return n
}

// describeClaims names what the pod's claims ask for, for a refusal: "claim gpus (2 of
// device class gpu.nvidia.com where device.attributes[...] ...)".
func describeClaims(pc *podClaims) string {
	var parts []string
	for _, c := range pc.toAllocate {
		for _, r := range c.Spec.Devices.Requests {
			if r.Exactly == nil {
				continue
			}
			e := r.Exactly
			what := fmt.Sprintf("%d of device class %s", e.Count, e.DeviceClassName)
			if e.AllocationMode == resourceapi.DeviceAllocationModeAll {
				what = "all devices of class " + e.DeviceClassName
			} else if e.Count == 0 {
				what = "1 of device class " + e.DeviceClassName
			}
			var sels []string
			for _, sel := range e.Selectors {
				if sel.CEL != nil {
					sels = append(sels, strings.TrimSpace(sel.CEL.Expression))
				}
			}
			if len(sels) > 0 {
				what += " where " + strings.Join(sels, " && ")
			}
			parts = append(parts, fmt.Sprintf("claim %s request %s: %s", c.Name, r.Name, what))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// DeviceCheck judges, in one scheduling cycle, whether a pod's claims still fit a node
// once the devices other groups' plans keep there are left out: kube-scheduler's
// DynamicResources plugin does not know what plans keep, so the gang plugin's Filter asks.
// It is built once per cycle (PreFilter) and safe for the Filter's parallel calls.
type DeviceCheck struct {
	state *deviceState
	pod   *corev1.Pod
}

// DeviceCheck prepares the check for a pod with claims; nil without DRA or claims.
func (m *Model) DeviceCheck(pod *corev1.Pod) *DeviceCheck {
	if m.dra == nil || !HasClaims(pod) {
		return nil
	}
	s := m.dra.state(false, nil)
	if _, err := s.claimsOf(pod); err != nil {
		return nil // the DynamicResources plugin reports a claim it cannot read
	}
	return &DeviceCheck{state: s, pod: pod}
}

// FitsAround reports whether what the allocator would give the pod's claims on the node
// (first fit, as kube-scheduler's DynamicResources plugin allocates) leaves out the devices
// named in kept.
func (c *DeviceCheck) FitsAround(node *corev1.Node, kept Resources) bool {
	ids := keptDevices(kept)
	if len(ids) == 0 {
		return true
	}
	got, err := c.state.allocate(context.TODO(), c.pod, node, nil, map[types.UID]*claimAllocation{})
	if err != nil {
		return true // the DynamicResources plugin refuses the node itself
	}
	return !intersects(got.devices, ids)
}

// CheckAllocation compares, once the pod is bound, the devices kube-scheduler's
// DynamicResources plugin allocated to the pod's claims with those its group's plan chose.
// checked is false when the plan chose none for the pod (no claims, a claim shared with a
// pod placed before it, or a pod not sent through the plan); the metric
// berth_placement_dra_allocation_checks_total counts the outcomes.
func (m *Model) CheckAllocation(pod *corev1.Pod) (checked, agree bool, msg string) {
	m.mu.Lock()
	want := m.expected[pod.UID]
	delete(m.expected, pod.UID)
	m.mu.Unlock()
	if len(want) == 0 || m.dra == nil {
		return false, false, ""
	}
	var got []string
	for i := range pod.Spec.ResourceClaims {
		name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil || name == nil {
			continue
		}
		claim, err := m.dra.mgr.ResourceClaims().Get(pod.Namespace, *name)
		if err != nil || claim.Status.Allocation == nil {
			continue
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			got = append(got, structured.MakeDeviceID(r.Driver, r.Pool, r.Device).String())
		}
	}
	wantS := make([]string, len(want))
	for i, id := range want {
		wantS[i] = id.String()
	}
	sort.Strings(got)
	sort.Strings(wantS)
	agree = strings.Join(got, ",") == strings.Join(wantS, ",")
	result := "agree"
	if !agree {
		result = "disagree"
		msg = fmt.Sprintf("the plan chose devices [%s], the claims were allocated [%s]", strings.Join(wantS, ", "), strings.Join(got, ", "))
	}
	allocationChecks.WithLabelValues(result).Inc()
	return true, agree, msg
}
