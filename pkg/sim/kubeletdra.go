package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// The simulated kubelet's DRA side: it is also the gpu.nvidia.com kubelet plugin of every
// node with DRA GPUs, publishing the node's ResourceSlice and preparing the claims of the
// pods it starts there.

// prepareRetry is how long a pod whose claims could not be prepared waits before the next
// attempt (the kubelet retries its pod sync the same way, with back-off).
const prepareRetry = time.Second

// preparedPod is a running pod's prepared claims ("namespace/name") on its node.
type preparedPod struct {
	node   string
	claims []string
}

// publishSlice creates or updates the node's GPU ResourceSlice when it has DRA GPUs.
func (k *Kubelet) publishSlice(ctx context.Context, node *corev1.Node) {
	want := GPUResourceSlice(node)
	if want == nil {
		return
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		have, err := k.client.ResourceV1().ResourceSlices().Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = k.client.ResourceV1().ResourceSlices().Create(ctx, want, metav1.CreateOptions{})
			return err
		}
		if err != nil || apiequality.Semantic.DeepEqual(have.Spec.Devices, want.Spec.Devices) {
			return err
		}
		// A changed node (say, a new clique label) is a new generation of its pool.
		have.Spec = want.Spec
		have.Spec.Pool.Generation = have.Spec.Pool.Generation + 1
		_, err = k.client.ResourceV1().ResourceSlices().Update(ctx, have, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		klog.FromContext(ctx).Error(err, "sim kubelet: publish ResourceSlice", "node", node.Name)
	}
}

// claimName is the name of the pod's claim rc: named in the spec, or made from a template
// by the ResourceClaim controller and recorded in the pod's status.
func claimName(p *corev1.Pod, rc corev1.PodResourceClaim) string {
	if rc.ResourceClaimName != nil {
		return *rc.ResourceClaimName
	}
	for _, s := range p.Status.ResourceClaimStatuses {
		if s.Name == rc.Name && s.ResourceClaimName != nil {
			return *s.ResourceClaimName
		}
	}
	return ""
}

// prepare checks, as a kubelet does before it starts a pod's containers, that each of the
// pod's claims is allocated and reserved for the pod, and that the gpu.nvidia.com devices
// it got are this node's; then it reports them Ready in the claim's status, as a driver
// may. The first claim that fails is the error.
func (k *Kubelet) prepare(ctx context.Context, p *corev1.Pod) error {
	var names []string
	for _, rc := range p.Spec.ResourceClaims {
		name := claimName(p, rc)
		if name == "" {
			return fmt.Errorf("claim %q: no ResourceClaim was created for it yet", rc.Name)
		}
		claim, err := k.client.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("claim %s: %w", name, err)
		}
		if claim.Status.Allocation == nil {
			return fmt.Errorf("claim %s is not allocated", name)
		}
		if !slices.ContainsFunc(claim.Status.ReservedFor, func(r resourcev1.ResourceClaimConsumerReference) bool { return r.UID == p.UID }) {
			return fmt.Errorf("claim %s is not reserved for pod %s", name, p.Name)
		}
		var ours []resourcev1.DeviceRequestAllocationResult
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != DRADriver {
				continue
			}
			if r.Pool != p.Spec.NodeName {
				return fmt.Errorf("claim %s: device %s/%s is not on node %s", name, r.Pool, r.Device, p.Spec.NodeName)
			}
			ours = append(ours, r)
		}
		if err := k.reportReady(ctx, claim, ours); err != nil {
			return fmt.Errorf("claim %s: status: %w", name, err)
		}
		names = append(names, p.Namespace+"/"+name)
	}
	if len(names) > 0 {
		k.mu.Lock()
		k.prepared[p.UID] = preparedPod{node: p.Spec.NodeName, claims: names}
		k.mu.Unlock()
	}
	return nil
}

// reportReady writes a Ready entry in claim.status.devices for each of the devices.
func (k *Kubelet) reportReady(ctx context.Context, claim *resourcev1.ResourceClaim, devices []resourcev1.DeviceRequestAllocationResult) error {
	if len(devices) == 0 {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := k.client.ResourceV1().ResourceClaims(claim.Namespace).Get(context.WithoutCancel(ctx), claim.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		changed := false
		for _, d := range devices {
			if slices.ContainsFunc(c.Status.Devices, func(s resourcev1.AllocatedDeviceStatus) bool {
				return s.Driver == d.Driver && s.Pool == d.Pool && s.Device == d.Device
			}) {
				continue
			}
			c.Status.Devices = append(c.Status.Devices, resourcev1.AllocatedDeviceStatus{
				Driver: d.Driver, Pool: d.Pool, Device: d.Device,
				Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Prepared",
					Message: "prepared for the pod's containers", LastTransitionTime: metav1.Now()}},
			})
			changed = true
		}
		if !changed {
			return nil
		}
		_, err = k.client.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{})
		return err
	})
}

// unprepare forgets a pod's prepared claims: it has ended or is going.
func (k *Kubelet) unprepare(uid types.UID) {
	k.mu.Lock()
	delete(k.prepared, uid)
	delete(k.prepareErrors, uid)
	k.mu.Unlock()
}

// PreparedClaims lists the claims ("namespace/name") prepared for pods on the node, sorted.
func (k *Kubelet) PreparedClaims(node string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, pp := range k.prepared {
		if pp.node == node {
			out = append(out, pp.claims...)
		}
	}
	slices.Sort(out)
	return out
}

// failedPrepare records, once per distinct reason, a Warning event on the pod, as the
// kubelet does when a pod's claims cannot be prepared; the pod stays Pending meanwhile.
func (k *Kubelet) failedPrepare(ctx context.Context, p *corev1.Pod, err error) {
	msg := "Failed to prepare dynamic resources: " + err.Error()
	k.mu.Lock()
	seen := k.prepareErrors[p.UID] == msg
	k.prepareErrors[p.UID] = msg
	k.mu.Unlock()
	if seen {
		return
	}
	klog.FromContext(ctx).Info("sim kubelet: cannot start pod", "pod", klog.KObj(p), "err", err)
	now := metav1.Now()
	_, cerr := k.client.CoreV1().Events(p.Namespace).Create(ctx, &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: p.Name + "."},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name,
			UID: p.UID, ResourceVersion: p.ResourceVersion},
		Reason: FailedPrepareReason, Message: msg, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "kubelet", Host: p.Spec.NodeName},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}, metav1.CreateOptions{})
	if cerr != nil && !apierrors.IsNotFound(cerr) {
		klog.FromContext(ctx).Error(cerr, "sim kubelet: record event", "pod", klog.KObj(p))
	}
}
