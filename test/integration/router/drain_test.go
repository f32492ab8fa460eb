package router

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/workload"
)

// Two nodes are drained the way kubectl drain does it (cordon, then an eviction of every pod
// on them, retried while the Eviction API answers 429) while clients stream through both
// routers. A ModelServing of 4 groups of 2 pods (each pod fills a node; 10 nodes, so 8 are
// left for the 8 pods once two are drained; a pod the size of half a node made the groups'
// layout up to the scheduler, which once straddled them over three nodes) keeps its default
// minimum of 3 Ready whole groups (4 minus the rollout's maxUnavailable 1): a watch over the
// whole run finds never fewer, and never a group with some pods going while others stay;
// every request is answered; the drain finishes with no pod left on the drained nodes; and
// while it waits the ModelServing's DisruptionAllowed condition says why.
func TestNodeDrainMovesWholeGroupsUnderLoad(t *testing.T) {
	w := newWorld(t, 10)
	w.apply(servingYAML("drain", 4, 2, "0.1", 8), serverYAML("drain"), `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: drain}
spec:
  modelName: base-model
  rules: [{targetModels: [{modelServerName: drain}]}]
`)
	w.waitEndpoints("drain", 8)

	ctx, stop := context.WithCancel(w.ctx)
	defer stop()
	inv := watchGroups(t, ctx, w.ns, 2)
	w.eventually("4 whole groups are Ready in the watch", 30*time.Second, func() bool { return inv.readyNow() == 4 })
	inv.arm()

	// The ModelServing's condition, as a user polling it would see it.
	var conditions sync.Map
	go func() {
		for ctx.Err() == nil {
			ms := &workloadv1alpha1.ModelServing{}
			if cl.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: "drain"}, ms) == nil {
				if c := meta.FindStatusCondition(ms.Status.Conditions, workload.ConditionDisruptionAllowed); c != nil {
					conditions.Store(string(c.Status)+" "+c.Message, true)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()

	var sent, failed atomic.Int64
	var failures sync.Map
	var clients sync.WaitGroup
	for c := range 8 {
		clients.Go(func() {
			oc := client_(c % 2)
			for i := 0; ctx.Err() == nil; i++ {
				sent.Add(1)
				stream := oc.Chat.Completions.NewStreaming(w.ctx, openai.ChatCompletionNewParams{
					Model: "base-model", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("c%d r%d", c, i))},
					MaxTokens: openai.Int(20)})
				tokens := 0
				for stream.Next() {
					if ch := stream.Current(); len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
						tokens++
					}
				}
				if err := stream.Err(); err != nil || tokens != 20 {
					failed.Add(1)
					failures.Store(fmt.Sprintf("c%d r%d", c, i), fmt.Sprintf("tokens=%d/20 err=%v", tokens, err))
				}
			}
		})
	}
	time.Sleep(500 * time.Millisecond)

	// The nodes of group 0's first pod and group 1's: two groups are displaced.
	var nodes []string
	for _, p := range w.podList() {
		if (p.Name == "drain-0-server-0-0" || p.Name == "drain-1-server-0-0") && !slices.Contains(nodes, p.Spec.NodeName) {
			nodes = append(nodes, p.Spec.NodeName)
		}
	}
	require.Len(t, nodes, 2, "each pod fills its node")
	start := time.Now()
	evictions, refused := kubectlDrain(t, w.ctx, w.ns, nodes)
	t.Logf("drain of %v finished in %s (%d evictions accepted, %d refused with 429)", nodes, time.Since(start).Round(time.Millisecond), evictions, refused)
	w.eventually("4 whole groups are Ready again, none on a drained node", 60*time.Second, func() bool {
		for _, p := range w.podList() {
			if slices.Contains(nodes, p.Spec.NodeName) {
				return false
			}
		}
		return inv.readyNow() == 4
	})
	time.Sleep(500 * time.Millisecond)
	stop()
	clients.Wait()

	failures.Range(func(k, v any) bool { t.Logf("failed %s: %s", k, v); return true })
	t.Logf("%d streamed requests; fewest Ready whole groups %d", sent.Load(), inv.fewest())
	assert.Zero(t, failed.Load(), "no request is lost to the drain")
	assert.Greater(t, sent.Load(), int64(50))
	assert.GreaterOrEqual(t, inv.fewest(), 3, "never fewer than the minimum of 3 whole groups Ready")
	assert.Empty(t, inv.partial(), "no group had some pods going while others stayed")
	var seen []string
	conditions.Range(func(k, _ any) bool { seen = append(seen, k.(string)); return true })
	t.Logf("DisruptionAllowed seen: %q", seen)
	// The condition is asked of a wait: when every eviction was accepted at once (the first
	// displaced group was whole again before the second's pods were tried, which a slow run
	// can do) nothing waited and there is nothing for it to explain.
	if refused > 0 {
		assert.True(t, slices.ContainsFunc(seen, func(s string) bool {
			return strings.HasPrefix(s, "False nodes drained: ") && strings.Contains(s, "waits: 3 of min 3 groups ready")
		}), "while a group waits, the condition names the drained nodes and why it waits")
	}
	w.eventually("the DisruptionAllowed condition goes with the drain", 10*time.Second, func() bool {
		ms := &workloadv1alpha1.ModelServing{}
		require.NoError(t, cl.Get(w.ctx, client.ObjectKey{Namespace: w.ns, Name: "drain"}, ms))
		return meta.FindStatusCondition(ms.Status.Conditions, workload.ConditionDisruptionAllowed) == nil
	})
}

func (w *world) podList() []corev1.Pod {
	pods, err := kube.CoreV1().Pods(w.ns).List(w.ctx, metav1.ListOptions{})
	require.NoError(w.t, err)
	return pods.Items
}

// kubectlDrain drains nodes as kubectl drain does: it cordons them, then evicts every pod on
// them through the Eviction API, retrying an eviction refused with 429 (kubectl every 5 s;
// here every 200 ms, to keep the test short), and returns once every pod it evicted is gone.
// It returns how many evictions the API accepted and how many it refused with 429.
func kubectlDrain(t *testing.T, ctx context.Context, ns string, nodes []string) (accepted, refused int64) {
	for _, n := range nodes {
		_, err := kube.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	var accepts, refusals atomic.Int64
	var evicting sync.WaitGroup
	for _, n := range nodes {
		pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n})
		require.NoError(t, err)
		for _, p := range pods.Items {
			evicting.Go(func() {
				deadline := time.Now().Add(3 * time.Minute)
				for time.Now().Before(deadline) {
					cur, err := kube.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
					if apierrors.IsNotFound(err) || (err == nil && cur.UID != p.UID) {
						return // gone: the drain is done with it
					}
					if err == nil && cur.DeletionTimestamp == nil {
						err = kube.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.Name},
							DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}}})
						switch {
						case err == nil:
							accepts.Add(1)
						case apierrors.IsTooManyRequests(err):
							refusals.Add(1)
						case apierrors.IsNotFound(err), apierrors.IsConflict(err):
						default:
							t.Errorf("evicting %s: %v", p.Name, err)
							return
						}
					}
					time.Sleep(200 * time.Millisecond)
				}
				t.Errorf("pod %s on a drained node is still there after 3 minutes", p.Name)
			})
		}
	}
	evicting.Wait()
	return accepts.Load(), refusals.Load()
}

// groupWatch follows a ModelServing's pods for a whole run: the fewest whole groups Ready at
// any moment after arm, and the groups that had a pod terminating while another of the same
// group stayed live for over a second (part of a group evicted, the rest serving broken).
type groupWatch struct {
	size int // pods per group

	mu       sync.Mutex
	pods     map[types.UID]*corev1.Pod
	armed    bool
	least    int
	split    map[string]time.Time // group → since when it is partly terminating
	partials map[string]bool
}

func watchGroups(t *testing.T, ctx context.Context, ns string, size int) *groupWatch {
	g := &groupWatch{size: size, pods: map[types.UID]*corev1.Pod{}, least: 1 << 30, split: map[string]time.Time{}, partials: map[string]bool{}}
	f := informers.NewSharedInformerFactoryWithOptions(kube, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { g.set(o.(*corev1.Pod), false) },
		UpdateFunc: func(_, o any) { g.set(o.(*corev1.Pod), false) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				g.set(p, true)
			}
		},
	})
	require.NoError(t, err)
	f.Start(ctx.Done())
	require.True(t, cache.WaitForCacheSync(ctx.Done(), inf.HasSynced))
	go func() { // a split lasting a second is found even when no event follows
		for ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
			g.mu.Lock()
			g.check()
			g.mu.Unlock()
		}
	}()
	return g
}

func (g *groupWatch) set(p *corev1.Pod, deleted bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if deleted {
		delete(g.pods, p.UID)
	} else {
		g.pods[p.UID] = p
	}
	g.check()
}

// check updates the record from the pods now; g.mu is held.
func (g *groupWatch) check() {
	ready, live, going := map[string]int{}, map[string]int{}, map[string]int{}
	for _, p := range g.pods {
		grp := p.Labels[workloadv1alpha1.GroupNameLabel]
		if p.DeletionTimestamp != nil {
			going[grp]++
			continue
		}
		live[grp]++
		if p.Status.Phase == corev1.PodRunning && slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}) {
			ready[grp]++
		}
	}
	whole := 0
	for _, n := range ready {
		if n == g.size {
			whole++
		}
	}
	if g.armed {
		g.least = min(g.least, whole)
	}
	now := time.Now()
	for grp := range g.split {
		if going[grp] == 0 || live[grp] == 0 {
			delete(g.split, grp)
		}
	}
	for grp, n := range going {
		if n > 0 && live[grp] > 0 {
			if since, ok := g.split[grp]; !ok {
				g.split[grp] = now
			} else if g.armed && now.Sub(since) > time.Second {
				g.partials[grp] = true
			}
		}
	}
}

func (g *groupWatch) readyNow() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	counts := map[string]int{}
	for _, p := range g.pods {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		}) {
			counts[p.Labels[workloadv1alpha1.GroupNameLabel]]++
		}
	}
	for _, c := range counts {
		if c == g.size {
			n++
		}
	}
	return n
}

func (g *groupWatch) arm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed = true
	g.check()
}

func (g *groupWatch) fewest() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.least
}

func (g *groupWatch) partial() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for grp := range g.partials {
		out = append(out, grp)
	}
	slices.Sort(out)
	return out
}
