package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-sh/berth/internal/chatstream"
	"github.com/berth-sh/berth/internal/quantile"
	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// Load drives traffic through the router once everything is Available, so the autoscaler
// has something to react to, and prints the replicas as it does.
type Load struct {
	// Concurrency is the most requests kept in flight (0: no load).
	Concurrency int
	// Duration is how long requests are sent: a quarter ramping up to Concurrency, half at
	// it, a quarter ramping down. The sandbox then watches as long again for scale-down.
	Duration time.Duration
	// MaxTokens is each request's output length.
	MaxTokens int
	// Every is how often a line is printed (also whenever replicas change).
	Every time.Duration
}

// loadReport is what a load run saw: whether any autoscaler scaled up under it.
type loadReport struct {
	scaledUp bool
	ok, bad  int64
	// errors are the first few distinct failures, so a failed request explains itself.
	errors []string
}

// runLoad sends streaming chat completions for models through the router and prints, every
// l.Every and on every change, the load, TTFT and each autoscaled ModelServing's replicas.
func runLoad(ctx context.Context, cl client.Client, routerURL string, models []string, l Load, out io.Writer) (loadReport, error) {
	var rep loadReport
	if l.Every <= 0 {
		l.Every = 5 * time.Second
	}
	if l.MaxTokens <= 0 {
		l.MaxTokens = 128
	}
	if l.Duration <= 0 {
		l.Duration = 2 * time.Minute
	}
	if len(models) == 0 {
		fmt.Fprintln(out, "\n--load: no routed model to send requests to")
		return rep, nil
	}
	fmt.Fprintf(out, "\nload: up to %d streaming chat completions in flight for %s through %s for %s (ramp up, hold, ramp down), then watching scale-down for %s\n",
		l.Concurrency, strings.Join(models, ", "), routerURL, l.Duration, l.Duration)

	loadCtx, stop := context.WithCancel(ctx)
	defer stop()
	var want atomic.Int32
	var inFlight, ok, bad atomic.Int64
	var ttftMu sync.Mutex
	var ttfts []time.Duration
	var errMu sync.Mutex
	seenErr := map[string]bool{}
	httpc := &http.Client{Timeout: 2 * time.Minute}
	var wg sync.WaitGroup
	for i := range l.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for loadCtx.Err() == nil {
				if int32(i) >= want.Load() {
					select {
					case <-loadCtx.Done():
					case <-time.After(100 * time.Millisecond):
					}
					continue
				}
				inFlight.Add(1)
				ttft, err := streamOnce(loadCtx, httpc, routerURL, models[i%len(models)], l.MaxTokens, i)
				inFlight.Add(-1)
				switch {
				case err == nil:
					ok.Add(1)
					ttftMu.Lock()
					ttfts = append(ttfts, ttft)
					ttftMu.Unlock()
				case loadCtx.Err() == nil:
					bad.Add(1)
					errMu.Lock()
					if msg := err.Error(); !seenErr[msg] && len(rep.errors) < 3 {
						seenErr[msg] = true
						rep.errors = append(rep.errors, msg)
					}
					errMu.Unlock()
					time.Sleep(200 * time.Millisecond)
				}
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()

	start := time.Now()
	end := start.Add(2 * l.Duration)
	ticker := time.NewTicker(250 * time.Millisecond)
	defer ticker.Stop()
	lastLine, lastAt := "", time.Time{}
	initial := map[string]int32{}
	for {
		elapsed := time.Since(start)
		want.Store(int32(float64(l.Concurrency) * rampShape(elapsed, l.Duration)))
		reps, decisions, err := autoscaled(ctx, cl)
		if err != nil && ctx.Err() == nil {
			return rep, err
		}
		for name, n := range reps {
			if first, seen := initial[name]; !seen {
				initial[name] = n
			} else if n > first {
				rep.scaledUp = true
			}
		}
		ttftMu.Lock()
		p50, p90 := quantile.Of(ttfts, 0.5), quantile.Of(ttfts, 0.9)
		ttfts = ttfts[:0]
		ttftMu.Unlock()
		state := formatReplicas(reps) + decisions
		if state != lastLine || time.Since(lastAt) >= l.Every {
			ttft := "-"
			if p50 > 0 {
				ttft = fmt.Sprintf("%s/%s", p50.Round(time.Millisecond), p90.Round(time.Millisecond))
			}
			fmt.Fprintf(out, "  [%4.0fs] in flight %3d  done %6d (%d failed)  TTFT p50/p90 %-15s | %s\n",
				elapsed.Seconds(), inFlight.Load(), ok.Load(), bad.Load(), ttft, state)
			lastLine, lastAt = state, time.Now()
		}
		if time.Now().After(end) || ctx.Err() != nil {
			stop()
			wg.Wait()
			rep.ok, rep.bad = ok.Load(), bad.Load()
			return rep, nil
		}
		select {
		case <-ctx.Done():
		case <-ticker.C:
		}
	}
}

// rampShape is the load's fraction of its maximum at t: up over the first quarter, held for
// half, down over the last quarter, then none.
func rampShape(t, d time.Duration) float64 {
	q := float64(d) / 4
	switch x := float64(t); {
	case x < q:
		return x / q
	case x < 3*q:
		return 1
	case x < 4*q:
		return (4*q - x) / q
	}
	return 0
}

// autoscaled returns the replicas of every ModelServing an AutoscalingPolicyBinding
// scales, and each binding's last decision in a few words.
func autoscaled(ctx context.Context, cl client.Client) (map[string]int32, string, error) {
	var bindings workloadv1alpha1.AutoscalingPolicyBindingList
	if err := cl.List(ctx, &bindings); err != nil {
		return nil, "", err
	}
	reps := map[string]int32{}
	var parts []string
	for _, b := range bindings.Items {
		for _, t := range b.Status.Targets {
			reps[b.Namespace+"/"+t.Name] = t.DesiredReplicas
		}
		s := fmt.Sprintf(" | %s:", b.Name)
		if b.Status.RecommendedReplicas != nil {
			s += fmt.Sprintf(" want %d", *b.Status.RecommendedReplicas)
		}
		for _, c := range b.Status.Conditions {
			if c.Type == "Ready" {
				s += " (" + c.Reason + ")"
			}
		}
		if b.Status.PanicMode {
			s += " PANIC"
		}
		parts = append(parts, s)
	}
	// The replicas as they are, not as last decided: kubectl scale shows too.
	var servings workloadv1alpha1.ModelServingList
	if err := cl.List(ctx, &servings); err != nil {
		return nil, "", err
	}
	for _, ms := range servings.Items {
		if key := ms.Namespace + "/" + ms.Name; ms.Spec.Replicas != nil {
			if _, scaled := reps[key]; scaled {
				reps[key] = *ms.Spec.Replicas
			}
		}
	}
	sort.Strings(parts)
	return reps, strings.Join(parts, ""), nil
}

func formatReplicas(reps map[string]int32) string {
	keys := make([]string, 0, len(reps))
	for k := range reps {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("replicas")
	for _, k := range keys {
		_, name, _ := strings.Cut(k, "/")
		fmt.Fprintf(&b, " %s=%d", name, reps[k])
	}
	return b.String()
}

// streamOnce sends one streaming chat completion and returns the time to its first token.
func streamOnce(ctx context.Context, c *http.Client, routerURL, model string, maxTokens, n int) (time.Duration, error) {
	body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": maxTokens, "stream": true,
		"messages": []map[string]string{{"role": "user", "content": fmt.Sprintf("load request %d: tell me about placement", n)}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, routerURL+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(raw)))
	}
	return chatstream.FirstToken(resp.Body, start)
}

// loadModels are the models to load: those of ModelRoutes a ModelBooster made, else every
// routed model.
func loadModels(ctx context.Context, cl client.Client) ([]string, error) {
	var routes networkingv1alpha1.ModelRouteList
	if err := cl.List(ctx, &routes); err != nil {
		return nil, err
	}
	var boosted, all []string
	for _, r := range routes.Items {
		if r.Spec.ModelName == "" {
			continue
		}
		all = append(all, r.Spec.ModelName)
		if r.Labels[workloadv1alpha1.ModelBoosterNameLabel] != "" {
			boosted = append(boosted, r.Spec.ModelName)
		}
	}
	if len(boosted) > 0 {
		all = boosted
	}
	sort.Strings(all)
	return slices.Compact(all), nil
}
