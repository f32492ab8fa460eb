package sandbox

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// fromZeroRequests is how many requests the load sends first to each model at zero.
const fromZeroRequests = 3

// coldModels are the routed models every target of whose route is a ModelServer selecting a
// ModelServing at zero replicas, each with those ModelServings (namespace/name).
func coldModels(ctx context.Context, cl client.Client) (map[string][]string, error) {
	var routes networkingv1alpha1.ModelRouteList
	if err := cl.List(ctx, &routes); err != nil {
		return nil, err
	}
	// A model routed in several namespaces is cold only when every route's targets are: the
	// router serves it by one of them.
	out, warm := map[string][]string{}, map[string]bool{}
	for _, r := range routes.Items {
		if r.Spec.ModelName == "" {
			continue
		}
		var servings []string
		cold := true
		for _, rule := range r.Spec.Rules {
			for _, t := range rule.TargetModels {
				if t.ModelServerName == "" {
					cold = false
					continue
				}
				var srv networkingv1alpha1.ModelServer
				if err := cl.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: t.ModelServerName}, &srv); err != nil || srv.Spec.WorkloadSelector == nil {
					cold = false
					continue
				}
				name := srv.Spec.WorkloadSelector.MatchLabels[workloadv1alpha1.ModelServingNameLabel]
				var ms workloadv1alpha1.ModelServing
				if name == "" || cl.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: name}, &ms) != nil ||
					ms.Spec.Replicas == nil || *ms.Spec.Replicas != 0 {
					cold = false
					continue
				}
				servings = append(servings, r.Namespace+"/"+name)
			}
		}
		if !cold || len(servings) == 0 {
			warm[r.Spec.ModelName] = true
			continue
		}
		out[r.Spec.ModelName] = append(out[r.Spec.ModelName], servings...)
	}
	for m := range warm {
		delete(out, m)
	}
	return out, nil
}

// runFromZero sends fromZeroRequests chat completions for a model at zero replicas, one
// after another a moment apart, and prints what happens while the router holds them: the
// replicas as the autoscaler scales the model from zero, then each answer with how long it
// waited. It fails when any is not answered.
func runFromZero(ctx context.Context, cl client.Client, routerURL, model string, servings []string, out io.Writer) error {
	fmt.Fprintf(out, "\nscale from zero: %s is at zero replicas (%s); sending %d requests, which berth-router holds while the autoscaler brings it up\n",
		model, strings.Join(servings, ", "), fromZeroRequests)
	type answer struct {
		line string
		err  error
	}
	answers := make([]answer, fromZeroRequests)
	var wg sync.WaitGroup
	start := time.Now()
	last := ""
	report := func() {
		state := servingReplicas(ctx, cl, servings)
		if state != last {
			fmt.Fprintf(out, "  [%4.1fs] %s\n", time.Since(start).Seconds(), state)
			last = state
		}
	}
	report()
	for i := range fromZeroRequests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			line, err := probe(ctx, routerURL, model)
			answers[i] = answer{line, err}
		}()
		time.Sleep(50 * time.Millisecond) // arrival order: 1, 2, 3
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	for waiting := true; waiting; {
		report()
		select {
		case <-done:
			waiting = false
		case <-ticker.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// The client may read the ModelServing a moment behind the router: show it up.
	for deadline := time.Now().Add(10 * time.Second); !anyAvailable(ctx, cl, servings) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	report()
	var failed []string
	for i, a := range answers {
		if a.err != nil {
			failed = append(failed, fmt.Sprintf("request %d: %v", i+1, a.err))
			fmt.Fprintf(out, "  request %d FAILED: %v\n", i+1, a.err)
			continue
		}
		fmt.Fprintf(out, "  request %d held, then %s\n", i+1, a.line)
	}
	if len(failed) > 0 {
		return fmt.Errorf("scale from zero: %s", strings.Join(failed, "; "))
	}
	fmt.Fprintf(out, "  %s: %d held requests answered once it came up from zero\n", model, fromZeroRequests)
	return nil
}

// servingReplicas describes the ModelServings' replicas and Ready pods.
func servingReplicas(ctx context.Context, cl client.Client, servings []string) string {
	parts := make([]string, 0, len(servings))
	for _, key := range servings {
		ns, name, _ := strings.Cut(key, "/")
		var ms workloadv1alpha1.ModelServing
		if err := cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ms); err != nil {
			continue
		}
		replicas := int32(1)
		if ms.Spec.Replicas != nil {
			replicas = *ms.Spec.Replicas
		}
		s := fmt.Sprintf("%s: replicas %d, available %d", name, replicas, ms.Status.AvailableReplicas)
		if d := ms.Annotations[workloadv1alpha1.DemandAnnotation]; d != "" {
			s += " (demand " + d + ")"
		}
		parts = append(parts, s)
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}

// allAvailable says whether one of the ModelServings has an available replica.
func anyAvailable(ctx context.Context, cl client.Client, servings []string) bool {
	for _, key := range servings {
		ns, name, _ := strings.Cut(key, "/")
		var ms workloadv1alpha1.ModelServing
		if cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &ms) == nil && ms.Status.AvailableReplicas > 0 {
			return true
		}
	}
	return false
}
