package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sort"
	"strings"
	"sync"

	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// requestsPrefix starts the line a controller process prints every 200 ms with the API
// requests it has made so far by verb and resource.
const requestsPrefix = "scalebench-requests "

// requestCounter counts a client's API requests by verb and resource ("create pods",
// "update modelservings/status"), so the report can say how many writes each controller
// makes per object: the cost a CPU profile shows as JSON encoding and HTTP, named.
// Every transport built from the wrapped config (the manager's, discovery's, the scale
// client's) counts into the same one.
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

func newRequestCounter() *requestCounter { return &requestCounter{counts: map[string]int{}} }

// wrap is a rest.Config WrapTransport.
func (c *requestCounter) wrap(next http.RoundTripper) http.RoundTripper {
	return countingTransport{c, next}
}

type countingTransport struct {
	c    *requestCounter
	next http.RoundTripper
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	key := requestKey(req.Method, req.URL.Path, req.URL.Query().Get("watch") == "true")
	t.c.mu.Lock()
	t.c.counts[key]++
	t.c.mu.Unlock()
	return t.next.RoundTrip(req)
}

// snapshot is the counts so far, with berth-controller's reconciles by controller
// ("reconcile modelserving"), as JSON.
func (c *requestCounter) snapshot() string {
	c.mu.Lock()
	out := maps.Clone(c.counts)
	c.mu.Unlock()
	families, _ := ctrlmetrics.Registry.Gather()
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" {
					out[reconcilePrefix+l.GetValue()] += int(m.GetCounter().GetValue())
				}
			}
		}
	}
	raw, _ := json.Marshal(out)
	return string(raw)
}

// reconcilePrefix starts the count of a controller's reconciles among the request counts.
const reconcilePrefix = "reconcile "

// requestKey names a request by the apiserver's verb and its resource (with subresource):
// /api/v1/namespaces/ns/pods/p/status under PUT is "update pods/status".
func requestKey(method, path string, watch bool) string {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(seg) >= 2 && seg[0] == "api":
		seg = seg[2:] // api, v1
	case len(seg) >= 3 && seg[0] == "apis":
		seg = seg[3:] // apis, group, version
	default:
		return strings.ToLower(method) + " " + path // discovery, /healthz and the like
	}
	if len(seg) >= 3 && seg[0] == "namespaces" {
		seg = seg[2:] // a namespaced resource (a namespace itself keeps its two segments)
	}
	if len(seg) == 0 {
		return strings.ToLower(method) + " " + path
	}
	resource, named := seg[0], len(seg) >= 2
	if len(seg) >= 3 {
		resource += "/" + seg[2]
	}
	verb := map[string]string{http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch"}[method]
	switch method {
	case http.MethodGet:
		verb = "get"
		if !named {
			verb = "list"
			if watch {
				verb = "watch"
			}
		}
	case http.MethodDelete:
		verb = "delete"
		if !named {
			verb = "deletecollection"
		}
	}
	if verb == "" {
		verb = strings.ToLower(method)
	}
	return verb + " " + resource
}

// isReconcile says whether a count is of reconciles.
func isReconcile(key string) bool { return strings.HasPrefix(key, reconcilePrefix) }

// isRead says whether a requestKey is a get or a list (not a watch, nor discovery).
func isRead(key string) bool {
	return strings.HasPrefix(key, "get ") || strings.HasPrefix(key, "list ")
}

// isWrite says whether a requestKey's verb changes something.
func isWrite(key string) bool {
	verb, _, _ := strings.Cut(key, " ")
	switch verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return true
	}
	return false
}

// perObject formats the counts that keep selects (of a component's in one phase) divided by
// objects, largest first: "total 13.2, create pods 10.00, update modelservings/status 3.20,
// ...". Reads under 0.05 per object (an informer's first list, discovery) are left out.
func perObject(counts map[string]int, objects int, keep func(string) bool) string {
	type kv struct {
		k string
		n int
	}
	var list []kv
	total := 0
	for k, n := range counts {
		if n > 0 && keep(k) && (!isRead(k) || float64(n)/float64(objects) >= 0.05) {
			list = append(list, kv{k, n})
			total += n
		}
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].n != list[j].n {
			return list[i].n > list[j].n
		}
		return list[i].k < list[j].k
	})
	parts := []string{fmt.Sprintf("total %.1f", float64(total)/float64(objects))}
	for _, e := range list {
		parts = append(parts, fmt.Sprintf("%s %.2f", e.k, float64(e.n)/float64(objects)))
	}
	return strings.Join(parts, ", ")
}
