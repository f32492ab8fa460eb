package routestatus

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
)

func route(ns, name, model string, created time.Time, servers ...string) networkingv1alpha1.ModelRoute {
	mr := networkingv1alpha1.ModelRoute{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(created)}}
	mr.Spec.ModelName = model
	var targets []networkingv1alpha1.TargetModel
	for _, s := range servers {
		targets = append(targets, networkingv1alpha1.TargetModel{ModelServerName: s})
	}
	mr.Spec.Rules = []networkingv1alpha1.Rule{{TargetModels: targets}}
	return mr
}

func TestResolvedRefsNamesEachMissingTarget(t *testing.T) {
	mr := route("a", "r", "qwen", time.Now(), "qwen", "gone", "also-gone")
	c := ResolvedRefs(&mr, Existing{Servers: map[string]bool{"qwen": true}})
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, ReasonModelServerNotFound, c.Reason)
	assert.Contains(t, c.Message, `spec.rules[0].targetModels[1].modelServerName: ModelServer "gone" not found in namespace "a"`)
	assert.Contains(t, c.Message, `spec.rules[0].targetModels[2].modelServerName: ModelServer "also-gone"`)
	assert.NotContains(t, c.Message, `"qwen" not found`)

	c = ResolvedRefs(&mr, Existing{Servers: map[string]bool{"qwen": true, "gone": true, "also-gone": true}})
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Contains(t, c.Message, "every target (3)")
}

// A target naming an ExternalModelProvider resolves against the providers, not the servers.
func TestResolvedRefsLooksProvidersUp(t *testing.T) {
	mr := route("a", "r", "qwen", time.Now(), "qwen")
	mr.Spec.Rules[0].TargetModels = append(mr.Spec.Rules[0].TargetModels, networkingv1alpha1.TargetModel{ExternalModelProviderName: "openai"})
	c := ResolvedRefs(&mr, Existing{Servers: map[string]bool{"qwen": true, "openai": true}})
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, ReasonProviderNotFound, c.Reason)
	assert.Contains(t, c.Message, `spec.rules[0].targetModels[1].externalModelProviderName: ExternalModelProvider "openai" not found in namespace "a"`)

	c = ResolvedRefs(&mr, Existing{Servers: map[string]bool{"qwen": true}, Providers: map[string]bool{"openai": true}})
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Contains(t, c.Message, "every target (2) names an existing ModelServer or ExternalModelProvider")
}

func TestAcceptedRefusesABadRegexAndAShadowedModelName(t *testing.T) {
	now := time.Now()
	bad := route("a", "bad", "qwen", now, "qwen")
	bad.Spec.Rules[0].ModelMatch = &networkingv1alpha1.ModelMatch{URI: &networkingv1alpha1.StringMatch{Regex: ptr.To("/v1/(chat")}}
	c := Accepted(&bad, nil)
	assert.Equal(t, metav1.ConditionFalse, c.Status)
	assert.Equal(t, ReasonInvalidMatch, c.Reason)
	assert.Contains(t, c.Message, "spec.rules[0].modelMatch.uri: regex")

	older := route("z", "first", "qwen", now.Add(-time.Minute), "qwen")
	newer := route("a", "second", "qwen", now, "qwen")
	other := route("a", "other", "llama", now.Add(-time.Hour), "llama")
	all := []networkingv1alpha1.ModelRoute{newer, other, older}
	c = Accepted(&newer, all)
	assert.Equal(t, ReasonModelNameInUse, c.Reason)
	assert.Contains(t, c.Message, "ModelRoute z/first")
	assert.Equal(t, metav1.ConditionTrue, Accepted(&older, all).Status, "the oldest route serves the model")
	assert.Equal(t, metav1.ConditionTrue, Accepted(&other, all).Status, "another model is not in the way")
}

func TestWorkloadsFoundCountsWhatTheRouterServes(t *testing.T) {
	ms := &networkingv1alpha1.ModelServer{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "qwen"}}
	ms.Spec.WorkloadSelector = &networkingv1alpha1.WorkloadSelector{MatchLabels: map[string]string{"app": "qwen"}}
	pod := func(name string, lbl map[string]string, ready bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: name, Labels: lbl}}
		if ready {
			p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.5",
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		}
		return p
	}
	other := pod("other", map[string]string{"app": "llama"}, true)

	c := WorkloadsFound(ms, []*corev1.Pod{other})
	assert.Equal(t, ReasonNoMatchingPods, c.Reason)
	assert.Contains(t, c.Message, "spec.workloadSelector.matchLabels (app=qwen)")

	pending := pod("p0", map[string]string{"app": "qwen"}, false)
	c = WorkloadsFound(ms, []*corev1.Pod{other, pending})
	assert.Equal(t, ReasonNoReadyPods, c.Reason)
	assert.Equal(t, metav1.ConditionFalse, c.Status)

	c = WorkloadsFound(ms, []*corev1.Pod{other, pending, pod("p1", map[string]string{"app": "qwen"}, true)})
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, "2 pods match spec.workloadSelector; 1 can serve", c.Message)

	// A PD server with prefill pods only pairs nothing.
	ms.Spec.WorkloadSelector.PDGroup = &networkingv1alpha1.PDGroup{GroupKey: "group",
		PrefillLabels: map[string]string{"role": "prefill"}, DecodeLabels: map[string]string{"role": "decode"}}
	prefill := pod("pf", map[string]string{"app": "qwen", "role": "prefill", "group": "g0"}, true)
	c = WorkloadsFound(ms, []*corev1.Pod{prefill})
	assert.Equal(t, ReasonIncompletePDGroup, c.Reason)
	decode := pod("dc", map[string]string{"app": "qwen", "role": "decode", "group": "g0"}, true)
	assert.Equal(t, metav1.ConditionTrue, WorkloadsFound(ms, []*corev1.Pod{prefill, decode}).Status)
}
