package accelerator

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/utils/ptr"
)

func TestFilterReasons(t *testing.T) {
	pl := newPlugin(t, nil)
	nodes := []*framework.NodeInfo{
		gpuNode("busy", 8, 5, a100, 81920, "ampere"),
		gpuNode("a100", 8, 0, a100, 81920, "ampere"),
		gpuNode("h100", 8, 0, h100, 81559, "hopper"),
		gpuNode("nolabels", 8, 0, "", 0, ""),
		gpuNode("a100-40g", 8, 0, "NVIDIA-A100-SXM4-40GB", 40960, "ampere"),
		gpuNode("small", 4, 0, h100, 81559, "hopper"),
		gpuNode("cpu", 0, 0, "", 0, ""),
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want map[string]string // node -> reason; nodes not listed must pass
		code map[string]fwk.Code
	}{{
		name: "count only",
		pod:  gpuPod("p", 8, nil),
		want: map[string]string{
			"busy":  "node has 3 free nvidia.com/gpu, pod needs 8",
			"small": "node has 4 nvidia.com/gpu in all, pod needs 8",
			"cpu":   "node has no nvidia.com/gpu",
		},
		code: map[string]fwk.Code{"busy": fwk.Unschedulable, "small": fwk.UnschedulableAndUnresolvable, "cpu": fwk.UnschedulableAndUnresolvable},
	}, {
		name: "product",
		pod:  gpuPod("p", 1, map[string]string{ProductsAnnotation: h100}),
		want: map[string]string{
			"busy":     "nvidia.com/gpu.product is NVIDIA-A100-SXM4-80GB, pod accepts NVIDIA-H100-80GB-HBM3",
			"a100":     "nvidia.com/gpu.product is NVIDIA-A100-SXM4-80GB, pod accepts NVIDIA-H100-80GB-HBM3",
			"nolabels": "node has no nvidia.com/gpu.product label, pod accepts NVIDIA-H100-80GB-HBM3",
			"a100-40g": "nvidia.com/gpu.product is NVIDIA-A100-SXM4-40GB, pod accepts NVIDIA-H100-80GB-HBM3",
			"cpu":      "node has no nvidia.com/gpu",
		},
	}, {
		name: "any of several products, spaces around commas",
		pod:  gpuPod("p", 2, map[string]string{ProductsAnnotation: " NVIDIA-H100-80GB-HBM3 , NVIDIA-A100-SXM4-80GB,"}),
		want: map[string]string{
			"nolabels": "node has no nvidia.com/gpu.product label, pod accepts NVIDIA-H100-80GB-HBM3 , NVIDIA-A100-SXM4-80GB,",
			"a100-40g": "nvidia.com/gpu.product is NVIDIA-A100-SXM4-40GB, pod accepts NVIDIA-H100-80GB-HBM3 , NVIDIA-A100-SXM4-80GB,",
			"cpu":      "node has no nvidia.com/gpu",
		},
	}, {
		name: "family",
		pod:  gpuPod("p", 1, map[string]string{FamiliesAnnotation: "hopper,blackwell"}),
		want: map[string]string{
			"busy":     "nvidia.com/gpu.family is ampere, pod accepts hopper,blackwell",
			"a100":     "nvidia.com/gpu.family is ampere, pod accepts hopper,blackwell",
			"nolabels": "node has no nvidia.com/gpu.family label, pod accepts hopper,blackwell",
			"a100-40g": "nvidia.com/gpu.family is ampere, pod accepts hopper,blackwell",
			"cpu":      "node has no nvidia.com/gpu",
		},
	}, {
		// GFD reports what the driver reports: an "80GB" H100 has 81559 MiB, 0.4% under
		// 80Gi; the 1% tolerance lets "80Gi" mean the 80 GB class.
		name: "memory in binary units",
		pod:  gpuPod("p", 1, map[string]string{MinMemoryAnnotation: "80Gi"}),
		want: map[string]string{
			"nolabels": "node has no nvidia.com/gpu.memory label, pod needs 80Gi per device",
			"a100-40g": "nvidia.com/gpu.memory is 40960 MiB, pod needs 80Gi per device",
			"cpu":      "node has no nvidia.com/gpu",
		},
	}, {
		// 81Gi less 1% is 82115 MiB: more than either 80 GB device reports.
		name: "memory just above a class",
		pod:  gpuPod("p", 1, map[string]string{MinMemoryAnnotation: "81Gi"}),
		want: map[string]string{
			"busy":     "nvidia.com/gpu.memory is 81920 MiB, pod needs 81Gi per device",
			"a100":     "nvidia.com/gpu.memory is 81920 MiB, pod needs 81Gi per device",
			"h100":     "nvidia.com/gpu.memory is 81559 MiB, pod needs 81Gi per device",
			"small":    "nvidia.com/gpu.memory is 81559 MiB, pod needs 81Gi per device",
			"nolabels": "node has no nvidia.com/gpu.memory label, pod needs 81Gi per device",
			"a100-40g": "nvidia.com/gpu.memory is 40960 MiB, pod needs 81Gi per device",
			"cpu":      "node has no nvidia.com/gpu",
		},
	}, {
		name: "memory in decimal units takes the 80GB H100",
		pod:  gpuPod("p", 1, map[string]string{MinMemoryAnnotation: "80G"}),
		want: map[string]string{
			"nolabels": "node has no nvidia.com/gpu.memory label, pod needs 80G per device",
			"a100-40g": "nvidia.com/gpu.memory is 40960 MiB, pod needs 80G per device",
			"cpu":      "node has no nvidia.com/gpu",
		},
	}, {
		// No accelerator requested: the annotations alone send the pod to accelerator nodes.
		name: "annotations without a request",
		pod:  gpuPod("p", 0, map[string]string{FamiliesAnnotation: "ampere"}),
		want: map[string]string{
			"h100":     "nvidia.com/gpu.family is hopper, pod accepts ampere",
			"small":    "nvidia.com/gpu.family is hopper, pod accepts ampere",
			"nolabels": "node has no nvidia.com/gpu.family label, pod accepts ampere",
			"cpu":      "node offers no accelerator, pod requires one (accelerator.berth.sh/families=ampere)",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c := runCycle(t, pl, tc.pod, nodes)
			require.True(t, c.prefilter.IsSuccess(), c.prefilter.Message())
			got := map[string]string{}
			for node, s := range c.filter {
				got[node] = s.Message()
				want := fwk.UnschedulableAndUnresolvable
				if code, ok := tc.code[node]; ok {
					want = code
				}
				assert.Equal(t, want, s.Code(), node)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestFilterOtherVendors(t *testing.T) {
	pl := newPlugin(t, nil)
	amd := corev1.ResourceName("amd.com/gpu")
	ascend := corev1.ResourceName("huawei.com/Ascend910")
	nodes := []*framework.NodeInfo{
		labelledNode("mi300x", amd, 8, map[string]string{"amd.com/gpu.product-name": "AMD_Instinct_MI300X_OAM", "amd.com/gpu.vram": "192G", "amd.com/gpu.family": "AI"}),
		labelledNode("mi210", amd, 4, map[string]string{"amd.com/gpu.product-name": "AMD_Instinct_MI210", "amd.com/gpu.vram": "64G", "amd.com/gpu.family": "AI"}),
		labelledNode("910b", ascend, 8, map[string]string{"node.kubernetes.io/npu.chip.name": "910B3", "accelerator": "huawei-Ascend910"}),
	}
	unresolvable := func(msg string) verdict { return verdict{fwk.UnschedulableAndUnresolvable.String(), msg} }

	assert.Equal(t, map[string]verdict{
		"mi210": unresolvable("amd.com/gpu.vram is 64G, pod needs 128Gi per device"),
		"910b":  unresolvable("node has no amd.com/gpu"),
	}, filterOnly(t, pl, devicePod("p", amd, 4, map[string]string{MinMemoryAnnotation: "128Gi"}), nodes))

	assert.Equal(t, map[string]verdict{
		"mi300x": unresolvable("node has no huawei.com/Ascend910"),
		"mi210":  unresolvable("node has no huawei.com/Ascend910"),
	}, filterOnly(t, pl, devicePod("p", ascend, 8, map[string]string{ProductsAnnotation: "910B3,910B4"}), nodes),
		"the Ascend node's chip label is one of the products")

	assert.Equal(t, map[string]verdict{
		"mi300x": unresolvable("node has no huawei.com/Ascend910"),
		"mi210":  unresolvable("node has no huawei.com/Ascend910"),
		"910b":   unresolvable("no memory label is configured for huawei.com/Ascend910, pod needs 64Gi per device"),
	}, filterOnly(t, pl, devicePod("p", ascend, 8, map[string]string{MinMemoryAnnotation: "64Gi"}), nodes))

	// Configuring a memory label for the Ascend nodes makes the requirement usable.
	pl = newPlugin(t, &Args{Resources: []AcceleratorResource{{Name: ascend, MemoryLabel: "berth.sh/npu-memory", MemoryLabelUnit: UnitGiB}}})
	nodes = append(nodes, labelledNode("910b-mem", ascend, 8, map[string]string{"berth.sh/npu-memory": "64"}))
	assert.Equal(t, map[string]verdict{
		"mi300x": unresolvable("node has no huawei.com/Ascend910"),
		"mi210":  unresolvable("node has no huawei.com/Ascend910"),
		"910b":   unresolvable("node has no berth.sh/npu-memory label, pod needs 64Gi per device"),
	}, filterOnly(t, pl, devicePod("p", ascend, 8, map[string]string{MinMemoryAnnotation: "64Gi"}), nodes))
}

// verdict is what Filter said about a node that did not pass. The code is its name, so that
// a failed comparison shows "Unschedulable", not 2.
type verdict struct {
	code string
	msg  string
}

// filterOnly runs a cycle for a test about Filter: PreFilter must admit the pod, because a
// PreFilter rejection (or skip) means Filter never ran, and every "this node passes" would
// then hold without Filter having said so. It returns the verdict on each node Filter
// rejected; nodes it admitted are absent.
func filterOnly(t *testing.T, pl *Accelerator, pod *corev1.Pod, nodes []*framework.NodeInfo) map[string]verdict {
	t.Helper()
	c := runCycle(t, pl, pod, nodes)
	require.True(t, c.prefilter.IsSuccess(), "PreFilter must admit %s so that Filter runs; it returned %v: %s",
		pod.Name, c.prefilter.Code(), c.prefilter.Message())
	got := map[string]verdict{}
	for node, s := range c.filter {
		got[node] = verdict{s.Code().String(), s.Message()}
	}
	return got
}

func TestPreFilterRejectsMalformedAnnotations(t *testing.T) {
	pl := newPlugin(t, nil)
	for _, tc := range []struct {
		annotations map[string]string
		want        string
	}{
		{map[string]string{MinMemoryAnnotation: "80 GB"}, `annotation accelerator.berth.sh/min-memory="80 GB" is not a quantity (e.g. 80Gi)`},
		{map[string]string{MinMemoryAnnotation: "-1Gi"}, `annotation accelerator.berth.sh/min-memory="-1Gi" must be positive`},
		{map[string]string{ProductsAnnotation: "NVIDIA H100"}, `annotation accelerator.berth.sh/products="NVIDIA H100": "NVIDIA H100" is not a label value`},
		{map[string]string{FamiliesAnnotation: " , "}, `annotation accelerator.berth.sh/families="," lists nothing`},
	} {
		c := runCycle(t, pl, gpuPod("p", 1, tc.annotations), []*framework.NodeInfo{gpuNode("n", 8, 0, h100, 81559, "hopper")})
		assert.Equal(t, fwk.UnschedulableAndUnresolvable, c.prefilter.Code(), tc.want)
		assert.Contains(t, c.prefilter.Message(), tc.want)
		ok, reason := Match(gpuPod("p", 1, tc.annotations), gpuNode("n", 8, 0, h100, 81559, "hopper").Node())
		assert.False(t, ok)
		assert.Contains(t, reason, tc.want, "Match agrees with PreFilter")
	}
}

func TestPreFilterSkipsPodsWithoutAccelerators(t *testing.T) {
	pl := newPlugin(t, nil)
	c := runCycle(t, pl, gpuPod("web", 0, map[string]string{"unrelated": "x"}), []*framework.NodeInfo{gpuNode("n", 8, 0, h100, 81559, "hopper")})
	assert.True(t, c.prefilter.IsSkip())
	assert.Empty(t, c.filter)

	// An explicit zero request is no request.
	pod := gpuPod("zero", 0, nil)
	pod.Spec.Containers[0].Resources.Requests[gpu] = resource.MustParse("0")
	c = runCycle(t, pl, pod, []*framework.NodeInfo{gpuNode("n", 8, 0, h100, 81559, "hopper")})
	assert.True(t, c.prefilter.IsSkip())
}

func TestMatchIgnoresCounts(t *testing.T) {
	full := gpuNode("full", 8, 8, h100, 81559, "hopper").Node()
	ok, reason := Match(gpuPod("p", 8, map[string]string{ProductsAnnotation: h100, FamiliesAnnotation: "hopper", MinMemoryAnnotation: "79Gi"}), full)
	assert.True(t, ok, reason)
	ok, reason = Match(gpuPod("p", 8, map[string]string{ProductsAnnotation: a100}), full)
	assert.False(t, ok)
	assert.Equal(t, "nvidia.com/gpu.product is NVIDIA-H100-80GB-HBM3, pod accepts NVIDIA-A100-SXM4-80GB", reason)
	ok, _ = Match(gpuPod("p", 0, nil), full)
	assert.True(t, ok, "no annotations, no constraint")
	ok, reason = Match(gpuPod("p", 0, map[string]string{MinMemoryAnnotation: "1Gi"}), gpuNode("cpu", 0, 0, "", 0, "").Node())
	assert.False(t, ok)
	assert.Equal(t, "node offers no accelerator, pod requires one (accelerator.berth.sh/min-memory=1Gi)", reason)
}

func TestDeviceRequestIsTheEffectiveRequest(t *testing.T) {
	name, n := DeviceRequest(gpuPod("p", 2, nil))
	assert.Equal(t, gpu, name)
	assert.Equal(t, int64(2), n)

	// An init container that needs more devices than the app containers sets the request.
	pod := gpuPod("p", 2, nil)
	pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: "second", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{gpu: resource.MustParse("1")},
	}})
	pod.Spec.InitContainers = []corev1.Container{{Name: "warmup", Resources: corev1.ResourceRequirements{
		Requests: corev1.ResourceList{gpu: resource.MustParse("4")},
	}}}
	_, n = DeviceRequest(pod)
	assert.Equal(t, int64(4), n)
	pod.Spec.InitContainers[0].Resources.Requests[gpu] = resource.MustParse("1")
	_, n = DeviceRequest(pod)
	assert.Equal(t, int64(3), n, "app containers add up")

	// A sidecar (restartable init container) runs beside the app containers.
	pod.Spec.InitContainers[0].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	_, n = DeviceRequest(pod)
	assert.Equal(t, int64(4), n)

	name, n = DeviceRequest(devicePod("p", "huawei.com/Ascend310P", 1, nil))
	assert.Equal(t, corev1.ResourceName("huawei.com/Ascend310P"), name)
	assert.Equal(t, int64(1), n)
	name, n = DeviceRequest(gpuPod("cpu", 0, nil))
	assert.Equal(t, corev1.ResourceName(""), name)
	assert.Zero(t, n)
}

func TestMemoryLabelValues(t *testing.T) {
	for _, tc := range []struct {
		v, unit string
		mib     int64
		ok      bool
	}{
		{"81920", UnitMiB, 81920, true},
		{"192G", UnitGiB, 192 * 1024, true},
		{"192", UnitGiB, 192 * 1024, true},
		{"64Gi", UnitMiB, 64 * 1024, true},
		{"40960Mi", UnitGiB, 40960, true},
		{"", UnitMiB, 0, false},
		{"80GB-HBM", UnitMiB, 0, false},
		{"99999999999999999999", UnitMiB, 0, false},
	} {
		mib, ok := memoryMiB(tc.v, tc.unit)
		assert.Equal(t, tc.ok, ok, tc.v)
		assert.Equal(t, tc.mib, mib, tc.v)
	}
}

// Match runs for every node while the topology plugin simulates a group; it must not
// allocate for the common case.
func TestMatchDoesNotAllocate(t *testing.T) {
	node := gpuNode("n", 8, 0, h100, 81559, "hopper").Node()
	pod := gpuPod("p", 8, map[string]string{ProductsAnnotation: a100 + "," + h100, FamiliesAnnotation: "hopper", MinMemoryAnnotation: "80G"})
	allocs := testing.AllocsPerRun(100, func() {
		if ok, _ := Match(pod, node); !ok {
			t.Fatal("no match")
		}
	})
	assert.Zero(t, allocs)
	plain := gpuPod("plain", 8, nil)
	allocs = testing.AllocsPerRun(100, func() { Match(plain, node) })
	assert.Zero(t, allocs)
}
