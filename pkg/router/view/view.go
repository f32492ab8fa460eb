// Package view is berth-router's informer-backed picture of the cluster: the compiled
// ModelRoutes, every ModelServer with the Ready pods it selects as endpoints, and every
// ExternalModelProvider with its credential (package credentials watches the Secrets).
// Watch events only mark the picture stale; one goroutine rebuilds it and publishes an
// immutable Snapshot, so request handling never locks and never sees half an update.
package view

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	infv1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	topologyv1alpha1 "volcano.sh/apis/pkg/apis/topology/v1alpha1"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/fabric"
	"github.com/berth-sh/berth/pkg/router/credentials"
	"github.com/berth-sh/berth/pkg/router/gateway"
	"github.com/berth-sh/berth/pkg/router/match"
)

// Role is an endpoint's part in prefill/decode disaggregation.
type Role string

const (
	Whole   Role = ""        // serves whole requests
	Prefill Role = "prefill" // pdGroup.prefillLabels
	Decode  Role = "decode"  // pdGroup.decodeLabels
)

// DefaultPort is used when a ModelServer has no workloadPort and the pod declares no
// container port: vLLM's and most engines' default.
const DefaultPort = 8000

// Endpoint is one Ready pod serving a ModelServer.
type Endpoint struct {
	Namespace, Pod string
	// Address is ip:port; it also identifies the endpoint in the router's state, because a
	// pod recreated under the same name gets a new IP and must not inherit the old one's.
	Address string
	Scheme  string // http or https
	Role    Role
	// Group is the pod's value of pdGroup.groupKey: prefill and decode endpoints pair only
	// within one group.
	Group string
	// Node is the node the pod runs on: where it sits in the fabric.
	Node string
	// ModelServing is the pod's modelserving.volcano.sh/name label ("" for a pod no
	// ModelServing runs); DeletionCost its controller.kubernetes.io/pod-deletion-cost
	// annotation now ("" without one). The router publishes that cost (deletioncost.go).
	ModelServing, DeletionCost string
	// Revision is what a PD endpoint was built from (Pairable), from the labels and
	// annotation berth-controller puts on a ModelServing's pods; zero for other pods.
	Revision Revision
}

// Revision is the ModelServing revision a pod was created under and what that revision's
// roles were, so that the router pairs a prefill with a decode of the same version.
type Revision struct {
	// Name is the pod's workloadv1alpha1.RevisionLabel ("": the pod is unconstrained).
	Name string
	// Role and Template are its role (RoleLabel) and role template hash
	// (RoleTemplateHashLabel).
	Role, Template string
	// Roles is the role template hash of every role of the revision, by role name
	// (RevisionRolesAnnotation); nil on pods created before the controller wrote it.
	Roles map[string]string
}

// CrossRevisionAnnotation "allow" on a PD ModelServer lets its router pair a prefill and a
// decode endpoint of different ModelServing revisions (the user says their KV caches are
// compatible); without it they pair only within one revision (Pairable).
const CrossRevisionAnnotation = "networking.berth.sh/pd-cross-revision"

// Pairing is how a prefill and a decode endpoint's revisions relate (Server.Pairing).
type Pairing string

const (
	// SameRevision: both were created under one revision (or either carries none).
	SameRevision Pairing = "same"
	// CompatibleRevision: different revisions, but one of them has both endpoints' role
	// templates: a RoleRollingUpdate replaced one role and left the other as it is.
	CompatibleRevision Pairing = "compatible"
	// CrossRevision: versions one revision never had together; only with
	// CrossRevisionAnnotation.
	CrossRevision Pairing = "cross"
)

// Pairing says how the revisions of prefill p and decode d relate, and whether the server
// lets them serve a request together: a prefill hands its KV cache only to a decode of the
// same version, unless the ModelServer allows crossing revisions.
func (s *Server) Pairing(p, d *Endpoint) (Pairing, bool) {
	a, b := &p.Revision, &d.Revision
	switch {
	case a.Name == "" || b.Name == "" || a.Name == b.Name:
		return SameRevision, true
	case a.Template != "" && b.Template != "" &&
		(a.Roles[b.Role] == b.Template || b.Roles[a.Role] == a.Template):
		return CompatibleRevision, true
	}
	return CrossRevision, s.CrossRevision
}

// Pairable says whether prefill p and decode d may serve a request together: one PD group,
// and one revision unless the server allows crossing them (Pairing).
func (s *Server) Pairable(p, d *Endpoint) bool {
	if p.Group != d.Group {
		return false
	}
	_, ok := s.Pairing(p, d)
	return ok
}

// URL is the endpoint's base URL.
func (e *Endpoint) URL() string { return e.Scheme + "://" + e.Address }

// Name is namespace/pod, for logs and metrics.
func (e *Endpoint) Name() string { return e.Namespace + "/" + e.Pod }

// Policy is a target's trafficPolicy.
type Policy struct {
	Timeout       time.Duration // 0: none
	RetryAttempts int
	RetryInterval time.Duration
}

func policyOf(tp *networkingv1alpha1.TrafficPolicy) Policy {
	p := Policy{RetryInterval: DefaultRetryInterval}
	if tp == nil {
		return p
	}
	if tp.Timeout != nil {
		p.Timeout = tp.Timeout.Duration
	}
	if r := tp.Retry; r != nil {
		p.RetryAttempts = int(r.Attempts)
		if r.RetryInterval != nil {
			p.RetryInterval = r.RetryInterval.Duration
		}
	}
	return p
}

// Server is a ModelServer resolved to its endpoints; an InferencePool or a Service port a
// Gateway API route sends to is one too (Kind says which), picked from the same way.
type Server struct {
	// Kind is "" for a ModelServer, else InferencePool or Service.
	Kind            string
	Namespace, Name string
	Engine          networkingv1alpha1.InferenceEngine
	// Model is spec.model: the name the engines serve, written into requests ("" keeps the
	// request's model).
	Model string
	Policy
	// Connector is the KV connector of a PD server ("" when not disaggregated).
	Connector networkingv1alpha1.KVConnectorType
	// CrossRevision is true when the ModelServer's CrossRevisionAnnotation is "allow".
	CrossRevision bool
	// Endpoints serve whole requests; a PD server has Prefill and Decode instead.
	Endpoints       []*Endpoint
	Prefill, Decode []*Endpoint
	// Workload is the ModelServing the server's workloadSelector names (by its
	// modelserving.volcano.sh/name label), nil when it names none, that ModelServing does not
	// exist, or the view does not read ModelServings (EnableWorkloads).
	Workload *Workload
	// Fabric is the network the endpoints' nodes sit in (nil unless the view reads it,
	// EnableFabric): a prefill endpoint hands its KV to a decode endpoint near it.
	Fabric *fabric.Fabric
}

// Workload is what the router knows of a ModelServing to bring it up from zero.
type Workload struct {
	Namespace, Name string
	// Replicas is its spec.replicas (1 when unset).
	Replicas int32
	// Demand is the time in its DemandAnnotation (zero without one, or unreadable).
	Demand time.Time
}

func (w *Workload) String() string { return "ModelServing " + w.Namespace + "/" + w.Name }

// Disaggregated reports whether requests need a prefill and a decode endpoint.
func (s *Server) Disaggregated() bool { return s.Connector != "" }

// DefaultRetryInterval is seed 001's default retryInterval.
const DefaultRetryInterval = 100 * time.Millisecond

// Provider is an ExternalModelProvider with its credential.
type Provider struct {
	Namespace, Name string
	Type            networkingv1alpha1.ExternalProviderType
	// Model is spec.model ("" keeps the request's model).
	Model              string
	BaseURL            *url.URL
	InsecureSkipVerify bool
	// AuthScheme is how Credential is sent ("" when the provider has no auth).
	AuthScheme networkingv1alpha1.ProviderAuthScheme
	Credential string
	Headers    map[string]string
	Policy
	// Err says why the provider cannot be used now (its credential is missing, its
	// baseURL does not parse); nil when it can.
	Err error
}

// String describes a provider for logs and errors.
func (p *Provider) String() string {
	return fmt.Sprintf("ExternalModelProvider %s/%s", p.Namespace, p.Name)
}

// Snapshot is one consistent picture. Never modified once published.
type Snapshot struct {
	Routes      *match.Table
	RouteErrors []error
	Servers     map[types.NamespacedName]*Server
	Providers   map[types.NamespacedName]*Provider
	// Endpoints is every endpoint of every server, by address.
	Endpoints map[string]*Endpoint

	// Gateway is what the Gateway API objects compile to (empty without them), Backends
	// the InferencePools and Service ports their routes send to, GatewayStatus the
	// conditions they get (nil without them).
	Gateway       *gateway.Config
	Backends      map[gateway.BackendKey]*Server
	GatewayStatus *gateway.Status
}

// Backend returns the endpoints of a route's backend, or nil.
func (s *Snapshot) Backend(b gateway.Backend) *Server {
	return s.Backends[b.Key()]
}

// Server returns the named ModelServer, or nil.
func (s *Snapshot) Server(namespace, name string) *Server {
	return s.Servers[types.NamespacedName{Namespace: namespace, Name: name}]
}

// Provider returns the named ExternalModelProvider, or nil.
func (s *Snapshot) Provider(namespace, name string) *Provider {
	return s.Providers[types.NamespacedName{Namespace: namespace, Name: name}]
}

// Serving is true when the target exists and can take a request: a ModelServer with a
// Ready endpoint for a whole request (for a PD server: a prefill and a decode endpoint), a
// provider whose credential is loaded.
func (s *Snapshot) Serving(namespace string, t match.Target) bool {
	if t.Kind == match.Provider {
		p := s.Provider(namespace, t.Name)
		return p != nil && p.Err == nil
	}
	srv := s.Server(namespace, t.Name)
	if srv == nil {
		return false
	}
	return len(srv.Endpoints) > 0 || (len(srv.Prefill) > 0 && len(srv.Decode) > 0)
}

// View keeps the Snapshot current.
type View struct {
	cache cache.Cache
	// providers is false when the apiserver does not serve ExternalModelProviders (Kthena
	// v1.0's CRDs): routes naming one then find none.
	providers bool
	creds     *credentials.Store
	log       logr.Logger
	current   atomic.Pointer[Snapshot]
	stale     chan struct{}
	synced    atomic.Bool
	mu        sync.Mutex
	watchers  []func(*Snapshot)
	// routesKey identifies the ModelRoutes (name and resourceVersion of each) the current
	// table was compiled from. Pod events are by far the most frequent; they reuse the
	// table instead of compiling every rule's regexes again. Used by the Run goroutine only.
	routesKey string
	// gw is set by EnableGateway: the view then reads the Gateway API objects too.
	gw *gatewaySource
	// workloads is set by EnableWorkloads: the view then reads ModelServings (their replicas
	// and demand annotation only) for scale from zero.
	workloads bool
	// fabric is set by EnableFabric (fabric.go).
	fabric *fabricSource
}

// EnableWorkloads makes the view read ModelServings, so a Server knows its Workload. Call
// before Run.
func (v *View) EnableWorkloads() { v.workloads = true }

// Scheme knows the kinds the view reads.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := networkingv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := workloadv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := gwv1.Install(s); err != nil {
		panic(err)
	}
	if err := infv1.Install(s); err != nil {
		panic(err)
	}
	if err := topologyv1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}

// New creates a view over the cluster cfg points at. Call Run. With providers false it
// does not read ExternalModelProviders (the apiserver does not serve them).
func New(cfg *rest.Config, providers bool, log logr.Logger) (*View, error) {
	c, err := cache.New(cfg, cache.Options{
		Scheme: Scheme(),
		// The router needs labels, status and ports; managed fields are the bulk of a pod
		// object and never read.
		DefaultTransform: cache.TransformStripManagedFields(),
		// Of a ModelServing (two pod templates per role) the router needs its name,
		// annotations and replicas only: keep no more in memory.
		ByObject: map[client.Object]cache.ByObject{&workloadv1alpha1.ModelServing{}: {Transform: slimModelServing},
			// Of a Node, where it sits: its labels (fabric.go).
			&corev1.Node{}: {Transform: slimNode}},
	})
	if err != nil {
		return nil, err
	}
	v := &View{cache: c, log: log, stale: make(chan struct{}, 1), providers: providers}
	if providers {
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		v.creds = credentials.New(kube, log.WithName("credentials"), v.markStale)
	}
	v.current.Store(&Snapshot{Routes: mustTable(nil), Servers: map[types.NamespacedName]*Server{},
		Providers: map[types.NamespacedName]*Provider{}, Endpoints: map[string]*Endpoint{},
		Gateway: gateway.Empty(), Backends: map[gateway.BackendKey]*Server{}})
	return v, nil
}

func mustTable(routes []*networkingv1alpha1.ModelRoute) *match.Table {
	t, _ := match.NewTable(routes)
	return t
}

// Snapshot is the current picture.
func (v *View) Snapshot() *Snapshot { return v.current.Load() }

// Synced reports whether the first full picture has been published.
func (v *View) Synced() bool { return v.synced.Load() }

// OnChange registers f to be called with every new snapshot (from the view's goroutine).
func (v *View) OnChange(f func(*Snapshot)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.watchers = append(v.watchers, f)
}

// Run starts the informers and rebuilds the snapshot on every change until ctx ends.
func (v *View) Run(ctx context.Context) error {
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { v.markStale() },
		UpdateFunc: func(_, _ any) { v.markStale() },
		DeleteFunc: func(any) { v.markStale() },
	}
	objs := []client.Object{&networkingv1alpha1.ModelRoute{}, &networkingv1alpha1.ModelServer{}, &corev1.Pod{}}
	if v.providers {
		objs = append(objs, &networkingv1alpha1.ExternalModelProvider{})
		defer v.creds.Stop()
	}
	if v.workloads {
		objs = append(objs, &workloadv1alpha1.ModelServing{})
	}
	if v.gw != nil {
		objs = append(objs, gatewayObjects()...)
		defer v.gw.certs.Stop()
	}
	for _, obj := range objs {
		inf, err := v.cache.GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
	}
	if v.fabric != nil {
		if err := v.watchFabric(ctx); err != nil {
			return err
		}
	}
	errc := make(chan error, 1)
	go func() { errc <- v.cache.Start(ctx) }()
	if !v.cache.WaitForCacheSync(ctx) {
		select {
		case err := <-errc:
			return err
		default:
			return ctx.Err()
		}
	}
	v.rebuild(ctx)
	v.synced.Store(true)
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return err
		case <-v.stale:
			v.rebuild(ctx)
		}
	}
}

func (v *View) markStale() {
	select {
	case v.stale <- struct{}{}:
	default:
	}
}

func (v *View) rebuild(ctx context.Context) {
	snap, routesChanged, err := v.build(ctx)
	if err != nil {
		v.log.Error(err, "rebuilding the routing view; keeping the previous one")
		return
	}
	if routesChanged {
		for _, e := range snap.RouteErrors {
			v.log.Info("ModelRoute ignored", "reason", e.Error())
		}
	}
	v.current.Store(snap)
	v.mu.Lock()
	watchers := append([](func(*Snapshot)){}, v.watchers...)
	v.mu.Unlock()
	for _, f := range watchers {
		f(snap)
	}
}

func (v *View) build(ctx context.Context) (_ *Snapshot, routesChanged bool, _ error) {
	var routes networkingv1alpha1.ModelRouteList
	if err := v.cache.List(ctx, &routes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, false, err
	}
	var servers networkingv1alpha1.ModelServerList
	if err := v.cache.List(ctx, &servers, client.UnsafeDisableDeepCopy); err != nil {
		return nil, false, err
	}
	podsByNS := map[string][]*corev1.Pod{}
	snap := &Snapshot{Servers: map[types.NamespacedName]*Server{}, Providers: map[types.NamespacedName]*Provider{}, Endpoints: map[string]*Endpoint{}}
	if v.providers {
		var providers networkingv1alpha1.ExternalModelProviderList
		if err := v.cache.List(ctx, &providers, client.UnsafeDisableDeepCopy); err != nil {
			return nil, false, err
		}
		refs := map[types.NamespacedName]bool{}
		for i := range providers.Items {
			if ref, ok := SecretOf(&providers.Items[i]); ok {
				refs[ref] = true
			}
		}
		v.creds.Sync(refs)
		for i := range providers.Items {
			p := &providers.Items[i]
			snap.Providers[types.NamespacedName{Namespace: p.Namespace, Name: p.Name}] = ResolveProvider(p, v.creds.Get)
		}
	}
	// A route with parentRefs is served on its Gateways' listeners only (buildGateway).
	ptrs := make([]*networkingv1alpha1.ModelRoute, 0, len(routes.Items))
	keys := make([]string, len(routes.Items))
	var bound []*networkingv1alpha1.ModelRoute
	for i := range routes.Items {
		mr := &routes.Items[i]
		keys[i] = mr.Namespace + "/" + mr.Name + "@" + mr.ResourceVersion
		if len(mr.Spec.ParentRefs) > 0 {
			bound = append(bound, mr)
			continue
		}
		ptrs = append(ptrs, mr)
	}
	sort.Strings(keys)
	if key := strings.Join(keys, ","); key != v.routesKey || !v.synced.Load() {
		snap.Routes, snap.RouteErrors = match.NewTable(ptrs)
		v.routesKey, routesChanged = key, true
	} else {
		prev := v.current.Load()
		snap.Routes, snap.RouteErrors = prev.Routes, prev.RouteErrors
	}
	podsIn := func(ns string) ([]*corev1.Pod, error) {
		pods, ok := podsByNS[ns]
		if !ok {
			var list corev1.PodList
			if err := v.cache.List(ctx, &list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
				return nil, err
			}
			for j := range list.Items {
				pods = append(pods, &list.Items[j])
			}
			podsByNS[ns] = pods
		}
		return pods, nil
	}
	snap.Gateway, snap.Backends = gateway.Empty(), map[gateway.BackendKey]*Server{}
	if v.gw != nil {
		if err := v.buildGateway(ctx, snap, podsIn, bound); err != nil {
			return nil, false, err
		}
	}
	var fab *fabric.Fabric
	if v.fabric != nil {
		f, err := v.currentFabric(ctx)
		if err != nil {
			return nil, false, err
		}
		fab = f
	}
	for i := range servers.Items {
		ms := &servers.Items[i]
		pods, err := podsIn(ms.Namespace)
		if err != nil {
			return nil, false, err
		}
		s := Resolve(ms, pods)
		s.Fabric = fab
		if v.workloads {
			if s.Workload, err = v.workloadOf(ctx, ms); err != nil {
				return nil, false, err
			}
		}
		snap.Servers[types.NamespacedName{Namespace: ms.Namespace, Name: ms.Name}] = s
		for _, list := range [][]*Endpoint{s.Endpoints, s.Prefill, s.Decode} {
			for _, e := range list {
				snap.Endpoints[e.Address] = e
			}
		}
	}
	return snap, routesChanged, nil
}

// Resolve turns a ModelServer and its namespace's pods into a Server. Only Ready pods with
// an IP that are not terminating become endpoints: a terminating pod takes no new request,
// so none is lost to a pod being deleted.
func Resolve(ms *networkingv1alpha1.ModelServer, pods []*corev1.Pod) *Server {
	s := &Server{Namespace: ms.Namespace, Name: ms.Name, Engine: ms.Spec.InferenceEngine, Policy: policyOf(ms.Spec.TrafficPolicy)}
	if ms.Spec.Model != nil {
		s.Model = *ms.Spec.Model
	}
	sel := ms.Spec.WorkloadSelector
	if sel == nil {
		return s
	}
	var pd *networkingv1alpha1.PDGroup
	if sel.PDGroup != nil {
		pd = sel.PDGroup
		s.Connector = networkingv1alpha1.ConnectorTypeHTTP
		s.CrossRevision = ms.Annotations[CrossRevisionAnnotation] == "allow"
		if ms.Spec.KVConnector != nil && ms.Spec.KVConnector.Type != "" {
			s.Connector = ms.Spec.KVConnector.Type
		}
	}
	base := labels.SelectorFromSet(sel.MatchLabels)
	var prefillSel, decodeSel labels.Selector // nil: that role is not selected
	if pd != nil && len(pd.PrefillLabels) > 0 {
		prefillSel = labels.SelectorFromSet(pd.PrefillLabels)
	}
	if pd != nil && len(pd.DecodeLabels) > 0 {
		decodeSel = labels.SelectorFromSet(pd.DecodeLabels)
	}
	scheme := "http"
	var port int32
	if wp := ms.Spec.WorkloadPort; wp != nil {
		port = wp.Port
		if wp.Protocol == "https" {
			scheme = "https"
		}
	}
	for _, p := range pods {
		if !base.Matches(labels.Set(p.Labels)) || !servable(p) {
			continue
		}
		e := &Endpoint{Namespace: p.Namespace, Pod: p.Name, Scheme: scheme, Node: p.Spec.NodeName,
			ModelServing: p.Labels[workloadv1alpha1.ModelServingNameLabel], DeletionCost: p.Annotations[corev1.PodDeletionCost]}
		e.Address = net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(portOf(p, port))))
		if pd == nil {
			s.Endpoints = append(s.Endpoints, e)
			continue
		}
		value, ok := p.Labels[pd.GroupKey]
		if !ok {
			continue // an instance outside every PD group can pair with nothing
		}
		e.Group = value
		e.Revision = revisionOf(p)
		switch {
		case prefillSel != nil && prefillSel.Matches(labels.Set(p.Labels)):
			e.Role = Prefill
			s.Prefill = append(s.Prefill, e)
		case decodeSel != nil && decodeSel.Matches(labels.Set(p.Labels)):
			e.Role = Decode
			s.Decode = append(s.Decode, e)
		}
	}
	for _, list := range [][]*Endpoint{s.Endpoints, s.Prefill, s.Decode} {
		sort.Slice(list, func(i, j int) bool { return list[i].Address < list[j].Address })
	}
	return s
}

// revisionOf reads what berth-controller wrote on a ModelServing's pod about its revision.
func revisionOf(p *corev1.Pod) Revision {
	r := Revision{Name: p.Labels[workloadv1alpha1.RevisionLabel], Role: p.Labels[workloadv1alpha1.RoleLabel],
		Template: p.Labels[workloadv1alpha1.RoleTemplateHashLabel]}
	if r.Name == "" {
		return Revision{}
	}
	if v := p.Annotations[workloadv1alpha1.RevisionRolesAnnotation]; v != "" {
		r.Roles = map[string]string{}
		for _, kv := range strings.Split(v, ",") {
			if role, hash, ok := strings.Cut(kv, "="); ok {
				r.Roles[role] = hash
			}
		}
	}
	return r
}

func servable(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.PodIP == "" || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// portOf is the ModelServer's workloadPort, else the pod's first declared container port,
// else DefaultPort.
func portOf(p *corev1.Pod, port int32) int32 {
	if port > 0 {
		return port
	}
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.ContainerPort > 0 && (cp.Protocol == "" || cp.Protocol == corev1.ProtocolTCP) {
				return cp.ContainerPort
			}
		}
	}
	return DefaultPort
}

// String describes a server for logs and errors.
func (s *Server) String() string {
	if s.Kind != "" {
		return fmt.Sprintf("%s %s/%s", s.Kind, s.Namespace, s.Name)
	}
	return fmt.Sprintf("ModelServer %s/%s", s.Namespace, s.Name)
}

// SecretOf is the Secret a provider's credential is in, if it has one.
func SecretOf(p *networkingv1alpha1.ExternalModelProvider) (types.NamespacedName, bool) {
	if p.Spec.Auth == nil || p.Spec.Auth.SecretRef.Name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: p.Namespace, Name: p.Spec.Auth.SecretRef.Name}, true
}

// ResolveProvider turns an ExternalModelProvider into a Provider, its credential looked up
// with credential (Secret, key).
func ResolveProvider(p *networkingv1alpha1.ExternalModelProvider, credential func(types.NamespacedName, string) credentials.Lookup) *Provider {
	out := &Provider{Namespace: p.Namespace, Name: p.Name, Type: p.Spec.ProviderType, InsecureSkipVerify: p.Spec.InsecureSkipVerify,
		Headers: p.Spec.Headers, Policy: policyOf(p.Spec.TrafficPolicy)}
	if out.Type == "" {
		out.Type = networkingv1alpha1.OpenAI
	}
	if p.Spec.Model != nil {
		out.Model = *p.Spec.Model
	}
	u, err := url.Parse(p.Spec.BaseURL)
	switch {
	case err != nil:
		out.Err = fmt.Errorf("%s: baseURL: %w", out, err)
		return out
	case u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
		// The schema refuses these; a router may still meet an object stored before it did.
		out.Err = fmt.Errorf("%s: baseURL %q must be https://host[/path], without user info, query or fragment", out, p.Spec.BaseURL)
		return out
	}
	out.BaseURL = u
	if a := p.Spec.Auth; a != nil {
		out.AuthScheme = a.Scheme
		if out.AuthScheme == "" {
			out.AuthScheme = networkingv1alpha1.ProviderAuthSchemeBearer
			if out.Type == networkingv1alpha1.Anthropic {
				out.AuthScheme = networkingv1alpha1.ProviderAuthSchemeAPIKey
			}
		}
		ref, _ := SecretOf(p)
		c := credential(ref, a.SecretRef.Key)
		if c.Err != nil {
			out.Err = fmt.Errorf("%s: credential: %w", out, c.Err)
			return out
		}
		out.Credential = c.Value
	}
	return out
}

// workloadOf is the ModelServing ms's workloadSelector names, nil when none.
func (v *View) workloadOf(ctx context.Context, ms *networkingv1alpha1.ModelServer) (*Workload, error) {
	sel := ms.Spec.WorkloadSelector
	if sel == nil || sel.MatchLabels[workloadv1alpha1.ModelServingNameLabel] == "" {
		return nil, nil
	}
	var w workloadv1alpha1.ModelServing
	key := types.NamespacedName{Namespace: ms.Namespace, Name: sel.MatchLabels[workloadv1alpha1.ModelServingNameLabel]}
	if err := v.cache.Get(ctx, key, &w, client.UnsafeDisableDeepCopy); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	out := &Workload{Namespace: w.Namespace, Name: w.Name, Replicas: 1}
	if w.Spec.Replicas != nil {
		out.Replicas = *w.Spec.Replicas
	}
	if t, err := time.Parse(time.RFC3339Nano, w.Annotations[workloadv1alpha1.DemandAnnotation]); err == nil {
		out.Demand = t
	}
	return out, nil
}

// slimModelServing keeps of a ModelServing what workloadOf reads.
func slimModelServing(obj any) (any, error) {
	w, ok := obj.(*workloadv1alpha1.ModelServing)
	if !ok {
		return obj, nil
	}
	return &workloadv1alpha1.ModelServing{
		TypeMeta: w.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name, UID: w.UID, ResourceVersion: w.ResourceVersion,
			Generation: w.Generation, Labels: w.Labels, Annotations: w.Annotations, DeletionTimestamp: w.DeletionTimestamp},
		Spec: workloadv1alpha1.ModelServingSpec{Replicas: w.Spec.Replicas},
	}, nil
}
