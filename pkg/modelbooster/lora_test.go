package modelbooster

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

// The adapters of one engine are made exactly the backend's: missing ones loaded from the
// artifact's Hugging Face repo, ones the spec dropped unloaded, the base model untouched.
func TestSyncPodAdaptersLoadsAndUnloads(t *testing.T) {
	srv := engine.New(engine.Config{Model: "llama-3-8b", TimeScale: 0.01})
	require.NoError(t, srv.Start("127.0.0.1:0"))
	t.Cleanup(func() { _ = srv.Close() })
	host, port, err := net.SplitHostPort(srv.Addr())
	require.NoError(t, err)
	portNum, err := strconv.Atoi(port)
	require.NoError(t, err)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "llama-a100-0-server-0-0"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(portNum)}}}}},
		Status:     corev1.PodStatus{PodIP: host},
	}
	post := func(path, body string) {
		resp, err := http.Post("http://"+srv.Addr()+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	post("/v1/load_lora_adapter", `{"lora_name":"dropped","lora_path":"/old"}`)
	post("/v1/load_lora_adapter", `{"lora_name":"kept","lora_path":"org/kept"}`)

	mb := parseBooster(t, boosterManifest)
	b := &mb.Spec.Backends[1]
	b.LoraAdapters = []workloadv1alpha1.LoraAdapter{{Name: "kept", ArtifactURL: "hf://org/kept"}, {Name: "sql-expert", ArtifactURL: "hf://example/sql-lora"}}
	r := &Reconciler{}
	require.NoError(t, r.syncPodAdapters(context.Background(), mb, b, pod))
	assert.Equal(t, []string{"kept", "sql-expert"}, srv.Stats().LoadedAdapters)
	loaded, err := r.loadedAdapters(context.Background(), "http://"+srv.Addr())
	require.NoError(t, err)
	assert.Equal(t, []string{"kept", "sql-expert"}, loaded)
	require.NoError(t, r.syncPodAdapters(context.Background(), mb, b, pod), "a second pass has nothing to do")

	// An engine that is gone: an error for the condition, not a hang or a panic.
	_ = srv.Close()
	err = r.syncPodAdapters(context.Background(), mb, b, pod)
	assert.ErrorContains(t, err, "list models")
}
