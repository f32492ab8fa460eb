package gateway

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	"github.com/berth-sh/berth/pkg/router/match"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// Input is what Build reads.
type Input struct {
	Classes  []*gwv1.GatewayClass
	Gateways []*gwv1.Gateway
	Routes   []*gwv1.HTTPRoute
	Pools    []*infv1.InferencePool
	Grants   []*gwv1.ReferenceGrant
	Services map[types.NamespacedName]*corev1.Service
	// ModelRoutes are those with spec.parentRefs: each is served on the listeners of the
	// Gateways it names.
	ModelRoutes []*networkingv1alpha1.ModelRoute
	// NamespaceLabels are a namespace's labels, for listeners whose
	// allowedRoutes.namespaces.from is Selector (nil: no namespace matches).
	NamespaceLabels func(namespace string) map[string]string
	// PoolEndpoints is how many Ready endpoints an InferencePool has.
	PoolEndpoints func(types.NamespacedName) int
	// Certificate loads an HTTPS listener's certificate from a Secret (nil: HTTPS listeners
	// have none).
	Certificate func(types.NamespacedName) (*tls.Certificate, error)
	// Bind opens exactly the given ports (true: HTTPS) in the router process and returns
	// the error of each that could not be opened (nil: opens nothing).
	Bind func(ports map[int32]bool) map[int32]error
}

// Status is every condition Build decided, for StatusWriter. Conditions carry their
// observedGeneration; their lastTransitionTime is left to the writer.
type Status struct {
	// Classes are the GatewayClasses naming ControllerName.
	Classes map[string]Conditions
	// Gateways are the Gateways of those classes.
	Gateways map[types.NamespacedName]*GatewayStatus
	// Routes holds every HTTPRoute: its parent entries for our Gateways (none: any entry
	// of ours is removed).
	Routes map[types.NamespacedName][]gwv1.RouteParentStatus
	// Pools holds every InferencePool: its parent entries for our Gateways.
	Pools map[types.NamespacedName][]infv1.ParentStatus
}

// Conditions of one object.
type Conditions []metav1.Condition

// GatewayStatus is a Gateway's conditions and listeners.
type GatewayStatus struct {
	Conditions Conditions
	Listeners  []gwv1.ListenerStatus
}

func cond(t string, ok bool, reason, msg string, gen int64) metav1.Condition {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	return metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: gen}
}

// listenerState is one listener being built.
type listenerState struct {
	gw       *gwv1.Gateway
	spec     *gwv1.Listener
	served   *Listener
	accepted bool   // Accepted
	reason   string // Accepted=False reason
	msg      string
	refsOK   bool
	refsWhy  string
	refsMsg  string
	conflict string // Conflicted=True reason
	kindsOK  bool
	bindErr  error
	attached int32
	fromAll  bool
	// selector is allowedRoutes.namespaces.selector when from is Selector: the namespaces
	// whose routes the listener admits, besides none.
	selector labels.Selector
	nsLabels func(string) map[string]string
	cert     *tls.Certificate
}

// admits says whether the listener takes routes from namespace ns (allowedRoutes.namespaces).
func (l *listenerState) admits(ns string) bool {
	switch {
	case l.fromAll:
		return true
	case l.selector != nil:
		return l.nsLabels != nil && l.selector.Matches(labels.Set(l.nsLabels(ns)))
	}
	return l.gw.Namespace == ns
}

func (l *listenerState) programmed() bool {
	return l.accepted && l.refsOK && l.conflict == "" && l.bindErr == nil
}

// Build compiles in. It never fails: what cannot be served gets a condition saying why.
func Build(in Input) (*Config, *Status) {
	cfg := Empty()
	st := &Status{Classes: map[string]Conditions{}, Gateways: map[types.NamespacedName]*GatewayStatus{},
		Routes: map[types.NamespacedName][]gwv1.RouteParentStatus{}, Pools: map[types.NamespacedName][]infv1.ParentStatus{}}

	classes := map[string]bool{}
	for _, c := range in.Classes {
		if c.Spec.ControllerName != ControllerName {
			continue
		}
		if c.Spec.ParametersRef != nil {
			st.Classes[c.Name] = Conditions{cond(string(gwv1.GatewayClassConditionStatusAccepted), false, string(gwv1.GatewayClassReasonInvalidParameters),
				"berth-router takes no parameters; remove spec.parametersRef", c.Generation)}
			continue
		}
		classes[c.Name] = true
		st.Classes[c.Name] = Conditions{cond(string(gwv1.GatewayClassConditionStatusAccepted), true, string(gwv1.GatewayClassReasonAccepted),
			"berth-router serves the Gateways of this class", c.Generation)}
	}

	gateways := sortedObjects(in.Gateways)
	ours := map[types.NamespacedName]*gwv1.Gateway{}
	var all []*listenerState
	byGateway := map[types.NamespacedName][]*listenerState{}
	for _, gw := range gateways {
		if !classes[string(gw.Spec.GatewayClassName)] {
			continue
		}
		key := types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
		ours[key] = gw
		for i := range gw.Spec.Listeners {
			l := checkListener(gw, &gw.Spec.Listeners[i], in)
			all = append(all, l)
			byGateway[key] = append(byGateway[key], l)
		}
	}
	markConflicts(all)

	want := map[int32]bool{}
	for _, l := range all {
		if l.accepted && l.refsOK && l.conflict == "" {
			want[int32(l.spec.Port)] = l.spec.Protocol == gwv1.HTTPSProtocolType
		}
	}
	var bindErrs map[int32]error
	if in.Bind != nil {
		bindErrs = in.Bind(want)
	}
	for _, l := range all {
		if err := bindErrs[int32(l.spec.Port)]; err != nil && l.accepted && l.refsOK && l.conflict == "" {
			l.bindErr = err
			l.accepted, l.reason, l.msg = false, string(gwv1.ListenerReasonPortUnavailable), fmt.Sprintf("port %d: %v", l.spec.Port, err)
		}
	}

	poolIndex := map[types.NamespacedName]*infv1.InferencePool{}
	for _, p := range in.Pools {
		poolIndex[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = p
	}
	poolParents := map[types.NamespacedName]map[types.NamespacedName]bool{} // pool → gateway → route accepted

	for _, hr := range sortedObjects(in.Routes) {
		rkey := types.NamespacedName{Namespace: hr.Namespace, Name: hr.Name}
		rules, resolved, filtersErr := compileRoute(hr, in, poolIndex)
		var parents []gwv1.RouteParentStatus
		for _, ref := range hr.Spec.ParentRefs {
			gkey, isGateway := parentGateway(hr.Namespace, ref)
			gw := ours[gkey]
			if !isGateway || gw == nil {
				continue // another implementation's parent
			}
			ps := gwv1.RouteParentStatus{ParentRef: ref, ControllerName: ControllerName}
			accepted, reason, msg := attach(hr, ref, byGateway[gkey], rules, filtersErr)
			ps.Conditions = append(ps.Conditions, cond(string(gwv1.RouteConditionAccepted), accepted, reason, msg, hr.Generation))
			ps.Conditions = append(ps.Conditions, cond(string(gwv1.RouteConditionResolvedRefs), resolved.ok, resolved.reason, resolved.msg, hr.Generation))
			parents = append(parents, ps)
			for _, r := range rules {
				for _, b := range r.Backends {
					if b.Kind == PoolBackend && b.Invalid == "" {
						if poolParents[b.NamespacedName] == nil {
							poolParents[b.NamespacedName] = map[types.NamespacedName]bool{}
						}
						poolParents[b.NamespacedName][gkey] = poolParents[b.NamespacedName][gkey] || accepted
					}
				}
			}
		}
		st.Routes[rkey] = parents
	}

	attachModelRoutes(in.ModelRoutes, ours, byGateway)

	for _, p := range in.Pools {
		key := types.NamespacedName{Namespace: p.Namespace, Name: p.Name}
		var parents []infv1.ParentStatus
		gws := make([]types.NamespacedName, 0, len(poolParents[key]))
		for g := range poolParents[key] {
			gws = append(gws, g)
		}
		sort.Slice(gws, func(i, j int) bool { return gws[i].String() < gws[j].String() })
		for _, g := range gws {
			group, kind, ns := infv1.Group(GatewayGroup), infv1.Kind("Gateway"), infv1.Namespace(g.Namespace)
			ps := infv1.ParentStatus{ControllerName: infv1.ControllerName(ControllerName),
				ParentRef: infv1.ParentReference{Group: &group, Kind: kind, Namespace: ns, Name: infv1.ObjectName(g.Name)}}
			if poolParents[key][g] {
				ps.Conditions = append(ps.Conditions, cond(string(infv1.InferencePoolConditionAccepted), true, string(infv1.InferencePoolReasonAccepted),
					"an HTTPRoute accepted by Gateway "+g.String()+" sends to this pool", p.Generation))
			} else {
				ps.Conditions = append(ps.Conditions, cond(string(infv1.InferencePoolConditionAccepted), false, string(infv1.InferencePoolReasonHTTPRouteNotAccepted),
					"no HTTPRoute sending to this pool is accepted by Gateway "+g.String(), p.Generation))
			}
			msg := "berth-router picks this pool's endpoints itself, with its scorers"
			if p.Spec.EndpointPickerRef != nil {
				msg += fmt.Sprintf("; endpointPickerRef %s is not called", p.Spec.EndpointPickerRef.Name)
			}
			ps.Conditions = append(ps.Conditions, cond(string(infv1.InferencePoolConditionResolvedRefs), true, string(infv1.InferencePoolReasonResolvedRefs), msg, p.Generation))
			n := 0
			if in.PoolEndpoints != nil {
				n = in.PoolEndpoints(key)
			}
			if n > 0 {
				ps.Conditions = append(ps.Conditions, cond(PoolConditionReady, true, PoolReasonEndpointsReady, fmt.Sprintf("%d Ready endpoints", n), p.Generation))
			} else {
				ps.Conditions = append(ps.Conditions, cond(PoolConditionReady, false, PoolReasonNoReadyEndpoints,
					fmt.Sprintf("no Ready pod matches spec.selector %s: requests to this pool are answered 503", selectorString(p)), p.Generation))
			}
			parents = append(parents, ps)
		}
		st.Pools[key] = parents
	}

	for _, gw := range gateways {
		key := types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}
		if ours[key] == nil {
			continue
		}
		gs := &GatewayStatus{}
		anyAccepted, anyProgrammed := false, false
		for _, l := range byGateway[key] {
			gs.Listeners = append(gs.Listeners, l.status())
			anyAccepted = anyAccepted || l.accepted
			if l.programmed() {
				anyProgrammed = true
				l.served.Certificate = l.cert
				addListener(cfg, l)
			}
		}
		switch {
		case len(gw.Spec.Addresses) > 0:
			gs.Conditions = append(gs.Conditions, cond(string(gwv1.GatewayConditionAccepted), false, string(gwv1.GatewayReasonUnsupportedAddress),
				"berth-router listens on its own addresses; remove spec.addresses", gw.Generation))
		case anyAccepted:
			gs.Conditions = append(gs.Conditions, cond(string(gwv1.GatewayConditionAccepted), true, string(gwv1.GatewayReasonAccepted), "accepted by berth-router", gw.Generation))
		default:
			gs.Conditions = append(gs.Conditions, cond(string(gwv1.GatewayConditionAccepted), false, string(gwv1.GatewayReasonListenersNotValid), "no listener is valid", gw.Generation))
		}
		if anyProgrammed && len(gw.Spec.Addresses) == 0 {
			gs.Conditions = append(gs.Conditions, cond(string(gwv1.GatewayConditionProgrammed), true, string(gwv1.GatewayReasonProgrammed), "berth-router serves its listeners", gw.Generation))
		} else {
			gs.Conditions = append(gs.Conditions, cond(string(gwv1.GatewayConditionProgrammed), false, string(gwv1.GatewayReasonInvalid), "no listener is served; see the listeners' conditions", gw.Generation))
		}
		st.Gateways[key] = gs
	}
	for _, p := range cfg.Ports {
		sort.SliceStable(p.Listeners, func(i, j int) bool {
			return hostSpecificity(p.Listeners[i].Hostname) > hostSpecificity(p.Listeners[j].Hostname)
		})
		for _, l := range p.Listeners {
			sortRules(l.Rules)
			if len(l.modelRoutes) > 0 {
				// Bad rules were reported when the route was compiled for the router's own
				// port would have been; here the route is simply left out, as there.
				l.Models, _ = match.NewTable(l.modelRoutes)
			}
		}
	}
	return cfg, st
}

// PoolConditionReady is Berth's own InferencePool parent condition: whether any Ready pod
// serves the pool (the Inference Extension's Accepted and ResolvedRefs do not say).
const (
	PoolConditionReady         = "Ready"
	PoolReasonEndpointsReady   = "EndpointsReady"
	PoolReasonNoReadyEndpoints = "NoReadyEndpoints"
)

func selectorString(p *infv1.InferencePool) string {
	var parts []string
	for k, v := range p.Spec.Selector.MatchLabels {
		parts = append(parts, string(k)+"="+string(v))
	}
	sort.Strings(parts)
	return "{" + strings.Join(parts, ",") + "}"
}

func addListener(cfg *Config, l *listenerState) {
	port := int32(l.spec.Port)
	p := cfg.Ports[port]
	if p == nil {
		p = &Port{Number: port, HTTPS: l.spec.Protocol == gwv1.HTTPSProtocolType}
		cfg.Ports[port] = p
	}
	p.Listeners = append(p.Listeners, l.served)
}

// hostSpecificity orders listeners on a port: an exact hostname before wildcards (longer
// first), and a listener without hostname last.
func hostSpecificity(h string) int {
	switch {
	case h == "":
		return 0
	case strings.HasPrefix(h, "*."):
		return len(h)
	}
	return 1 << 20
}

func (l *listenerState) status() gwv1.ListenerStatus {
	gen := l.gw.Generation
	s := gwv1.ListenerStatus{Name: l.spec.Name, AttachedRoutes: l.attached, SupportedKinds: []gwv1.RouteGroupKind{}}
	if l.kindsOK {
		group := gwv1.Group(GatewayGroup)
		s.SupportedKinds = []gwv1.RouteGroupKind{{Group: &group, Kind: "HTTPRoute"}}
	}
	if l.accepted {
		s.Conditions = append(s.Conditions, cond(string(gwv1.ListenerConditionAccepted), true, string(gwv1.ListenerReasonAccepted), "", gen))
	} else {
		s.Conditions = append(s.Conditions, cond(string(gwv1.ListenerConditionAccepted), false, l.reason, l.msg, gen))
	}
	if l.refsOK {
		s.Conditions = append(s.Conditions, cond(string(gwv1.ListenerConditionResolvedRefs), true, string(gwv1.ListenerReasonResolvedRefs), "", gen))
	} else {
		s.Conditions = append(s.Conditions, cond(string(gwv1.ListenerConditionResolvedRefs), false, l.refsWhy, l.refsMsg, gen))
	}
	if l.conflict != "" {
		s.Conditions = append(s.Conditions, cond(string(gwv1.ListenerConditionConflicted), true, l.conflict,
			fmt.Sprintf("another listener of a berth-router Gateway uses port %d differently", l.spec.Port), gen))
	} else {
		s.Conditions = append(s.Conditions, cond(string(gwv1.ListenerConditionConflicted), false, string(gwv1.ListenerReasonNoConflicts), "", gen))
	}
	if l.programmed() {
		s.Conditions = append(s.Conditions, cond(string(gwv1.ListenerConditionProgrammed), true, string(gwv1.ListenerReasonProgrammed),
			fmt.Sprintf("berth-router listens on port %d", l.spec.Port), gen))
	} else {
		msg := "not served: see the Accepted, ResolvedRefs and Conflicted conditions"
		if l.bindErr != nil {
			msg = fmt.Sprintf("port %d cannot be opened: %v", l.spec.Port, l.bindErr)
		}
		s.Conditions = append(s.Conditions, cond(string(gwv1.ListenerConditionProgrammed), false, string(gwv1.ListenerReasonInvalid), msg, gen))
	}
	return s
}

func checkListener(gw *gwv1.Gateway, spec *gwv1.Listener, in Input) *listenerState {
	l := &listenerState{gw: gw, spec: spec, accepted: true, refsOK: true, kindsOK: true}
	l.served = &Listener{Gateway: types.NamespacedName{Namespace: gw.Namespace, Name: gw.Name}, Name: string(spec.Name),
		HTTPS: spec.Protocol == gwv1.HTTPSProtocolType}
	if spec.Hostname != nil {
		l.served.Hostname = strings.ToLower(string(*spec.Hostname))
	}
	switch spec.Protocol {
	case gwv1.HTTPProtocolType, gwv1.HTTPSProtocolType:
	default:
		l.accepted, l.reason, l.msg = false, string(gwv1.ListenerReasonUnsupportedProtocol),
			fmt.Sprintf("protocol %s: berth-router serves HTTP and HTTPS", spec.Protocol)
		l.kindsOK = false
		return l
	}
	if ar := spec.AllowedRoutes; ar != nil {
		if ar.Namespaces != nil && ar.Namespaces.From != nil {
			switch *ar.Namespaces.From {
			case gwv1.NamespacesFromAll:
				l.fromAll = true
			case gwv1.NamespacesFromSelector:
				sel, err := namespaceSelector(ar.Namespaces.Selector)
				if err != nil {
					l.accepted, l.reason, l.msg = false, string(gwv1.ListenerReasonUnsupportedValue), "allowedRoutes.namespaces.selector: "+err.Error()
				}
				l.selector, l.nsLabels = sel, in.NamespaceLabels
			}
		}
		if len(ar.Kinds) > 0 {
			l.kindsOK = false
			var invalid []string
			for _, k := range ar.Kinds {
				switch {
				case k.Kind == "HTTPRoute" && (k.Group == nil || *k.Group == GatewayGroup):
					l.kindsOK = true
				case k.Kind == ModelRouteKind && k.Group != nil && string(*k.Group) == networkingv1alpha1.SchemeGroupVersion.Group:
				default:
					invalid = append(invalid, string(k.Kind))
				}
			}
			// Any kind the router cannot serve makes ResolvedRefs False (the valid ones stay
			// in supportedKinds), as the Gateway API prescribes (conformance test
			// GatewayInvalidRouteKind).
			if len(invalid) > 0 {
				l.refsOK, l.refsWhy, l.refsMsg = false, string(gwv1.ListenerReasonInvalidRouteKinds),
					fmt.Sprintf("allowedRoutes.kinds %s: berth-router serves HTTPRoute (and ModelRoute)", strings.Join(invalid, ", "))
			}
		}
	}
	if spec.Protocol == gwv1.HTTPSProtocolType {
		checkCertificate(l, in)
	}
	return l
}

// namespaceSelector is allowedRoutes.namespaces.selector as a labels.Selector; from:
// Selector without one selects nothing (the Gateway API requires it there).
func namespaceSelector(ls *metav1.LabelSelector) (labels.Selector, error) {
	if ls == nil {
		return labels.Nothing(), nil
	}
	return metav1.LabelSelectorAsSelector(ls)
}

func checkCertificate(l *listenerState, in Input) {
	t := l.spec.TLS
	switch {
	case t == nil || len(t.CertificateRefs) == 0:
		l.refsOK, l.refsWhy, l.refsMsg = false, string(gwv1.ListenerReasonInvalidCertificateRef), "an HTTPS listener needs tls.certificateRefs"
		return
	case t.Mode != nil && *t.Mode != gwv1.TLSModeTerminate:
		l.accepted, l.reason, l.msg = false, string(gwv1.ListenerReasonUnsupportedValue), "tls.mode: berth-router terminates TLS (Terminate)"
		return
	}
	ref := t.CertificateRefs[0]
	if (ref.Group != nil && *ref.Group != "") || (ref.Kind != nil && *ref.Kind != "Secret") {
		l.refsOK, l.refsWhy, l.refsMsg = false, string(gwv1.ListenerReasonInvalidCertificateRef), "tls.certificateRefs[0] must be a core Secret"
		return
	}
	key := types.NamespacedName{Namespace: l.gw.Namespace, Name: string(ref.Name)}
	if ref.Namespace != nil && string(*ref.Namespace) != l.gw.Namespace {
		key.Namespace = string(*ref.Namespace)
		if !granted(in.Grants, "Gateway", l.gw.Namespace, "", "Secret", key) {
			l.refsOK, l.refsWhy, l.refsMsg = false, string(gwv1.ListenerReasonRefNotPermitted),
				fmt.Sprintf("no ReferenceGrant in namespace %s lets Gateways of %s use Secret %s", key.Namespace, l.gw.Namespace, key.Name)
			return
		}
	}
	if in.Certificate == nil {
		l.refsOK, l.refsWhy, l.refsMsg = false, string(gwv1.ListenerReasonInvalidCertificateRef), "this berth-router reads no certificates"
		return
	}
	cert, err := in.Certificate(key)
	if err != nil {
		l.refsOK, l.refsWhy, l.refsMsg = false, string(gwv1.ListenerReasonInvalidCertificateRef), fmt.Sprintf("Secret %s: %v", key, err)
		return
	}
	l.cert = cert
}

// CertificateRefs are the Secrets the HTTPS listeners of gateways name (for the view to
// watch).
func CertificateRefs(gateways []*gwv1.Gateway) map[types.NamespacedName]bool {
	refs := map[types.NamespacedName]bool{}
	for _, gw := range gateways {
		for _, l := range gw.Spec.Listeners {
			if l.TLS == nil {
				continue
			}
			for _, r := range l.TLS.CertificateRefs {
				ns := gw.Namespace
				if r.Namespace != nil {
					ns = string(*r.Namespace)
				}
				refs[types.NamespacedName{Namespace: ns, Name: string(r.Name)}] = true
			}
		}
	}
	return refs
}

// markConflicts flags listeners sharing a port with another of a different protocol, or
// with another listener of the same Gateway with the same hostname. Listeners of different
// Gateways with the same protocol and hostname are merged, not in conflict: the Gateway API
// scopes Conflicted to one Gateway, and Gateways with no hostname on port 80 are the common
// case (Config.Route takes the best rule of all of them).
func markConflicts(all []*listenerState) {
	byPort := map[gwv1.PortNumber][]*listenerState{}
	for _, l := range all {
		if l.accepted {
			byPort[l.spec.Port] = append(byPort[l.spec.Port], l)
		}
	}
	for _, ls := range byPort {
		for i, a := range ls {
			for j, b := range ls {
				if i == j {
					continue
				}
				switch {
				case a.spec.Protocol != b.spec.Protocol:
					a.conflict = string(gwv1.ListenerReasonProtocolConflict)
				case a.gw == b.gw && a.served.Hostname == b.served.Hostname && a.conflict == "":
					a.conflict = string(gwv1.ListenerReasonHostnameConflict)
				}
			}
		}
	}
}

func parentGateway(routeNS string, ref gwv1.ParentReference) (types.NamespacedName, bool) {
	if (ref.Group != nil && *ref.Group != GatewayGroup) || (ref.Kind != nil && *ref.Kind != "Gateway") {
		return types.NamespacedName{}, false
	}
	ns := routeNS
	if ref.Namespace != nil {
		ns = string(*ref.Namespace)
	}
	return types.NamespacedName{Namespace: ns, Name: string(ref.Name)}, true
}

// attach decides whether a route binds to the listeners ref selects, and attaches its rules
// to those it binds to.
func attach(hr *gwv1.HTTPRoute, ref gwv1.ParentReference, listeners []*listenerState, rules []*Rule, filtersErr string) (bool, string, string) {
	var named []*listenerState
	for _, l := range listeners {
		if (ref.SectionName == nil || *ref.SectionName == l.spec.Name) && (ref.Port == nil || *ref.Port == l.spec.Port) {
			named = append(named, l)
		}
	}
	if len(named) == 0 {
		return false, string(gwv1.RouteReasonNoMatchingParent), "the Gateway has no listener with this sectionName/port"
	}
	if filtersErr != "" {
		return false, string(gwv1.RouteReasonUnsupportedValue), filtersErr
	}
	var allowed, bound []*listenerState
	for _, l := range named {
		if l.accepted && l.kindsOK && l.admits(hr.Namespace) {
			allowed = append(allowed, l)
		}
	}
	if len(allowed) == 0 {
		return false, string(gwv1.RouteReasonNotAllowedByListeners), "no listener the parentRef names is valid and admits HTTPRoutes from namespace " + hr.Namespace
	}
	for _, l := range allowed {
		ok := len(hr.Spec.Hostnames) == 0
		for _, h := range hr.Spec.Hostnames {
			if hostnamesIntersect(l.served.Hostname, strings.ToLower(string(h))) {
				ok = true
			}
		}
		if ok {
			bound = append(bound, l)
		}
	}
	if len(bound) == 0 {
		return false, string(gwv1.RouteReasonNoMatchingListenerHostname), "no listener's hostname matches spec.hostnames"
	}
	for _, l := range bound {
		l.attached++
		l.served.Rules = append(l.served.Rules, rules...)
	}
	return true, string(gwv1.RouteReasonAccepted), "accepted by berth-router"
}

type refsResult struct {
	ok          bool
	reason, msg string
}

// compileRoute turns a route's rules into Rules. filtersErr names the first filter the
// router does not implement (the route is then not accepted anywhere).
func compileRoute(hr *gwv1.HTTPRoute, in Input, pools map[types.NamespacedName]*infv1.InferencePool) ([]*Rule, refsResult, string) {
	refs := refsResult{ok: true, reason: string(gwv1.RouteReasonResolvedRefs), msg: "every backendRef resolves"}
	var problems []string
	fail := func(reason, msg string) {
		if refs.ok {
			refs.ok, refs.reason = false, reason
		}
		problems = append(problems, msg)
	}
	var hostnames []string
	for _, h := range hr.Spec.Hostnames {
		hostnames = append(hostnames, strings.ToLower(string(h)))
	}
	var out []*Rule
	filtersErr := ""
	key := types.NamespacedName{Namespace: hr.Namespace, Name: hr.Name}
	for i, ru := range hr.Spec.Rules {
		filters, err := compileFilters(ru.Filters, fmt.Sprintf("spec.rules[%d].filters", i))
		if err != "" && filtersErr == "" {
			filtersErr = err
		}
		var backends []Backend
		for j, br := range ru.BackendRefs {
			b, why, msg := resolveBackend(hr, br.BackendRef, in, pools)
			if why != "" {
				b.Invalid = fmt.Sprintf("spec.rules[%d].backendRefs[%d]: %s", i, j, msg)
				fail(why, b.Invalid)
			}
			bf, err := compileFilters(br.Filters, fmt.Sprintf("spec.rules[%d].backendRefs[%d].filters", i, j))
			if err != "" && filtersErr == "" {
				filtersErr = err
			}
			b.Filters = bf
			backends = append(backends, b)
		}
		name := ""
		if ru.Name != nil {
			name = string(*ru.Name)
		}
		base := Rule{Route: key, Index: i, Name: name, Hostnames: hostnames, Filters: filters, Backends: backends, created: hr.CreationTimestamp.Time}
		if ru.Timeouts != nil && ru.Timeouts.Request != nil {
			if d, err := time.ParseDuration(string(*ru.Timeouts.Request)); err == nil {
				base.Timeout = d
			}
		}
		matches := ru.Matches
		if len(matches) == 0 {
			matches = []gwv1.HTTPRouteMatch{{}}
		}
		for _, m := range matches {
			cm, err := compileMatch(m)
			if err != nil {
				fail(string(gwv1.RouteReasonUnsupportedValue), fmt.Sprintf("spec.rules[%d].matches: %v", i, err))
				continue
			}
			r := base
			r.Match = cm
			out = append(out, &r)
		}
	}
	if !refs.ok {
		refs.msg = strings.Join(problems, "; ")
	}
	return out, refs, filtersErr
}

func compileFilters(fs []gwv1.HTTPRouteFilter, field string) (Filters, string) {
	var f Filters
	for k, x := range fs {
		switch x.Type {
		case gwv1.HTTPRouteFilterRequestHeaderModifier:
			if x.RequestHeaderModifier != nil {
				f.RequestHeaders = &HeaderChange{Set: x.RequestHeaderModifier.Set, Add: x.RequestHeaderModifier.Add, Remove: x.RequestHeaderModifier.Remove}
			}
		case gwv1.HTTPRouteFilterResponseHeaderModifier:
			if x.ResponseHeaderModifier != nil {
				f.ResponseHeaders = &HeaderChange{Set: x.ResponseHeaderModifier.Set, Add: x.ResponseHeaderModifier.Add, Remove: x.ResponseHeaderModifier.Remove}
			}
		case gwv1.HTTPRouteFilterURLRewrite:
			f.Rewrite = x.URLRewrite
		default:
			return f, fmt.Sprintf("%s[%d].type: berth-router does not implement %s (it implements RequestHeaderModifier, ResponseHeaderModifier and URLRewrite)", field, k, x.Type)
		}
	}
	return f, ""
}

func compileMatch(m gwv1.HTTPRouteMatch) (Match, error) {
	out := Match{PathType: gwv1.PathMatchPathPrefix, Path: "/"}
	if p := m.Path; p != nil {
		if p.Type != nil {
			out.PathType = *p.Type
		}
		if p.Value != nil {
			out.Path = *p.Value
		}
		if out.PathType == gwv1.PathMatchRegularExpression {
			re, err := regexp.Compile("^(?:" + out.Path + ")$")
			if err != nil {
				return out, fmt.Errorf("path regex %q: %w", out.Path, err)
			}
			out.pathRE = re
		}
	}
	if m.Method != nil {
		out.Method = string(*m.Method)
	}
	for _, h := range m.Headers {
		vm := valueMatch{name: http.CanonicalHeaderKey(string(h.Name)), exact: h.Value}
		if h.Type != nil && *h.Type == gwv1.HeaderMatchRegularExpression {
			re, err := regexp.Compile(h.Value)
			if err != nil {
				return out, fmt.Errorf("header %s regex %q: %w", h.Name, h.Value, err)
			}
			vm.re = re
		}
		out.Headers = append(out.Headers, vm)
	}
	for _, q := range m.QueryParams {
		vm := valueMatch{name: string(q.Name), exact: q.Value}
		if q.Type != nil && *q.Type == gwv1.QueryParamMatchRegularExpression {
			re, err := regexp.Compile(q.Value)
			if err != nil {
				return out, fmt.Errorf("query parameter %s regex %q: %w", q.Name, q.Value, err)
			}
			vm.re = re
		}
		out.Query = append(out.Query, vm)
	}
	return out, nil
}

func resolveBackend(hr *gwv1.HTTPRoute, br gwv1.BackendRef, in Input, pools map[types.NamespacedName]*infv1.InferencePool) (Backend, string, string) {
	group, kind := "", ServiceKind
	if br.Group != nil {
		group = string(*br.Group)
	}
	if br.Kind != nil {
		kind = string(*br.Kind)
	}
	b := Backend{NamespacedName: types.NamespacedName{Namespace: hr.Namespace, Name: string(br.Name)}, Weight: 1}
	if br.Weight != nil {
		b.Weight = *br.Weight
	}
	if br.Namespace != nil {
		b.Namespace = string(*br.Namespace)
	}
	switch {
	case group == "" && kind == ServiceKind:
		b.Kind = ServiceBackend
	case group == infv1.GroupName && kind == InferenceKind:
		b.Kind = PoolBackend
	default:
		return b, string(gwv1.RouteReasonInvalidKind), fmt.Sprintf("kind %s of group %q: berth-router sends to Services and %s InferencePools", kind, group, infv1.GroupName)
	}
	if b.Namespace != hr.Namespace && !granted(in.Grants, "HTTPRoute", hr.Namespace, group, kind, b.NamespacedName) {
		return b, string(gwv1.RouteReasonRefNotPermitted), fmt.Sprintf("no ReferenceGrant in namespace %s lets HTTPRoutes of %s send to %s %s", b.Namespace, hr.Namespace, kind, b.Name)
	}
	if b.Kind == PoolBackend {
		if pools[b.NamespacedName] == nil {
			return b, string(gwv1.RouteReasonBackendNotFound), fmt.Sprintf("InferencePool %s does not exist", b.NamespacedName)
		}
		return b, "", ""
	}
	if br.Port == nil {
		return b, string(gwv1.RouteReasonUnsupportedValue), fmt.Sprintf("Service %s needs a port", b.NamespacedName)
	}
	b.Port = int32(*br.Port)
	svc := in.Services[b.NamespacedName]
	if svc == nil {
		return b, string(gwv1.RouteReasonBackendNotFound), fmt.Sprintf("Service %s does not exist", b.NamespacedName)
	}
	for _, p := range svc.Spec.Ports {
		if p.Port == b.Port {
			return b, "", ""
		}
	}
	return b, string(gwv1.RouteReasonBackendNotFound), fmt.Sprintf("Service %s has no port %d", b.NamespacedName, b.Port)
}

// granted reports whether a ReferenceGrant in to's namespace lets fromKind objects of
// fromNS refer to the (group, kind) object to.
func granted(grants []*gwv1.ReferenceGrant, fromKind, fromNS, group, kind string, to types.NamespacedName) bool {
	for _, g := range grants {
		if g.Namespace != to.Namespace {
			continue
		}
		from := false
		for _, f := range g.Spec.From {
			if string(f.Group) == GatewayGroup && string(f.Kind) == fromKind && string(f.Namespace) == fromNS {
				from = true
			}
		}
		if !from {
			continue
		}
		for _, t := range g.Spec.To {
			if string(t.Group) == group && string(t.Kind) == kind && (t.Name == nil || string(*t.Name) == to.Name) {
				return true
			}
		}
	}
	return false
}

// sortRules orders a listener's rules by the Gateway API's precedence: an Exact path before
// a prefix, longer prefixes first, then a method match, more header matches, more query
// matches; ties go to the older route, then by namespace/name, then by rule order.
func sortRules(rules []*Rule) {
	sort.SliceStable(rules, func(i, j int) bool { return ruleBefore(rules[i], rules[j]) })
}

// ruleBefore is the Gateway API's precedence: a before b when a is to be tried first.
func ruleBefore(a, b *Rule) bool {
	rank := func(m *Match) int {
		switch m.PathType {
		case gwv1.PathMatchExact:
			return 2
		case gwv1.PathMatchPathPrefix:
			return 1
		}
		return 0
	}
	if ra, rb := rank(&a.Match), rank(&b.Match); ra != rb {
		return ra > rb
	}
	if a.Match.PathType != gwv1.PathMatchRegularExpression && len(a.Match.Path) != len(b.Match.Path) {
		return len(a.Match.Path) > len(b.Match.Path)
	}
	if (a.Match.Method != "") != (b.Match.Method != "") {
		return a.Match.Method != ""
	}
	if len(a.Match.Headers) != len(b.Match.Headers) {
		return len(a.Match.Headers) > len(b.Match.Headers)
	}
	if len(a.Match.Query) != len(b.Match.Query) {
		return len(a.Match.Query) > len(b.Match.Query)
	}
	if !a.created.Equal(b.created) {
		return a.created.Before(b.created)
	}
	if a.Route != b.Route {
		return a.Route.String() < b.Route.String()
	}
	return a.Index < b.Index
}

// sortedObjects orders objects oldest first, then by namespace/name: the order conflicts
// are settled in, the same on every router replica.
func sortedObjects[T metav1.Object](objs []T) []T {
	out := append([]T(nil), objs...)
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
		if !ta.Equal(&tb) {
			return ta.Before(&tb)
		}
		if a.GetNamespace() != b.GetNamespace() {
			return a.GetNamespace() < b.GetNamespace()
		}
		return a.GetName() < b.GetName()
	})
	return out
}

// ModelRouteKind is how a listener's allowedRoutes.kinds admits ModelRoutes.
const ModelRouteKind = "ModelRoute"

// attachModelRoutes attaches every ModelRoute with parentRefs to the listeners of our
// Gateways its parentRefs select, where the listener admits routes of its namespace (and,
// when allowedRoutes.kinds is set, names ModelRoute).
func attachModelRoutes(routes []*networkingv1alpha1.ModelRoute, ours map[types.NamespacedName]*gwv1.Gateway, byGateway map[types.NamespacedName][]*listenerState) {
	for _, mr := range sortedObjects(routes) {
		for _, ref := range mr.Spec.ParentRefs {
			gkey, isGateway := parentGateway(mr.Namespace, ref)
			if !isGateway || ours[gkey] == nil {
				continue
			}
			for _, l := range byGateway[gkey] {
				if (ref.SectionName != nil && *ref.SectionName != l.spec.Name) || (ref.Port != nil && *ref.Port != l.spec.Port) {
					continue
				}
				if !l.accepted || !l.admits(mr.Namespace) || !admitsModelRoutes(l.spec) {
					continue
				}
				if !slices.Contains(l.served.modelRoutes, mr) {
					l.served.modelRoutes = append(l.served.modelRoutes, mr)
					l.attached++
				}
			}
		}
	}
}

func admitsModelRoutes(l *gwv1.Listener) bool {
	if l.AllowedRoutes == nil || len(l.AllowedRoutes.Kinds) == 0 {
		return true
	}
	for _, k := range l.AllowedRoutes.Kinds {
		if k.Kind == ModelRouteKind && k.Group != nil && string(*k.Group) == networkingv1alpha1.SchemeGroupVersion.Group {
			return true
		}
	}
	return false
}
