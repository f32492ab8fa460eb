package autoscale

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale"
)

// running is the metric every test scales on: requests in an engine's batch.
const running = "vllm:num_requests_running"

func policyYAML(name, behavior string) string {
	return fmt.Sprintf(`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: %s}
spec:
  tolerancePercent: 10
  metrics:
  - {metricName: "%s", targetValue: "2"}
  behavior:
%s`, name, running, behavior)
}

func scalingBindingYAML(name, policy, target string, lo, hi int) string {
	return fmt.Sprintf(`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicyBinding
metadata: {name: %s}
spec:
  policyRef: {name: %s}
  scalingConfiguration:
    target:
      targetRef: {name: %s}
      metricEndpoint: {port: 8000}
    minReplicas: %d
    maxReplicas: %d
`, name, policy, target, lo, hi)
}

// optParam is one target of an optimizer binding: its ModelServing, cost and bounds.
type optParam struct {
	target   string
	cost     int
	min, max int
}

// optimizerBindingYAML is an optimizer binding of policy over params (in that order), the
// metrics read from each target's pods on port 8000.
func optimizerBindingYAML(name, policy string, costExpansionRatePercent int, params ...optParam) string {
	var b strings.Builder
	fmt.Fprintf(&b, `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicyBinding
metadata: {name: %s}
spec:
  policyRef: {name: %s}
  optimizerConfiguration:
    costExpansionRatePercent: %d
    params:
`, name, policy, costExpansionRatePercent)
	for _, p := range params {
		fmt.Fprintf(&b, `    - target: {targetRef: {name: %s}, metricEndpoint: {port: 8000}}
      cost: %d
      minReplicas: %d
      maxReplicas: %d
`, p.target, p.cost, p.min, p.max)
	}
	return b.String()
}

func condition(b *workloadv1alpha1.AutoscalingPolicyBinding, typ string) (string, string, string) {
	c := meta.FindStatusCondition(b.Status.Conditions, typ)
	if c == nil {
		return "", "", ""
	}
	return string(c.Status), c.Reason, c.Message
}

// Load up: the autoscaler scales up by its stable policy, never past maxReplicas. Load
// gone: it waits out the scale-down stabilization window, then scales down to
// minReplicas, never below.
func TestScaleUpUnderLoadAndDownAfterTheWindow(t *testing.T) {
	w := newWorld(t, 1)
	w.served("chat", "qwen3-8b", "chat", 1)
	w.route("chat", "qwen3-8b")
	w.waitAvailable("chat", 1)
	log := w.watchReplicas("chat")["chat"]
	const window = 4 * time.Second
	w.apply(policyYAML("running", `
    scaleUp:
      stablePolicy: {instances: 1, percent: 100, period: 1s}
      panicPolicy: {panicThresholdPercent: 1000}
    scaleDown: {instances: 1, percent: 100, period: 1s, stabilizationWindow: 4s}`),
		scalingBindingYAML("chat", "running", "chat", 1, 3))

	// 10 requests in flight over one engine: 10 running against a target of 2 asks for 5
	// replicas; the maximum is 3.
	l := w.startLoad("qwen3-8b", 10, 400)
	w.eventually("scaled up to the maximum 3", 30*time.Second, func() bool { return log.last() == 3 })
	w.waitAvailable("chat", 3)
	b := w.binding("chat")
	require.NotNil(t, b.Status.RecommendedReplicas)
	assert.Equal(t, int32(3), *b.Status.RecommendedReplicas, "the recommendation is clamped to the maximum")
	status, _, msg := condition(b, "Ready")
	assert.Equal(t, "True", status, msg)
	assert.Contains(t, msg, running)
	require.Len(t, b.Status.Metrics, 1)
	assert.Equal(t, running, b.Status.Metrics[0].Name)
	assert.Greater(t, b.Status.Metrics[0].Current.AsApproximateFloat64(), 2.0)
	w.hasEvent("chat", "ScaledUp")

	// Hold the load a moment at 3 replicas, then stop it (a step of the load, not a check).
	time.Sleep(time.Second)
	l.end()
	stopped := time.Now()
	w.eventually("scaled down to the minimum 1", 30*time.Second, func() bool { return log.last() == 1 })
	changes := log.snapshot()
	var firstDown time.Time
	for i, c := range changes {
		assert.LessOrEqual(t, c.n, int32(3), "never above maxReplicas: %v", log.values())
		assert.GreaterOrEqual(t, c.n, int32(1), "never below minReplicas: %v", log.values())
		if i > 0 && c.n < changes[i-1].n && firstDown.IsZero() {
			firstDown = c.at
		}
	}
	assert.Equal(t, []int32{1, 2, 3}, log.values()[:3], "stable scale-up: +1 (or +100%%) per period")
	// The last high recommendation was read up to one sync period before the load stopped.
	assert.GreaterOrEqual(t, firstDown.Sub(stopped), window-2*syncPeriod-500*time.Millisecond,
		"the first scale-down comes only after the stabilization window: %v", log.values())
	w.hasEvent("chat", "ScaledDown")
	assert.Zero(t, l.bad.Load(), "no request failed while scaling")
}

// A burst far above the current capacity enters panic mode, which scales up by the panic
// policy in one step where the stable policy would add one replica per period, and holds
// the replicas until the panic hold has passed.
func TestPanicOnABurst(t *testing.T) {
	w := newWorld(t, 1)
	w.served("burst", "llama-burst", "burst", 1)
	w.route("burst", "llama-burst")
	w.waitAvailable("burst", 1)
	log := w.watchReplicas("burst")["burst"]
	w.apply(policyYAML("burst", `
    scaleUp:
      stablePolicy: {instances: 1, percent: 0, period: 30s}
      panicPolicy: {percent: 1000, panicThresholdPercent: 200, panicModeHold: 5s}
    scaleDown: {instances: 8, percent: 100, period: 1s, stabilizationWindow: 1s}`),
		scalingBindingYAML("burst", "burst", "burst", 1, 8))

	l := w.startLoad("llama-burst", 12, 400)
	// 12 running on one pod asks for 6: 600% of 1 is over the 200% threshold. The stable
	// policy alone adds one replica per 30 s, so 5 within 20 s is the panic policy's doing.
	w.eventually("panic scale-up past the stable policy's +1", 20*time.Second, func() bool { return log.last() >= 5 })
	// The status is written after the scale, so it may lag the replicas by one write.
	w.eventually("PanicMode condition True", 10*time.Second, func() bool {
		s, _, _ := condition(w.binding("burst"), "PanicMode")
		return s == "True"
	})
	b := w.binding("burst")
	assert.True(t, b.Status.PanicMode)
	require.NotNil(t, b.Status.PanicUntil)
	status, reason, _ := condition(b, "PanicMode")
	assert.Equal(t, "True", status)
	assert.Equal(t, "Burst", reason)
	w.hasEvent("burst", "PanicModeStarted")
	changes := log.snapshot()
	require.GreaterOrEqual(t, len(changes), 2)
	assert.Equal(t, int32(1), changes[0].n)
	firstUp := changes[1].at
	for _, c := range changes[1:] {
		if c.n >= 5 {
			assert.Less(t, c.at.Sub(firstUp), 30*time.Second, "from the first step to 5 replicas in less than one stable period: %v", log.values())
			break
		}
	}

	// Load gone: panic mode holds the replicas until the hold runs out, then scales down.
	// The hold runs from the last reading over the threshold, which is no earlier than the
	// decision that first scaled up in panic, so no scale-down comes sooner than the hold
	// after that first step (both times seen by the same watch).
	l.end()
	w.eventually("panic mode over and scaled down to 1", 30*time.Second, func() bool { return log.last() == 1 })
	changes = log.snapshot()
	for i := 1; i < len(changes); i++ {
		if changes[i].n < changes[i-1].n {
			assert.GreaterOrEqual(t, changes[i].at.Sub(firstUp), 5*time.Second-500*time.Millisecond, "no scale-down during the panic hold: %v", log.values())
			break
		}
	}
	w.eventually("PanicMode condition False", 10*time.Second, func() bool {
		s, _, _ := condition(w.binding("burst"), "PanicMode")
		return s == "False"
	})
	w.hasEvent("burst", "PanicModeEnded")
}

// An optimizer binding over two ModelServings of one model fills the cheap one before
// the dear one, splits the total as autoscale.Distribute does, and keeps each within its
// bounds.
func TestOptimizerFillsTheCheapTargetFirst(t *testing.T) {
	w := newWorld(t, 1)
	w.served("cheap", "mixed-model", "mixed", 1)
	w.served("dear", "mixed-model", "mixed", 0)
	w.route("mixed", "mixed-model")
	w.waitAvailable("cheap", 1)
	logs := w.watchReplicas("cheap", "dear")
	cheap, dear := logs["cheap"], logs["dear"]
	w.apply(policyYAML("opt", `
    scaleUp:
      stablePolicy: {instances: 1, percent: 100, period: 1s}
      panicPolicy: {panicThresholdPercent: 1000}
    scaleDown: {stabilizationWindow: 2s, period: 1s}`),
		optimizerBindingYAML("mixed", "opt", 200, optParam{"dear", 100, 0, 3}, optParam{"cheap", 10, 1, 3}))
	shares := []autoscale.Share{{Cost: 100, Min: 0, Max: 3}, {Cost: 10, Min: 1, Max: 3}}
	// 10 in flight against 2 per pod asks for 5 replicas in all.
	l := w.startLoad("mixed-model", 10, 400)
	w.eventually("both targets scaled to 5 in all", 40*time.Second, func() bool { return cheap.last()+dear.last() == 5 })
	assert.Equal(t, autoscale.Distribute(5, shares, 200), []int32{dear.last(), cheap.last()})
	assert.Equal(t, int32(3), cheap.last())
	// Whenever the dear target had replicas, the cheap one was already full.
	for _, c := range dear.snapshot() {
		if c.n > 0 {
			var cheapThen int32
			for _, cc := range cheap.snapshot() {
				if cc.seq < c.seq {
					cheapThen = cc.n
				}
			}
			assert.Equal(t, int32(3), cheapThen, "dear got %d replicas while cheap had %d", c.n, cheapThen)
		}
	}
	// The status reports the split it applied (a later decision may have moved it since).
	w.eventually("the status reports the replicas applied", 10*time.Second, func() bool {
		b := w.binding("mixed")
		return len(b.Status.Targets) == 2 && b.Status.DesiredReplicas != nil && *b.Status.DesiredReplicas == cheap.last()+dear.last()
	})

	// Load gone: the dear replicas go first, the cheap target keeps its minimum, and the
	// dear target's last replica waits out its scale-to-zero grace period (the annotation a
	// ModelBooster writes from scaleToZeroGracePeriod).
	const grace = 5 * time.Second
	require.NoError(t, cl.Patch(w.ctx, &workloadv1alpha1.ModelServing{ObjectMeta: metav1.ObjectMeta{Name: "dear", Namespace: w.ns}},
		client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"`+workloadv1alpha1.ScaleToZeroGracePeriodAnnotation+`":"5s"}}}`))))
	w.decided(2, "mixed") // the annotation is read at the next decision
	ended := time.Now()
	l.end()
	w.eventually("back to the minimums", 30*time.Second, func() bool { return cheap.last() == 1 && dear.last() == 0 })
	// The grace is held by the dear target's last replica: its last two changes are to 1 and
	// then to 0, and the 0 comes a grace period after the later of that 1 and the load's end.
	// (The 1 of the ramp-up, long before, must not stand in for it.)
	changes := dear.snapshot()
	require.GreaterOrEqual(t, len(changes), 2, "the dear target's replicas: %v", dear.values())
	one, zero := changes[len(changes)-2], changes[len(changes)-1]
	require.Equal(t, []int32{1, 0}, []int32{one.n, zero.n}, "the dear target kept one replica just before zero: %v", dear.values())
	held := zero.at.Sub(maxTime(one.at, ended))
	t.Logf("the dear target's last replica held %s after the load ended (grace %s)", held.Round(10*time.Millisecond), grace)
	// The grace runs from the first decision that gave dear no share, which can come up to a
	// period before the load's end (the last requests finishing), and the write of 0 up to a
	// period after the grace: three periods of slack (without the grace it is one period).
	assert.GreaterOrEqual(t, held, grace-3*syncPeriod, "one replica held for the grace period: %v", dear.values())
	for _, c := range cheap.snapshot() {
		assert.GreaterOrEqual(t, c.n, int32(1))
		assert.LessOrEqual(t, c.n, int32(3))
	}
	for _, c := range dear.snapshot() {
		assert.LessOrEqual(t, c.n, int32(3))
	}
}

// `kubectl scale` on an autoscaled target: the autoscaler wins, because it owns the
// replicas while a binding names the target (as the HPA does). It takes the manual count as
// the current replicas (an event says so) and moves from there to what the load needs
// under its policy, counting the manual change against its rate limits. Neither side keeps
// flipping: each manual change causes exactly one move back.
func TestManualScaleAndTheAutoscalerDoNotFight(t *testing.T) {
	w := newWorld(t, 1)
	w.served("manual", "manual-model", "manual", 1)
	w.route("manual", "manual-model")
	w.waitAvailable("manual", 1)
	log := w.watchReplicas("manual")["manual"]
	w.apply(policyYAML("manual", `
    scaleUp:
      stablePolicy: {instances: 4, percent: 100, period: 1s}
      panicPolicy: {panicThresholdPercent: 1000}
    scaleDown: {instances: 8, percent: 100, period: 1s, stabilizationWindow: 3s}`),
		scalingBindingYAML("manual", "manual", "manual", 1, 6))
	// 4 in flight against 2 per pod: 2 replicas.
	l := w.startLoad("manual-model", 4, 400)
	defer l.end()
	w.eventually("the load's 2 replicas", 30*time.Second, func() bool { return log.last() == 2 })
	w.waitAvailable("manual", 2)
	// The autoscaler has decided with the 2 in place (over a scale period), so what it sees
	// next is a manual change from the count it applied.
	w.decided(4, "manual")

	w.scale("manual", 5)
	w.eventually("the watch sees the manual 5", 10*time.Second, func() bool { return log.last() == 5 })
	w.eventually("back to 2", 30*time.Second, func() bool { return log.last() == 2 })
	w.waitAvailable("manual", 2)
	w.decided(4, "manual")

	w.scale("manual", 1)
	w.eventually("the watch sees the manual 1", 10*time.Second, func() bool { return log.last() == 1 })
	w.eventually("back to 2 at once", 10*time.Second, func() bool { return log.last() == 2 })
	// Settled: decisions past one scale period (1 s) and the next ones leave it at 2.
	w.decided(8, "manual")
	assert.Equal(t, int32(2), log.last(), "settled")
	vals := log.values()
	// From the first 2 on: 2, 5 (manual), down to 2, 1 (manual), up to 2, and nothing else.
	// The way back from a manual change may take more than one step when a decision saw a
	// sample from before the load had spread over the new pods (the engines' gauges are
	// scraped, not exact); what fighting would show is a reversal: a step away from 2 that
	// no manual change explains.
	i := slices.Index(vals, 2)
	assert.NoError(t, oneWayBack(vals[i:], 2, 5, 1), "the autoscaler goes back to its 2 after each manual change, one way: %v", vals)
	w.hasEvent("manual", "ManualScaleObserved")
}

// Bad input is reported where the user looks, and changes nothing: the target keeps its
// replicas (here 1, below the binding's minimum 2, which a working binding would fix).
func TestBadInput(t *testing.T) {
	w := newWorld(t, 1)
	w.served("victim", "bad-model", "victim", 1)
	w.waitAvailable("victim", 1)
	log := w.watchReplicas("victim")["victim"]
	w.apply(`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: misspelt}
spec:
  metrics: [{metricName: "vllm:num_requests_runing", targetValue: "2"}]
`, `
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: zero-target}
spec:
  metrics: [{metricName: "vllm:num_requests_running", targetValue: "0"}]
`, policyYAML("good", "    scaleUp: {}"))
	w.apply(
		scalingBindingYAML("unknown-metric", "misspelt", "victim", 2, 4),
		scalingBindingYAML("missing-target", "good", "no-such-serving", 2, 4),
		// (other targets: two bindings on one target would be a conflict, reported as such)
		scalingBindingYAML("missing-policy", "no-such-policy", "victim-b", 2, 4),
		scalingBindingYAML("invalid-policy", "zero-target", "victim-c", 2, 4),
		strings.Replace(scalingBindingYAML("other-namespace", "good", "victim", 2, 4), "targetRef: {name: victim}", "targetRef: {name: victim, namespace: default}", 1),
	)
	for name, want := range map[string][]string{
		"unknown-metric":  {"UnknownMetric", `"vllm:num_requests_runing" is not exposed by any of the 1 ready pods of victim`},
		"missing-target":  {"TargetNotFound", "ModelServing no-such-serving not found"},
		"missing-policy":  {"PolicyNotFound", `spec.policyRef.name: AutoscalingPolicy "no-such-policy" not found`},
		"invalid-policy":  {"InvalidPolicy", "spec.metrics[0].targetValue: must be greater than 0"},
		"other-namespace": {"TargetInOtherNamespace", `targetRef.namespace: "default" is not the binding's namespace`},
	} {
		w.eventually(name+" reports "+want[0], 20*time.Second, func() bool {
			s, reason, msg := condition(w.binding(name), "Ready")
			return s == "False" && reason == want[0] && strings.Contains(msg, want[1])
		})
		w.hasEvent(name, want[0])
	}
	w.eventually("the invalid policy says why", 10*time.Second, func() bool {
		var p workloadv1alpha1.AutoscalingPolicy
		require.NoError(t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "zero-target"}, &p))
		c := meta.FindStatusCondition(p.Status.Conditions, "Valid")
		return c != nil && c.Status == "False" && strings.Contains(c.Message, "targetValue")
	})

	// min > max never gets in: the apiserver rejects it, naming the field.
	bad := scalingBindingYAML("min-over-max", "good", "victim", 5, 2)
	var obj workloadv1alpha1.AutoscalingPolicyBinding
	require.NoError(t, yamlStrict(bad, &obj))
	obj.Namespace = w.ns
	err := cl.Create(w.ctx, &obj)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spec.scalingConfiguration.minReplicas: Invalid value")
	assert.Contains(t, err.Error(), "minReplicas cannot exceed maxReplicas")

	// Each bad binding decided again since it reported its problem, and left the target alone.
	w.decided(2, "unknown-metric", "missing-target", "missing-policy", "invalid-policy", "other-namespace")
	assert.Equal(t, []int32{1}, log.values(), "no bad binding changed the target's replicas")
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// oneWayBack checks a replica sequence that starts at the autoscaler's count want, is
// scaled by hand to each of manual in turn, and after each returns to want: every step
// between two manual changes moves towards want (never away, never past it), and the
// sequence ends at want.
func oneWayBack(vals []int32, want int32, manual ...int32) error {
	if len(vals) == 0 || vals[0] != want {
		return fmt.Errorf("the sequence does not start at %d", want)
	}
	j := 1
	for _, m := range manual {
		if j >= len(vals) || vals[j] != m {
			return fmt.Errorf("step %d: want the manual %d", j, m)
		}
		j++
		for j < len(vals) && vals[j-1] != want {
			prev, cur := vals[j-1], vals[j]
			if (cur-want)*(prev-want) < 0 || abs32(cur-want) >= abs32(prev-want) {
				return fmt.Errorf("step %d: %d -> %d moves away from (or past) %d", j, prev, cur, want)
			}
			j++
		}
		if vals[j-1] != want {
			return fmt.Errorf("after the manual %d the sequence ends at %d, not %d", m, vals[j-1], want)
		}
	}
	if j != len(vals) {
		return fmt.Errorf("steps after the last return to %d: %v", want, vals[j:])
	}
	return nil
}

func abs32(v int32) int32 {
	if v < 0 {
		return -v
	}
	return v
}
