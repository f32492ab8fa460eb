package autoscale

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale"
	"github.com/berth-sh/berth/pkg/sim"
)

// AutoscalingPolicy as Kthena 1.0 writes it: the policy names its own target.

func (w *world) policy(name string) *workloadv1alpha1.AutoscalingPolicy {
	var p workloadv1alpha1.AutoscalingPolicy
	require.NoError(w.t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: name}, &p))
	return &p
}

func policyCondition(p *workloadv1alpha1.AutoscalingPolicy, typ string) (string, string, string) {
	c := meta.FindStatusCondition(p.Status.Conditions, typ)
	if c == nil {
		return "", "", ""
	}
	return string(c.Status), c.Reason, c.Message
}

// homogeneousPolicyYAML scales target on the engines' running requests (2 per pod), read
// through a pod metric source on the engines' port.
func homogeneousPolicyYAML(name, target string, lo, hi int, behavior string) string {
	return fmt.Sprintf(`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: %s}
spec:
  tolerancePercent: 10
  metrics:
  - {name: running, targetValue: "2"}
  homogeneousTarget:
    target:
      targetRef: {kind: ModelServing, name: %s}
      metricSources:
        running: {pod: {name: "%s", port: 8000}}
    minReplicas: %d
    maxReplicas: %d
  behavior:
%s`, name, target, running, lo, hi, behavior)
}

// A homogeneousTarget scales its ModelServing exactly as a binding's scalingConfiguration
// does: up under load to its maximum by the stable policy, down to its minimum after the
// window. Its status is Kthena 1.0's homogeneousStatus. A binding naming the policy is
// refused and changes nothing.
func TestHomogeneousTargetScalesLikeABinding(t *testing.T) {
	w := newWorld(t, 1)
	w.served("homog", "homog-model", "homog", 1)
	w.route("homog", "homog-model")
	w.served("bystander", "bystander-model", "bystander", 1)
	w.waitAvailable("homog", 1)
	w.waitAvailable("bystander", 1)
	logs := w.watchReplicas("homog", "bystander")
	log := logs["homog"]
	w.apply(homogeneousPolicyYAML("homog", "homog", 1, 3, `
    scaleUp:
      stablePolicy: {instances: 1, percent: 100, period: 1s}
      panicPolicy: {panicThresholdPercent: 1000}
    scaleDown: {instances: 1, percent: 100, period: 1s, stabilizationWindow: 3s}`),
		// The spec's binding naming a policy that has its own target: refused, it would
		// otherwise take bystander from 1 to its minimum 2.
		scalingBindingYAML("stray", "homog", "bystander", 2, 4))

	w.eventually("the binding is refused", 20*time.Second, func() bool {
		s, reason, msg := condition(w.binding("stray"), "Ready")
		return s == "False" && reason == "PolicyHasTarget" &&
			strings.Contains(msg, "AutoscalingPolicy homog names its own target (spec.homogeneousTarget, Kthena 1.0's shape) and scales it itself")
	})
	w.hasEvent("stray", "PolicyHasTarget")

	l := w.startLoad("homog-model", 10, 400)
	w.eventually("scaled up to the maximum 3", 30*time.Second, func() bool { return log.last() == 3 })
	assert.Equal(t, []int32{1, 2, 3}, log.values()[:3], "stable scale-up: +1 per period")
	w.eventually("homogeneousStatus reports the decision", 10*time.Second, func() bool {
		hs := w.policy("homog").Status.HomogeneousStatus
		return hs != nil && hs.DesiredReplicas == 3 && hs.CurrentReplicas == 3 && hs.LastScaleTime != nil
	})
	p := w.policy("homog")
	status, _, msg := policyCondition(p, "Ready")
	assert.Equal(t, "True", status, msg)
	assert.Contains(t, msg, "running")
	assert.Equal(t, "Stable", p.Status.HomogeneousStatus.Mode)
	valid, _, _ := policyCondition(p, "Valid")
	assert.Equal(t, "True", valid)
	w.hasEventOn("AutoscalingPolicy", "homog", "ScaledUp")

	l.end()
	w.eventually("scaled down to the minimum 1", 30*time.Second, func() bool { return log.last() == 1 })
	w.hasEventOn("AutoscalingPolicy", "homog", "ScaledDown")
	for _, c := range log.snapshot() {
		assert.True(t, c.n >= 1 && c.n <= 3, "within the bounds: %v", log.values())
	}
	assert.Equal(t, []int32{1}, logs["bystander"].values(), "the refused binding changed nothing")
	assert.Zero(t, l.bad.Load())
}

// What a policy's own target can get wrong is reported on the policy, and changes nothing.
func TestPolicyTargetBadInput(t *testing.T) {
	w := newWorld(t, 1)
	w.served("held", "held-model", "held", 1)
	w.waitAvailable("held", 1)
	log := w.watchReplicas("held")["held"]
	// The oldest autoscaler of a target keeps it: this binding is older than the policy below.
	w.apply(policyYAML("plain", "    scaleUp: {}"), scalingBindingYAML("first", "plain", "held", 1, 1))
	time.Sleep(1100 * time.Millisecond) // creation timestamps have a one-second resolution

	w.apply(
		homogeneousPolicyYAML("second", "held", 2, 4, "    scaleUp: {}"),
		homogeneousPolicyYAML("missing", "no-such-serving", 1, 2, "    scaleUp: {}"),
		strings.Replace(homogeneousPolicyYAML("typo", "held", 2, 4, "    scaleUp: {}"), "running: {pod:", "runing: {pod:", 1),
		`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: no-role}
spec:
  metrics: [{name: running, targetValue: "2"}]
  disaggregatedTarget:
    targetRef: {name: held}
    roles:
      prefill: {minReplicas: 1, maxReplicas: 2}
`)
	for name, want := range map[string][]string{
		"second":  {"TargetScaledByAnotherBinding", "ModelServing held is already scaled by AutoscalingPolicyBinding first"},
		"missing": {"TargetNotFound", "spec.homogeneousTarget.target.targetRef: ModelServing no-such-serving not found"},
		"typo":    {"InvalidPolicy", `spec.homogeneousTarget.target.metricSources[runing]: names no metric of the policy (it has "running")`},
		"no-role": {"TargetNotFound", "spec.disaggregatedTarget.roles[prefill]: ModelServing held has no role prefill (it has server)"},
	} {
		w.eventually(name+" reports "+want[0], 20*time.Second, func() bool {
			s, reason, msg := policyCondition(w.policy(name), "Ready")
			return s == "False" && reason == want[0] && strings.Contains(msg, want[1])
		})
		w.hasEventOn("AutoscalingPolicy", name, want[0])
	}
	valid, _, msg := policyCondition(w.policy("typo"), "Valid")
	assert.Equal(t, "False", valid)
	assert.Contains(t, msg, "runing")
	// Each bad policy that is decided every period did so again since it reported its
	// problem ("typo" is invalid: it waits for an edit, and its one decision is the report),
	// and so did the binding that keeps the target, which holds it at its maximum 1.
	w.decided(2, "autoscalingpolicy/second", "autoscalingpolicy/missing", "autoscalingpolicy/no-role", "first")
	assert.Equal(t, []int32{1}, log.values(), "no bad policy changed the target's replicas")
}

// pdServed is a prefill/decode ModelServing of one-GPU engines, one ServingGroup with one
// prefill and one decode replica, behind a ModelServer that pairs them (NIXL) and a
// ModelRoute for model.
func (w *world) pdServed(name, model string) { w.pdServedOn(name, model, 1, "") }

// pdServedOn is pdServed with engines of gpus GPUs on nodes of the GPU product ("": any).
func (w *world) pdServedOn(name, model string, gpus int, product string) {
	sel := ""
	if product != "" {
		sel = fmt.Sprintf("\n          nodeSelector: {%s: %s}", sim.GPUProductLabel, product)
	}
	role := func(r string) string {
		return fmt.Sprintf(`
    - name: %[1]s
      replicas: 1
      entryTemplate:
        spec:%[4]s
          containers:
          - name: vllm
            image: vllm/vllm-openai:v0.11.0
            args: ["--model", "%[2]s"]
            ports: [{containerPort: 8000}]
            resources: {limits: {nvidia.com/gpu: "%[3]d"}}`, r, model, gpus, sel)
	}
	w.apply(fmt.Sprintf(`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata: {name: %s}
spec:
  schedulerName: berth-scheduler
  replicas: 1
  template:
    roles:%s%s
`, name, role("prefill"), role("decode")), fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: %[1]s}
spec:
  model: %[2]s
  inferenceEngine: vLLM
  workloadSelector:
    matchLabels: {modelserving.volcano.sh/name: %[1]s}
    pdGroup:
      groupKey: modelserving.volcano.sh/group-name
      prefillLabels: {modelserving.volcano.sh/role: prefill}
      decodeLabels: {modelserving.volcano.sh/role: decode}
  workloadPort: {port: 8000}
  kvConnector: {type: nixl}
`, name, model), fmt.Sprintf(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: %[1]s}
spec:
  modelName: %[2]s
  rules:
  - targetModels: [{modelServerName: %[1]s}]
`, name, model))
}

// pdPolicyYAML is an AutoscalingPolicy whose disaggregatedTarget scales the prefill (1 to
// 4) and decode (1 to 6) roles of ModelServing name, each on its own engines' running
// requests (2 per engine), prefill:decode within [0.5, 1]; stable is its scale-up
// stablePolicy, window its scale-down stabilization window.
func pdPolicyYAML(name, stable, window string) string {
	return fmt.Sprintf(`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: %[1]s}
spec:
  tolerancePercent: 10
  behavior:
    scaleUp:
      stablePolicy: %[2]s
      panicPolicy: {panicThresholdPercent: 1000}
    scaleDown: {instances: 1, percent: 100, period: 1s, stabilizationWindow: %[3]s}
  disaggregatedTarget:
    targetRef: {kind: ModelServing, name: %[1]s}
    roles:
      prefill:
        minReplicas: 1
        maxReplicas: 4
        metrics: [{name: prefilling, targetValue: "2"}]
        metricSources:
          prefilling: {pod: {name: "vllm:num_requests_running", port: 8000}}
      decode:
        minReplicas: 1
        maxReplicas: 6
        metrics: [{name: decoding, targetValue: "2"}]
        metricSources:
          decoding: {pod: {name: "vllm:num_requests_running", port: 8000}}
    ratioConstraint: {numeratorRole: prefill, denominatorRole: decode, minRatio: "0.5", maxRatio: "1"}
`, name, stable, window)
}

// roleReplicas is one version of a ModelServing's role replicas as a watch saw it.
type roleReplicas struct {
	at      time.Time
	replica map[string]int32
}

// watchRoles records every change of a ModelServing's role replicas for the whole test.
func (w *world) watchRoles(name string) func() []roleReplicas {
	w.t.Helper()
	var mu sync.Mutex
	var seen []roleReplicas
	wi, err := cl.Watch(w.ctx, &workloadv1alpha1.ModelServingList{}, client.InNamespace(w.ns))
	require.NoError(w.t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range wi.ResultChan() {
			ms, ok := ev.Object.(*workloadv1alpha1.ModelServing)
			if !ok || ms.Name != name || ev.Type == watch.Deleted {
				continue
			}
			rr := roleReplicas{at: time.Now(), replica: map[string]int32{}}
			for _, r := range ms.Spec.Template.Roles {
				rr.replica[r.Name] = ptr.Deref(r.Replicas, 1)
			}
			mu.Lock()
			if len(seen) == 0 || !maps.Equal(seen[len(seen)-1].replica, rr.replica) {
				seen = append(seen, rr)
			}
			mu.Unlock()
		}
	}()
	w.t.Cleanup(func() { wi.Stop(); <-done })
	return func() []roleReplicas {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

func pdString(rs []roleReplicas) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, " %d:%d", r.replica["prefill"], r.replica["decode"])
	}
	return strings.TrimSpace(b.String())
}

// The done-when of issue 25 point 3: a prefill/decode ModelServing autoscaled by a
// disaggregatedTarget keeps prefill:decode within the ratioConstraint under a load ramp.
// Each role scales on its own engines' running requests: decode engines hold a request for
// its whole generation, prefill engines only for its prompt, so the load asks for decode
// replicas and hardly any prefill ones, and it is the ratio constraint (prefill/decode in
// [0.5, 1]) that brings prefill along. Every version of the ModelServing's role replicas,
// as a watch saw them from start to end, is within the ratio and each role's bounds.
func TestDisaggregatedTargetKeepsTheRatioUnderALoadRamp(t *testing.T) {
	w := newWorld(t, 2)
	w.pdServed("pd", "pd-model")
	w.waitAvailable("pd", 1)
	roles := w.watchRoles("pd")
	w.apply(pdPolicyYAML("pd", "{instances: 1, percent: 100, period: 1s}", "2s"))
	w.eventually("the policy decides", 20*time.Second, func() bool {
		s, _, _ := policyCondition(w.policy("pd"), "Ready")
		return s != ""
	})

	// The ramp: 2, then 6, then 12 requests in flight (400 tokens each, about 4 s of decode).
	l := w.startLoad("pd-model", 2, 400)
	time.Sleep(6 * time.Second) // a step of the ramp, not a check: the ratio is checked over every version the watch saw
	l.want.Store(6)
	w.eventually("decode scaled up for 6 in flight", 30*time.Second, func() bool {
		rs := roles()
		return len(rs) > 0 && rs[len(rs)-1].replica["decode"] >= 3
	})
	l.want.Store(12)
	w.eventually("decode at its maximum 6 with prefill brought along", 45*time.Second, func() bool {
		rs := roles()
		last := rs[len(rs)-1].replica
		return last["decode"] == 6 && last["prefill"] >= 3
	})
	w.eventually("the status reports the ratio of 6 decode replicas", 10*time.Second, func() bool {
		ds := w.policy("pd").Status.DisaggregatedStatus
		return ds != nil && ds.RatioStatus != nil && len(ds.Roles) == 2 && ds.Roles[0].CurrentReplicas == 6 &&
			(ds.RatioStatus.CurrentRatio == "0.5" || ds.RatioStatus.CurrentRatio == "0.6666666666666666")
	})
	p := w.policy("pd")
	ds := p.Status.DisaggregatedStatus
	assert.Equal(t, "prefill", ds.RatioStatus.NumeratorRole)
	assert.Equal(t, "decode", ds.RatioStatus.DenominatorRole)
	assert.Equal(t, "decode", ds.Roles[0].Name, "roles sorted by name")
	assert.Less(t, ds.Roles[1].DesiredReplicas, int32(3), "prefill's own metrics ask for less than the ratio needs: %+v", ds.Roles)
	violated, _, msg := policyCondition(p, "RatioConstraintViolated")
	assert.Equal(t, "False", violated, msg)
	w.hasEventOn("AutoscalingPolicy", "pd", "ScaledUp")
	// The engines follow the spec: every prefill and decode pod serves.
	want := 6 + ds.Roles[1].CurrentReplicas
	w.eventually("every prefill and decode engine running", 30*time.Second, func() bool {
		var pods corev1.PodList
		if cl.List(w.ctx, &pods, client.InNamespace(w.ns), client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: "pd"}) != nil {
			return false
		}
		n := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
				n++
			}
		}
		return n == int(want)
	})

	// Down the ramp: 4 in flight, then none.
	l.want.Store(4)
	w.eventually("decode back to 2 for 4 in flight", 45*time.Second, func() bool {
		rs := roles()
		return rs[len(rs)-1].replica["decode"] <= 3
	})
	l.end()
	w.eventually("back to 1:1", 45*time.Second, func() bool {
		rs := roles()
		last := rs[len(rs)-1].replica
		return last["decode"] == 1 && last["prefill"] == 1
	})
	assert.Zero(t, l.bad.Load(), "no request failed while the roles scaled")

	seen := roles()
	t.Logf("prefill:decode as the watch saw them: %s", pdString(seen))
	require.GreaterOrEqual(t, len(seen), 6, "the roles moved up and down: %s", pdString(seen))
	for _, r := range seen {
		pf, dc := r.replica["prefill"], r.replica["decode"]
		assert.True(t, pf >= 1 && pf <= 4 && dc >= 1 && dc <= 6, "within the roles' bounds: %d:%d in %s", pf, dc, pdString(seen))
		ratio := float64(pf) / float64(dc)
		assert.True(t, ratio >= 0.5 && ratio <= 1, "prefill:decode %d:%d is outside [0.5, 1] in %s", pf, dc, pdString(seen))
	}
}

// Placement-aware scale-up of a disaggregatedTarget: the prefill/decode group's one node (8
// GPUs, 2 per engine) holds two more engines after its first pair, of either role alone,
// but not the 3 decode and 2 prefill engines the load and the ratio ask for together.
// berth-scheduler counts the replicas of each role every group can take and which pairs
// fit together; the policy scales to 2:2, inside the ratio, says capacity-limited in its
// status and an event, and no pod waits unplaced. Blind (BERTH_TEST_BLIND_SCALING=1) the
// roles go past 4 engines and the extra ones wait.
func TestDisaggregatedScaleUpStopsAtWhatFitsTogether(t *testing.T) {
	w := newWorld(t, 0)
	product := w.ns + "-pool"
	w.gpuPools(product)
	w.pdServedOn("pdfit", "pdfit-model", 2, product)
	w.waitAvailable("pdfit", 1)
	w.eventually("berth-scheduler publishes the role counts", 20*time.Second, func() bool {
		var ms workloadv1alpha1.ModelServing
		if cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "pdfit"}, &ms) != nil {
			return false
		}
		fits, ok := autoscale.RoleReplicasThatFit(ms.Annotations, time.Now())
		return ok && fits["decode"].Fit == 2 && fits["prefill"].Fit == 2 && slices.Equal(fits["decode"].Alongside["prefill"], []int32{2, 1, 0})
	})
	roles := w.watchRoles("pdfit")
	pending := w.watchPending()
	w.apply(pdPolicyYAML("pdfit", "{instances: 4, percent: 400, period: 1s}", "60s"))
	// 12 in flight asks for 6 decode engines, and the ratio for 3 prefill ones.
	l := w.startLoad("pdfit-model", 12, 400)
	defer l.end()
	var msg string
	w.eventually("the policy says capacity-limited", 45*time.Second, func() bool {
		var s string
		s, _, msg = policyCondition(w.policy("pdfit"), "CapacityLimited")
		return s == "True" && strings.Contains(msg, "0 more replicas of decode fit in every group")
	})
	defer func() { t.Logf("prefill:decode as the watch saw them: %s", pdString(roles())) }()
	w.eventually("2:2, the pair that fits", 60*time.Second, func() bool {
		rs := roles()
		last := rs[len(rs)-1].replica
		return last["decode"] == 2 && last["prefill"] == 2
	})
	w.hasEventOn("AutoscalingPolicy", "pdfit", "CapacityLimited")
	w.decided(8, "autoscalingpolicy/pdfit") // settled: later decisions keep it
	seen := roles()
	for _, r := range seen {
		pf, dc := r.replica["prefill"], r.replica["decode"]
		assert.LessOrEqual(t, pf+dc, int32(4), "never more engines than the node holds: %s", pdString(seen))
		ratio := float64(pf) / float64(dc)
		assert.True(t, ratio >= 0.5 && ratio <= 1, "prefill:decode %d:%d is outside [0.5, 1] in %s", pf, dc, pdString(seen))
	}
	for pod, d := range pending() {
		assert.Less(t, d, 5*time.Second, "pod %s waited unplaced", pod)
	}
	t.Logf("prefill:decode %s; %s", pdString(seen), msg)
}

// A heterogeneousTarget spreads one demand over two ModelServings of one model by cost, as a
// binding's optimizerConfiguration does, and its costExpansionRatePercent decides how soon the
// dearer one is used: at 200 the cheaper target's blocks of replicas grow (1, 2, 4, …) and
// cost more, so the dearer one gets replicas before the cheaper is full; at 100 the cheaper
// fills first. Editing the rate under load moves the split.
func TestHeterogeneousTargetSpreadsByCost(t *testing.T) {
	w := newWorld(t, 1)
	w.served("a100", "hetero-model", "hetero", 1)
	w.served("h100", "hetero-model", "hetero", 0)
	w.route("hetero", "hetero-model")
	w.waitAvailable("a100", 1)
	logs := w.watchReplicas("a100", "h100")
	a100, h100 := logs["a100"], logs["h100"]
	policy := func(rate int) string {
		return fmt.Sprintf(`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: hetero}
spec:
  tolerancePercent: 10
  metrics:
  - {name: running, targetValue: "2"}
  behavior:
    scaleUp:
      stablePolicy: {instances: 1, percent: 100, period: 1s}
      panicPolicy: {panicThresholdPercent: 1000}
    scaleDown: {period: 1s, stabilizationWindow: 2s}
  heterogeneousTarget:
    costExpansionRatePercent: %d
    params:
    - target:
        targetRef: {name: h100}
        metricSources: {running: {pod: {name: "%[2]s", port: 8000}}}
      cost: 100
      minReplicas: 0
      maxReplicas: 4
    - target:
        targetRef: {name: a100}
        metricSources: {running: {pod: {name: "%[2]s", port: 8000}}}
      cost: 60
      minReplicas: 1
      maxReplicas: 4
`, rate, running)
	}
	w.apply(policy(200))
	shares := []autoscale.Share{{Cost: 100, Min: 0, Max: 4}, {Cost: 60, Min: 1, Max: 4}}
	at200, at100 := autoscale.Distribute(4, shares, 200), autoscale.Distribute(4, shares, 100)
	require.Equal(t, []int32{2, 2}, at200, "rate 200: the dearer target's first block is cheaper than the cheaper one's second")
	require.Equal(t, []int32{0, 4}, at100, "rate 100: the cheaper target fills first")

	// 8 in flight against 2 per pod asks for 4 replicas in all.
	l := w.startLoad("hetero-model", 8, 400)
	defer l.end()
	w.eventually("4 replicas split 2 + 2 at rate 200", 40*time.Second, func() bool { return h100.last() == 2 && a100.last() == 2 })
	w.eventually("heterogeneousStatus reports both targets", 10*time.Second, func() bool {
		hs := w.policy("hetero").Status.HeterogeneousStatus
		return len(hs) == 2 && hs[0].Name == "h100" && hs[0].DesiredReplicas == 2 && hs[1].Name == "a100" && hs[1].DesiredReplicas == 2
	})
	w.hasEventOn("AutoscalingPolicy", "hetero", "ScaledUp")

	// Cheaper to fill the A100s first: the rate goes to 100, the split follows.
	require.NoError(t, cl.Patch(w.ctx, &workloadv1alpha1.AutoscalingPolicy{ObjectMeta: metav1.ObjectMeta{Name: "hetero", Namespace: w.ns}},
		client.RawPatch(types.MergePatchType, []byte(`{"spec":{"heterogeneousTarget":{"costExpansionRatePercent":100}}}`))))
	w.eventually("4 replicas all on the cheaper target at rate 100", 40*time.Second, func() bool { return h100.last() == 0 && a100.last() == 4 })
	for _, c := range a100.snapshot() {
		assert.True(t, c.n >= 1 && c.n <= 4, "a100 within its bounds: %v", a100.values())
	}
	for _, c := range h100.snapshot() {
		assert.True(t, c.n >= 0 && c.n <= 4, "h100 within its bounds: %v", h100.values())
	}
	t.Logf("a100 %v, h100 %v", a100.values(), h100.values())
}
