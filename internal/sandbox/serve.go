package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
)

// routerLogger is the router's logger: klog's, which ConfigureLogging silences at
// verbosity 0.
func routerLogger() logr.Logger { return klog.Background().WithName("berth-router") }

// probeTimeout bounds one probe request (engines at TimeScale 1 answer in well under it).
const probeTimeout = 30 * time.Second

// probeRoutes sends one chat completion through the router for the model of every
// ModelRoute and prints the answer with a curl line a user can copy. An error names the
// models that did not answer.
func probeRoutes(ctx context.Context, cl client.Client, routerURL string, out io.Writer) error {
	var routes networkingv1alpha1.ModelRouteList
	if err := cl.List(ctx, &routes); err != nil {
		return err
	}
	var models []string
	seen := map[string]bool{}
	for _, r := range routes.Items {
		if m := r.Spec.ModelName; m != "" && !seen[m] {
			seen[m] = true
			models = append(models, m)
		}
	}
	sort.Strings(models)
	fmt.Fprintf(out, "\nberth-router serves the OpenAI API at %s\n", routerURL)
	if len(models) == 0 {
		fmt.Fprintln(out, "  (no ModelRoute names a model yet)")
		return nil
	}
	fmt.Fprintf(out, "  curl %s/v1/chat/completions -H 'Content-Type: application/json' \\\n    -d '{\"model\":%q,\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'\n", routerURL, models[0])
	fmt.Fprintf(out, "  (add \"stream\":true for server-sent events; GET %s/v1/models lists the models;\n", routerURL)
	fmt.Fprintf(out, "   POST %s/v1/messages takes Anthropic's Messages API, with \"max_tokens\")\n", routerURL)
	var failed []string
	for _, m := range models {
		line, err := probe(ctx, routerURL, m)
		// The router learns of Ready pods from its watch a moment after the sandbox does.
		for deadline := time.Now().Add(10 * time.Second); err != nil && time.Now().Before(deadline) && ctx.Err() == nil; {
			time.Sleep(200 * time.Millisecond)
			line, err = probe(ctx, routerURL, m)
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", m, err))
			fmt.Fprintf(out, "  %-28s FAILED: %v\n", m, err)
			continue
		}
		fmt.Fprintf(out, "  %-28s %s\n", m, line)
	}
	if len(failed) > 0 {
		return fmt.Errorf("the router did not answer for %s", strings.Join(failed, "; "))
	}
	return nil
}

// probe asks model one short question and describes the answer.
func probe(ctx context.Context, routerURL, model string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 8,
		"messages": []map[string]string{{"role": "user", "content": "Hello from the Berth sandbox"}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, routerURL+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(raw)))
	}
	var answer struct {
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil || len(answer.Choices) == 0 {
		return "", fmt.Errorf("not a chat completion: %s", raw)
	}
	return fmt.Sprintf("200 in %s from %s: %q", time.Since(start).Round(time.Millisecond), resp.Header.Get("X-Berth-Endpoint"),
		answer.Choices[0].Message.Content), nil
}
