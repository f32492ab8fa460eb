package autoscale

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-sh/berth/internal/systemtest"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale/binding"
	"github.com/berth-sh/berth/pkg/fabric"
	"github.com/berth-sh/berth/pkg/sim"
)

// servedOn is served with pods of `gpus` GPUs that only nodes of the GPU product run.
func (w *world) servedOn(name, model, app, product string, gpus, replicas int) {
	w.apply(servedYAML(name, model, app, replicas, gpus, "", fmt.Sprintf("{%s: %s}", sim.GPUProductLabel, product)))
}

// gpuPools creates one 8-GPU node of each GPU product, node i named <ns>-pool-<i>.
func (w *world) gpuPools(products ...string) {
	w.t.Helper()
	for i, product := range products {
		_, err := kube.CoreV1().Nodes().Create(w.ctx, systemtest.GPUNode(fmt.Sprintf("%s-pool-%d", w.ns, i), w.ns, product), metav1.CreateOptions{})
		require.NoError(w.t, err)
	}
}

// watchPending polls the namespace's pods and records, per pod, how long it has waited
// unbound (until it bound, or until now).
func (w *world) watchPending() func() map[string]time.Duration {
	var mu sync.Mutex
	since, waited := map[string]time.Time{}, map[string]time.Duration{}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			pods, err := kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{})
			if err == nil {
				now := time.Now()
				mu.Lock()
				for _, p := range pods.Items {
					key := p.Name + "/" + string(p.UID)
					if p.Spec.NodeName == "" && p.DeletionTimestamp == nil {
						if _, ok := since[key]; !ok {
							since[key] = now
						}
						waited[key] = now.Sub(since[key])
					}
				}
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-w.ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	end := func() { once.Do(func() { close(stop); <-done }) }
	w.t.Cleanup(end)
	return func() map[string]time.Duration {
		end()
		mu.Lock()
		defer mu.Unlock()
		return waited
	}
}

// Placement-aware scale-up: the cheap target's GPUs (one node of its product) hold two of
// its 4-GPU groups; the load asks for four replicas. The optimizer would give all four to
// the cheap target, two of them pods that cannot land; berth-scheduler's published counts
// cap the cheap target at what fits, so the dear target (another product's node) takes
// the overflow, and no group of the cheap target waits unplaced for longer than a
// scheduling pass. Run with BERTH_TEST_BLIND_SCALING=1 (the autoscaler blind), it fails:
// the cheap target goes to 4 with two groups pending for good.
func TestOverflowGoesWhereItLands(t *testing.T) {
	w := newWorld(t, 0)
	small, big := w.ns+"-small", w.ns+"-big"
	w.gpuPools(small, big)
	w.servedOn("cheap", "squeeze-model", "squeeze", small, 4, 1)
	w.servedOn("dear", "squeeze-model", "squeeze", big, 4, 0)
	w.route("squeeze", "squeeze-model")
	w.waitAvailable("cheap", 1)
	// The scheduler has published the counts: one more group of cheap fits, two of dear.
	var seen string
	defer func() { t.Logf("last counts seen: %s", seen) }()
	w.eventually("berth-scheduler publishes the groups that fit", 20*time.Second, func() bool {
		var a, b workloadv1alpha1.ModelServing
		if cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "cheap"}, &a) != nil || cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "dear"}, &b) != nil {
			return false
		}
		seen = fmt.Sprintf("cheap %q, dear %q", a.Annotations[workloadv1alpha1.GroupsThatFitAnnotation], b.Annotations[workloadv1alpha1.GroupsThatFitAnnotation])
		return a.Annotations[workloadv1alpha1.GroupsThatFitAnnotation] == "1" && b.Annotations[workloadv1alpha1.GroupsThatFitAnnotation] == "2"
	})
	logs := w.watchReplicas("cheap", "dear")
	cheap, dear := logs["cheap"], logs["dear"]
	pending := w.watchPending()
	w.apply(policyYAML("squeeze", `
    scaleUp:
      stablePolicy: {instances: 1, percent: 100, period: 1s}
      panicPolicy: {panicThresholdPercent: 1000}
    scaleDown: {stabilizationWindow: 30s, period: 1s}`),
		optimizerBindingYAML("squeeze", "squeeze", 100, optParam{"cheap", 10, 1, 4}, optParam{"dear", 100, 0, 4}))
	// 8 in flight against 2 per pod asks for 4 replicas in all.
	l := w.startLoad("squeeze-model", 8, 400)
	defer l.end()
	w.eventually("4 replicas in all, the overflow on the dear target", 60*time.Second, func() bool {
		return cheap.last()+dear.last() == 4 && dear.last() == 2
	})
	w.waitAvailable("dear", 2)
	w.waitAvailable("cheap", 2)
	w.decided(8, "squeeze") // settled: later decisions keep the split
	assert.Equal(t, int32(2), cheap.last())
	for _, c := range cheap.snapshot() {
		assert.LessOrEqual(t, c.n, int32(2), "the cheap target never asked for a group that cannot land: %v", cheap.values())
	}
	// The counts are republished each period: the condition may first show the dear pool's
	// count from before its groups landed, then the settled one.
	const settled = "capacity-limited: 0 more groups of cheap fit, 0 more groups of dear fit"
	var cond *metav1.Condition
	w.eventually("the binding says capacity-limited with the settled counts", 30*time.Second, func() bool {
		cond = meta.FindStatusCondition(w.binding("squeeze").Status.Conditions, binding.ConditionCapacityLimited)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.Message == settled
	})
	w.hasEvent("squeeze", binding.ReasonCapacityLimited)
	for pod, d := range pending() {
		// A scheduling pass (the gang's plan, the binding, the informer's view) takes well
		// under this; a group that cannot land waits for the whole run.
		assert.Less(t, d, 5*time.Second, "pod %s waited unplaced", pod)
	}
	t.Logf("cheap %v, dear %v; %d requests answered, %d failed", cheap.values(), dear.values(), l.ok.Load(), l.bad.Load())
}

// Placement-aware scale-up on the llm-d path: a VariantAutoscaling whose ModelServing's pool
// (one node of its GPU product) holds two of its 4-GPU groups, under a load its queueing model
// sizes at three or more replicas, scales to the two that land and says why in its Ready
// condition and an event; no group waits unplaced. Blind (BERTH_TEST_BLIND_SCALING=1) it
// goes past two and the extra groups stay pending.
func TestVariantAutoscalingScalesOnlyWhatLands(t *testing.T) {
	w := newWorld(t, 0)
	product := w.ns + "-pool"
	w.gpuPools(product)
	w.servedOn("va-squeeze", "va-squeeze", "va-squeeze", product, 4, 1)
	w.route("va-squeeze", "va-squeeze")
	w.waitAvailable("va-squeeze", 1)
	w.eventually("berth-scheduler publishes that one more group fits", 20*time.Second, func() bool {
		var ms workloadv1alpha1.ModelServing
		return cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "va-squeeze"}, &ms) == nil &&
			ms.Annotations[workloadv1alpha1.GroupsThatFitAnnotation] == "1"
	})
	log := w.watchReplicas("va-squeeze")["va-squeeze"]
	pending := w.watchPending()
	w.apply(sloConfigMap("service-classes-config", "va-squeeze"), costsConfigMap,
		fmt.Sprintf(variantYAML, "va-squeeze", "va-squeeze", "service-classes-config"))
	// As in TestVariantAutoscalingScalesItsModelServing: far more than one replica serves
	// within the SLO; the model asks for three or more.
	l := w.startLoad("va-squeeze", 16, 100)
	defer l.end()
	var msg string
	w.eventually("the variant says it is capacity-limited", 60*time.Second, func() bool {
		_, _, msg = readyOf(w.variant("va-squeeze"))
		return strings.Contains(msg, "capacity-limited: ") && strings.Contains(msg, "of va-squeeze") && strings.Contains(msg, "so 2 replicas instead of")
	})
	w.waitAvailable("va-squeeze", 2)
	w.hasEventOn("VariantAutoscaling", "va-squeeze", "CapacityLimited")
	for _, c := range log.snapshot() {
		assert.LessOrEqual(t, c.n, int32(2), "never more replicas than land: %v", log.values())
	}
	for pod, d := range pending() {
		assert.Less(t, d, 5*time.Second, "pod %s waited unplaced", pod)
	}
	t.Logf("replicas %v; Ready: %s", log.values(), msg)
}

// The llm-d v0.5 path: two variants of one model, the cheap one on a pool that holds two of
// its 4-GPU groups, the dear one on a pool with room. Under load the saturation analyzer adds
// replicas to the cheapest variant; once the cheap pool is full (berth-scheduler's count),
// the next ones go to the dear variant, and no group waits unplaced. Blind
// (BERTH_TEST_BLIND_SCALING=1) the cheap variant goes to three and that group stays pending.
func TestLLMDVariantOverflowGoesWhereItLands(t *testing.T) {
	w := newWorld(t, 0)
	small, big := w.ns+"-small", w.ns+"-big"
	w.gpuPools(small, big)
	batch := `, "--max-num-seqs", "4"`
	w.apply(servedYAML("lv-cheap", "lv", "lv", 1, 4, batch, fmt.Sprintf("{%s: %s}", sim.GPUProductLabel, small)),
		servedYAML("lv-dear", "lv", "lv", 1, 4, batch, fmt.Sprintf("{%s: %s}", sim.GPUProductLabel, big)))
	w.route("lv", "lv")
	w.waitAvailable("lv-cheap", 1)
	w.waitAvailable("lv-dear", 1)
	logs := w.watchReplicas("lv-cheap", "lv-dear")
	pending := w.watchPending()
	variant := func(name, cost string) string {
		return fmt.Sprintf(`
apiVersion: llmd.ai/v1alpha1
kind: VariantAutoscaling
metadata: {name: %[1]s}
spec:
  scaleTargetRef: {apiVersion: workload.serving.volcano.sh/v1alpha1, kind: ModelServing, name: %[1]s}
  modelID: lv
  variantCost: "%[2]s"
`, name, cost)
	}
	w.apply(variant("lv-cheap", "10"), variant("lv-dear", "80"))
	l := w.startLoad("lv", 24, 200)
	defer l.end()
	w.eventually("the overflow reached the dear variant", 90*time.Second, func() bool {
		return logs["lv-cheap"].last() == 2 && logs["lv-dear"].last() >= 2
	})
	w.waitAvailable("lv-dear", 2)
	for _, c := range logs["lv-cheap"].snapshot() {
		assert.LessOrEqual(t, c.n, int32(2), "the cheap variant never asked for a group that cannot land: %v", logs["lv-cheap"].values())
	}
	for pod, d := range pending() {
		assert.Less(t, d, 5*time.Second, "pod %s waited unplaced", pod)
	}
	_, _, msg := readyOf(w.variant("lv-dear"))
	t.Logf("replicas: cheap %v, dear %v; dear's Ready: %s", logs["lv-cheap"].values(), logs["lv-dear"].values(), msg)
}

// Placement-aware scale-up counts groups as berth-scheduler places them, network topology
// included. A ModelServing whose groups (two pods of 5 GPUs) must sit in one NVLink domain
// runs its one group on the only domain of two nodes; two more nodes, each its own domain,
// have 16 GPUs free between them, which a count over every node would take for one more
// group. Under load that asks for more, the autoscaler stays at one group and says why, and
// no pod waits unplaced; once a domain gains a second node, the next group fits, is made,
// and lands there. Counted blind to the topology, the second group would be made at once
// and wait, split over two domains, until that node came.
func TestScaleUpCountsGroupsInsideOneNVLinkDomain(t *testing.T) {
	w := newWorld(t, 0)
	product := w.ns + "-nvl"
	clique := func(name, domain string) {
		n := systemtest.GPUNode(w.ns+"-"+name, w.ns, product)
		n.Labels[fabric.CliqueLabel] = w.ns + "." + domain
		_, err := kube.CoreV1().Nodes().Create(w.ctx, n, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	clique("a-0", "a")
	clique("a-1", "a")
	clique("b-0", "b")
	clique("c-0", "c")
	w.apply(fmt.Sprintf(`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: ModelServing
metadata: {name: nvl}
spec:
  schedulerName: berth-scheduler
  replicas: 1
  template:
    networkTopology: {mode: hard, highestTierName: nvlink}
    roles:
    - name: server
      replicas: 1
      workerReplicas: 1
      entryTemplate:
        metadata: {labels: {app: nvl}}
        spec:
          nodeSelector: {%[1]s: %[2]s}
          containers:
          - name: vllm
            image: vllm/vllm-openai:v0.11.0
            args: ["--model", "nvl-model"]
            ports: [{containerPort: 8000}]
            resources: {limits: {nvidia.com/gpu: "5"}}
      workerTemplate:
        spec:
          nodeSelector: {%[1]s: %[2]s}
          containers:
          - name: worker
            image: vllm/vllm-openai:v0.11.0
            args: ["--model", "nvl-model"]
            resources: {limits: {nvidia.com/gpu: "5"}}
`, sim.GPUProductLabel, product))
	w.route("nvl", "nvl-model")
	w.waitAvailable("nvl", 1)
	count := func() string {
		var ms workloadv1alpha1.ModelServing
		if cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "nvl"}, &ms) != nil {
			return ""
		}
		return ms.Annotations[workloadv1alpha1.GroupsThatFitAnnotation]
	}
	w.eventually("berth-scheduler publishes that no group fits one NVLink domain", 20*time.Second, func() bool { return count() == "0" })

	log := w.watchReplicas("nvl")["nvl"]
	pending := w.watchPending()
	w.apply(policyYAML("nvl", `
    scaleUp:
      stablePolicy: {instances: 1, percent: 100, period: 1s}
      panicPolicy: {panicThresholdPercent: 1000}
    scaleDown: {stabilizationWindow: 60s, period: 1s}`),
		scalingBindingYAML("nvl", "nvl", "nvl", 1, 3))
	// 8 in flight against 2 per engine asks for more than one group.
	l := w.startLoad("nvl-model", 8, 400)
	defer l.end()
	var cond *metav1.Condition
	w.eventually("the binding says capacity-limited", 30*time.Second, func() bool {
		cond = meta.FindStatusCondition(w.binding("nvl").Status.Conditions, binding.ConditionCapacityLimited)
		return cond != nil && cond.Status == metav1.ConditionTrue && strings.Contains(cond.Message, "0 more groups of nvl fit")
	})
	w.hasEvent("nvl", binding.ReasonCapacityLimited)
	w.decided(8, "nvl") // settled: later decisions keep it
	assert.Equal(t, []int32{1}, log.values(), "no group was made that could not land")

	// Domain c gains a node: one more group fits there.
	clique("c-1", "c")
	w.eventually("the count sees the new domain", 20*time.Second, func() bool { return count() != "0" && count() != "" })
	w.waitAvailable("nvl", 2)
	var pods corev1.PodList
	require.NoError(t, cl.List(w.ctx, &pods, client.InNamespace(w.ns), client.MatchingLabels{workloadv1alpha1.GroupNameLabel: "nvl-1"}))
	for _, p := range pods.Items {
		assert.Contains(t, []string{w.ns + "-c-0", w.ns + "-c-1"}, p.Spec.NodeName, "group nvl-1 is inside domain c")
	}
	for pod, d := range pending() {
		assert.Less(t, d, 5*time.Second, "pod %s waited unplaced", pod)
	}
	t.Logf("replicas %v; %s", log.values(), cond.Message)
}
