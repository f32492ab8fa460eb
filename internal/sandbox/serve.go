package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/router/view"
)

// routerLogger is the router's logger: klog's, which ConfigureLogging silences at
// verbosity 0.
func routerLogger() logr.Logger { return klog.Background().WithName("berth-router") }

// probeTimeout bounds one probe request (engines at TimeScale 1 answer in well under it).
const probeTimeout = 30 * time.Second

// probeRoutes sends one chat completion through the router for the model of every
// ModelRoute and prints the answer with a curl line a user can copy. An error names the
// models that did not answer. Models at zero replicas (cold) are not asked: they stay at
// zero until a request comes, which --load sends (runFromZero).
func probeRoutes(ctx context.Context, cl client.Client, routerURL string, cold map[string][]string, out io.Writer) error {
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
		if servings, ok := cold[m]; ok {
			fmt.Fprintf(out, "  %-28s at zero replicas (%s): a request is held while the autoscaler scales it from zero (--load shows it)\n",
				m, strings.Join(servings, ", "))
			continue
		}
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

func hostOf(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return host
}

// probeGateways sends, for every listener of a berth-router Gateway that an HTTPRoute is
// attached to, one chat completion through that listener (for the model its engines list
// at /v1/models, asked through the same listener), and prints the answer with a curl line.
func probeGateways(ctx context.Context, cfg *rest.Config, rt *router.Router, out io.Writer) error {
	cl, err := client.New(cfg, client.Options{Scheme: view.Scheme()})
	if err != nil {
		return err
	}
	var gateways gwv1.GatewayList
	if err := cl.List(ctx, &gateways); err != nil {
		if meta.IsNoMatchError(err) {
			return nil // the apiserver serves no Gateway API
		}
		return err
	}
	var failed []string
	for _, g := range gateways.Items {
		for _, l := range g.Spec.Listeners {
			base := ""
			// The router opens the port when the view compiles the Gateway, a moment after
			// the sandbox applied it; the route attaches at the same time.
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && ctx.Err() == nil; time.Sleep(200 * time.Millisecond) {
				if addr := rt.GatewayAddr(int32(l.Port)); addr != "" {
					base = "http://" + addr
					break
				}
			}
			name := fmt.Sprintf("Gateway %s/%s listener %s", g.Namespace, g.Name, l.Name)
			if base == "" {
				failed = append(failed, name+": not served (kubectl describe gateway shows why)")
				fmt.Fprintf(out, "  %s: not served\n", name)
				continue
			}
			fmt.Fprintf(out, "\nberth-router serves %s at %s (HTTPRoutes to InferencePools)\n", name, base)
			var line string
			var err error
			for deadline := time.Now().Add(10 * time.Second); ctx.Err() == nil; time.Sleep(200 * time.Millisecond) {
				var model string
				if model, err = servedModel(ctx, base); err == nil {
					if line, err = probe(ctx, base, model); err == nil {
						fmt.Fprintf(out, "  curl %s/v1/chat/completions -H 'Content-Type: application/json' \\\n    -d '{\"model\":%q,\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'\n", base, model)
						fmt.Fprintf(out, "  %-28s %s\n", model, line)
						break
					}
				}
				if time.Now().After(deadline) {
					break
				}
			}
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", name, err))
				fmt.Fprintf(out, "  FAILED: %v\n", err)
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("the Gateway did not answer: %s", strings.Join(failed, "; "))
	}
	return nil
}

// servedModel is the first model GET /v1/models lists at base.
func servedModel(ctx context.Context, base string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var list struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &list) != nil || len(list.Data) == 0 {
		return "", fmt.Errorf("GET /v1/models: %s: %s", resp.Status, strings.TrimSpace(string(raw)))
	}
	return list.Data[0].ID, nil
}
