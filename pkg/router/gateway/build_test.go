package gateway

import (
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

func decode[T any](t *testing.T, doc string) *T {
	t.Helper()
	out := new(T)
	require.NoError(t, yaml.UnmarshalStrict([]byte(doc), out))
	return out
}

func world(t *testing.T, routes ...string) Input {
	in := Input{
		Classes: []*gwv1.GatewayClass{decode[gwv1.GatewayClass](t, `{metadata: {name: berth}, spec: {controllerName: berth.sh/router}}`),
			decode[gwv1.GatewayClass](t, `{metadata: {name: other}, spec: {controllerName: example.com/other}}`)},
		Gateways: []*gwv1.Gateway{decode[gwv1.Gateway](t, `
metadata: {name: gw, namespace: ns}
spec:
  gatewayClassName: berth
  listeners:
  - {name: web, protocol: HTTP, port: 8080}
  - {name: api, protocol: HTTP, port: 8080, hostname: api.example.com}
  - {name: clash, protocol: HTTPS, port: 8080, hostname: x.example.com, tls: {certificateRefs: [{name: cert}]}}
  - {name: udp, protocol: UDP, port: 9000}`),
			decode[gwv1.Gateway](t, `{metadata: {name: foreign, namespace: ns}, spec: {gatewayClassName: other, listeners: [{name: a, protocol: HTTP, port: 1}]}}`)},
		Pools:         []*infv1.InferencePool{decode[infv1.InferencePool](t, `{metadata: {name: pool, namespace: ns}, spec: {selector: {matchLabels: {app: x}}, targetPorts: [{number: 8000}]}}`)},
		PoolEndpoints: func(types.NamespacedName) int { return 2 },
		Bind:          func(ports map[int32]bool) map[int32]error { return nil },
	}
	for _, r := range routes {
		in.Routes = append(in.Routes, decode[gwv1.HTTPRoute](t, r))
	}
	return in
}

func condition(t *testing.T, conds []metav1.Condition, typ string) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(conds, typ)
	require.NotNil(t, c, "no %s condition in %+v", typ, conds)
	return *c
}

func TestListenersAndClasses(t *testing.T) {
	cfg, st := Build(world(t))
	assert.Len(t, st.Classes, 1, "only the class naming berth.sh/router is ours")
	assert.Equal(t, metav1.ConditionTrue, condition(t, st.Classes["berth"], "Accepted").Status)
	require.Contains(t, st.Gateways, types.NamespacedName{Namespace: "ns", Name: "gw"})
	assert.NotContains(t, st.Gateways, types.NamespacedName{Namespace: "ns", Name: "foreign"})
	ls := st.Gateways[types.NamespacedName{Namespace: "ns", Name: "gw"}].Listeners
	require.Len(t, ls, 4)
	assert.Equal(t, "ProtocolConflict", condition(t, ls[0].Conditions, "Conflicted").Reason, "HTTP and HTTPS on one port")
	assert.Equal(t, "UnsupportedProtocol", condition(t, ls[3].Conditions, "Accepted").Reason)
	assert.Empty(t, cfg.Ports, "nothing is served on a port whose listeners conflict")
}

func TestPortUnavailable(t *testing.T) {
	in := world(t)
	in.Gateways[0].Spec.Listeners = in.Gateways[0].Spec.Listeners[:2]
	in.Bind = func(ports map[int32]bool) map[int32]error {
		assert.Equal(t, map[int32]bool{8080: false}, ports)
		return map[int32]error{8080: errors.New("address already in use")}
	}
	_, st := Build(in)
	gs := st.Gateways[types.NamespacedName{Namespace: "ns", Name: "gw"}]
	c := condition(t, gs.Listeners[0].Conditions, "Accepted")
	assert.Equal(t, "PortUnavailable", c.Reason)
	assert.Contains(t, c.Message, "address already in use")
	assert.Equal(t, metav1.ConditionFalse, condition(t, gs.Conditions, "Programmed").Status)
}

const route = `
metadata: {name: r, namespace: ns}
spec:
  parentRefs: [{name: gw, sectionName: web}, {name: gw, sectionName: nope}, {name: foreign}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /v1}}]
    backendRefs: [{group: inference.networking.k8s.io, kind: InferencePool, name: pool}]
  - matches: [{path: {type: Exact, value: /v1/models}}, {path: {type: PathPrefix, value: /v1/chat}, headers: [{name: x-a, value: b}]}]
    backendRefs: [{group: inference.networking.k8s.io, kind: InferencePool, name: gone}, {name: svc, port: 80}, {group: example.com, kind: Thing, name: t}]
`

func TestRoutesPrecedenceAndRefs(t *testing.T) {
	in := world(t, route)
	in.Gateways[0].Spec.Listeners = in.Gateways[0].Spec.Listeners[:2]
	cfg, st := Build(in)
	parents := st.Routes[types.NamespacedName{Namespace: "ns", Name: "r"}]
	require.Len(t, parents, 2, "the foreign Gateway's parentRef is another implementation's")
	assert.Equal(t, metav1.ConditionTrue, condition(t, parents[0].Conditions, "Accepted").Status)
	assert.Equal(t, "NoMatchingParent", condition(t, parents[1].Conditions, "Accepted").Reason)
	refs := condition(t, parents[0].Conditions, "ResolvedRefs")
	assert.Equal(t, "BackendNotFound", refs.Reason)
	assert.Contains(t, refs.Message, "InferencePool ns/gone does not exist")
	assert.Contains(t, refs.Message, "Service ns/svc does not exist")
	assert.Contains(t, refs.Message, "kind Thing")

	pool := st.Pools[types.NamespacedName{Namespace: "ns", Name: "pool"}]
	require.Len(t, pool, 1)
	assert.Equal(t, infv1.ObjectName("gw"), pool[0].ParentRef.Name)
	assert.Equal(t, metav1.ConditionTrue, condition(t, pool[0].Conditions, "Accepted").Status)

	routeOf := func(method, target string, header map[string]string) *Rule {
		req := httptest.NewRequest(method, target, nil)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		r, ok := cfg.Route(8080, req)
		require.True(t, ok)
		return r.Rule
	}
	assert.Equal(t, 1, routeOf("GET", "/v1/models", nil).Index, "Exact beats a prefix")
	assert.Equal(t, 0, routeOf("POST", "/v1/chat/completions", nil).Index, "without the header the longer prefix does not match")
	assert.Equal(t, 1, routeOf("POST", "/v1/chat/completions", map[string]string{"X-A": "b"}).Index, "the longer prefix wins")
	assert.Nil(t, routeOf("POST", "/v10", nil), "a prefix matches whole path elements")
	req := httptest.NewRequest("GET", "http://api.example.com:8080/v1/x", nil)
	r, _ := cfg.Route(8080, req)
	assert.Equal(t, "api", r.Listener.Name, "the listener with the hostname takes its host")
	assert.Empty(t, r.Listener.Rules, "the route attached only to sectionName web")
}

func TestRewritePath(t *testing.T) {
	prefix := func(p string) *gwv1.HTTPPathModifier {
		return &gwv1.HTTPPathModifier{Type: gwv1.PrefixMatchHTTPPathModifier, ReplacePrefixMatch: &p}
	}
	m := &Match{PathType: gwv1.PathMatchPathPrefix, Path: "/engine"}
	assert.Equal(t, "/v1/chat/completions", RewritePath(prefix("/v1"), m, "/engine/chat/completions"))
	assert.Equal(t, "/chat", RewritePath(prefix("/"), m, "/engine/chat"))
	assert.Equal(t, "/v1", RewritePath(prefix("/v1"), m, "/engine"))
	full := "/health"
	assert.Equal(t, "/health", RewritePath(&gwv1.HTTPPathModifier{Type: gwv1.FullPathHTTPPathModifier, ReplaceFullPath: &full}, m, "/engine/x"))
}

// A listener with allowedRoutes.namespaces.from: Selector admits routes from the namespaces
// whose labels match, and only those (the Gateway API conformance suite's backend-namespaces
// Gateway is one).
func TestNamespaceSelector(t *testing.T) {
	in := world(t, `
metadata: {name: in, namespace: team-a}
spec:
  parentRefs: [{name: gw, namespace: ns}]
  rules: [{backendRefs: [{group: inference.networking.k8s.io, kind: InferencePool, name: pool, namespace: ns}]}]`, `
metadata: {name: out, namespace: team-b}
spec:
  parentRefs: [{name: gw, namespace: ns}]
  rules: [{backendRefs: [{group: inference.networking.k8s.io, kind: InferencePool, name: pool, namespace: ns}]}]`)
	in.Gateways[0].Spec.Listeners = []gwv1.Listener{*decode[gwv1.Listener](t,
		`{name: web, protocol: HTTP, port: 8080, allowedRoutes: {namespaces: {from: Selector, selector: {matchLabels: {team: served}}}}}`)}
	in.NamespaceLabels = func(ns string) map[string]string {
		return map[string]map[string]string{"team-a": {"team": "served"}, "team-b": {"team": "other"}}[ns]
	}
	_, st := Build(in)
	gs := st.Gateways[types.NamespacedName{Namespace: "ns", Name: "gw"}]
	assert.Equal(t, metav1.ConditionTrue, condition(t, gs.Listeners[0].Conditions, "Accepted").Status)
	assert.Equal(t, int32(1), gs.Listeners[0].AttachedRoutes)
	assert.Equal(t, metav1.ConditionTrue, condition(t, st.Routes[types.NamespacedName{Namespace: "team-a", Name: "in"}][0].Conditions, "Accepted").Status)
	out := condition(t, st.Routes[types.NamespacedName{Namespace: "team-b", Name: "out"}][0].Conditions, "Accepted")
	assert.Equal(t, "NotAllowedByListeners", out.Reason)

	in.Gateways[0].Spec.Listeners[0].AllowedRoutes.Namespaces.Selector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Bogus"}}
	_, st = Build(in)
	c := condition(t, st.Gateways[types.NamespacedName{Namespace: "ns", Name: "gw"}].Listeners[0].Conditions, "Accepted")
	assert.Equal(t, "UnsupportedValue", c.Reason)
	assert.Contains(t, c.Message, "allowedRoutes.namespaces.selector")
}

// Two Gateways with a hostname-less HTTP listener on one port (the conformance suite's base
// Gateways are three such) are both served: their listeners are merged, not Conflicted, and
// a request takes the best rule of either.
func TestGatewaysShareAPort(t *testing.T) {
	in := world(t, `
metadata: {name: a, namespace: ns}
spec:
  parentRefs: [{name: gw}]
  rules: [{matches: [{path: {type: PathPrefix, value: /a}}], backendRefs: [{group: inference.networking.k8s.io, kind: InferencePool, name: pool}]}]`, `
metadata: {name: b, namespace: ns}
spec:
  parentRefs: [{name: gw2}]
  rules: [{matches: [{path: {type: Exact, value: /a/exact}}], backendRefs: [{group: inference.networking.k8s.io, kind: InferencePool, name: pool}]}]`)
	in.Gateways[0].Spec.Listeners = in.Gateways[0].Spec.Listeners[:1]
	in.Gateways = append(in.Gateways, decode[gwv1.Gateway](t, `{metadata: {name: gw2, namespace: ns}, spec: {gatewayClassName: berth, listeners: [{name: web, protocol: HTTP, port: 8080}]}}`))
	cfg, st := Build(in)
	for _, name := range []string{"gw", "gw2"} {
		gs := st.Gateways[types.NamespacedName{Namespace: "ns", Name: name}]
		assert.Equal(t, "NoConflicts", condition(t, gs.Listeners[0].Conditions, "Conflicted").Reason, name)
		assert.Equal(t, metav1.ConditionTrue, condition(t, gs.Conditions, "Programmed").Status, name)
	}
	r, ok := cfg.Route(8080, httptest.NewRequest("GET", "/a/exact", nil))
	require.True(t, ok)
	require.NotNil(t, r.Rule)
	assert.Equal(t, "b", r.Rule.Route.Name, "the Exact match of gw2's route beats gw's prefix")
	r, _ = cfg.Route(8080, httptest.NewRequest("GET", "/a/other", nil))
	require.NotNil(t, r.Rule)
	assert.Equal(t, "a", r.Rule.Route.Name)
}
