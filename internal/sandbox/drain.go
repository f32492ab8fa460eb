package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	llmdv1alpha1 "github.com/berth-sh/berth/pkg/apis/llmd/v1alpha1"
	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/workload"
)

// The drain demo (after --load): a node that holds a ServingGroup of a routed ModelServing
// with at least two available groups is cordoned while streams for its model run. The
// controller moves the groups on it whole, one at a time, keeping the minimum of Ready
// groups; the demo prints what moved, the fewest groups available it saw, and how many of
// the streams failed, then uncordons the node.

// drainStreams is how many streams run for the drained model throughout.
const drainStreams = 8

// drainTimeout bounds the wait for the groups to be off the node and all available again.
const drainTimeout = 2 * time.Minute

// drainTarget is the ModelServing the demo drains a node of, and the model routed to it.
type drainTarget struct {
	ms         *workloadv1alpha1.ModelServing
	model      string
	node       string
	autoscaled bool // an autoscaler sets its count (the demo says so)
}

// pickDrainTarget is the routed one-role ModelServing (the demo is about groups, not P/D
// pairs) with at least two available groups, and the node of its group 0's entry pod; nil
// when there is none. One whose count no autoscaler sets comes first: the minimum the drain
// keeps is a share of the count, and an autoscaler that scales the model down meanwhile (as
// it does after the load) takes groups away that the drain did not. Then the most groups.
func pickDrainTarget(ctx context.Context, cl client.Client) (*drainTarget, error) {
	sized, _, err := autoscaled(ctx, cl)
	if err != nil {
		return nil, err
	}
	var variants llmdv1alpha1.VariantAutoscalingList
	if err := cl.List(ctx, &variants); err != nil {
		return nil, err
	}
	for _, va := range variants.Items {
		sized[va.Namespace+"/"+va.Name] = 0 // it sizes the ModelServing of its name
	}
	var servers networkingv1alpha1.ModelServerList
	if err := cl.List(ctx, &servers); err != nil {
		return nil, err
	}
	var routes networkingv1alpha1.ModelRouteList
	if err := cl.List(ctx, &routes); err != nil {
		return nil, err
	}
	modelOf := map[string]string{} // namespace/ModelServer → model
	for _, r := range routes.Items {
		for _, rule := range r.Spec.Rules {
			for _, t := range rule.TargetModels {
				if t.ModelServerName != "" && r.Spec.ModelName != "" {
					modelOf[r.Namespace+"/"+t.ModelServerName] = r.Spec.ModelName
				}
			}
		}
	}
	var list workloadv1alpha1.ModelServingList
	if err := cl.List(ctx, &list); err != nil {
		return nil, err
	}
	var best *drainTarget
	for i := range list.Items {
		ms := &list.Items[i]
		if ms.Status.AvailableReplicas < 2 || ptr.Deref(ms.Spec.Replicas, 1) < 2 || len(ms.Spec.Template.Roles) != 1 {
			continue
		}
		model := ""
		for _, s := range servers.Items {
			if s.Namespace == ms.Namespace && s.Spec.WorkloadSelector != nil &&
				s.Spec.WorkloadSelector.MatchLabels[workloadv1alpha1.ModelServingNameLabel] == ms.Name {
				model = modelOf[s.Namespace+"/"+s.Name]
			}
		}
		if model == "" {
			continue
		}
		_, scaled := sized[ms.Namespace+"/"+ms.Name]
		if best == nil || (!scaled && best.autoscaled) ||
			(scaled == best.autoscaled && ms.Status.AvailableReplicas > best.ms.Status.AvailableReplicas) {
			best = &drainTarget{ms: ms, model: model, autoscaled: scaled}
		}
	}
	if best == nil {
		return nil, nil
	}
	var pods corev1.PodList
	if err := cl.List(ctx, &pods, client.InNamespace(best.ms.Namespace), client.MatchingLabels{
		workloadv1alpha1.GroupNameLabel: workloadv1alpha1.ServingGroupName(best.ms.Name, 0), workloadv1alpha1.EntryLabel: "true"}); err != nil {
		return nil, err
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			best.node = p.Spec.NodeName
		}
	}
	if best.node == "" {
		return nil, nil
	}
	return best, nil
}

// runDrain cordons the target's node under load and reports how the groups moved. It
// returns an error when a stream failed or the groups were not back in time.
func runDrain(ctx context.Context, cl client.Client, routerURL string, out io.Writer) error {
	t, err := pickDrainTarget(ctx, cl)
	if err != nil {
		return err
	}
	if t == nil {
		fmt.Fprintln(out, "\ndrain: skipped (no routed one-role ModelServing with two available ServingGroups)")
		return nil
	}
	key := client.ObjectKeyFromObject(t.ms)
	replicas := ptr.Deref(t.ms.Spec.Replicas, 1)
	startReplicas := replicas
	fmt.Fprintf(out, "\ndrain: cordoning %s, which holds ServingGroup %s of %s (%d available), while %d streams for %s run\n",
		t.node, workloadv1alpha1.ServingGroupName(t.ms.Name, 0), key, t.ms.Status.AvailableReplicas, drainStreams, t.model)

	loadCtx, stop := context.WithCancel(ctx)
	defer stop()
	var ok, bad atomic.Int64
	var errMu sync.Mutex
	var firstErr string
	httpc := &http.Client{Timeout: 2 * time.Minute}
	var wg sync.WaitGroup
	for i := range drainStreams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for loadCtx.Err() == nil {
				_, err := streamOnce(loadCtx, httpc, routerURL, t.model, 32, i)
				switch {
				case err == nil:
					ok.Add(1)
				case loadCtx.Err() == nil:
					bad.Add(1)
					errMu.Lock()
					if firstErr == "" {
						firstErr = err.Error()
					}
					errMu.Unlock()
					time.Sleep(200 * time.Millisecond)
				}
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()

	cordon := func(on bool) error {
		return cl.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: t.node}}, client.RawPatch(types.MergePatchType,
			[]byte(fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on))))
	}
	time.Sleep(time.Second) // the streams are running before the node is cordoned
	if err := cordon(true); err != nil {
		return err
	}
	defer func() {
		if err := cordon(false); err != nil {
			fmt.Fprintf(out, "drain: uncordoning %s: %v\n", t.node, err)
		}
	}()

	fewest := t.ms.Status.AvailableReplicas
	var conditions []string
	moved := map[string]bool{}
	deadline := time.Now().Add(drainTimeout)
	for {
		ms := &workloadv1alpha1.ModelServing{}
		if err := cl.Get(ctx, key, ms); err != nil {
			return err
		}
		fewest = min(fewest, ms.Status.AvailableReplicas)
		if c := meta.FindStatusCondition(ms.Status.Conditions, workload.ConditionDisruptionAllowed); c != nil {
			line := c.Reason + ": " + c.Message
			if len(conditions) == 0 || conditions[len(conditions)-1] != line {
				conditions = append(conditions, line)
				fmt.Fprintf(out, "  %s %s\n", workload.ConditionDisruptionAllowed, line)
			}
		}
		var pods corev1.PodList
		if err := cl.List(ctx, &pods, client.InNamespace(ms.Namespace), client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: ms.Name}); err != nil {
			return err
		}
		onNode := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName == t.node {
				onNode++
				moved[p.Labels[workloadv1alpha1.GroupNameLabel]] = true
			}
		}
		// (An autoscaler may change the count meanwhile: the current one is what must be back.)
		replicas = ptr.Deref(ms.Spec.Replicas, 1)
		if onNode == 0 && ms.Status.AvailableReplicas >= replicas {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("drain: after %s, %d pods of %s are still on %s and %d of %d groups are available",
				drainTimeout, onNode, key, t.node, ms.Status.AvailableReplicas, replicas)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second) // the streams go on a moment on the moved groups
	stop()
	wg.Wait()
	groups := make([]string, 0, len(moved))
	for g := range moved {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	count := "its count fixed"
	if t.autoscaled {
		count = "an autoscaler sets its count and may have changed it meanwhile"
	}
	fmt.Fprintf(out, "drain: %s moved off %s whole (%s); available groups never below %d of %d (%s); %d streams answered during the drain, %d failed\n",
		pluralGroups(len(groups)), t.node, strings.Join(groups, ", "), fewest, startReplicas, count, ok.Load(), bad.Load())
	if bad.Load() > 0 {
		return errors.New("drain: a stream failed while the node was drained: " + firstErr)
	}
	return nil
}

func pluralGroups(n int) string {
	if n == 1 {
		return "1 ServingGroup"
	}
	return fmt.Sprintf("%d ServingGroups", n)
}
