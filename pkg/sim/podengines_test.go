package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
)

// A pod that several ModelServers select serves the model of the most specific one: the
// canary's ModelServer (app and version) over the model-wide one (app alone), whatever
// their names, as Kthena 1.0's canary routing examples lay them out.
func TestEngineModelFromTheMostSpecificModelServer(t *testing.T) {
	server := func(name, model string, sel map[string]string) networkingv1alpha1.ModelServer {
		return networkingv1alpha1.ModelServer{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec: networkingv1alpha1.ModelServerSpec{
				Model:            ptr.To(model),
				InferenceEngine:  networkingv1alpha1.VLLM,
				WorkloadSelector: &networkingv1alpha1.WorkloadSelector{MatchLabels: sel},
			},
		}
	}
	servers := []networkingv1alpha1.ModelServer{
		server("chat-canary", "org/chat-canary", map[string]string{"app": "chat", "track": "canary"}),
		server("chat", "org/chat", map[string]string{"app": "chat"}),
		server("chat-b", "org/chat-b", map[string]string{"app": "chat"}),
	}
	pod := func(labels map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Labels: labels},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.9"},
		}
	}
	for _, tc := range []struct {
		labels map[string]string
		want   string
	}{
		{map[string]string{"app": "chat", "track": "canary"}, "org/chat-canary"},
		{map[string]string{"app": "chat"}, "org/chat"}, // equally specific: the first name
		{map[string]string{"app": "other"}, ""},
	} {
		p := pod(tc.labels)
		ms := selecting(p, servers)
		if tc.want == "" {
			assert.Nil(t, ms, "%v", tc.labels)
			continue
		}
		cfg, ok := engineConfig(p, ms)
		assert.True(t, ok)
		assert.Equal(t, tc.want, cfg.Model, "%v", tc.labels)
	}
}
