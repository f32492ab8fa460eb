package router

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// Router-informed scale-down (docs/router.md, "Deletion cost"; docs/controller.md): the
// routers write on each pod what losing it costs (its open requests and prefix cache), and
// berth-controller, scaling down, removes the Ready group that costs least instead of the
// highest ordinal. Here every request goes to the highest-ordinal group (sd-2, through a
// ModelServer that selects only it): when the ModelServing goes from 3 groups to 2, that hot
// group stays, a cold one (sd-1, the highest of the equal ones) goes, the event says why, and
// the streams open on sd-2 finish whole.
func TestScaleDownKeepsTheGroupTheRoutersUse(t *testing.T) {
	w := newWorld(t, 1)
	w.apply(servingYAML("sd", 3, 1, "1", 1), serverYAML("sd"), `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: sd-hot}
spec:
  model: base-model
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {modelserving.volcano.sh/name: sd, modelserving.volcano.sh/group-name: sd-2}}
`, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: sd-hot}
spec:
  modelName: hot
  rules: [{targetModels: [{modelServerName: sd-hot}]}]
`)
	w.waitEndpoints("sd", 3)
	w.waitEndpoints("sd-hot", 1)

	// A prompt family with a 2 KiB shared prefix, streamed long (8 ms a token, real time) to
	// sd-2 through both routers: open requests and prefix blocks both count.
	const tokens = 600
	shared := strings.Repeat("You are a careful assistant for the shared-prefix family. ", 40)
	var streams sync.WaitGroup
	results := make(chan string, 6)
	for i := range 6 {
		streams.Add(1)
		go func() {
			defer streams.Done()
			oc := client_(i % 2)
			stream := oc.Chat.Completions.NewStreaming(w.ctx, openai.ChatCompletionNewParams{
				Model: "hot", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("%s question %d", shared, i))},
				MaxTokens: openai.Int(tokens)})
			got := 0
			for stream.Next() {
				if ch := stream.Current(); len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
					got++
				}
			}
			if err := stream.Err(); err != nil || got != tokens {
				results <- fmt.Sprintf("stream %d: %d/%d tokens, err %v", i, got, tokens, err)
			}
		}()
	}

	group := func(name string) []corev1.Pod {
		var pods corev1.PodList
		require.NoError(t, cl.List(w.ctx, &pods, client.InNamespace(w.ns), client.MatchingLabels{workloadv1alpha1.GroupNameLabel: name}))
		return pods.Items
	}
	cost := func(p corev1.Pod) int {
		n, _ := strconv.Atoi(p.Annotations[corev1.PodDeletionCost])
		return n
	}
	w.eventually("the routers publish sd-2's deletion cost", 20*time.Second, func() bool {
		pods := group("sd-2")
		return len(pods) == 1 && cost(pods[0]) > 0
	})
	hot := group("sd-2")[0]
	for _, g := range []string{"sd-0", "sd-1"} {
		for _, p := range group(g) {
			assert.Zero(t, cost(p), "group %s has no traffic, so no cost", g)
		}
	}
	t.Logf("sd-2's pod %s costs %s", hot.Name, hot.Annotations[corev1.PodDeletionCost])

	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ms := &workloadv1alpha1.ModelServing{}
		if err := cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "sd"}, ms); err != nil {
			return err
		}
		two := int32(2)
		ms.Spec.Replicas = &two
		return cl.Update(w.ctx, ms)
	}))
	w.eventually("a group is gone", 30*time.Second, func() bool { return len(w.podsOf("sd")) == 2 })
	assert.ElementsMatch(t, []string{hot.Name}, names(group("sd-2")), "the hot group stays")
	assert.Empty(t, live(group("sd-1")), "the cold group of the highest ordinal goes")
	assert.Len(t, live(group("sd-0")), 1)
	assert.Nil(t, hot.DeletionTimestamp)

	w.eventually("a ScaledDown event names sd-1 and its cost against the kept groups'", 10*time.Second, func() bool {
		evs, err := kube.CoreV1().Events(w.ns).List(w.ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=ModelServing,involvedObject.name=sd"})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "ScaledDown" && strings.Contains(e.Message, "deleting ServingGroup sd-1: lowest deletion cost 0 (kept: sd-0 0, sd-2 ") {
				return true
			}
		}
		return false
	})

	streams.Wait()
	close(results)
	for r := range results {
		t.Error(r)
	}
}

func names(pods []corev1.Pod) []string {
	var out []string
	for _, p := range live(pods) {
		out = append(out, p.Name)
	}
	return out
}

func live(pods []corev1.Pod) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}
