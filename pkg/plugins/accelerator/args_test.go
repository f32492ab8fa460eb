package accelerator

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

func TestArgsDefaults(t *testing.T) {
	args, err := decodeArgs(nil)
	require.NoError(t, err)
	assert.Equal(t, DefaultResources(), args.Resources)
	assert.True(t, *args.PreferNodesWithoutAccelerators)
	assert.Empty(t, args.ClassCosts)

	var names []string
	for _, r := range args.Resources {
		names = append(names, string(r.Name))
	}
	assert.Equal(t, []string{"nvidia.com/gpu", "amd.com/gpu", "huawei.com/Ascend910", "huawei.com/Ascend310P"}, names)
	assert.Equal(t, AcceleratorResource{Name: "nvidia.com/gpu", ProductLabel: "nvidia.com/gpu.product", FamilyLabel: "nvidia.com/gpu.family", MemoryLabel: "nvidia.com/gpu.memory", MemoryLabelUnit: UnitMiB}, args.Resources[0])
}

// The YAML documented for the profile's pluginConfig decodes as the scheduler hands it
// over: a runtime.Unknown holding JSON.
func TestArgsFromProfileYAML(t *testing.T) {
	const profileArgs = `
classCosts:
  NVIDIA-A100-SXM4-80GB: 1.0
  NVIDIA-H100-80GB-HBM3: 2.2
preferNodesWithoutAccelerators: true
resources:
- name: nvidia.com/gpu
- name: amd.com/gpu
- name: huawei.com/Ascend910
  memoryLabel: berth.sh/npu-memory
  memoryLabelUnit: GiB
`
	raw, err := yaml.YAMLToJSON([]byte(profileArgs))
	require.NoError(t, err)
	args, err := decodeArgs(&runtime.Unknown{Raw: raw, ContentType: runtime.ContentTypeJSON})
	require.NoError(t, err)
	assert.Equal(t, 2.2, args.ClassCosts[h100])
	require.Len(t, args.Resources, 3)
	assert.Equal(t, DefaultResources()[0], args.Resources[0], "a built-in name takes the built-in labels")
	assert.Equal(t, "amd.com/gpu.vram", args.Resources[1].MemoryLabel)
	assert.Equal(t, UnitGiB, args.Resources[1].MemoryLabelUnit)
	assert.Equal(t, AcceleratorResource{Name: "huawei.com/Ascend910", ProductLabel: "node.kubernetes.io/npu.chip.name", FamilyLabel: "accelerator", MemoryLabel: "berth.sh/npu-memory", MemoryLabelUnit: UnitGiB}, args.Resources[2])

	_, err = decodeArgs(&runtime.Unknown{Raw: []byte(`{"classCost": {"x": 1}}`)})
	assert.ErrorContains(t, err, `unknown field "classCost"`, "a misspelt field is refused, not ignored")
	args, err = decodeArgs(&runtime.Unknown{})
	require.NoError(t, err)
	assert.Len(t, args.Resources, 4)
}

func TestArgsValidationNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		args *Args
		want string
	}{
		{&Args{Resources: []AcceleratorResource{{ProductLabel: "x"}}}, "resources[0].name: Required value"},
		{&Args{Resources: []AcceleratorResource{{Name: "cpu"}}}, `resources[0].name: Invalid value: "cpu": not an extended resource name`},
		{&Args{Resources: []AcceleratorResource{{Name: "kubernetes.io/gpu"}}}, `resources[0].name: Invalid value: "kubernetes.io/gpu": not an extended resource name`},
		{&Args{Resources: []AcceleratorResource{{Name: "nvidia.com/gpu"}, {Name: "nvidia.com/gpu"}}}, `resources[1].name: Duplicate value: "nvidia.com/gpu"`},
		{&Args{Resources: []AcceleratorResource{{Name: "example.com/npu", ProductLabel: "bad label!"}}}, `resources[0].productLabel: Invalid value: "bad label!": not a label key`},
		{&Args{Resources: []AcceleratorResource{{Name: "example.com/npu", MemoryLabelUnit: "GB"}}}, `resources[0].memoryLabelUnit: Unsupported value: "GB": supported values: "MiB", "GiB"`},
		{&Args{ClassCosts: map[string]float64{a100: -1}}, `classCosts[NVIDIA-A100-SXM4-80GB]: Invalid value: -1: must be between 0 and 1e+06`},
		{&Args{ClassCosts: map[string]float64{a100: math.NaN()}}, `classCosts[NVIDIA-A100-SXM4-80GB]: Invalid value: NaN: must be between 0 and`},
		{&Args{ClassCosts: map[string]float64{"NVIDIA A100": 1}}, `classCosts[NVIDIA A100]: Invalid value: "NVIDIA A100": the key is not a product label value`},
	} {
		_, err := decodeArgs(tc.args)
		assert.ErrorContains(t, err, "accelerator args: "+tc.want)
	}
}

// Args with several mistakes at once, as the scheduler hands them over: every one is
// reported, each with its path, not only the first.
func TestArgsReportEveryMistake(t *testing.T) {
	_, err := decodeArgs(&runtime.Unknown{ContentType: runtime.ContentTypeJSON, Raw: []byte(`{
		"resources": [
			{"name": "cpu", "productLable": "x"},
			{"name": "example.com/npu", "memoryLabel": "bad label!", "memoryLabelUnit": "GB"},
			{"name": "example.com/npu"}
		],
		"classCosts": {"NVIDIA A100": 1, "NVIDIA-H100-80GB-HBM3": -2},
		"preferNodesWithoutAccelerator": false
	}`)})
	require.Error(t, err)
	for _, want := range []string{
		`unknown field "resources[0].productLable"`,
		`unknown field "preferNodesWithoutAccelerator"`,
		`resources[0].name: Invalid value: "cpu": not an extended resource name`,
		`resources[1].memoryLabel: Invalid value: "bad label!": not a label key`,
		`resources[1].memoryLabelUnit: Unsupported value: "GB"`,
		`resources[2].name: Duplicate value: "example.com/npu"`,
		`classCosts[NVIDIA A100]: Invalid value: "NVIDIA A100": the key is not a product label value`,
		`classCosts[NVIDIA-H100-80GB-HBM3]: Invalid value: -2: must be between 0 and 1e+06`,
	} {
		assert.ErrorContains(t, err, want)
	}
}

func TestArgsDeepCopyDoesNotShare(t *testing.T) {
	in := &Args{ClassCosts: map[string]float64{a100: 1}, Resources: DefaultResources(), PreferNodesWithoutAccelerators: ptr.To(false)}
	out := in.DeepCopyObject().(*Args)
	out.ClassCosts[a100] = 5
	out.Resources[0].ProductLabel = "x"
	*out.PreferNodesWithoutAccelerators = true
	assert.Equal(t, 1.0, in.ClassCosts[a100])
	assert.Equal(t, "nvidia.com/gpu.product", in.Resources[0].ProductLabel)
	assert.False(t, *in.PreferNodesWithoutAccelerators)
}
