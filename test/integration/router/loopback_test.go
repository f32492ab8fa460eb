package router

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Every pod the simulated kubelet runs gets an IP of its own on 127.0.0.0/8 (status.podIP,
// and the same single address in status.podIPs), and the pod's simulated engine answers on
// that IP at the pod's container port, so whatever dials a pod's IP, as on a cluster, reaches
// that pod's engine: the entry pods and the workers of a ModelServing alike.
func TestRunningPodsGetLoopbackIPsTheirEnginesAnswerOn(t *testing.T) {
	w := newWorld(t, 1)
	w.apply(`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata: {name: lo}
spec:
  schedulerName: berth-scheduler
  replicas: 2
  template:
    roles:
    - name: server
      replicas: 1
      workerReplicas: 1
      entryTemplate:
        spec:
          containers:
          - name: vllm
            image: vllm/vllm-openai:v0.11.0
            args: ["--model", "Qwen/Qwen3-8B", "--port", "8100"]
            ports: [{containerPort: 8100}]
            resources: {limits: {nvidia.com/gpu: "1"}}
      workerTemplate:
        spec:
          containers:
          - name: vllm
            image: vllm/vllm-openai:v0.11.0
            args: ["--model", "Qwen/Qwen3-8B", "--port", "8100"]
            ports: [{containerPort: 8100}]
            resources: {limits: {nvidia.com/gpu: "1"}}
`)
	var pods []corev1.Pod
	w.eventually("the 4 pods run with an IP", 60*time.Second, func() bool {
		list, err := kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{LabelSelector: "modelserving.volcano.sh/name=lo"})
		if err != nil || len(list.Items) != 4 {
			return false
		}
		for _, p := range list.Items {
			if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
				return false
			}
		}
		pods = list.Items
		return true
	})

	_, loopback, err := net.ParseCIDR("127.0.0.0/8")
	require.NoError(t, err)
	owner := map[string]string{}
	for _, p := range pods {
		ip := net.ParseIP(p.Status.PodIP)
		require.NotNil(t, ip, "pod %s has an IP address, not %q", p.Name, p.Status.PodIP)
		assert.True(t, loopback.Contains(ip), "pod %s has IP %s, outside 127.0.0.0/8", p.Name, ip)
		assert.Equal(t, []corev1.PodIP{{IP: p.Status.PodIP}}, p.Status.PodIPs, "pod %s lists its one IP", p.Name)
		if other, dup := owner[p.Status.PodIP]; dup {
			t.Errorf("pods %s and %s share IP %s", other, p.Name, p.Status.PodIP)
		}
		owner[p.Status.PodIP] = p.Name
	}

	// Each engine answers on its own pod's IP, and says which pod it is.
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, p := range pods {
		url := fmt.Sprintf("http://%s/v1/models", net.JoinHostPort(p.Status.PodIP, "8100"))
		var models struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		var servedBy string
		w.eventually("the engine of "+p.Name+" answers on "+url, 30*time.Second, func() bool {
			resp, err := hc.Get(url)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			servedBy = resp.Header.Get("X-Sim-Engine")
			return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&models) == nil
		})
		assert.Equal(t, w.ns+"/"+p.Name, servedBy, "the engine on %s is pod %s's", url, p.Name)
		if assert.Len(t, models.Data, 1, "models served on %s", url) {
			assert.Equal(t, "Qwen/Qwen3-8B", models.Data[0].ID, "the model pod %s serves", p.Name)
		}
	}
}
