package router

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-sh/berth/internal/systemtest"
	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	"github.com/berth-sh/berth/pkg/routestatus"
)

// What the schema cannot check (it needs other objects, or the router's regex compiler) is
// reported in status: each bad ModelRoute or ModelServer the apiserver accepts gets a False
// condition whose message names the field, berth-router keeps serving the good route beside
// it, and no other object changes.
func TestRouteAndServerStatusExplainWhatTheSchemaCannot(t *testing.T) {
	w := newWorld(t, 1)
	w.pod("good-0", map[string]string{"app": "good"})
	w.apply(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: good}
spec:
  model: base-model # what the engine serves; the route's name is this namespace's own
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {app: good}}
  workloadPort: {port: 8000}
`, fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: good}
spec:
  modelName: %s-base
  rules: [{targetModels: [{modelServerName: good}]}]
`, w.ns))
	model := w.ns + "-base"
	w.waitEndpoints("good", 1)
	w.waitCondition(&networkingv1alpha1.ModelServer{}, "good", routestatus.ConditionWorkloadsFound, metav1.ConditionTrue, routestatus.ReasonPodsReady, "1 pods match spec.workloadSelector; 1 can serve")
	w.waitCondition(&networkingv1alpha1.ModelRoute{}, "good", routestatus.ConditionAccepted, metav1.ConditionTrue, routestatus.ReasonAccepted, "")
	w.waitCondition(&networkingv1alpha1.ModelRoute{}, "good", routestatus.ConditionResolvedRefs, metav1.ConditionTrue, routestatus.ReasonAllModelServersSeen, "every target (1)")
	// The bystanders, once settled: nothing below may change them.
	goodRoute, goodServer := w.resourceVersion(&networkingv1alpha1.ModelRoute{}, "good"), w.resourceVersion(&networkingv1alpha1.ModelServer{}, "good")
	bystandersUnchanged := func() {
		t.Helper()
		assert.Equal(t, goodRoute, w.resourceVersion(&networkingv1alpha1.ModelRoute{}, "good"), "a bad object beside it must not change the good ModelRoute")
		assert.Equal(t, goodServer, w.resourceVersion(&networkingv1alpha1.ModelServer{}, "good"), "a bad object beside it must not change the good ModelServer")
	}

	cases := []struct {
		name, manifest       string
		kind                 client.Object
		condition, reason    string
		words                string // the message names the field and the mistake
		routerServesTheModel bool   // the bystander's model is still answered by the bystander
	}{
		{"a target names no ModelServer", `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: dangling}
spec:
  modelName: dangling-model
  rules: [{targetModels: [{modelServerName: good}, {modelServerName: missing}]}]
`, &networkingv1alpha1.ModelRoute{}, routestatus.ConditionResolvedRefs, routestatus.ReasonModelServerNotFound,
			`spec.rules[0].targetModels[1].modelServerName: ModelServer "missing" not found`, true},
		{"a URI regex that does not compile", `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: bad-regex}
spec:
  modelName: regex-model
  rules: [{modelMatch: {uri: {regex: "/v1/(chat"}}, targetModels: [{modelServerName: good}]}]
`, &networkingv1alpha1.ModelRoute{}, routestatus.ConditionAccepted, routestatus.ReasonInvalidMatch,
			"spec.rules[0].modelMatch.uri: regex", true},
		{"a model name an older route already serves", fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: shadowed}
spec:
  modelName: %s
  rules: [{targetModels: [{modelServerName: good}]}]
`, model), &networkingv1alpha1.ModelRoute{}, routestatus.ConditionAccepted, routestatus.ReasonModelNameInUse,
			fmt.Sprintf("spec.modelName: model %q is already served by the older ModelRoute %s/good", model, w.ns), true},
		{"a workload selector no pod matches", `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: nobody}
spec:
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {app: nobody}}
`, &networkingv1alpha1.ModelServer{}, routestatus.ConditionWorkloadsFound, routestatus.ReasonNoMatchingPods,
			"spec.workloadSelector.matchLabels (app=nobody)", true},
		{"a PD group whose decode labels match no pod", `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: half-pd}
spec:
  inferenceEngine: vLLM
  workloadSelector:
    matchLabels: {app: good}
    pdGroup: {groupKey: app, prefillLabels: {app: good}, decodeLabels: {role: decode}}
`, &networkingv1alpha1.ModelServer{}, routestatus.ConditionWorkloadsFound, routestatus.ReasonIncompletePDGroup,
			"1 prefill and 0 decode pods can serve: spec.workloadSelector.pdGroup", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := *w
			w.t = t
			w.apply(tc.manifest)
			obj, err := systemtest.Decode(tc.manifest)
			require.NoError(t, err)
			c := w.waitCondition(tc.kind, obj.GetName(), tc.condition, metav1.ConditionFalse, tc.reason, tc.words)
			t.Logf("%s: %s=%s %s: %s", obj.GetName(), c.Type, c.Status, c.Reason, c.Message)
			w.expectEvent(obj.GetName(), tc.reason)
			if tc.routerServesTheModel {
				_, resp, err := chat(w.ctx, client_(0), model, "still there?")
				require.NoError(t, err, "the good route keeps serving beside a bad object")
				assert.Equal(t, w.ns+"/good-0", resp.Header.Get("X-Sim-Engine"))
			}
		})
	}
	bystandersUnchanged()

	// Mending the mistake clears the condition: the missing ModelServer appears.
	w.apply(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: missing}
spec:
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {app: good}}
`)
	w.waitCondition(&networkingv1alpha1.ModelRoute{}, "dangling", routestatus.ConditionResolvedRefs, metav1.ConditionTrue, routestatus.ReasonAllModelServersSeen, "every target (2)")
	// And the shadowing route takes over once the older one is gone.
	require.NoError(t, cl.Delete(w.ctx, &networkingv1alpha1.ModelRoute{ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: "good"}}))
	w.waitCondition(&networkingv1alpha1.ModelRoute{}, "shadowed", routestatus.ConditionAccepted, metav1.ConditionTrue, routestatus.ReasonAccepted, "")
}

// waitCondition waits until obj (of kind's type) in the world's namespace has the condition
// with that status and reason and a message containing words, and returns it.
func (w *world) waitCondition(kind client.Object, name, typ string, status metav1.ConditionStatus, reason, words string) metav1.Condition {
	w.t.Helper()
	var got metav1.Condition
	var last string
	err := pollFor(w.ctx, 30*time.Second, func() bool {
		obj := kind.DeepCopyObject().(client.Object)
		if err := cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, obj); err != nil {
			last = err.Error()
			return false
		}
		c := meta.FindStatusCondition(conditionsOf(obj), typ)
		if c == nil {
			last = "no " + typ + " condition"
			return false
		}
		got, last = *c, fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
		return c.Status == status && c.Reason == reason && strings.Contains(c.Message, words) && c.ObservedGeneration == obj.GetGeneration()
	})
	require.NoError(w.t, err, "%s: want %s=%s %s containing %q; last seen: %s", name, typ, status, reason, words, last)
	return got
}

func conditionsOf(obj client.Object) []metav1.Condition {
	switch o := obj.(type) {
	case *networkingv1alpha1.ModelRoute:
		return o.Status.Conditions
	case *networkingv1alpha1.ModelServer:
		return o.Status.Conditions
	}
	return nil
}

func (w *world) resourceVersion(kind client.Object, name string) string {
	w.t.Helper()
	obj := kind.DeepCopyObject().(client.Object)
	require.NoError(w.t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, obj))
	return obj.GetResourceVersion()
}

// expectEvent waits for an event about the named object with the reason.
func (w *world) expectEvent(name, reason string) {
	w.t.Helper()
	err := pollFor(w.ctx, 30*time.Second, func() bool {
		evs, err := kube.EventsV1().Events(w.ns).List(w.ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Regarding.Name == name && e.Reason == reason {
				return true
			}
		}
		return false
	})
	require.NoError(w.t, err, "no event with reason %s about %s", reason, name)
}

func pollFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}
