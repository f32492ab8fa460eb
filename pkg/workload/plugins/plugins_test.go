package plugins

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

func pod(name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "x"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm"}}}}
}

// The labels LeaderWorkerSet's controller gives its pods, on the pods of a ModelServing a
// LeaderWorkerSet owns; nothing on any other ModelServing.
func TestLWSLabels(t *testing.T) {
	chain, err := NewChain([]workloadv1alpha1.PluginSpec{{Name: LWSLabelsName, Type: workloadv1alpha1.PluginTypeBuiltIn}})
	require.NoError(t, err)
	ms := &workloadv1alpha1.ModelServing{ObjectMeta: metav1.ObjectMeta{Name: "llama", OwnerReferences: []metav1.OwnerReference{
		{APIVersion: "leaderworkerset.x-k8s.io/v1", Kind: "LeaderWorkerSet", Name: "llama", UID: "u"}}}}
	p := pod("llama-2-server-0-3")
	require.NoError(t, chain.OnPodCreate(&Pod{ModelServing: ms, Group: 2, Role: "server", RoleID: "server-0", Worker: 3, Pod: p}))
	assert.Equal(t, map[string]string{
		"app":                              "x",
		"leaderworkerset.sigs.k8s.io/name": "llama",
		"leaderworkerset.sigs.k8s.io/group-index":  "2",
		"leaderworkerset.sigs.k8s.io/worker-index": "3",
		// sha1("llama-2"), LeaderWorkerSet's group hash
		"leaderworkerset.sigs.k8s.io/group-key": "e6f87e08676804f108eecda08ef87d605d9bee00",
	}, p.Labels)

	// LWS's exclusive placement, from the annotation the take-over puts on the templates.
	p = pod("llama-2-server-0-1")
	p.Annotations = map[string]string{"leaderworkerset.sigs.k8s.io/exclusive-topology": "network.berth.sh/leaf"}
	require.NoError(t, chain.OnPodCreate(&Pod{ModelServing: ms, Group: 2, Role: "server", RoleID: "server-0", Worker: 1, Pod: p}))
	require.NotNil(t, p.Spec.Affinity)
	key := "e6f87e08676804f108eecda08ef87d605d9bee00"
	assert.Equal(t, []corev1.PodAffinityTerm{{TopologyKey: "network.berth.sh/leaf", LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "leaderworkerset.sigs.k8s.io/group-key", Operator: metav1.LabelSelectorOpIn, Values: []string{key}}}}}},
		p.Spec.Affinity.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, "the group together in one leaf")
	assert.Equal(t, []corev1.PodAffinityTerm{{TopologyKey: "network.berth.sh/leaf", LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "leaderworkerset.sigs.k8s.io/group-key", Operator: metav1.LabelSelectorOpExists},
		{Key: "leaderworkerset.sigs.k8s.io/group-key", Operator: metav1.LabelSelectorOpNotIn, Values: []string{key}}}}}},
		p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, "and no other group in that leaf")

	ms.OwnerReferences = nil
	p = pod("llama-2-server-0-0")
	require.NoError(t, chain.OnPodCreate(&Pod{ModelServing: ms, Group: 2, Role: "server", RoleID: "server-0", Pod: p}))
	assert.Equal(t, map[string]string{"app": "x"}, p.Labels, "no LeaderWorkerSet owns it: nothing to add")
}

// demo-pod-tweaks changes only the pods its scope names, in list order after the plugins
// before it.
func TestPodTweaksScope(t *testing.T) {
	chain, err := NewChain([]workloadv1alpha1.PluginSpec{{
		Name:   PodTweaksName,
		Config: &apiextensionsv1.JSON{Raw: []byte(`{"runtimeClassName":"nvidia","annotations":{"example.com/tweaked":"yes"},"env":[{"name":"TWEAK","value":"1"}]}`)},
		Scope:  &workloadv1alpha1.PluginScope{Roles: []string{"decode"}, Target: workloadv1alpha1.PluginTargetWorker},
	}})
	require.NoError(t, err)
	ms := &workloadv1alpha1.ModelServing{ObjectMeta: metav1.ObjectMeta{Name: "pd"}}
	for _, tc := range []struct {
		role    string
		worker  int
		tweaked bool
	}{{"decode", 1, true}, {"decode", 0, false}, {"prefill", 1, false}} {
		p := pod("p")
		require.NoError(t, chain.OnPodCreate(&Pod{ModelServing: ms, Role: tc.role, Worker: tc.worker, Pod: p}))
		if !tc.tweaked {
			assert.Nil(t, p.Spec.RuntimeClassName, "%s worker %d", tc.role, tc.worker)
			continue
		}
		assert.Equal(t, "nvidia", *p.Spec.RuntimeClassName)
		assert.Equal(t, "yes", p.Annotations["example.com/tweaked"])
		assert.Equal(t, []corev1.EnvVar{{Name: "TWEAK", Value: "1"}}, p.Spec.Containers[0].Env)
	}
}

// A plugin that is not a built-in, or a config that does not read, names the plugin.
func TestChainRefuses(t *testing.T) {
	_, err := NewChain([]workloadv1alpha1.PluginSpec{{Name: LWSLabelsName}, {Name: "gpu-driver-injector", Type: workloadv1alpha1.PluginTypeBuiltIn}})
	var pe *Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, ReasonUnknownPlugin, pe.Reason)
	assert.Equal(t, 1, pe.Index)
	assert.Contains(t, err.Error(), `spec.plugins[1] "gpu-driver-injector"`)
	assert.Contains(t, err.Error(), "demo-pod-tweaks, lws-standard-labels", "the message lists what exists")

	_, err = NewChain([]workloadv1alpha1.PluginSpec{{Name: PodTweaksName, Config: &apiextensionsv1.JSON{Raw: []byte(`{"runtimeClass":"nvidia"}`)}}})
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, ReasonInvalidPluginConfig, pe.Reason)
	assert.Contains(t, err.Error(), `unknown field "runtimeClass"`)
}
