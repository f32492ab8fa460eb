package fabric

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func node(name string, labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// Apart is what the router ranks decode endpoints by: the same node, then the lowest tier
// that joins two nodes, and Far for nodes no tier joins or the fabric does not know.
func TestApart(t *testing.T) {
	nodes := []*corev1.Node{
		node("a1", map[string]string{CliqueLabel: "c1", "network.berth.sh/leaf": "l1"}),
		node("a2", map[string]string{CliqueLabel: "c1", "network.berth.sh/leaf": "l1"}),
		node("b1", map[string]string{CliqueLabel: "c2", "network.berth.sh/leaf": "l1"}),
		node("z1", map[string]string{CliqueLabel: "c3", "network.berth.sh/leaf": "l2"}),
		node("bare", nil),
	}
	f, problems := Build(nil, nodes, DefaultLabelTiers)
	require.Empty(t, problems)
	assert.Equal(t, 0, f.Apart("a1", "a1"))
	assert.Equal(t, f.TierNames["nvlink"], f.Apart("a1", "a2"))
	assert.Equal(t, f.TierNames["leaf"], f.Apart("a1", "b1"))
	assert.Equal(t, Far, f.Apart("a1", "z1"), "no spine label: nothing joins two leaves")
	assert.Equal(t, Far, f.Apart("a1", "bare"))
	assert.Equal(t, Far, f.Apart("", ""), "an unscheduled pod is nowhere")
	assert.True(t, f.Knows("a1"))
	assert.False(t, f.Knows("bare"))
	assert.Equal(t, "nvlink", f.TierName(f.Apart("a1", "a2")))
}

func TestParseLabelTiers(t *testing.T) {
	tiers, err := ParseLabelTiers(FormatLabelTiers(DefaultLabelTiers))
	require.NoError(t, err)
	require.Len(t, tiers, len(DefaultLabelTiers))
	for i, tier := range tiers {
		assert.Equal(t, DefaultLabelTiers[i].Name, tier.Name)
		assert.Equal(t, DefaultLabelTiers[i].Label, tier.Label)
		assert.True(t, tier.Optional, "a tier no node carries is left out")
	}
	for in, msg := range map[string]string{
		"leaf":                           `tier "leaf": write name=label`,
		"leaf=a/b,leaf=c/d":              "the name leaf is given twice",
		"leaf=a/b,spine=a/b":             "the label a/b is given twice",
		"leaf=bad label!":                "bad label! is not a label key",
		"nvlink=nvidia.com/gpu.clique,=": `tier "=": write name=label`,
	} {
		_, err := ParseLabelTiers(in)
		assert.ErrorContains(t, err, msg, in)
	}
}
