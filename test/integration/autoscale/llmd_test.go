package autoscale

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// servedBatch is w.served with the engines' batch limited to batch running requests
// (vLLM's --max-num-seqs): more requests than that queue, which is what llm-d's
// saturation analyzer scales on.
func (w *world) servedBatch(name, model, app string, replicas, batch int) {
	w.apply(servedYAML(name, model, app, replicas, 1, fmt.Sprintf(`, "--max-num-seqs", "%d"`, batch), ""))
}

// series is one exported sample: its labels and value.
type series struct {
	labels map[string]string
	value  float64
}

// exported lists the series of a metric in berth-controller's registry (it runs in this
// process) whose labels match sel.
func exported(t *testing.T, name string, sel labels.Selector) []series {
	t.Helper()
	out, err := gather(name, sel)
	require.NoError(t, err)
	return out
}

func gather(name string, sel labels.Selector) ([]series, error) {
	fams, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		return nil, err
	}
	var out []series
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if sel.Matches(labels.Set(l)) {
				out = append(out, series{l, valueOf(f.GetType(), m)})
			}
		}
	}
	return out, nil
}

func valueOf(typ dto.MetricType, m *dto.Metric) float64 {
	if typ == dto.MetricType_COUNTER {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// A VariantAutoscaling written as llm-d v0.5's documentation writes it (scaleTargetRef,
// modelID, variantCost; the accelerator as a label) scales its ModelServing under a load
// ramp, one replica per run as llm-d's saturation analyzer moves, and back to one after.
func TestLLMDv05VariantScalesItsModelServing(t *testing.T) {
	w := newWorld(t, 1)
	w.servedBatch("llama-8b-a100", "meta/llama-3.1-8b", "llama-8b", 1, 4)
	w.route("llama-8b", "meta/llama-3.1-8b")
	w.waitAvailable("llama-8b-a100", 1)
	log := w.watchReplicas("llama-8b-a100")["llama-8b-a100"]
	w.apply(`
apiVersion: llmd.ai/v1alpha1
kind: VariantAutoscaling
metadata:
  name: llama-8b-a100
  labels:
    inference.optimization/acceleratorName: A100
spec:
  scaleTargetRef:
    apiVersion: workload.serving.volcano.sh/v1alpha1
    kind: ModelServing
    name: llama-8b-a100
  modelID: meta/llama-3.1-8b
  variantCost: "40.0"
`)
	w.eventually("the idle variant sized", 20*time.Second, func() bool {
		s, reason, _ := readyOf(w.variant("llama-8b-a100"))
		return s == "True" && reason == "Optimized"
	})

	// Ramp, first step: 3 clients fit in one engine's batch of 4: nothing queues, one
	// replica is enough (and one cannot give one up).
	l := w.startLoad("meta/llama-3.1-8b", 3, 200)
	// Sized with the load in flight (the first sizing may have read the engines before it),
	// and left at one.
	w.sized(3, "llama-8b-a100")
	assert.Equal(t, []int32{1}, log.values(), "no queue, no scale-up")

	// Second step: 24 clients, 200 tokens each, on engines that run 4 at a time: the queue
	// saturates a replica; the analyzer adds one replica per run until the average spare
	// queue is back to llm-d's trigger (3 of 5), which 24 clients reach at 4 replicas.
	l.want.Store(24)
	w.eventually("scaled up under load", 60*time.Second, func() bool { return log.last() >= 4 })
	va := w.variant("llama-8b-a100")
	s, reason, msg := readyOf(va)
	assert.Equal(t, "True", s, msg)
	assert.Equal(t, "Optimized", reason)
	assert.Contains(t, msg, "llama-8b-a100 (VariantAutoscaling)", "the message lists the model's variants")
	require.NotNil(t, va.Status.DesiredOptimizedAlloc)
	assert.Equal(t, "A100", va.Status.DesiredOptimizedAlloc.Accelerator, "the label names the accelerator")
	assert.True(t, va.Status.Actuation.Applied)
	assert.Nil(t, va.Status.CurrentAlloc, "llm-d v0.5 writes no currentAlloc")
	for _, typ := range []string{"TargetResolved", "MetricsAvailable", "OptimizationReady"} {
		c := meta.FindStatusCondition(va.Status.Conditions, typ)
		require.NotNil(t, c, "llm-d's condition %s", typ)
		assert.Equal(t, "True", string(c.Status), "%s: %s", typ, c.Message)
	}
	w.hasEventOn("VariantAutoscaling", "llama-8b-a100", "Scaled")
	// Exported under llm-d v0.5's series, variant_name the VariantAutoscaling's name.
	sel := labels.SelectorFromSet(labels.Set{"variant_name": "llama-8b-a100", "namespace": w.ns})
	desired := exported(t, "wva_desired_replicas", sel)
	require.Len(t, desired, 1)
	assert.Equal(t, map[string]string{"variant_name": "llama-8b-a100", "namespace": w.ns, "accelerator_type": "A100"}, desired[0].labels)
	assert.GreaterOrEqual(t, desired[0].value, 4.0)
	require.Len(t, exported(t, "wva_current_replicas", sel), 1)
	require.Len(t, exported(t, "wva_desired_ratio", sel), 1)
	ups := exported(t, "wva_replica_scaling_total", labels.SelectorFromSet(labels.Set{"variant_name": "llama-8b-a100", "direction": "up"}))
	require.Len(t, ups, 1)
	assert.GreaterOrEqual(t, ups[0].value, 3.0, "one scaling per step from 1 to 4 or more")
	assert.Empty(t, exported(t, "inferno_desired_replicas", sel), "the spec shape's series are not exported for a v0.5 variant")

	// Load gone: one replica fewer per run, down to one.
	l.end()
	w.eventually("scaled down after the load", 60*time.Second, func() bool { return log.last() == 1 })
	t.Logf("replicas: %v", log.values())
	assertSteps(t, log.values())
	assert.Zero(t, l.bad.Load(), "no request failed while scaling")
}

// assertSteps checks replicas moved one at a time, as llm-d's analyzer moves them.
func assertSteps(t *testing.T, vals []int32) {
	t.Helper()
	for i := 1; i < len(vals); i++ {
		assert.LessOrEqual(t, math.Abs(float64(vals[i]-vals[i-1])), 1.0, "one replica per step: %v", vals)
	}
	assert.GreaterOrEqual(t, slices.Min(vals), int32(1), "never below one replica: %v", vals)
}

// An HPA annotated as llm-d documents (llm-d.ai/managed, llm-d.ai/model-id,
// llm-d.ai/variant-cost) whose target is a ModelServing: berth-controller exports
// wva_desired_replicas under llm-d's labels and scales nothing itself. This control plane
// runs no HPA controller (nor a Prometheus adapter), so the test reads the series the HPA's
// External metric selector selects and, playing the HPA controller, applies it.
func TestLLMDAnnotatedHPAExportsDesiredReplicas(t *testing.T) {
	w := newWorld(t, 1)
	w.servedBatch("chat-h100", "chat", "chat", 1, 4)
	w.route("chat", "chat")
	w.waitAvailable("chat-h100", 1)
	log := w.watchReplicas("chat-h100")["chat-h100"]
	// variant_name is the HPA's own name (llm-d names an annotated variant after its HPA);
	// exported_namespace is how Prometheus relabels the namespace label of a series whose
	// scrape target (berth-controller) has a namespace of its own.
	w.apply(fmt.Sprintf(`
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: chat-h100-hpa
  labels:
    inference.optimization/acceleratorName: H100
  annotations:
    llm-d.ai/managed: "true"
    llm-d.ai/model-id: chat
    llm-d.ai/variant-cost: "80.0"
spec:
  scaleTargetRef:
    apiVersion: workload.serving.volcano.sh/v1alpha1
    kind: ModelServing
    name: chat-h100
  minReplicas: 1
  maxReplicas: 5
  metrics:
  - type: External
    external:
      metric:
        name: wva_desired_replicas
        selector:
          matchLabels:
            variant_name: chat-h100-hpa
            exported_namespace: %s
      target:
        type: AverageValue
        averageValue: "1"
`, w.ns))
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	require.NoError(t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "chat-h100-hpa"}, hpa))
	selected := func() []series { return selectedByHPA(t, hpa) }

	// Idle: the selector picks exactly one series, llm-d's labels, one replica.
	w.eventually("the idle variant exported", 20*time.Second, func() bool {
		s := selected()
		return len(s) == 1 && s[0].value == 1
	})
	assert.Equal(t, map[string]string{"variant_name": "chat-h100-hpa", "namespace": w.ns, "accelerator_type": "H100"}, selected()[0].labels)
	w.hasEventOn("HorizontalPodAutoscaler", "chat-h100-hpa", "DesiredReplicas")

	// Load: the desired replicas rise, and berth-controller leaves the scaling to the HPA.
	l := w.startLoad("chat", 24, 200)
	w.eventually("desired replicas above the current", 30*time.Second, func() bool {
		s := selected()
		return len(s) == 1 && s[0].value >= 2
	})
	// berth-controller sized the variant again with the desired count above the current one,
	// and left the replicas to the HPA.
	w.sized(2, "chat-h100-hpa")
	assert.Equal(t, []int32{1}, log.values(), "berth-controller does not scale an HPA's target")
	cur := exported(t, "wva_current_replicas", labels.SelectorFromSet(labels.Set{"variant_name": "chat-h100-hpa"}))
	require.Len(t, cur, 1)
	assert.Equal(t, 1.0, cur[0].value)
	// Until the HPA acts, the analyzer holds its decision (llm-d: a variant whose desired
	// count is not its current one is in transition).
	assert.Equal(t, 2.0, selected()[0].value)

	// The HPA acts on what its selector selects: the ModelServing follows the series up.
	stop := w.playHPA(hpa)
	w.eventually("scaled up by the HPA", 60*time.Second, func() bool { return log.last() >= 4 })
	l.end()
	w.eventually("desired back to one after the load", 60*time.Second, func() bool {
		s := selected()
		return len(s) == 1 && s[0].value == 1
	})
	w.eventually("scaled down by the HPA", 30*time.Second, func() bool { return log.last() == 1 })
	stop()
	t.Logf("replicas: %v", log.values())
	assertSteps(t, log.values())
	assert.Zero(t, l.bad.Load(), "no request failed while scaling")

	// The annotation removed: the series go.
	require.NoError(t, cl.Get(w.ctx, client.ObjectKeyFromObject(hpa), hpa))
	delete(hpa.Annotations, "llm-d.ai/managed")
	require.NoError(t, cl.Update(w.ctx, hpa))
	w.eventually("series dropped", 10*time.Second, func() bool {
		return len(exported(t, "wva_desired_replicas", labels.SelectorFromSet(labels.Set{"variant_name": "chat-h100-hpa"}))) == 0
	})
}

// selectedByHPA is what an HPA's first External metric selects: the series of its name
// whose labels match its selector, the way a Prometheus adapter serves it (a series'
// namespace label, renamed exported_namespace by the scrape, is matched as such).
func selectedByHPA(t *testing.T, hpa *autoscalingv2.HorizontalPodAutoscaler) []series {
	t.Helper()
	out, err := selectFor(hpa)
	require.NoError(t, err)
	return out
}

func selectFor(hpa *autoscalingv2.HorizontalPodAutoscaler) ([]series, error) {
	ext := hpa.Spec.Metrics[0].External
	if ext == nil || ext.Metric.Selector == nil {
		return nil, fmt.Errorf("HPA %s has no External metric with a selector", hpa.Name)
	}
	want := map[string]string{}
	for k, v := range ext.Metric.Selector.MatchLabels {
		if k == "exported_namespace" {
			k = "namespace"
		}
		want[k] = v
	}
	return gather(ext.Metric.Name, labels.SelectorFromSet(want))
}

// playHPA does what kube-controller-manager's HPA controller does with an External
// metric and an AverageValue target every 250 ms: replicas = ceil(value / target),
// unless within the 10% tolerance, within minReplicas and maxReplicas. It returns a stop
// function.
func (w *world) playHPA(hpa *autoscalingv2.HorizontalPodAutoscaler) func() {
	done, stopped := make(chan struct{}), make(chan struct{})
	target := hpa.Spec.Metrics[0].External.Target.AverageValue.AsApproximateFloat64()
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(250 * time.Millisecond):
			}
			s, err := selectFor(hpa)
			var ms workloadv1alpha1.ModelServing
			if err != nil || len(s) == 0 || cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: hpa.Spec.ScaleTargetRef.Name}, &ms) != nil {
				continue
			}
			var value float64
			for _, x := range s {
				value += x.value
			}
			current := *ms.Spec.Replicas
			if current > 0 && math.Abs(value/(target*float64(current))-1) <= 0.1 {
				continue
			}
			lo := int32(1) // the HPA's default minReplicas
			if hpa.Spec.MinReplicas != nil {
				lo = *hpa.Spec.MinReplicas
			}
			want := min(max(int32(math.Ceil(value/target)), lo), hpa.Spec.MaxReplicas)
			if want != current {
				// The HPA writes the scale subresource, as kubectl scale does.
				sc := &autoscalingv1.Scale{}
				if cl.SubResource("scale").Get(w.ctx, &ms, sc) == nil {
					sc.Spec.Replicas = want
					_ = cl.SubResource("scale").Update(w.ctx, &ms, client.WithSubResourceBody(sc))
				}
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// The variants of one model are sized together whichever way they are declared: a
// VariantAutoscaling in llm-d v0.5's shape (variantCost 10) and an annotated HPA
// (llm-d.ai/variant-cost 80) serving the same model behind one ModelServer. Under load
// every added replica goes to the cheaper variant; the dearer one stays at one.
func TestLLMDVariantsOfOneModelScaleCheapestFirst(t *testing.T) {
	w := newWorld(t, 1)
	w.servedBatch("mix-cheap", "mix", "mix", 1, 4)
	w.servedBatch("mix-dear", "mix", "mix", 1, 4)
	w.route("mix", "mix")
	w.waitAvailable("mix-cheap", 1)
	w.waitAvailable("mix-dear", 1)
	logs := w.watchReplicas("mix-cheap", "mix-dear")
	w.apply(`
apiVersion: llmd.ai/v1alpha1
kind: VariantAutoscaling
metadata: {name: mix-cheap}
spec:
  scaleTargetRef: {apiVersion: workload.serving.volcano.sh/v1alpha1, kind: ModelServing, name: mix-cheap}
  modelID: mix
  variantCost: "10"
`, fmt.Sprintf(`
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: mix-dear
  annotations: {llm-d.ai/managed: "true", llm-d.ai/model-id: mix, llm-d.ai/variant-cost: "80"}
spec:
  scaleTargetRef: {apiVersion: workload.serving.volcano.sh/v1alpha1, kind: ModelServing, name: mix-dear}
  maxReplicas: 5
  metrics:
  - type: External
    external:
      metric:
        name: wva_desired_replicas
        selector: {matchLabels: {variant_name: mix-dear, exported_namespace: %s}}
      target: {type: AverageValue, averageValue: "1"}
`, w.ns))
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	require.NoError(t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "mix-dear"}, hpa))
	stop := w.playHPA(hpa)
	defer stop()
	w.eventually("both variants sized", 20*time.Second, func() bool {
		s, reason, _ := readyOf(w.variant("mix-cheap"))
		return s == "True" && reason == "Optimized" && len(selectedByHPA(t, hpa)) == 1
	})

	l := w.startLoad("mix", 24, 200)
	w.eventually("the cheap variant scaled up", 60*time.Second, func() bool { return logs["mix-cheap"].last() >= 3 })
	_, _, msg := readyOf(w.variant("mix-cheap"))
	assert.Contains(t, msg, "mix-dear (HorizontalPodAutoscaler)", "the HPA's variant is sized with the VariantAutoscaling's")
	l.end()
	w.eventually("the cheap variant scaled down", 60*time.Second, func() bool { return logs["mix-cheap"].last() == 1 })
	t.Logf("replicas: cheap %v, dear %v", logs["mix-cheap"].values(), logs["mix-dear"].values())
	assert.Equal(t, []int32{1}, logs["mix-dear"].values(), "no replica went to the dearer variant")
	assertSteps(t, logs["mix-cheap"].values())
	assert.Zero(t, l.bad.Load(), "no request failed while scaling")
}
