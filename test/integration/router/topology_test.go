package router

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

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
// labels, pair the prefill with the decode in its own NVLink domain while that decode has
// room, even when it is busier than the decode across the spine (which pairing by load
// alone would pick every time).
func TestPDPairsWithinNVLinkDomain(t *testing.T) {
	w := newWorld(t, 0)
	// Two NVLink domains on two leaves, two nodes each.
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
	// The prefill in domain a; a decode in each domain. decode-a runs in real time, so the
	// streams held on it below stay open while the test sends its requests.
	w.podOn("prefill-a", w.ns+"-a0", map[string]string{"app": name, "pd-group": "shared", "pd-role": "prefill"})
	w.podOn("decode-a", w.ns+"-a1", map[string]string{"app": name, "pd-group": "shared", "pd-role": "decode", timeScaleLabel: "1"})
	w.podOn("decode-b", w.ns+"-b1", map[string]string{"app": name, "pd-group": "shared", "pd-role": "decode"})
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
	w.waitEndpoints(name, 3)

	// Two long streams sent to decode-a directly: it runs two sequences (nothing waits, its
	// KV cache is far from full), decode-b none. By load, decode-b is the better pick.
	near := w.engine("decode-a").Addr()
	hold, release := context.WithCancel(w.ctx)
	defer release()
	for i := range 2 {
		body := fmt.Sprintf(`{"model":"base-model","stream":true,"max_tokens":20000,"messages":[{"role":"user","content":"hold %d"}]}`, i)
		req, err := http.NewRequestWithContext(hold, http.MethodPost, "http://"+near+"/v1/chat/completions", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		go func() {
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	w.eventually("both routers scraped decode-a running the two held streams", 30*time.Second, func() bool {
		for _, r := range routers {
			if st, ok := r.Scraped(near); !ok || st.Running < 2 {
				return false
			}
		}
		return true
	})

	const n = 16
	nearPairs := 0
	for i := range n {
		_, resp, err := chat(w.ctx, client_(i%2), name, fmt.Sprintf("question %d about the fabric", i))
		require.NoError(t, err)
		prefill, decode, ok := strings.Cut(resp.Header.Get("X-Berth-Endpoint"), "+")
		require.True(t, ok, "X-Berth-Endpoint %q names a pair", resp.Header.Get("X-Berth-Endpoint"))
		if strings.HasSuffix(decode, "/decode-a") {
			nearPairs++
		} else {
			t.Logf("request %d: %s paired across the spine with %s", i, prefill, decode)
		}
	}
	assert.Equal(t, n, nearPairs, "every request's decode sits in its prefill's NVLink domain while that decode has room")
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
