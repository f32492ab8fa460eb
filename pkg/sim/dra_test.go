package sim

import (
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
)

// A node can have device-plugin GPUs, DRA GPUs or both; only DRA GPUs make a slice, and a
// node's NVLink clique label becomes its GPUs' cliqueID.
func TestGPUResourceSliceMixesWithTheDevicePlugin(t *testing.T) {
	plugin := NewNode("plugin", NodeShape{CPU: "8", Memory: "64Gi", GPUs: 8, GPUProduct: "NVIDIA-H100-80GB-HBM3"}, nil)
	require.Nil(t, GPUResourceSlice(plugin), "device-plugin GPUs are not published through DRA")

	mixed := NewNode("mixed", NodeShape{CPU: "8", Memory: "64Gi", GPUs: 4, DRAGPUs: 2, GPUProduct: "NVIDIA-L40S", GPUMemoryMiB: 46068},
		map[string]string{cliqueLabel: "7b1c.3"})
	gpus := mixed.Status.Allocatable[GPUResource]
	require.EqualValues(t, 4, gpus.Value(), "the device plugin keeps its own GPUs")
	s := GPUResourceSlice(mixed)
	require.NotNil(t, s)
	require.Equal(t, DRADriver, s.Spec.Driver)
	require.Equal(t, "mixed", s.Spec.Pool.Name)
	require.Len(t, s.Spec.Devices, 2)
	d := s.Spec.Devices[1]
	require.Equal(t, "gpu-1", d.Name)
	require.Equal(t, "NVIDIA L40S", *d.Attributes["productName"].StringValue)
	require.Equal(t, "Ada Lovelace", *d.Attributes["architecture"].StringValue)
	require.Equal(t, "gpu", *d.Attributes["type"].StringValue)
	require.Equal(t, "7b1c.3", *d.Attributes["cliqueID"].StringValue)
	require.True(t, d.Capacity["memory"].Value.Equal(resource.MustParse("46068Mi")))

	// A product NVML facts are not known for still gets a name and the family's architecture.
	other := NewNode("other", NodeShape{CPU: "8", Memory: "64Gi", DRAGPUs: 1, GPUProduct: "NVIDIA-B200", GPUFamily: "blackwell"}, nil)
	o := GPUResourceSlice(other).Spec.Devices[0]
	require.Equal(t, "Blackwell", *o.Attributes["architecture"].StringValue)
	require.NotContains(t, o.Attributes, "cliqueID")
	require.NotContains(t, o.Capacity, "memory")
}
