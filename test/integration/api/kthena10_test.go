package api

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	volcanov1beta1 "volcano.sh/apis/pkg/apis/scheduling/v1beta1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// A ModelServing as Kthena 1.0 writes it: networkTopology as groupPolicy and rolePolicy, a
// RoleRollingUpdate with each role's maxUnavailable and partition and a percentage
// partition for the groups, and a plugin chain. Written here for Berth's tests, not taken
// from Kthena's examples.
const kthena10ModelServing = `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata: {name: kthena10}
spec:
  schedulerName: volcano
  replicas: 4
  plugins:
  - name: lws-standard-labels
    type: BuiltIn
  - name: demo-pod-tweaks
    type: BuiltIn
    scope: {roles: [decode], target: Worker}
    config:
      annotations: {example.com/tier: gold}
      env: [{name: NCCL_DEBUG, value: INFO}]
  rolloutStrategy:
    type: RoleRollingUpdate
    rollingUpdateConfiguration: {partition: "25%"}
  template:
    networkTopology:
      groupPolicy: {mode: soft, highestTierName: spine}
      rolePolicy: {highestTierAllowed: 1}
    roles:
    - name: prefill
      replicas: 2
      maxUnavailable: "50%"
      entryTemplate: {spec: {containers: [{name: sglang, image: sglang:v0.5}]}}
    - name: decode
      replicas: 4
      maxUnavailable: 1
      partition: 2
      workerReplicas: 1
      entryTemplate: {spec: {containers: [{name: sglang, image: sglang:v0.5}]}}
      workerTemplate: {spec: {containers: [{name: sglang, image: sglang:v0.5}]}}
`

// Kthena 1.0's shape is accepted beside the spec's and reads back as written, into the
// same Go types the controller uses.
func TestKthena10ModelServingApplies(t *testing.T) {
	c := newClient(t)
	ns := newNamespace(t, c)
	ctx := context.Background()
	obj := decodeYAML(t, kthena10ModelServing)[0]
	want := obj.DeepCopy()
	obj.SetNamespace(ns)
	require.NoError(t, c.Create(ctx, obj))
	got := &unstructured.Unstructured{}
	got.SetGroupVersionKind(obj.GroupVersionKind())
	require.NoError(t, c.Get(ctx, keyOf(obj), got))
	assert.Empty(t, missingFrom(want.Object["spec"], got.Object["spec"], "spec"), "every field reads back as written")

	ms := &workloadv1alpha1.ModelServing{}
	require.NoError(t, c.Get(ctx, keyOf(obj), ms))
	nt := ms.Spec.Template.NetworkTopology
	require.NotNil(t, nt)
	group, role := nt.Policies()
	require.NotNil(t, group)
	require.NotNil(t, role)
	assert.Equal(t, volcanov1beta1.SoftNetworkTopologyMode, group.Mode)
	assert.Equal(t, "spine", group.HighestTierName)
	assert.Equal(t, volcanov1beta1.HardNetworkTopologyMode, role.Mode, "rolePolicy.mode defaults to hard, as Volcano's")
	assert.Equal(t, 1, *role.HighestTierAllowed)
	assert.Equal(t, workloadv1alpha1.RoleRollingUpdate, ms.Spec.RolloutStrategy.Type)
	assert.Equal(t, intstr.FromString("25%"), *ms.Spec.RolloutStrategy.RollingUpdateConfiguration.Partition)
	assert.Equal(t, intstr.FromString("50%"), *ms.Spec.Template.Roles[0].MaxUnavailable)
	assert.Equal(t, intstr.FromInt32(2), *ms.Spec.Template.Roles[1].Partition)
	require.Len(t, ms.Spec.Plugins, 2)
	assert.Equal(t, workloadv1alpha1.PluginTypeBuiltIn, ms.Spec.Plugins[1].Type)
	assert.JSONEq(t, `{"annotations":{"example.com/tier":"gold"},"env":[{"name":"NCCL_DEBUG","value":"INFO"}]}`, string(ms.Spec.Plugins[1].Config.Raw))
}

// Mixing the spec's flat networkTopology with Kthena 1.0's groupPolicy/rolePolicy is
// refused, naming the flat field; so are Kthena 1.0 fields with values that mean nothing.
func TestKthena10ValidationNamesTheField(t *testing.T) {
	nt := func(o map[string]any) map[string]any { return dig(o, "spec", "template", "networkTopology") }
	role := func(o map[string]any, i int) map[string]any {
		return dig(o, "spec", "template")["roles"].([]any)[i].(map[string]any)
	}
	plugin := func(o map[string]any) map[string]any { return dig(o, "spec")["plugins"].([]any)[1].(map[string]any) }
	cases := []badInput{
		{"flat highestTierAllowed beside groupPolicy", kthena10ModelServing, func(o map[string]any) { nt(o)["highestTierAllowed"] = 2 },
			"spec.template.networkTopology.highestTierAllowed", "cannot be mixed with Kthena 1.0's groupPolicy/rolePolicy"},
		{"flat highestTierName beside rolePolicy", kthena10ModelServing, func(o map[string]any) {
			delete(nt(o), "groupPolicy")
			nt(o)["highestTierName"] = "spine"
		}, "spec.template.networkTopology.highestTierName", "cannot be mixed with Kthena 1.0's groupPolicy/rolePolicy"},
		{"flat soft mode beside groupPolicy", kthena10ModelServing, func(o map[string]any) { nt(o)["mode"] = "soft" },
			"spec.template.networkTopology.mode", "cannot be mixed with Kthena 1.0's groupPolicy/rolePolicy"},
		{"both tiers in groupPolicy", kthena10ModelServing, func(o map[string]any) { dig(nt(o), "groupPolicy")["highestTierAllowed"] = 1 },
			"spec.template.networkTopology.groupPolicy", "mutually exclusive"},
		{"unknown rolePolicy mode", kthena10ModelServing, func(o map[string]any) { dig(nt(o), "rolePolicy")["mode"] = "strict" },
			"spec.template.networkTopology.rolePolicy.mode", `supported values: "hard", "soft"`},
		{"role maxUnavailable without RoleRollingUpdate", kthena10ModelServing, func(o map[string]any) {
			dig(o, "spec", "rolloutStrategy")["type"] = "ServingGroupRollingUpdate"
		}, "spec.template.roles", "need rolloutStrategy.type RoleRollingUpdate"},
		{"role maxUnavailable 0", kthena10ModelServing, func(o map[string]any) { role(o, 1)["maxUnavailable"] = 0 },
			"spec.template.roles[1].maxUnavailable", "must be a positive integer or a percentage"},
		{"role partition not a percentage", kthena10ModelServing, func(o map[string]any) { role(o, 1)["partition"] = "half" },
			"spec.template.roles[1].partition", "must be a non-negative integer or a percentage"},
		{"group partition negative", kthena10ModelServing, func(o map[string]any) {
			dig(o, "spec", "rolloutStrategy", "rollingUpdateConfiguration")["partition"] = -1
		}, "spec.rolloutStrategy.rollingUpdateConfiguration.partition", "must be a non-negative integer or a percentage"},
		{"webhook plugin", kthena10ModelServing, func(o map[string]any) { plugin(o)["type"] = "Webhook" },
			"spec.plugins[1].type", `supported values: "BuiltIn"`},
		{"unknown plugin target", kthena10ModelServing, func(o map[string]any) { dig(plugin(o), "scope")["target"] = "Leader" },
			"spec.plugins[1].scope.target", `supported values: "All", "Entry", "Worker"`},
		{"plugin without a name", kthena10ModelServing, func(o map[string]any) { plugin(o)["name"] = "" },
			"spec.plugins[1].name", "at least 1 chars long"},
		// The spec's shape is refused the same way it always was.
		{"flat soft mode beside rolePolicy in the spec's base", validModelServing, func(o map[string]any) {
			dig(o, "spec", "template")["networkTopology"] = map[string]any{"mode": "soft", "rolePolicy": map[string]any{"highestTierAllowed": 1}}
		}, "spec.template.networkTopology.mode", "cannot be mixed"},
	}
	c := newClient(t)
	ns := newNamespace(t, c)
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := decodeYAML(t, tc.base)[0]
			obj.SetNamespace(ns)
			require.NoError(t, c.Create(ctx, obj.DeepCopy(), dryRunAll), "the unmodified base must be accepted")
			tc.patch(obj.Object)
			err := c.Create(ctx, obj)
			require.Error(t, err, "the apiserver accepted a bad ModelServing")
			assert.True(t, apierrors.IsInvalid(err), "want an Invalid error, got %v", err)
			assert.Contains(t, err.Error(), tc.field, "the error must name the field")
			assert.Contains(t, err.Error(), tc.words, "the error must explain the mistake")
			t.Logf("rejected as a user sees it: %v", err)
		})
	}
}

// The spec's flat networkTopology is the same as before: its mode defaults to hard, and
// with it alone the PodGroup gets it whole.
func TestSpecNetworkTopologyUnchanged(t *testing.T) {
	ms := createMinimal[workloadv1alpha1.ModelServing](t, `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata: {name: flat}
spec:
  template:
    networkTopology: {highestTierName: leaf}
    roles:
    - name: server
      entryTemplate: {spec: {containers: [{name: vllm, image: vllm}]}}
`)
	group, role := ms.Spec.Template.NetworkTopology.Policies()
	require.NotNil(t, group)
	assert.Nil(t, role)
	assert.Equal(t, volcanov1beta1.NetworkTopologySpec{Mode: volcanov1beta1.HardNetworkTopologyMode, HighestTierName: "leaf"}, *group)
}
