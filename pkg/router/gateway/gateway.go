// Package gateway makes berth-router a Gateway API implementation. Build compiles the
// GatewayClasses that name ControllerName, their Gateways, the HTTPRoutes attached to them
// and the InferencePools and Services those routes send to into a Config (what each
// listener port serves, matched per request by Config.Route) and a Status (the conditions
// the Gateway API prescribes for every one of those objects). Listeners opens the
// Gateways' ports in the router process; StatusWriter writes Status back to the cluster.
//
// Build is pure: package view calls it on every rebuild of its snapshot, with the objects
// from its informers, so HTTPRoutes are served from the same immutable picture as
// ModelRoutes, and their backends' endpoints are picked by the same scorers.
package gateway

import (
	"crypto/tls"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	"github.com/berth-sh/berth/pkg/router/match"
)

// ControllerName is the GatewayClass spec.controllerName whose classes berth-router
// implements.
const ControllerName gwv1.GatewayController = "berth.sh/router"

// Kinds and groups the routes name.
const (
	GatewayGroup  = gwv1.GroupName
	InferenceKind = "InferencePool"
	ServiceKind   = "Service"
)

// BackendKind is what a backendRef names.
type BackendKind string

const (
	PoolBackend    BackendKind = InferenceKind
	ServiceBackend BackendKind = ServiceKind
)

// Backend is one backendRef of a rule, resolved.
type Backend struct {
	Kind BackendKind
	types.NamespacedName
	// Port is a Service backend's port (an InferencePool's are its targetPorts).
	Port   int32
	Weight int32
	// Invalid, when set, says why the ref cannot be used (it names no existing object, a
	// kind the router does not serve, a namespace no ReferenceGrant opens): requests drawn
	// to it are answered 500, as the Gateway API prescribes, with this message.
	Invalid string
	// Filters are the backendRef's own filters, applied after the rule's.
	Filters Filters
}

// String names the backend for answers and logs.
func (b Backend) String() string {
	if b.Kind == ServiceBackend {
		return "Service " + b.NamespacedName.String() + ":" + itoa(b.Port)
	}
	return string(b.Kind) + " " + b.NamespacedName.String()
}

// Filters are the request and response changes of a rule or backendRef.
type Filters struct {
	RequestHeaders, ResponseHeaders *HeaderChange
	Rewrite                         *gwv1.HTTPURLRewriteFilter
}

// HeaderChange is a RequestHeaderModifier or ResponseHeaderModifier.
type HeaderChange struct {
	Set, Add []gwv1.HTTPHeader
	Remove   []string
}

// Apply changes h.
func (c *HeaderChange) Apply(h http.Header) {
	if c == nil {
		return
	}
	for _, s := range c.Set {
		h.Set(string(s.Name), s.Value)
	}
	for _, a := range c.Add {
		h.Add(string(a.Name), a.Value)
	}
	for _, r := range c.Remove {
		h.Del(r)
	}
}

// Rule is one match of one HTTPRoute rule (a rule with three matches is three Rules, each
// with its own precedence).
type Rule struct {
	Route     types.NamespacedName
	Index     int // the rule's index in spec.rules
	Name      string
	Hostnames []string // the route's spec.hostnames ("" none: every host of the listener)
	Match     Match
	Filters   Filters
	Backends  []Backend
	Timeout   time.Duration // timeouts.request (0: none)
	created   time.Time
}

// Label is how the rule appears in metrics and answers: httproute/<ns>/<name>/rule-<i>.
func (r *Rule) Label() string {
	name := r.Name
	if name == "" {
		name = "rule-" + itoa(int32(r.Index))
	}
	return "httproute/" + r.Route.String() + "/" + name
}

// Match is one HTTPRouteMatch, compiled.
type Match struct {
	PathType gwv1.PathMatchType
	Path     string
	pathRE   *regexp.Regexp
	Method   string
	Headers  []valueMatch
	Query    []valueMatch
}

type valueMatch struct {
	name  string
	exact string
	re    *regexp.Regexp
}

func (m valueMatch) matches(vals []string) bool {
	for _, v := range vals {
		if (m.re == nil && v == m.exact) || (m.re != nil && m.re.MatchString(v)) {
			return true
		}
	}
	return false
}

func (m *Match) matches(req *http.Request) bool {
	p := req.URL.Path
	switch m.PathType {
	case gwv1.PathMatchExact:
		if p != m.Path {
			return false
		}
	case gwv1.PathMatchRegularExpression:
		if !m.pathRE.MatchString(p) {
			return false
		}
	default:
		if !prefixMatches(m.Path, p) {
			return false
		}
	}
	if m.Method != "" && req.Method != m.Method {
		return false
	}
	for _, h := range m.Headers {
		if !h.matches(req.Header.Values(h.name)) {
			return false
		}
	}
	if len(m.Query) > 0 {
		q := req.URL.Query()
		for _, qm := range m.Query {
			vals, ok := q[qm.name]
			if !ok || !qm.matches(vals[:1]) { // the first value counts, as the spec allows
				return false
			}
		}
	}
	return true
}

// prefixMatches is the Gateway API's PathPrefix: element-wise, so /foo matches /foo and
// /foo/bar but not /foobar; a trailing slash in the prefix is ignored.
func prefixMatches(prefix, path string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix == "" {
		return true
	}
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// Listener is one listener of one of our Gateways, as served.
type Listener struct {
	Gateway  types.NamespacedName
	Name     string
	Hostname string // "" any
	HTTPS    bool
	// Certificate is an HTTPS listener's, from its certificateRefs Secret.
	Certificate *tls.Certificate
	// Rules are the rules of every route attached to it, in the Gateway API's precedence.
	Rules []*Rule
	// Models are the ModelRoutes whose parentRefs name this listener's Gateway (nil: none).
	Models      *match.Table
	modelRoutes []*networkingv1alpha1.ModelRoute
}

// Port is what one port of the router serves: the listeners on it, most specific hostname
// first.
type Port struct {
	Number    int32
	HTTPS     bool
	Listeners []*Listener
}

// Certificate is the certificate for a TLS handshake naming serverName (SNI): that of the
// most specific HTTPS listener whose hostname takes it, else of the first listener.
func (p *Port) Certificate(serverName string) *tls.Certificate {
	host := strings.ToLower(serverName)
	for _, l := range p.Listeners {
		if l.Certificate != nil && hostMatches(l.Hostname, host) {
			return l.Certificate
		}
	}
	for _, l := range p.Listeners {
		if l.Certificate != nil {
			return l.Certificate
		}
	}
	return nil
}

// Config is the compiled set of Gateways. Never modified once built.
type Config struct {
	Ports map[int32]*Port
}

// Empty is a Config serving nothing.
func Empty() *Config { return &Config{Ports: map[int32]*Port{}} }

// Routed is the outcome of Route.
type Routed struct {
	Listener *Listener
	Rule     *Rule // nil when no HTTPRoute rule matched
}

// Route finds the listener a request to port serves (by its Host) and the first rule, in
// precedence order, that matches it. ok is false when no listener on the port takes the
// host.
func (c *Config) Route(port int32, req *http.Request) (Routed, bool) {
	p := c.Ports[port]
	if p == nil {
		return Routed{}, false
	}
	host := hostOnly(req.Host)
	// The most specific listener hostname matching the host takes the request; listeners of
	// several Gateways with that same hostname are merged: the best rule of all of them wins.
	var first *Listener
	var best Routed
	for _, l := range p.Listeners {
		if !hostMatches(l.Hostname, host) || first != nil && l.Hostname != first.Hostname {
			continue
		}
		if first == nil {
			first = l
		}
		for _, r := range l.Rules {
			if routeHostMatches(r.Hostnames, host) && r.Match.matches(req) {
				if best.Rule == nil || ruleBefore(r, best.Rule) {
					best = Routed{Listener: l, Rule: r}
				}
				break // a listener's rules are in precedence order
			}
		}
	}
	switch {
	case first == nil:
		return Routed{}, false
	case best.Rule == nil:
		return Routed{Listener: first}, true
	}
	return best, true
}

func hostOnly(h string) string {
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// hostMatches: pattern "" takes any host; "*.example.com" takes hosts with one or more
// labels before .example.com; else the host must equal it.
func hostMatches(pattern, host string) bool {
	switch {
	case pattern == "":
		return true
	case strings.HasPrefix(pattern, "*."):
		return strings.HasSuffix(host, pattern[1:]) && len(host) > len(pattern)-1
	}
	return pattern == host
}

func routeHostMatches(hostnames []string, host string) bool {
	if len(hostnames) == 0 {
		return true
	}
	for _, h := range hostnames {
		if hostMatches(h, host) {
			return true
		}
	}
	return false
}

// hostnamesIntersect reports whether a listener hostname and a route hostname can both take
// some host.
func hostnamesIntersect(listener, route string) bool {
	switch {
	case listener == "" || route == "":
		return true
	case hostMatches(listener, route) || hostMatches(route, listener) || listener == route:
		return true
	}
	return false
}

// RewritePath is the path a URLRewrite's path modifier makes of path, matched by m.
func RewritePath(mod *gwv1.HTTPPathModifier, m *Match, path string) string {
	if mod == nil {
		return path
	}
	switch mod.Type {
	case gwv1.FullPathHTTPPathModifier:
		if mod.ReplaceFullPath != nil {
			return *mod.ReplaceFullPath
		}
	case gwv1.PrefixMatchHTTPPathModifier:
		if mod.ReplacePrefixMatch == nil || m.PathType != gwv1.PathMatchPathPrefix {
			return path
		}
		prefix := strings.TrimSuffix(m.Path, "/")
		rest := strings.TrimPrefix(path, prefix)
		repl := *mod.ReplacePrefixMatch
		switch {
		case rest == "":
			if repl == "" {
				return "/"
			}
			return repl
		case strings.HasSuffix(repl, "/"):
			return repl + strings.TrimPrefix(rest, "/")
		}
		return repl + rest
	}
	return path
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

// BackendKey identifies a backend's endpoints in the view: an InferencePool (Port 0) or
// one port of a Service.
type BackendKey struct {
	Kind BackendKind
	types.NamespacedName
	Port int32
}

// Key is b's BackendKey.
func (b Backend) Key() BackendKey {
	k := BackendKey{Kind: b.Kind, NamespacedName: b.NamespacedName}
	if b.Kind == ServiceBackend {
		k.Port = b.Port
	}
	return k
}
