package sandbox

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	llmdv1alpha1 "github.com/berth-sh/berth/pkg/apis/llmd/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale/variantscaler"
)

// reportVariants waits until every VariantAutoscaling has been sized once (its first run
// only starts the counters' rates, so this takes two sync periods), prints each one's
// allocation, and fails naming those the controller could not size.
func reportVariants(ctx context.Context, cl client.Client, syncPeriod time.Duration, out io.Writer) error {
	var list llmdv1alpha1.VariantAutoscalingList
	deadline := time.Now().Add(3*syncPeriod + 10*time.Second)
	for {
		if err := cl.List(ctx, &list); err != nil {
			return err
		}
		if len(list.Items) == 0 {
			return nil
		}
		pending := 0
		for _, va := range list.Items {
			c := meta.FindStatusCondition(va.Status.Conditions, variantscaler.ConditionReady)
			if c == nil || c.Reason == variantscaler.ReasonWaitingForMetrics || c.ObservedGeneration != va.Generation {
				pending++
			}
		}
		if pending == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	sort.Slice(list.Items, func(i, j int) bool {
		return list.Items[i].Namespace+"/"+list.Items[i].Name < list.Items[j].Namespace+"/"+list.Items[j].Name
	})
	fmt.Fprintln(out, "\nllm-d VariantAutoscalings (berth-controller sizes the ModelServing of each one's name):")
	var bad []string
	for _, va := range list.Items {
		c := meta.FindStatusCondition(va.Status.Conditions, variantscaler.ConditionReady)
		switch {
		case c == nil:
			bad = append(bad, fmt.Sprintf("%s/%s: never sized", va.Namespace, va.Name))
			continue
		case c.Status != "True":
			bad = append(bad, fmt.Sprintf("%s/%s: %s: %s", va.Namespace, va.Name, c.Reason, c.Message))
			fmt.Fprintf(out, "  %s/%s: %s: %s\n", va.Namespace, va.Name, c.Reason, c.Message)
			continue
		}
		d, cur := va.Status.DesiredOptimizedAlloc, va.Status.CurrentAlloc
		if cur == nil || d == nil { // llm-d v0.5's shape writes no currentAlloc
			if d != nil {
				fmt.Fprintf(out, "  %s/%s  %s: optimized %d × %s, applied %t\n", va.Namespace, va.Name, va.Spec.ModelID, d.NumReplicas, d.Accelerator, va.Status.Actuation.Applied)
			}
			continue
		}
		fmt.Fprintf(out, "  %s/%s  %s: %d × %s now (cost %s, %s req/min), optimized %d × %s, applied %t\n",
			va.Namespace, va.Name, va.Spec.ModelID, cur.NumReplicas, cur.Accelerator, cur.VariantCost, cur.Load.ArrivalRate,
			d.NumReplicas, d.Accelerator, va.Status.Actuation.Applied)
	}
	if len(bad) > 0 {
		return fmt.Errorf("VariantAutoscalings not sized:\n  %s", strings.Join(bad, "\n  "))
	}
	return nil
}
