package router

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/berth-sh/berth/internal/systemtest"
	"github.com/berth-sh/berth/pkg/fabric"
	"github.com/berth-sh/berth/pkg/sim"
)

// A pdGroup whose groupKey has one value across the prefill and decode pods lets any
// prefill hand its KV to any decode; the routers, reading the fabric from the nodes'
// labels, pair each prefill with the decode in its own NVLink domain while that decode has
// room, rather than with whichever decode is least loaded (half the time across the
// spine, with idle decodes).
func TestPDPairsWithinNVLinkDomain(t *testing.T) {
	w := newWorld(t, 0)
	// Two NVLink domains on two leaves: a prefill on one node of each, a decode on the other.
	for _, dom := range []string{"a", "b"} {
		for i := range 2 {
			n := systemtest.GPUNode(fmt.Sprintf("%s-%s%d", w.ns, dom, i), w.ns, "")
			n.Labels[fabric.CliqueLabel] = w.ns + "-clique-" + dom
			n.Labels["network.berth.sh/leaf"] = w.ns + "-leaf-" + dom
			_, err := kube.CoreV1().Nodes().Create(w.ctx, n, metav1.CreateOptions{})
			require.NoError(t, err)
		}
	}
	const name = "pdtopo"
	for _, dom := range []string{"a", "b"} {
		w.podOn("prefill-"+dom, fmt.Sprintf("%s-%s0", w.ns, dom), map[string]string{"app": name, "pd-group": "shared", "pd-role": "prefill"})
		w.podOn("decode-"+dom, fmt.Sprintf("%s-%s1", w.ns, dom), map[string]string{"app": name, "pd-group": "shared", "pd-role": "decode"})
	}
	w.apply(fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: %[1]s}
spec:
  model: base-model
  inferenceEngine: vLLM
  workloadSelector:
    matchLabels: {app: %[1]s}
    pdGroup: {groupKey: pd-group, prefillLabels: {pd-role: prefill}, decodeLabels: {pd-role: decode}}
  kvConnector: {type: http}
`, name), fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: %[1]s}
spec:
  modelName: %[1]s
  rules: [{targetModels: [{modelServerName: %[1]s}]}]
`, name))
	w.waitEndpoints(name, 4)

	const n = 24
	near, prefills := 0, map[string]int{}
	for i := range n {
		_, resp, err := chat(w.ctx, client_(i%2), name, fmt.Sprintf("question %d about the fabric", i))
		require.NoError(t, err)
		prefill, decode, ok := strings.Cut(resp.Header.Get("X-Berth-Endpoint"), "+")
		require.True(t, ok, "X-Berth-Endpoint %q names a pair", resp.Header.Get("X-Berth-Endpoint"))
		pd, dd := prefill[strings.LastIndex(prefill, "-")+1:], decode[strings.LastIndex(decode, "-")+1:]
		prefills[pd]++
		if pd == dd {
			near++
		} else {
			t.Logf("request %d: %s paired across the spine with %s", i, prefill, decode)
		}
	}
	assert.Len(t, prefills, 2, "both prefills served (%v): the pairing was tested from each domain", prefills)
	assert.Equal(t, n, near, "every request's decode sits in its prefill's NVLink domain while that decode has room")
}

// podOn is an engine pod for berth-scheduler that must land on node (by its hostname label).
func (w *world) podOn(name, node string, labels map[string]string) {
	w.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns, Labels: labels},
		Spec: corev1.PodSpec{
			SchedulerName: "berth-scheduler",
			NodeSelector:  map[string]string{corev1.LabelHostname: node},
			Containers: []corev1.Container{{
				Name: "engine", Image: "vllm/vllm-openai:v0.11.0", Args: []string{"--model", "base-model"},
				Ports:     []corev1.ContainerPort{{ContainerPort: 8000}},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{sim.GPUResource: resource.MustParse("1")}},
			}},
		},
	}
	require.NoError(w.t, cl.Create(w.ctx, p))
}
