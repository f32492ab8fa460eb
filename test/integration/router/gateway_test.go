package router

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/router/gateway"
	"github.com/berth-sh/berth/pkg/router/view"
)

// gatewayHost is where router i opens Gateway listener ports: one loopback address per
// replica, as each replica is its own pod in a cluster (pod IPs of the simulated kubelet
// are on 127.1.0.0 and above, never here).
func gatewayHost(i int) string { return fmt.Sprintf("127.0.0.%d", 21+i) }

// freePort is a port free on every router's gateway host.
func freePort(t *testing.T) int32 {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", gatewayHost(0)+":0")
		require.NoError(t, err)
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		free := true
		for i := range routers {
			if l, err := net.Listen("tcp", net.JoinHostPort(gatewayHost(i), strconv.Itoa(port))); err != nil {
				free = false
			} else {
				l.Close()
			}
		}
		if free {
			return int32(port)
		}
	}
	t.Fatal("no port free on every gateway host")
	return 0
}

// applyAny creates objects of kinds the controller's scheme does not know (the Gateway API's)
// in the world's namespace, unless they are cluster-scoped.
func (w *world) applyAny(manifests ...string) {
	w.t.Helper()
	for _, m := range manifests {
		u := &unstructured.Unstructured{}
		require.NoError(w.t, yaml.Unmarshal([]byte(m), &u.Object), m)
		if u.GetKind() != "GatewayClass" {
			u.SetNamespace(w.ns)
		}
		require.NoError(w.t, cl.Create(w.ctx, u), m)
		if u.GetKind() == "GatewayClass" {
			w.t.Cleanup(func() { _ = cl.Delete(context.Background(), u) })
		}
	}
}

var gwClient client.Client

func gatewayClient(t *testing.T) client.Client {
	if gwClient == nil {
		c, err := client.New(cp.RESTConfig(), client.Options{Scheme: view.Scheme()})
		require.NoError(t, err)
		gwClient = c
	}
	return gwClient
}

// gatewayWorld is a namespace with a GatewayClass of berth-router and a Gateway with one
// HTTP listener on a free port.
func gatewayWorld(t *testing.T, gpuNodes int) (*world, int32) {
	w := newWorld(t, gpuNodes)
	port := freePort(t)
	w.applyAny(fmt.Sprintf(`
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: berth-%[1]s}
spec: {controllerName: %[2]s}`, w.ns, gateway.ControllerName), fmt.Sprintf(`
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw}
spec:
  gatewayClassName: berth-%[1]s
  listeners:
  - {name: http, protocol: HTTP, port: %[2]d}`, w.ns, port))
	return w, port
}

// condition waits until obj (re-read each time) has cond of type typ with status and reason.
func (w *world) waitGatewayCondition(what string, get func() []metav1.Condition, typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	w.t.Helper()
	var last []metav1.Condition
	var found metav1.Condition
	err := func() error {
		ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
		defer cancel()
		for {
			last = get()
			if c := meta.FindStatusCondition(last, typ); c != nil && c.Status == status && c.Reason == reason {
				found = *c
				return nil
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	require.NoError(w.t, err, "%s: waiting for %s=%s (%s); conditions are %+v", what, typ, status, reason, last)
	return found
}

func (w *world) gatewayStatus(name string) *gwv1.Gateway {
	var g gwv1.Gateway
	_ = gatewayClient(w.t).Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: name}, &g)
	return &g
}

func (w *world) listenerConds(gw, listener string) func() []metav1.Condition {
	return func() []metav1.Condition {
		for _, l := range w.gatewayStatus(gw).Status.Listeners {
			if string(l.Name) == listener {
				return l.Conditions
			}
		}
		return nil
	}
}

func (w *world) routeConds(route string) func() []metav1.Condition {
	return func() []metav1.Condition {
		var r gwv1.HTTPRoute
		_ = gatewayClient(w.t).Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: route}, &r)
		for _, p := range r.Status.Parents {
			if p.ControllerName == gateway.ControllerName {
				return p.Conditions
			}
		}
		return nil
	}
}

func (w *world) poolConds(pool string) func() []metav1.Condition { return w.poolConds2(pool, "gw") }

func (w *world) poolConds2(pool, gw string) func() []metav1.Condition {
	return func() []metav1.Condition {
		var p infv1.InferencePool
		_ = gatewayClient(w.t).Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: pool}, &p)
		for _, ps := range p.Status.Parents {
			if string(ps.ControllerName) == string(gateway.ControllerName) && string(ps.ParentRef.Name) == gw {
				return ps.Conditions
			}
		}
		return nil
	}
}

// poolPod labels a bare engine pod app=<app>; the ModelServing name label makes the
// simulated kubelet run an engine in it, as it does for every pod of a ModelServing (no
// ModelServer selects these: only an InferencePool does).
func poolPod(app string) map[string]string {
	return map[string]string{"app": app, workloadv1alpha1.ModelServingNameLabel: app}
}

func pool(name, app string) string {
	return fmt.Sprintf(`
apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata: {name: %s}
spec:
  selector: {matchLabels: {app: %s}}
  targetPorts: [{number: 8000}]`, name, app)
}

// gatewayChat sends a chat completion to router i's Gateway listener.
func gatewayChat(t *testing.T, i int, port int32, path string, header map[string]string, prompt ...string) (*openai.ChatCompletion, *http.Response, error) {
	opts := []option.RequestOption{}
	for k, v := range header {
		opts = append(opts, option.WithHeader(k, v))
	}
	c := openai.NewClient(option.WithBaseURL(fmt.Sprintf("http://%s:%d%s", gatewayHost(i), port, path)), option.WithAPIKey("test"),
		option.WithMaxRetries(0), option.WithRequestTimeout(30*time.Second))
	return chat(context.Background(), c, "base-model", strings.Join(append([]string{"hello gateway"}, prompt...), " "), opts...)
}

// An HTTPRoute on a berth-router Gateway sends to InferencePools of simulated engines, by
// header and path, with weights and filters, on both router replicas; every object shows
// the status the Gateway API prescribes.
func TestGatewayHTTPRouteToInferencePool(t *testing.T) {
	w, port := gatewayWorld(t, 2)
	for i := range 2 {
		w.pod(fmt.Sprintf("main-%d", i), poolPod("gw-main"))
	}
	w.pod("canary-0", poolPod("gw-canary"))
	w.applyAny(pool("main", "gw-main"), pool("canary", "gw-canary"), `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: llm}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /v1}, headers: [{name: x-canary, value: "yes"}]}]
    filters:
    - type: ResponseHeaderModifier
      responseHeaderModifier: {add: [{name: x-served-by, value: canary}]}
    backendRefs: [{group: inference.networking.k8s.io, kind: InferencePool, name: canary}]
  - matches: [{path: {type: PathPrefix, value: /v1}}]
    backendRefs:
    - {group: inference.networking.k8s.io, kind: InferencePool, name: main, weight: 1}
    - {group: inference.networking.k8s.io, kind: InferencePool, name: canary, weight: 0}
  - matches: [{path: {type: PathPrefix, value: /engine}, method: POST}]
    filters:
    - type: URLRewrite
      urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /v1}}
    - type: RequestHeaderModifier
      requestHeaderModifier: {set: [{name: x-rewritten, value: "true"}]}
    backendRefs: [{group: inference.networking.k8s.io, kind: InferencePool, name: main}]
`)

	w.waitGatewayCondition("GatewayClass", func() []metav1.Condition {
		var c gwv1.GatewayClass
		_ = gatewayClient(t).Get(w.ctx, types.NamespacedName{Name: "berth-" + w.ns}, &c)
		return c.Status.Conditions
	}, "Accepted", metav1.ConditionTrue, "Accepted")
	gwConds := func() []metav1.Condition { return w.gatewayStatus("gw").Status.Conditions }
	w.waitGatewayCondition("Gateway", gwConds, "Accepted", metav1.ConditionTrue, "Accepted")
	w.waitGatewayCondition("Gateway", gwConds, "Programmed", metav1.ConditionTrue, "Programmed")
	w.waitGatewayCondition("listener http", w.listenerConds("gw", "http"), "Programmed", metav1.ConditionTrue, "Programmed")
	w.waitGatewayCondition("listener http", w.listenerConds("gw", "http"), "ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs")
	w.waitGatewayCondition("listener http", w.listenerConds("gw", "http"), "Conflicted", metav1.ConditionFalse, "NoConflicts")
	w.waitGatewayCondition("HTTPRoute llm", w.routeConds("llm"), "Accepted", metav1.ConditionTrue, "Accepted")
	w.waitGatewayCondition("HTTPRoute llm", w.routeConds("llm"), "ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs")
	w.waitGatewayCondition("InferencePool main", w.poolConds("main"), "Accepted", metav1.ConditionTrue, "Accepted")
	w.waitGatewayCondition("InferencePool main", w.poolConds("main"), "ResolvedRefs", metav1.ConditionTrue, "ResolvedRefs")
	w.waitGatewayCondition("InferencePool main", w.poolConds("main"), gateway.PoolConditionReady, metav1.ConditionTrue, gateway.PoolReasonEndpointsReady)
	w.waitGatewayCondition("InferencePool canary", w.poolConds("canary"), gateway.PoolConditionReady, metav1.ConditionTrue, gateway.PoolReasonEndpointsReady)
	assert.EqualValues(t, 1, w.gatewayStatus("gw").Status.Listeners[0].AttachedRoutes)

	for i := range routers {
		// Concurrent requests with their own prompts: the load scorers spread them.
		var mu sync.Mutex
		var wg sync.WaitGroup
		served := map[string]bool{}
		for n := range 8 {
			wg.Go(func() {
				out, resp, err := gatewayChat(t, i, port, "/v1", nil, "question", strconv.Itoa(n))
				if !assert.NoError(t, err, "router %d through the Gateway", i) {
					return
				}
				assert.NotEmpty(t, out.Choices)
				ep := resp.Header.Get("X-Berth-Endpoint")
				assert.True(t, strings.HasPrefix(ep, w.ns+"/main-"), "weight 0 takes no request: %s served", ep)
				mu.Lock()
				served[ep] = true
				mu.Unlock()
			})
		}
		wg.Wait()
		assert.Len(t, served, 2, "router %d spreads over both pods of the pool", i)
	}
	_, resp, err := gatewayChat(t, 0, port, "/v1", map[string]string{"x-canary": "yes"})
	require.NoError(t, err)
	assert.Equal(t, w.ns+"/canary-0", resp.Header.Get("X-Berth-Endpoint"), "the header match wins over the path match")
	assert.Equal(t, "canary", resp.Header.Get("X-Served-By"), "the rule's ResponseHeaderModifier")

	_, resp, err = gatewayChat(t, 1, port, "/engine", nil)
	require.NoError(t, err, "/engine/chat/completions is rewritten to /v1/chat/completions")
	assert.True(t, strings.HasPrefix(resp.Header.Get("X-Berth-Endpoint"), w.ns+"/main-"))

	r, err := http.Get(fmt.Sprintf("http://%s:%d/engine/chat/completions", gatewayHost(0), port))
	require.NoError(t, err)
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	assert.Equal(t, http.StatusNotFound, r.StatusCode, "GET matches no rule (the /engine rule asks for POST): %s", body)
	assert.Contains(t, string(body), "no HTTPRoute rule")
}

// Bad input gets a condition and an answer that names it, never a crash: an HTTPRoute naming
// a missing pool, a pool whose selector matches nothing, a filter the router does not
// implement, a listener port another process holds.
func TestGatewayBadInput(t *testing.T) {
	w, port := gatewayWorld(t, 1)
	busy := freePort(t)
	for i := range routers {
		ln, err := net.Listen("tcp", net.JoinHostPort(gatewayHost(i), strconv.Itoa(int(busy))))
		require.NoError(t, err)
		t.Cleanup(func() { ln.Close() })
	}
	w.applyAny(pool("empty", "nothing-has-this-label"), fmt.Sprintf(`
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: busy}
spec:
  gatewayClassName: berth-%s
  listeners:
  - {name: taken, protocol: HTTP, port: %d}
  - {name: tcp, protocol: TCP, port: %d}`, w.ns, busy, freePort(t)), `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: missing}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /missing}}]
    backendRefs: [{group: inference.networking.k8s.io, kind: InferencePool, name: no-such-pool}]
  - matches: [{path: {type: PathPrefix, value: /empty}}]
    backendRefs: [{group: inference.networking.k8s.io, kind: InferencePool, name: empty}]
`, `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: mirror}
spec:
  parentRefs: [{name: gw}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /mirror}}]
    filters: [{type: RequestMirror, requestMirror: {backendRef: {name: svc, port: 80}}}]
    backendRefs: [{group: inference.networking.k8s.io, kind: InferencePool, name: empty}]
`)
	c := w.waitGatewayCondition("HTTPRoute missing", w.routeConds("missing"), "ResolvedRefs", metav1.ConditionFalse, "BackendNotFound")
	assert.Contains(t, c.Message, "InferencePool "+w.ns+"/no-such-pool does not exist")
	w.waitGatewayCondition("HTTPRoute missing", w.routeConds("missing"), "Accepted", metav1.ConditionTrue, "Accepted")
	c = w.waitGatewayCondition("InferencePool empty", w.poolConds("empty"), gateway.PoolConditionReady, metav1.ConditionFalse, gateway.PoolReasonNoReadyEndpoints)
	assert.Contains(t, c.Message, "app=nothing-has-this-label")
	c = w.waitGatewayCondition("HTTPRoute mirror", w.routeConds("mirror"), "Accepted", metav1.ConditionFalse, "UnsupportedValue")
	assert.Contains(t, c.Message, "RequestMirror")

	c = w.waitGatewayCondition("listener taken", w.listenerConds("busy", "taken"), "Accepted", metav1.ConditionFalse, "PortUnavailable")
	assert.Contains(t, c.Message, strconv.Itoa(int(busy)))
	w.waitGatewayCondition("listener taken", w.listenerConds("busy", "taken"), "Programmed", metav1.ConditionFalse, "Invalid")
	w.waitGatewayCondition("listener tcp", w.listenerConds("busy", "tcp"), "Accepted", metav1.ConditionFalse, "UnsupportedProtocol")
	w.waitGatewayCondition("Gateway busy", func() []metav1.Condition { return w.gatewayStatus("busy").Status.Conditions }, "Programmed", metav1.ConditionFalse, "Invalid")
	w.waitGatewayCondition("Gateway gw", func() []metav1.Condition { return w.gatewayStatus("gw").Status.Conditions }, "Programmed", metav1.ConditionTrue, "Programmed")

	get := func(path string) (int, string) {
		r, err := http.Post(fmt.Sprintf("http://%s:%d%s", gatewayHost(0), port, path), "application/json", strings.NewReader(`{"model":"m","messages":[]}`))
		require.NoError(t, err)
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	status, body := get("/missing/v1/chat/completions")
	assert.Equal(t, http.StatusInternalServerError, status, "a backendRef that does not resolve answers 500, as the Gateway API says")
	assert.Contains(t, body, "no-such-pool")
	status, body = get("/empty/v1/chat/completions")
	assert.Equal(t, http.StatusServiceUnavailable, status)
	assert.Contains(t, body, "InferencePool "+w.ns+"/empty")
	status, _ = get("/mirror")
	assert.Equal(t, http.StatusNotFound, status, "a route that is not accepted serves nothing")
	for _, r := range routers {
		assert.NotEmpty(t, r.Addr(), "the routers kept serving")
	}
}

// A ModelRoute with parentRefs is served on its Gateway's listeners only; one without keeps
// being served on the router's own port.
func TestModelRouteParentRefs(t *testing.T) {
	w, port := gatewayWorld(t, 1)
	w.pod("bound-0", map[string]string{"app": "bound"})
	w.apply(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: bound}
spec:
  model: base-model
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {app: bound}}`, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: bound}
spec:
  modelName: bound-model
  parentRefs: [{name: gw, sectionName: http}]
  rules:
  - targetModels: [{modelServerName: bound}]`, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: plain}
spec:
  modelName: plain-model
  rules:
  - targetModels: [{modelServerName: bound}]`)
	w.waitEndpoints("bound", 1)
	w.waitGatewayCondition("listener http", w.listenerConds("gw", "http"), "Programmed", metav1.ConditionTrue, "Programmed")
	w.eventually("the ModelRoute is attached to the listener", 30*time.Second, func() bool {
		ls := w.gatewayStatus("gw").Status.Listeners
		return len(ls) == 1 && ls[0].AttachedRoutes == 1
	})

	gw := openai.NewClient(option.WithBaseURL(fmt.Sprintf("http://%s:%d/v1", gatewayHost(1), port)), option.WithAPIKey("test"), option.WithMaxRetries(0))
	_, resp, err := chat(w.ctx, gw, "bound-model", "through the gateway")
	require.NoError(t, err, "the bound ModelRoute serves on its Gateway")
	assert.Equal(t, w.ns+"/bound-0", resp.Header.Get("X-Berth-Endpoint"))

	_, _, err = chat(w.ctx, client_(0), "bound-model", "through the router's port")
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr, "a route with parentRefs is not served on the router's own port")
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)

	_, _, err = chat(w.ctx, client_(1), "plain-model", "through the router's port")
	require.NoError(t, err, "a ModelRoute without parentRefs is served as before")
	_, _, err = chat(w.ctx, gw, "plain-model", "through the gateway")
	require.ErrorAs(t, err, &apiErr, "nor is it served on a Gateway it does not name")
	assert.Equal(t, http.StatusNotFound, apiErr.StatusCode)
}

// gatewayCert is a certificate for host with the given serial number, as a kubernetes.io/tls
// Secret's data.
func gatewayCert(t *testing.T, host string, serial int64) map[string][]byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return map[string][]byte{
		corev1.TLSCertKey:       pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		corev1.TLSPrivateKeyKey: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	}
}

// An HTTPS listener terminates TLS with its Secret's certificate, and a rotated Secret is
// used for the next connection without a restart.
func TestGatewayHTTPSCertificateRotation(t *testing.T) {
	w, _ := gatewayWorld(t, 1)
	w.pod("tls-0", poolPod("gw-tls"))
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "llm-cert", Namespace: w.ns}, Type: corev1.SecretTypeTLS,
		Data: gatewayCert(t, "llm.example.com", 1)}
	require.NoError(t, cl.Create(w.ctx, secret))
	port := freePort(t)
	w.applyAny(pool("tls", "gw-tls"), fmt.Sprintf(`
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: secure}
spec:
  gatewayClassName: berth-%s
  listeners:
  - name: https
    protocol: HTTPS
    port: %d
    tls: {mode: Terminate, certificateRefs: [{name: llm-cert}]}
  - name: bad-cert
    protocol: HTTPS
    port: %d
    tls: {certificateRefs: [{name: no-such-secret}]}`, w.ns, port, freePort(t)), `
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: secure}
spec:
  parentRefs: [{name: secure, sectionName: https}]
  rules:
  - backendRefs: [{group: inference.networking.k8s.io, kind: InferencePool, name: tls}]
`)
	w.waitGatewayCondition("listener https", w.listenerConds("secure", "https"), "Programmed", metav1.ConditionTrue, "Programmed")
	c := w.waitGatewayCondition("listener bad-cert", w.listenerConds("secure", "bad-cert"), "ResolvedRefs", metav1.ConditionFalse, "InvalidCertificateRef")
	assert.Contains(t, c.Message, "no-such-secret")
	w.waitGatewayCondition("InferencePool tls", w.poolConds2("tls", "secure"), gateway.PoolConditionReady, metav1.ConditionTrue, gateway.PoolReasonEndpointsReady)

	serial := func() int64 {
		conn, err := tls.Dial("tcp", fmt.Sprintf("%s:%d", gatewayHost(0), port), &tls.Config{ServerName: "llm.example.com", InsecureSkipVerify: true})
		if err != nil {
			return 0
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	w.eventually("the listener serves the Secret's certificate", 30*time.Second, func() bool { return serial() == 1 })

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	c2 := openai.NewClient(option.WithBaseURL(fmt.Sprintf("https://%s:%d/v1", gatewayHost(0), port)), option.WithAPIKey("test"),
		option.WithMaxRetries(0), option.WithHTTPClient(hc))
	_, resp, err := chat(w.ctx, c2, "base-model", "over https")
	require.NoError(t, err, "a chat completion through the HTTPS listener")
	assert.Equal(t, w.ns+"/tls-0", resp.Header.Get("X-Berth-Endpoint"))

	secret.Data = gatewayCert(t, "llm.example.com", 2)
	require.NoError(t, cl.Update(w.ctx, secret))
	w.eventually("a new connection gets the rotated certificate", 30*time.Second, func() bool { return serial() == 2 })
}
