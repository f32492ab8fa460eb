package gatewayconformance

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/berth-sh/berth/pkg/sim"
)

// The conformance suite's backends are Deployments of its echo-basic image: an HTTP server
// on port 3000 that answers every request with a JSON description of it (path, host,
// method, headers, and the pod and namespace it runs in, from the downward API), which the
// suite's round tripper reads to check where a request went and how it arrived. There is no
// container runtime here, so the simulated kubelet starts this server for each such pod,
// on the pod's address in the simulated pod network, before it reports the pod Ready.

// echoImage is the image (any tag) whose pods get an echo server.
const echoImage = "gateway-api/echo-basic"

// echoHTTPPort is echo-basic's HTTP_PORT default, the targetPort of the suite's Services.
const echoHTTPPort = "3000"

// echoes are the running echo servers, one per pod.
type echoes struct {
	mu      sync.Mutex
	servers map[types.UID]*http.Server
}

func newEchoes() *echoes { return &echoes{servers: map[types.UID]*http.Server{}} }

// start serves pod p (called by the kubelet with p's address set; again if its status
// update is retried).
func (e *echoes) start(ctx context.Context, p *corev1.Pod) {
	if !runsEcho(p) {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.servers[p.UID] != nil {
		return
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(sim.PodLoopback(p.Status.PodIP), echoHTTPPort))
	if err != nil {
		panic("echo server of pod " + p.Namespace + "/" + p.Name + ": " + err.Error())
	}
	srv := &http.Server{Handler: echoHandler(p.Namespace, p.Name), ReadHeaderTimeout: 10 * time.Second}
	e.servers[p.UID] = srv
	go func() { _ = srv.Serve(ln) }()
}

func (e *echoes) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.servers {
		_ = s.Close()
	}
}

func runsEcho(p *corev1.Pod) bool {
	for _, c := range p.Spec.Containers {
		if strings.Contains(c.Image, echoImage) && !hasEnv(c, "GRPC_ECHO_SERVER") && !hasEnv(c, "TCP_ECHO_SERVER") {
			return true
		}
	}
	return false
}

func hasEnv(c corev1.Container, name string) bool {
	for _, e := range c.Env {
		if e.Name == name {
			return true
		}
	}
	return false
}

// echoHandler answers as echo-basic does: the request described in JSON; ?delay=<duration>
// first waits that long (the timeout tests' slow backend); X-Echo-Set-Header: "name:value,
// ..." sets those response headers.
func echoHandler(namespace, pod string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := r.URL.Query().Get("delay"); d != "" {
			wait, err := time.ParseDuration(d)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			select {
			case <-time.After(wait):
			case <-r.Context().Done():
				return
			}
		}
		for _, list := range r.Header["X-Echo-Set-Header"] {
			for kv := range strings.SplitSeq(list, ",") {
				name, value, _ := strings.Cut(strings.TrimSpace(kv), ":")
				if len(w.Header()[name]) == 0 {
					w.Header()[name] = []string{value}
				} else {
					w.Header()[name][0] += "," + strings.TrimSpace(value)
				}
			}
		}
		body, _ := json.Marshal(map[string]any{
			"path": r.RequestURI, "host": r.Host, "method": r.Method, "proto": r.Proto, "headers": r.Header,
			"httpPort": echoHTTPPort, "namespace": namespace, "pod": pod,
		})
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(body)
	})
}
