package router

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/router/view"
)

// A disaggregated ModelServing whose ModelServer lets any prefill pair with any decode (its
// pdGroup's groupKey is the ModelServing's name, the same in every group) rolls to a new
// engine build under load: a new group comes up beside the old ones (maxSurge 1), so for a
// while prefill and decode endpoints of both revisions serve at once. The routers pair a
// prefill only with a decode of its own revision, so no decode engine ever receives KV from
// a prefill of the other build (the simulated engines count that themselves, by the
// berth.test/kv-version label the template change bumps), and no request is lost.
func TestPDRolloutPairsWithinARevision(t *testing.T) {
	w := newWorld(t, 1)
	const name = "pdroll"
	w.apply(pdRolloutYAML(name, 2, "ServingGroupRollingUpdate\n    rollingUpdateConfiguration: {maxUnavailable: 0, maxSurge: 1}", 1, "", workloadv1alpha1.ModelServingNameLabel)...)
	w.waitEndpoints(name, 4)
	sameBefore, crossBefore := engines.Hub().Transfers()

	// Watch the routers' view: the rollout must really put both revisions in front of them
	// at once, or the test proves nothing.
	ctx, stop := context.WithCancel(w.ctx)
	defer stop()
	var mixed atomic.Bool
	go func() {
		for ctx.Err() == nil {
			if s := routers[0].View().Snapshot().Server(w.ns, name); s != nil {
				revs := map[string]bool{}
				for _, list := range [][]*view.Endpoint{s.Prefill, s.Decode} {
					for _, e := range list {
						revs[e.Revision.Name] = true
					}
				}
				if len(revs) > 1 {
					mixed.Store(true)
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	long := strings.Repeat("a system prompt long enough to fill a few KV blocks. ", 6)
	load := w.chatLoad(ctx, name, 6, long)
	time.Sleep(time.Second)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ms := &workloadv1alpha1.ModelServing{}
		if err := cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, ms); err != nil {
			return err
		}
		for i := range ms.Spec.Template.Roles {
			ms.Spec.Template.Roles[i].EntryTemplate.Metadata.Labels[kvVersionLabel] = "v2"
		}
		return cl.Update(w.ctx, ms)
	}))
	w.eventually("every Ready endpoint the routers see is of the new build", 90*time.Second, func() bool {
		for _, r := range routers {
			s := r.View().Snapshot().Server(w.ns, name)
			if s == nil || len(s.Prefill) != 2 || len(s.Decode) != 2 {
				return false
			}
		}
		pods, err := kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{LabelSelector: workloadv1alpha1.ModelServingNameLabel + "=" + name})
		if err != nil || len(pods.Items) != 4 {
			return false
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.Labels[kvVersionLabel] != "v2" {
				return false
			}
		}
		return true
	})
	time.Sleep(500 * time.Millisecond)
	stop()
	sent, failed := load.wait(t)
	same, cross := engines.Hub().Transfers()
	same, cross = same-sameBefore, cross-crossBefore
	t.Logf("%d requests through the rollout; KV transfers: %d within a build, %d across builds", sent, same, cross)
	assert.True(t, mixed.Load(), "both revisions were Ready in front of the routers at once")
	assert.Zero(t, failed, "no request is lost to the rollout")
	assert.Zero(t, cross, "no decode engine received KV from a prefill of the other build")
	assert.Greater(t, same, int64(20), "requests were served through prefill/decode pairs")
	m := get(t, "http://"+routers[0].AdminAddr()+"/metrics")
	assert.Contains(t, m, fmt.Sprintf(`berth_router_pd_pairs_total{revisions="same",server="%s/%s",`, w.ns, name))
	assert.NotContains(t, m, fmt.Sprintf(`berth_router_pd_pairs_total{revisions="cross",server="%s/%s",`, w.ns, name))
}

// A RoleRollingUpdate of a disaggregated ServingGroup replaces role replicas inside the
// group, each role within its own maxUnavailable. Each role alone would allow the group to
// end up with only new prefills and only old decodes, which the routers may not pair: the
// group would serve nothing. Here the new decode template cannot be placed yet (it asks for
// a node pool that does not exist), so for a while only the new prefill comes up: the
// rollout must keep an old prefill beside the old decode (a complete pair of one revision)
// until a new decode is Ready, and no request may fail. Then the pool appears and the
// rollout completes.
func TestPDRoleRolloutKeepsACompletePair(t *testing.T) {
	w := newWorld(t, 1)
	const name = "pdrole"
	w.apply(pdRolloutYAML(name, 1, "RoleRollingUpdate", 2, "maxUnavailable: 1", workloadv1alpha1.GroupNameLabel)...)
	w.waitEndpoints(name, 4)
	_, crossBefore := engines.Hub().Transfers()

	ctx, stop := context.WithCancel(w.ctx)
	defer stop()
	load := w.chatLoad(ctx, name, 4, "role rollout")

	// pods are the ModelServing's live pods by role and build: how many, and how many Ready.
	type count struct{ live, ready int }
	pods := func() map[string]count {
		list, err := kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{LabelSelector: workloadv1alpha1.ModelServingNameLabel + "=" + name})
		require.NoError(t, err)
		out := map[string]count{}
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			k := p.Labels[workloadv1alpha1.RoleLabel] + "/" + p.Labels[kvVersionLabel]
			c := out[k]
			c.live++
			if podReady(&p) {
				c.ready++
			}
			out[k] = c
		}
		return out
	}
	time.Sleep(time.Second)
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ms := &workloadv1alpha1.ModelServing{}
		if err := cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, ms); err != nil {
			return err
		}
		for i := range ms.Spec.Template.Roles {
			ms.Spec.Template.Roles[i].EntryTemplate.Metadata.Labels[kvVersionLabel] = "v2"
		}
		ms.Spec.Template.Roles[1].EntryTemplate.Spec.NodeSelector = map[string]string{"berth.test/pool": "later"}
		return cl.Update(w.ctx, ms)
	}))
	w.eventually("a new prefill is Ready while the new decode cannot be placed", 60*time.Second, func() bool {
		c := pods()
		return c["prefill/v2"].ready >= 1 && c["decode/v2"].live >= 1 && c["decode/v2"].ready == 0
	})
	// For the next seconds (many controller passes) an old prefill stays beside the old
	// decode: each role's budget alone would let the second old prefill go.
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		c := pods()
		require.GreaterOrEqual(t, c["prefill/v1"].ready, 1, "an old prefill serves beside the old decode while no new decode is Ready: %v", c)
		require.GreaterOrEqual(t, c["decode/v1"].ready, 1, "an old decode serves: %v", c)
	}
	node := &corev1.Node{}
	require.NoError(t, cl.Get(w.ctx, client.ObjectKey{Name: w.ns + "-gpu-0"}, node))
	require.NoError(t, cl.Patch(w.ctx, node, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"berth.test/pool":"later"}}}`))))
	w.eventually("every pod runs the new build", 90*time.Second, func() bool {
		c := pods()
		return c["prefill/v2"].ready == 2 && c["decode/v2"].ready == 2 && c["prefill/v1"].live == 0 && c["decode/v1"].live == 0
	})
	time.Sleep(500 * time.Millisecond)
	stop()
	sent, failed := load.wait(t)
	_, cross := engines.Hub().Transfers()
	t.Logf("%d requests through the role rollout", sent)
	assert.Zero(t, failed, "no request is lost to the role rollout")
	assert.Zero(t, cross-crossBefore, "no decode engine received KV from a prefill of the other build")
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pdRolloutYAML is a disaggregated ModelServing of replicas groups, each a prefill and a
// decode role of roleReplicas replicas (with roleExtra, such as "maxUnavailable: 1", in
// each role), whose pod templates carry the simulated engines' kvVersionLabel v1 (a change
// of it is a change of engine build); rollout is its rolloutStrategy's type and what follows
// it. Beside it the ModelServer pairing a prefill with a decode of the same groupKey label
// value, and a ModelRoute serving model name through it.
func pdRolloutYAML(name string, replicas int, rollout string, roleReplicas int, roleExtra, groupKey string) []string {
	if roleExtra != "" {
		roleExtra = "\n      " + roleExtra
	}
	role := func(r string) string {
		return fmt.Sprintf(`
    - name: %s
      replicas: %d%s
      entryTemplate:
        metadata: {labels: {%s: v1}}
        spec:
          containers:
          - name: vllm
            image: vllm/vllm-openai:v0.11.0
            args: ["--model", "base-model"]
            ports: [{containerPort: 8000}]
            resources: {limits: {nvidia.com/gpu: "1"}}`, r, roleReplicas, roleExtra, kvVersionLabel)
	}
	return []string{fmt.Sprintf(`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata: {name: %[1]s}
spec:
  schedulerName: berth-scheduler
  replicas: %[2]d
  rolloutStrategy:
    type: %[3]s
  template:
    roles:%[4]s%[5]s
`, name, replicas, rollout, role("prefill"), role("decode")), fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: %[1]s}
spec:
  model: base-model
  inferenceEngine: vLLM
  workloadSelector:
    matchLabels: {modelserving.volcano.sh/name: %[1]s}
    pdGroup:
      groupKey: %[2]s
      prefillLabels: {modelserving.volcano.sh/role: prefill}
      decodeLabels: {modelserving.volcano.sh/role: decode}
`, name, groupKey), fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: %[1]s}
spec:
  modelName: %[1]s
  rules: [{targetModels: [{modelServerName: %[1]s}]}]
`, name)}
}

// chatLoad is clients chat completions at a time for model through both routers (client c
// through router c % 2), each with prompt and its client and request number, until ctx ends.
type chatLoad struct {
	sent, failed atomic.Int64
	failures     sync.Map
	clients      sync.WaitGroup
}

func (w *world) chatLoad(ctx context.Context, model string, clients int, prompt string) *chatLoad {
	l := &chatLoad{}
	for c := range clients {
		l.clients.Add(1)
		go func() {
			defer l.clients.Done()
			oc := client_(c % 2)
			for i := 0; ctx.Err() == nil; i++ {
				l.sent.Add(1)
				_, err := oc.Chat.Completions.New(w.ctx, openai.ChatCompletionNewParams{Model: model,
					Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("%s c%d r%d", prompt, c, i))},
					MaxTokens: openai.Int(8)})
				if err != nil {
					l.failed.Add(1)
					msg := err.Error()
					var apiErr *openai.Error
					if errors.As(err, &apiErr) {
						msg = fmt.Sprintf("%d %s: %s", apiErr.StatusCode, apiErr.Code, apiErr.Message)
					}
					l.failures.Store(fmt.Sprintf("c%d r%d at %s", c, i, time.Now().Format("15:04:05.000")), msg)
				}
			}
		}()
	}
	return l
}

// wait waits for the clients (their context must have ended), logs every failure, and
// returns how many requests were sent and how many failed.
func (l *chatLoad) wait(t *testing.T) (sent, failed int64) {
	l.clients.Wait()
	l.failures.Range(func(k, v any) bool { t.Logf("failed %s: %s", k, v); return true })
	return l.sent.Load(), l.failed.Load()
}
