package rbac

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-sh/berth/internal/systemtest"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// With the shipped roles berth-router reads a ModelServing at zero replicas and, holding a
// request for it, writes its demand annotation (scale from zero, docs/router.md).
func TestShippedRBACLetsTheRouterAskForAModelAtZero(t *testing.T) {
	s := sharedSystem(t)
	ctx := context.Background()
	ns := "rbac-fromzero"
	_, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	require.NoError(t, err)
	for _, doc := range []string{`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata: {name: zero}
spec:
  replicas: 0
  schedulerName: berth-scheduler
  template:
    roles:
    - name: server
      replicas: 1
      entryTemplate:
        spec:
          containers: [{name: vllm, image: vllm}]
`, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: zero}
spec:
  model: zero-model
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {modelserving.volcano.sh/name: zero}}
`, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: zero}
spec:
  modelName: zero-model
  rules:
  - targetModels: [{modelServerName: zero}]
`} {
		obj, err := systemtest.Decode(doc)
		require.NoError(t, err)
		obj.SetNamespace(ns)
		require.NoError(t, s.cl.Create(ctx, obj))
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		// The route too: the ModelRoute was created last, and a request the router has no
		// route for is refused (404), not held, so no demand is written (CI once saw that).
		snap := s.router.View().Snapshot()
		srv := snap.Server(ns, "zero")
		return srv != nil && srv.Workload != nil && srv.Workload.Replicas == 0 && slices.Contains(snap.Routes.Models(), "zero-model"), nil
	})
	require.NoError(t, err, "berth-router, as its ServiceAccount, sees the ModelRoute and the ModelServing at zero replicas")

	// The request is held (nothing scales the model here); the client gives up first.
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodPost, "http://"+s.router.Addr()+"/v1/chat/completions",
		bytes.NewBufferString(`{"model":"zero-model","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		var ms workloadv1alpha1.ModelServing
		if err := s.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "zero"}, &ms); err != nil {
			return false, nil
		}
		return ms.Annotations[workloadv1alpha1.DemandAnnotation] != "", nil
	})
	if _, refused := audit(t, s.components); len(refused) > 0 {
		t.Fatalf("the apiserver refused Berth's ServiceAccounts:\n  %s", strings.Join(refused, "\n  "))
	}
	require.NoError(t, err, "berth-router, as its ServiceAccount, wrote the demand annotation")
}
