package topology

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/berth-sh/berth/pkg/fabric"
)

// Args with several mistakes at once, as the scheduler hands them over: every one is
// reported, each with its path, not only the first.
func TestArgsReportEveryMistake(t *testing.T) {
	_, err := decodeArgs(&runtime.Unknown{ContentType: runtime.ContentTypeJSON, Raw: []byte(`{
		"nodeLabelTiers": [
			{"name": "leaf", "lable": "network.berth.sh/leaf"},
			{"name": "spine", "label": "bad label!"},
			{"name": "leaf", "label": "network.berth.sh/spine"},
			{"name": "zone", "label": "network.berth.sh/spine"}
		],
		"retryOtherDomainSeconds": -5,
		"retryOtherDomainSecs": 60
	}`)})
	require.Error(t, err)
	for _, want := range []string{
		`unknown field "nodeLabelTiers[0].lable"`,
		`unknown field "retryOtherDomainSecs"`,
		"nodeLabelTiers[0].label: Required value",
		`nodeLabelTiers[1].label: Invalid value: "bad label!": not a label key`,
		`nodeLabelTiers[2].name: Duplicate value: "leaf"`,
		`nodeLabelTiers[3].label: Duplicate value: "network.berth.sh/spine"`,
		"retryOtherDomainSeconds: Invalid value: -5: must not be negative",
	} {
		assert.ErrorContains(t, err, want)
	}
	assert.NotContains(t, err.Error(), "nodeLabelTiers[2].label", "the label is new at [2]; only its name repeats")

	_, err = decodeArgs(&runtime.Unknown{Raw: []byte(`{"nodeLabelTiers": [{"label": "network.berth.sh/leaf"}]}`)})
	assert.ErrorContains(t, err, "nodeLabelTiers[0].name: Required value")
}

// The shipped NVLink tier: optional, so a cluster without clique labels keeps leaf at tier 1.
func TestArgsOptionalTier(t *testing.T) {
	args, err := decodeArgs(&runtime.Unknown{Raw: []byte(`{"nodeLabelTiers": [
		{"name": "nvlink", "label": "nvidia.com/gpu.clique", "optional": true},
		{"name": "leaf", "label": "network.berth.sh/leaf"}]}`)})
	require.NoError(t, err)
	assert.Equal(t, []fabric.LabelTier{{Name: "nvlink", Label: fabric.CliqueLabel, Optional: true}, {Name: "leaf", Label: "network.berth.sh/leaf"}}, args.NodeLabelTiers)
}
