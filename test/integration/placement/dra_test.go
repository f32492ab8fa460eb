package placement

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"

	"github.com/berth-sh/berth/pkg/sim"
)

// DRA GPUs beside device-plugin GPUs: nodes whose GPUs the simulated gpu.nvidia.com driver
// publishes as ResourceSlices, next to the fabric's device-plugin nodes. They are tainted so
// that the other tests' pods stay on the fabric; the pods here tolerate the taint.
const (
	draTaint = "sim.berth.test/dra"
	draH100  = "dra-h100" // 2 DRA H100 and 2 device-plugin GPUs
	draA100  = "dra-a100" // 4 DRA A100 40GB
	// h100Selector picks H100s with at least 79 GiB, as a user's claim would.
	h100Selector = `device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3" && ` +
		`device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("79Gi")) >= 0`
)

var draNodesOnce = make(chan struct{}, 1)

// createDRANodes makes the two DRA nodes and the gpu.nvidia.com DeviceClass, once.
func createDRANodes(t *testing.T, ctx context.Context) {
	select {
	case draNodesOnce <- struct{}{}:
	default:
		return
	}
	taint := []corev1.Taint{{Key: draTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	h := sim.NewNode(draH100, sim.NodeShape{CPU: "64", Memory: "512Gi", GPUs: 2, DRAGPUs: 2,
		GPUProduct: h100, GPUMemoryMiB: 81559, GPUFamily: "hopper"}, nil)
	a := sim.NewNode(draA100, sim.NodeShape{CPU: "64", Memory: "512Gi", DRAGPUs: 4,
		GPUProduct: a100, GPUMemoryMiB: 40960, GPUFamily: "ampere"}, nil)
	for _, n := range []*corev1.Node{h, a} {
		n.Spec.Taints = taint
		_, err := kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	_, err := kube.ResourceV1().DeviceClasses().Create(ctx, sim.GPUDeviceClass(), metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err)
	}
}

// claimTemplate creates a ResourceClaimTemplate of count GPUs of the simulated driver's
// class, those the CEL selector matches ("": any).
func (w *world) claimTemplate(name string, count int64, selector string) {
	w.t.Helper()
	req := &resourcev1.ExactDeviceRequest{DeviceClassName: sim.GPUDeviceClassName, AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: count}
	if selector != "" {
		req.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: selector}}}
	}
	_, err := kube.ResourceV1().ResourceClaimTemplates(w.ns).Create(w.ctx, &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceClaimTemplateSpec{Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
			Requests: []resourcev1.DeviceRequest{{Name: "gpus", Exactly: req}}}}},
	}, metav1.CreateOptions{})
	require.NoError(w.t, err)
}

// draPod is a pod of berth-scheduler whose engine uses the claim made from template.
func draPod(name, template string) *corev1.Pod {
	spec := podSpec(0)
	spec.Tolerations = []corev1.Toleration{{Key: draTaint, Operator: corev1.TolerationOpExists}}
	spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimTemplateName: ptr.To(template)}}
	spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpus"}}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

func TestDRAGPUs(t *testing.T) {
	w := newWorld(t)
	createDRANodes(t, w.ctx)
	waitForSlices(w)

	w.claimTemplate("two-h100", 2, h100Selector)

	// The fabric's nodes publish no devices and dra-a100's are A100s: only dra-h100's two
	// H100s match, so the first pod runs there and the second waits for them.
	first := w.createDRAPod("first", "two-h100")
	w.running("first", time.Minute)
	require.Equal(t, draH100, w.node("first"), "the claim's H100s are only on "+draH100)
	claim := w.claimOf(first)
	require.Equal(t, []string{w.ns + "/" + claim.Name}, simKubelet.PreparedClaims(draH100), "the running pod's claim is prepared on its node")
	require.Len(t, claim.Status.Allocation.Devices.Results, 2)
	for _, r := range claim.Status.Allocation.Devices.Results {
		require.Equal(t, sim.DRADriver, r.Driver)
		require.Equal(t, draH100, r.Pool)
	}
	require.Len(t, claim.Status.Devices, 2, "the driver reports both devices in the claim's status")
	for _, d := range claim.Status.Devices {
		require.True(t, conditionTrue(d.Conditions, "Ready"), "device %s is Ready", d.Device)
	}

	// Device-plugin GPUs of the same node run beside the DRA pod.
	plugin := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plugin"}, Spec: podSpec(2)}
	plugin.Spec.Tolerations = []corev1.Toleration{{Key: draTaint, Operator: corev1.TolerationOpExists}}
	plugin.Spec.NodeSelector = map[string]string{corev1.LabelHostname: draH100}
	_, err := kube.CoreV1().Pods(w.ns).Create(w.ctx, plugin, metav1.CreateOptions{})
	require.NoError(t, err)
	w.running("plugin", time.Minute)

	second := w.createDRAPod("second", "two-h100")
	time.Sleep(3 * time.Second)
	require.Empty(t, w.node("second"), "both H100s are taken (dra-a100's four A100s do not match the selector)")

	// When the first pod goes, its claim goes and its devices are free: the second takes them.
	require.NoError(t, kube.CoreV1().Pods(w.ns).Delete(w.ctx, first.Name, metav1.DeleteOptions{}))
	w.eventually("the first pod's claim to be deleted", time.Minute, func() bool {
		_, err := kube.ResourceV1().ResourceClaims(w.ns).Get(w.ctx, claim.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	w.running("second", time.Minute)
	require.Equal(t, draH100, w.node("second"))
	require.Equal(t, []string{w.ns + "/" + w.claimOf(second).Name}, simKubelet.PreparedClaims(draH100),
		"only the second pod's claim is prepared: nothing of the first is left")
}

// A pod bound by hand to a DRA node with a claim nobody allocated does not start: the
// kubelet reports why on the pod and it stays Pending.
func TestDRAUnallocatedClaimDoesNotStart(t *testing.T) {
	w := newWorld(t)
	createDRANodes(t, w.ctx)
	_, err := kube.ResourceV1().ResourceClaims(w.ns).Create(w.ctx, &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "unallocated"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{Name: "gpu",
			Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: sim.GPUDeviceClassName}}}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	p := draPod("bypass", "unused")
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpus", ResourceClaimName: ptr.To("unallocated")}}
	p.Spec.NodeName = draA100
	_, err = kube.CoreV1().Pods(w.ns).Create(w.ctx, p, metav1.CreateOptions{})
	require.NoError(t, err)

	var message string
	w.eventually("a FailedPrepareDynamicResources event", time.Minute, func() bool {
		events, err := kube.CoreV1().Events(w.ns).List(w.ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("involvedObject.name", "bypass").String()})
		if err != nil {
			return false
		}
		for _, e := range events.Items {
			if e.Reason == sim.FailedPrepareReason {
				message = e.Message
				return true
			}
		}
		return false
	})
	require.Contains(t, message, "claim unallocated is not allocated")
	got, err := kube.CoreV1().Pods(w.ns).Get(w.ctx, "bypass", metav1.GetOptions{})
	require.NoError(t, err)
	require.NotEqual(t, corev1.PodRunning, got.Status.Phase)
	require.Empty(t, simKubelet.PreparedClaims(draA100))
}

func (w *world) createDRAPod(name, template string) *corev1.Pod {
	w.t.Helper()
	p, err := kube.CoreV1().Pods(w.ns).Create(w.ctx, draPod(name, template), metav1.CreateOptions{})
	require.NoError(w.t, err)
	return p
}

func (w *world) running(pod string, timeout time.Duration) {
	w.t.Helper()
	w.eventually(pod+" to run", timeout, func() bool {
		p, err := kube.CoreV1().Pods(w.ns).Get(w.ctx, pod, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	})
}

// claimOf is the claim made for the pod from its template.
func (w *world) claimOf(p *corev1.Pod) *resourcev1.ResourceClaim {
	w.t.Helper()
	got, err := kube.CoreV1().Pods(w.ns).Get(w.ctx, p.Name, metav1.GetOptions{})
	require.NoError(w.t, err)
	require.Len(w.t, got.Status.ResourceClaimStatuses, 1)
	claim, err := kube.ResourceV1().ResourceClaims(w.ns).Get(w.ctx, *got.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	require.NoError(w.t, err)
	return claim
}

// waitForSlices waits until the simulated driver has published both DRA nodes' slices with
// the devices and attributes NVIDIA's driver publishes.
func waitForSlices(w *world) {
	w.t.Helper()
	w.eventually("the DRA nodes' ResourceSlices", time.Minute, func() bool {
		for _, n := range []string{draH100, draA100} {
			if _, err := kube.ResourceV1().ResourceSlices().Get(w.ctx, sim.GPUSliceName(n), metav1.GetOptions{}); err != nil {
				return false
			}
		}
		return true
	})
	s, err := kube.ResourceV1().ResourceSlices().Get(w.ctx, sim.GPUSliceName(draA100), metav1.GetOptions{})
	require.NoError(w.t, err)
	require.Equal(w.t, draA100, *s.Spec.NodeName)
	require.Equal(w.t, draA100, s.Spec.Pool.Name)
	var names []string
	for _, d := range s.Spec.Devices {
		names = append(names, d.Name)
	}
	require.Equal(w.t, []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}, names)
	d := s.Spec.Devices[3]
	require.Equal(w.t, "NVIDIA A100-SXM4-40GB", *d.Attributes["productName"].StringValue)
	require.Equal(w.t, "Ampere", *d.Attributes["architecture"].StringValue)
	require.Equal(w.t, "8.0.0", *d.Attributes["cudaComputeCapability"].VersionValue)
	require.EqualValues(w.t, 3, *d.Attributes["index"].IntValue)
	require.True(w.t, d.Capacity["memory"].Value.Equal(resource.MustParse("40Gi")))
	require.False(w.t, slices.ContainsFunc(s.Spec.Devices[:3], func(o resourcev1.Device) bool {
		return *o.Attributes["uuid"].StringValue == *d.Attributes["uuid"].StringValue
	}), "every GPU has its own UUID")
}

func conditionTrue(conds []metav1.Condition, typ string) bool {
	for _, c := range conds {
		if c.Type == typ {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// A node's NVLink clique label (GPU feature discovery's, which the NVL72 fabric sets) becomes
// its DRA GPUs' cliqueID attribute, and a label set later is a new generation of the pool.
func TestDRACliqueFromNodeLabel(t *testing.T) {
	w := newWorld(t)
	createDRANodes(t, w.ctx)
	waitForSlices(w)
	const clique = "3f1b2c9e-5d1e-4c55-9a43-0d3e6e2b7a11.4"
	node, err := kube.CoreV1().Nodes().Get(w.ctx, draA100, metav1.GetOptions{})
	require.NoError(t, err)
	node.Labels["nvidia.com/gpu.clique"] = clique
	_, err = kube.CoreV1().Nodes().Update(w.ctx, node, metav1.UpdateOptions{})
	require.NoError(t, err)
	// A clique label anywhere turns on the optional nvlink tier (tier 1, leaf moving to 2)
	// for every later test of the package: take it off again.
	t.Cleanup(func() {
		n, err := kube.CoreV1().Nodes().Get(w.ctx, draA100, metav1.GetOptions{})
		require.NoError(t, err)
		delete(n.Labels, "nvidia.com/gpu.clique")
		_, err = kube.CoreV1().Nodes().Update(w.ctx, n, metav1.UpdateOptions{})
		require.NoError(t, err)
	})
	w.eventually("the slice to carry the clique", time.Minute, func() bool {
		s, err := kube.ResourceV1().ResourceSlices().Get(w.ctx, sim.GPUSliceName(draA100), metav1.GetOptions{})
		if err != nil || s.Spec.Pool.Generation < 2 {
			return false
		}
		for _, d := range s.Spec.Devices {
			if a, ok := d.Attributes["cliqueID"]; !ok || *a.StringValue != clique {
				return false
			}
		}
		return true
	})
}
