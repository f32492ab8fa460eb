package view

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// pdPod is a Ready pod of role ("prefill" or "decode") created under revision rev from
// template hash tmpl, its revision's roles in roles ("" for none); rev "" leaves it without
// the controller's labels (a pod berth-controller did not make).
func pdPod(name, role, rev, tmpl, roles, ip string) *corev1.Pod {
	labels := map[string]string{"app": "m", "pd": "all", "role": role}
	annotations := map[string]string{}
	if rev != "" {
		labels[workloadv1alpha1.RevisionLabel] = rev
		labels[workloadv1alpha1.RoleLabel] = role
		labels[workloadv1alpha1.RoleTemplateHashLabel] = tmpl
	}
	if roles != "" {
		annotations[workloadv1alpha1.RevisionRolesAnnotation] = roles
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: labels, Annotations: annotations},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func pdServer(annotations map[string]string) *networkingv1alpha1.ModelServer {
	return &networkingv1alpha1.ModelServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "m", Annotations: annotations},
		Spec: networkingv1alpha1.ModelServerSpec{WorkloadSelector: &networkingv1alpha1.WorkloadSelector{
			MatchLabels: map[string]string{"app": "m"},
			PDGroup: &networkingv1alpha1.PDGroup{GroupKey: "pd",
				PrefillLabels: map[string]string{"role": "prefill"}, DecodeLabels: map[string]string{"role": "decode"}},
		}},
	}
}

// A prefill pairs with a decode of its own revision; with one of another revision only when
// one of the two revisions had both their role templates (a RoleRollingUpdate changed one
// role only), or when the ModelServer's annotation allows crossing revisions. Pods without
// the controller's revision label are unconstrained.
func TestPairingByRevision(t *testing.T) {
	pods := []*corev1.Pod{
		// r1: prefill p1, decode d1. r2: prefill p2, decode d2 (both roles changed).
		// r3: prefill p3, decode unchanged (d1's template).
		pdPod("p-r1", "prefill", "r1", "p1", "prefill=p1,decode=d1", "10.0.0.1"),
		pdPod("d-r1", "decode", "r1", "d1", "prefill=p1,decode=d1", "10.0.0.2"),
		pdPod("p-r2", "prefill", "r2", "p2", "prefill=p2,decode=d2", "10.0.0.3"),
		pdPod("d-r2", "decode", "r2", "d2", "prefill=p2,decode=d2", "10.0.0.4"),
		pdPod("p-r3", "prefill", "r3", "p3", "prefill=p3,decode=d1", "10.0.0.5"),
		pdPod("p-old", "prefill", "r0", "p0", "", "10.0.0.6"), // created before the annotation
		pdPod("d-bare", "decode", "", "", "", "10.0.0.7"),
	}
	s := Resolve(pdServer(nil), pods)
	require.Len(t, s.Prefill, 4)
	require.Len(t, s.Decode, 3)
	by := map[string]*Endpoint{}
	for _, e := range append(append([]*Endpoint{}, s.Prefill...), s.Decode...) {
		by[e.Pod] = e
	}
	for _, c := range []struct {
		p, d string
		want Pairing
		ok   bool
	}{
		{"p-r1", "d-r1", SameRevision, true},
		{"p-r2", "d-r2", SameRevision, true},
		{"p-r1", "d-r2", CrossRevision, false},
		{"p-r2", "d-r1", CrossRevision, false},
		{"p-r3", "d-r1", CompatibleRevision, true}, // r3 kept r1's decode
		{"p-r3", "d-r2", CrossRevision, false},
		{"p-old", "d-r1", CrossRevision, false},
		{"p-r2", "d-bare", SameRevision, true},
	} {
		got, ok := s.Pairing(by[c.p], by[c.d])
		assert.Equal(t, c.want, got, "%s + %s", c.p, c.d)
		assert.Equal(t, c.ok, ok, "%s + %s", c.p, c.d)
		assert.Equal(t, c.ok, s.Pairable(by[c.p], by[c.d]), "%s + %s", c.p, c.d)
	}

	allow := Resolve(pdServer(map[string]string{CrossRevisionAnnotation: "allow"}), pods)
	got, ok := allow.Pairing(by["p-r1"], by["d-r2"])
	assert.Equal(t, CrossRevision, got)
	assert.True(t, ok, "the annotation allows pairing across revisions")

	other := *by["d-r1"]
	other.Group = "elsewhere"
	assert.False(t, allow.Pairable(by["p-r1"], &other), "never across PD groups")
}
