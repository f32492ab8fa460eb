package autoscale

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
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
	time.Sleep(4 * syncPeriod)
	assert.Equal(t, []int32{1}, log.values(), "no bad policy changed the target's replicas")
}
