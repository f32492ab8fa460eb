// Package router is berth-router: an OpenAI-compatible HTTP front for the models that
// ModelRoutes and ModelServers describe. A request is parsed (package request), matched to
// a route and a ModelServer (match), checked against the route's token rate limit
// (ratelimit), given an endpoint by weighted scorers over scraped engine metrics (pick,
// scrape) and proxied with retry, timeout and streaming pass-through, through a prefill
// and a decode engine when the ModelServer is disaggregated (proxy). Package view keeps
// the picture of routes, servers and Ready pods current from informers.
package router

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/berth-sh/berth/pkg/apicheck"
	"github.com/berth-sh/berth/pkg/fabric"
	"github.com/berth-sh/berth/pkg/router/certs"
	"github.com/berth-sh/berth/pkg/router/fairqueue"
	"github.com/berth-sh/berth/pkg/router/pick"
	"github.com/berth-sh/berth/pkg/router/proxy"
	"github.com/berth-sh/berth/pkg/router/ratelimit"
	"github.com/berth-sh/berth/pkg/router/request"
	"github.com/berth-sh/berth/pkg/router/scrape"
	"github.com/berth-sh/berth/pkg/router/shared"
	"github.com/berth-sh/berth/pkg/router/tracing"
	"github.com/berth-sh/berth/pkg/router/view"
)

// Modes of a Router.
const (
	// ModeProxy serves the OpenAI API and proxies each request to the endpoint it picks.
	ModeProxy = "proxy"
	// ModeEPP is an endpoint picker for Envoy: the Gateway API Inference Extension's
	// Endpoint Picker Protocol over ext_proc (package epp). Envoy proxies; the router
	// picks, with the same routes, scorers and rate limits.
	ModeEPP = "epp"
)

// Options configure a Router. Zero values take the defaults in Defaults.
type Options struct {
	// Mode is ModeProxy (the default) or ModeEPP.
	Mode string
	// Addr serves the OpenAI API in proxy mode ("127.0.0.1:0" picks a port).
	Addr string
	// EPPAddr serves ext_proc (gRPC) in epp mode; EPPHealthAddr serves grpc.health.v1
	// there (liveness, readiness and the ext_proc service, as the protocol names them).
	EPPAddr, EPPHealthAddr string
	// EPPSecureServing serves ext_proc over TLS, as the Inference Extension's reference
	// picker does by default and gateways expect: with TLSCertFile and TLSKeyFile when set,
	// else a self-signed certificate made at start (the gateways skip verifying it).
	EPPSecureServing bool
	// EPPFallbacks is how many endpoints after the primary the picker names, in the order
	// the data plane should try them when the one before fails.
	EPPFallbacks int
	// EPPPool ("namespace/name") makes the endpoint picker choose among the Ready pods of
	// that InferencePool, as the Inference Extension deploys one picker per pool (the pool's
	// endpointPickerRef names it): no ModelRoute is matched, the body is passed unchanged.
	// Empty: the picker matches the request's model to a ModelRoute as the proxy does.
	EPPPool string
	// AdminAddr serves /metrics, /healthz, /readyz and /version ("" disables it; the API listener
	// serves /healthz and /readyz too).
	AdminAddr string
	// MetricsAuth guards the admin listener's /metrics as kube-apiserver guards its own: a
	// request needs a bearer token the apiserver authenticates (TokenReview) and authorizes
	// for GET on the non-resource URL /metrics (SubjectAccessReview). The series name routes,
	// servers and pods of every namespace, so without it anyone who reaches the port learns
	// them. The admin listener is then HTTPS with a self-signed certificate, so tokens never
	// cross the network in the clear; its /healthz, /readyz and /version stay open (the API listener
	// serves them too, and the kubelet probes that one).
	MetricsAuth bool
	// TLSCertFile and TLSKeyFile, when both set, make the API listener HTTPS. They are read
	// again when they change on disk (package certs), so a rotated certificate reaches new
	// connections without a restart.
	TLSCertFile, TLSKeyFile string
	// TLSReloadInterval is how often the certificate files and UpstreamCAFile are read again
	// when no file event said they changed (default certs.DefaultInterval).
	TLSReloadInterval time.Duration
	// MaxBodyBytes bounds a request body (413 beyond it).
	MaxBodyBytes int64
	// ReadHeaderTimeout bounds reading a request's headers; IdleTimeout closes idle
	// keep-alive connections. Neither bounds a streaming response.
	ReadHeaderTimeout, IdleTimeout time.Duration
	// ShutdownTimeout is how long in-flight requests and streams may take to finish after
	// the router stopped taking new ones.
	ShutdownTimeout time.Duration
	// ShutdownDelay is how long the router, told to stop, goes on serving new requests while
	// its readiness is already false: the time its Service's endpoints need to drop it, so
	// no client is refused in between. Then it stops taking requests and drains.
	ShutdownDelay time.Duration
	// ScrapeInterval is how often every endpoint's /metrics and /v1/models are read.
	ScrapeInterval time.Duration
	// Policy and Scorers choose how endpoints are picked (see package pick).
	Policy  pick.Policy
	Scorers string
	// PrefixBlocks bounds the prefix-affinity index.
	PrefixBlocks int
	// RedisAddr is the Redis (host:port) behind the global rate limits of ModelRoutes whose
	// rateLimit.global names none: one Redis per installation, set once by the operator,
	// rather than in every route. A route's own address wins.
	RedisAddr string
	// DisableSharedState keeps this replica's prefix index and in-flight counts to itself
	// even with a RedisAddr (package shared; by default replicas share them through it).
	DisableSharedState bool
	// UpstreamTLS is used for ModelServers whose workloadPort protocol is https.
	UpstreamTLS *tls.Config
	// UpstreamCAFile is a PEM bundle of the CAs that sign the https model servers'
	// certificates (in place of the system roots), read again whenever it changes on disk,
	// so a rotated CA is trusted without a restart. It takes the place of UpstreamTLS's
	// RootCAs.
	UpstreamCAFile string
	// EndpointHeader adds X-Berth-Endpoint (the namespace/pod that served, or the provider)
	// to every answer. Off by default: it tells any client the cluster's pod names. The
	// sandbox and tests turn it on to show where requests went.
	EndpointHeader bool
	// DisableGateway keeps the router from serving the Gateway API (GatewayClasses naming
	// gateway.ControllerName, their Gateways, HTTPRoutes and InferencePools) even where the
	// apiserver serves those kinds.
	DisableGateway bool
	// GatewayHost is the address Gateway listener ports are opened on ("" every interface).
	GatewayHost string
	// DialEndpoint, when set, opens the connections to endpoints (pods, Service endpoints)
	// in place of a net.Dialer: the simulated cluster's pod network (sim.DialPodNetwork)
	// reaches its pods' servers on loopback addresses this way.
	DialEndpoint func(ctx context.Context, network, addr string) (net.Conn, error)
	// GatewayAddresses are what every Programmed Gateway's status.addresses names: where
	// clients reach the listeners (the router Service's address or DNS name), which
	// `kubectl get gateway` shows and the conformance suite sends to. None: GatewayHost when
	// it is a single IP address, else no address.
	GatewayAddresses []string
	// Tracing exports OpenTelemetry spans over OTLP when it (or the standard OTEL_*
	// environment) names a collector; off by default (package tracing).
	Tracing tracing.Config
	// Auth is AuthNone (every caller served: the default, for the sandbox) or AuthAPIKey:
	// callers present an API key from a key Secret, which names their tenant (tenants.go,
	// package tenant). Proxy mode only.
	Auth string
	// APIKeyNamespaces are the namespaces whose key Secrets are read (none: every namespace).
	APIKeyNamespaces []string
	// QueueConcurrency, when positive, is how many requests this router sends to each Ready
	// endpoint of a ModelServer at once (less what other replicas send there); beyond it
	// requests wait in the server's fair queue (package fairqueue), let go by QueuePolicy.
	QueueConcurrency int
	// QueuePolicy orders waiting requests: fairqueue.Fair (the default; tenants share by
	// tokens) or fairqueue.FIFO.
	QueuePolicy fairqueue.Policy
	// QueueSize bounds how many requests wait for one ModelServer (503 beyond);
	// QueueTimeout how long each may (503 with Retry-After after).
	QueueSize    int
	QueueTimeout time.Duration
	// QueueReserve keeps, for each tenant active in the last fairqueue.ActiveWindow that
	// holds no request, one of a ModelServer's slots free, so its next request goes at once
	// rather than after one of another tenant's ends (at the cost of the slot idling).
	QueueReserve bool
	// HoldQueueSize bounds how many requests are held for one ModelServer whose
	// ModelServing is at zero replicas while it comes up (scale from zero, fromzero.go);
	// HoldTimeout how long each may be held. DisableHold refuses them at once instead (503
	// with Retry-After; the autoscaler is still told of the demand).
	HoldQueueSize int
	HoldTimeout   time.Duration
	DisableHold   bool
	// DisablePDTopology pairs prefill and decode endpoints by load alone, blind to where
	// they sit; the router then reads no Nodes or HyperNodes. By default a prefill hands
	// its KV to the nearest decode with room (pdtopology.go).
	DisablePDTopology bool
	// FabricLabelTiers are the node labels the fabric is read from where no HyperNode
	// exists, lowest tier first (nil: fabric.DefaultLabelTiers, berth-scheduler's shipped
	// nodeLabelTiers).
	FabricLabelTiers []fabric.LabelTier
	// DisableDeletionCost keeps the router from writing the cost of losing each ModelServing
	// pod it routes to (its in-flight requests and prefix cache) as the pod's
	// controller.kubernetes.io/pod-deletion-cost annotation, which berth-controller's
	// scale-down reads (deletioncost.go). DeletionCostInterval is how often at most one
	// replica writes one pod (default 5s).
	DisableDeletionCost  bool
	DeletionCostInterval time.Duration
}

// Defaults fills in zero fields.
func (o *Options) Defaults() {
	if o.Mode == "" {
		o.Mode = ModeProxy
	}
	if o.Addr == "" {
		o.Addr = ":8080"
	}
	if o.EPPAddr == "" {
		o.EPPAddr = ":9002"
	}
	if o.EPPHealthAddr == "" {
		o.EPPHealthAddr = ":9003"
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 16 << 20
	}
	if o.ReadHeaderTimeout == 0 {
		o.ReadHeaderTimeout = 10 * time.Second
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 120 * time.Second
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = 30 * time.Second
	}
	if o.ScrapeInterval == 0 {
		o.ScrapeInterval = time.Second
	}
	if o.Policy == "" {
		o.Policy = pick.Scored
	}
	if o.Scorers == "" {
		o.Scorers = pick.DefaultScorers
	}
	if o.PrefixBlocks == 0 {
		o.PrefixBlocks = 1 << 20
	}
	if o.TLSReloadInterval == 0 {
		o.TLSReloadInterval = certs.DefaultInterval
	}
	if o.Auth == "" {
		o.Auth = AuthNone
	}
	if o.QueuePolicy == "" {
		o.QueuePolicy = fairqueue.Fair
	}
	if o.QueueSize == 0 {
		o.QueueSize = 1000
	}
	if o.QueueTimeout == 0 {
		o.QueueTimeout = 30 * time.Second
	}
	if o.HoldQueueSize == 0 {
		o.HoldQueueSize = 100
	}
	if o.HoldTimeout == 0 {
		o.HoldTimeout = 2 * time.Minute
	}
	if o.DeletionCostInterval == 0 {
		o.DeletionCostInterval = 5 * time.Second
	}
}

// Router serves requests. Create with New, run with Run.
type Router struct {
	cfg     *rest.Config
	opts    Options
	log     logr.Logger
	view    *view.View
	picker  *pick.Picker
	scraper *scrape.Scraper
	proxy   *proxy.Proxy
	local   *ratelimit.Local
	redis   *ratelimit.Clients
	metrics *metrics
	tracer  *tracing.Tracer // nil: tracing off
	// gateway is nil unless the router serves the Gateway API (gateway.go).
	gateway *gatewayServing
	// listenerCert is the API listener's reloaded certificate (nil: plain HTTP); upstreamCA
	// the reloaded CA bundle for https model servers (nil: UpstreamTLS as given).
	listenerCert *certs.Listener
	upstreamCA   *certs.CAPool
	// tenants is nil unless the router authenticates callers or queues requests (tenants.go).
	tenants *tenantServing
	// shared is nil unless replicas share picks through Redis; sharedOff then says why not.
	shared    *shared.Shared
	sharedOff string
	// fromZero is nil unless the router holds requests for models at zero (fromzero.go):
	// proxy mode, with the apiserver serving ModelServings.
	fromZero *fromZero
	// deletionCosts is nil unless the router publishes its pods' deletion costs.
	deletionCosts *deletionCosts

	stopping atomic.Bool
	ready    chan struct{}
	draining chan struct{}
	addr     atomic.Pointer[string]
	admin    atomic.Pointer[string]
	eppAddr  atomic.Pointer[string]
	eppHAddr atomic.Pointer[string]
}

// New builds a router over the cluster cfg points at, once the apiserver has shown it
// serves every API the router needs (requiredAPIs); otherwise it returns an
// *apicheck.MissingError naming those it does not.
func New(cfg *rest.Config, o Options, log logr.Logger) (*Router, error) {
	o.Defaults()
	if o.Mode != ModeProxy && o.Mode != ModeEPP {
		return nil, fmt.Errorf("mode %q: use %q or %q", o.Mode, ModeProxy, ModeEPP)
	}
	if o.EPPPool != "" {
		if ns, name, ok := strings.Cut(o.EPPPool, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return nil, fmt.Errorf("epp pool %q: write namespace/name", o.EPPPool)
		}
		if o.DisableGateway {
			return nil, fmt.Errorf("epp pool %q: InferencePools are read with the Gateway API, which DisableGateway turns off", o.EPPPool)
		}
	}
	if o.EPPFallbacks < 0 {
		return nil, fmt.Errorf("epp fallbacks %d: must be 0 or more", o.EPPFallbacks)
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return nil, errors.New("TLS needs both a certificate and a key file")
	}
	if err := apicheck.Check(cfg, "berth-router", requiredAPIs(o)); err != nil {
		return nil, err
	}
	// ExternalModelProviders came after Kthena v1.0.0: beside that release's CRDs the router
	// runs without them (a route naming one finds none) rather than refusing to start.
	providers := apicheck.Check(cfg, "berth-router", providerAPIs()) == nil
	if !providers {
		log.Info("the apiserver does not serve ExternalModelProviders; routes can target ModelServers only", "crd", "externalmodelproviders.networking.serving.volcano.sh")
	}
	v, err := view.New(cfg, providers, log.WithName("view"))
	if err != nil {
		return nil, err
	}
	if !o.DisablePDTopology {
		tiers := o.FabricLabelTiers
		if tiers == nil {
			tiers = fabric.DefaultLabelTiers
		}
		v.EnableFabric(tiers, apicheck.Check(cfg, "berth-router", hyperNodeAPIs()) == nil)
	}
	picker, err := pick.New(o.Policy, o.Scorers, o.PrefixBlocks)
	if err != nil {
		return nil, err
	}
	p := proxy.New(o.UpstreamTLS)
	if o.DialEndpoint != nil {
		p.DialEndpointsWith(o.DialEndpoint)
	}
	var listenerCert *certs.Listener
	if o.TLSCertFile != "" && o.Mode == ModeProxy {
		if listenerCert, err = certs.NewListener(o.TLSCertFile, o.TLSKeyFile, o.TLSReloadInterval); err != nil {
			return nil, err
		}
	}
	var upstreamCA *certs.CAPool
	if o.UpstreamCAFile != "" {
		if upstreamCA, err = certs.NewCAPool(o.UpstreamCAFile, o.TLSReloadInterval, log.WithName("upstream-ca")); err != nil {
			return nil, err
		}
		p.UpstreamRoots(upstreamCA.Roots)
	}
	scrapeClient := &http.Client{Transport: p.Client().Transport, Timeout: max(o.ScrapeInterval, 500*time.Millisecond)}
	r := &Router{
		cfg: cfg, opts: o, log: log, view: v, picker: picker, proxy: p, listenerCert: listenerCert, upstreamCA: upstreamCA,
		scraper:  scrape.New(o.ScrapeInterval, scrapeClient),
		local:    ratelimit.NewLocal(time.Now),
		redis:    ratelimit.NewClients(),
		metrics:  newMetrics(),
		ready:    make(chan struct{}),
		draining: make(chan struct{}),
	}
	r.scraper.OwnLoad = picker.Load
	if err := r.enableTenants(); err != nil {
		return nil, err
	}
	if o.Mode == ModeProxy {
		if err := apicheck.Check(cfg, "berth-router", workloadAPIs()); err != nil {
			log.Info("not holding requests for models at zero replicas: the apiserver does not serve ModelServings", "missing", err.Error())
		} else if err := r.enableFromZero(); err != nil {
			return nil, err
		}
	}
	if !o.DisableDeletionCost {
		if err := r.enableDeletionCosts(); err != nil {
			return nil, err
		}
	}
	switch {
	case o.Policy != pick.Scored:
		r.sharedOff = shared.Off(r.metrics.registry, "policy "+string(o.Policy)+" keeps no index")
	case o.RedisAddr == "":
		r.sharedOff = shared.Off(r.metrics.registry, "no Redis address")
	case o.DisableSharedState:
		r.sharedOff = shared.Off(r.metrics.registry, "disabled")
	default:
		r.shared = shared.New(shared.Options{Addr: o.RedisAddr}, picker, r.metrics.registry, log.WithName("shared"))
		picker.SharePeers(r.shared)
	}
	if !o.DisableGateway {
		if err := apicheck.Check(cfg, "berth-router", gatewayAPIs()); err != nil {
			if o.EPPPool != "" {
				return nil, fmt.Errorf("epp pool %s: the picker reads InferencePools, which the apiserver does not serve: %w", o.EPPPool, err)
			}
			log.Info("not serving the Gateway API: the apiserver does not serve its kinds", "missing", err.Error())
		} else if o.Mode == ModeEPP {
			// A picker is asked by another gateway: it reads InferencePools for its pool but
			// opens no Gateway listener and writes no Gateway API status.
			if err := r.readInferencePools(); err != nil {
				return nil, err
			}
		} else if err := r.enableGateway(); err != nil {
			return nil, err
		}
	}
	// Last: nothing after it can fail and leave its exporter running.
	if r.tracer, err = tracing.New(o.Tracing, r.metrics.registry); err != nil {
		return nil, err
	}
	p.TraceWith(r.tracer)
	return r, nil
}

// Addr is the API listener's address once Run has started it ("" before).
func (r *Router) Addr() string {
	if a := r.addr.Load(); a != nil {
		return *a
	}
	return ""
}

// EPPAddr is the ext_proc listener's address once Run has started it in epp mode ("" before).
func (r *Router) EPPAddr() string {
	if a := r.eppAddr.Load(); a != nil {
		return *a
	}
	return ""
}

// EPPHealthAddr is the gRPC health listener's address once started in epp mode.
func (r *Router) EPPHealthAddr() string {
	if a := r.eppHAddr.Load(); a != nil {
		return *a
	}
	return ""
}

// AdminAddr is the admin listener's address once started.
func (r *Router) AdminAddr() string {
	if a := r.admin.Load(); a != nil {
		return *a
	}
	return ""
}

// View is the router's picture of routes, servers and endpoints.
func (r *Router) View() *view.View { return r.view }

// MetricsRegistry is the registry the admin listener serves at /metrics.
func (r *Router) MetricsRegistry() *prometheus.Registry { return r.metrics.registry }

// Ready is closed when the router has its first full picture of the cluster and listens.
func (r *Router) Ready() <-chan struct{} { return r.ready }

// Draining is closed when, told to stop, the router ends its shutdown delay and stops
// taking new connections (then it waits for what is in flight).
func (r *Router) Draining() <-chan struct{} { return r.draining }

// Scraped is what the router last scraped of the endpoint at addr (its Stats.Scrapes
// counts the scrapes, so a caller can wait for one newer than a change it made).
func (r *Router) Scraped(addr string) (scrape.Stats, bool) { return r.scraper.Stats(addr) }

// Handler is the API handler (also serving /v1/models, /healthz and /readyz).
func (r *Router) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, p := range request.Paths() {
		mux.HandleFunc(p, r.serveInference)
	}
	mux.HandleFunc("GET /v1/models", r.serveModels)
	mux.HandleFunc("GET /v1/models/{id...}", r.serveModel)
	r.health(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "", fmt.Sprintf("berth-router serves POST %s and GET /v1/models, not %s", strings.Join(request.Paths(), ", "), req.URL.Path))
	})
	return mux
}

func (r *Router) health(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, req *http.Request) {
		switch {
		case r.stopping.Load():
			http.Error(w, "stopping", http.StatusServiceUnavailable)
		case !r.view.Synced():
			http.Error(w, "routes, servers and pods not synced yet", http.StatusServiceUnavailable)
		default:
			// Ready either way: a replica that cannot share still serves. ?verbose (as the
			// apiserver's /readyz) adds the detail: whether it shares with the other replicas.
			body := "ok\n"
			if req.URL.Query().Has("verbose") {
				body += r.SharedState() + "\n"
			}
			_, _ = w.Write([]byte(body))
		}
	})
}

// SharedState is the readiness detail line on sharing picks with the other replicas.
func (r *Router) SharedState() string {
	if r.shared == nil {
		return r.sharedOff
	}
	_, detail := r.shared.Status()
	return detail
}

// Run serves until ctx ends, then reports not ready, serves on for ShutdownDelay, stops
// taking requests, lets in-flight ones (streams too) finish within ShutdownTimeout, and
// returns.
func (r *Router) Run(ctx context.Context) error {
	viewCtx, stopView := context.WithCancel(context.WithoutCancel(ctx))
	defer stopView()
	defer r.redis.Close()
	defer func() {
		// The spans still queued go out before the router returns.
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := r.tracer.Shutdown(sctx); err != nil {
			r.log.Error(err, "sending the last trace spans failed")
		}
		cancel()
	}()
	r.view.OnChange(func(s *view.Snapshot) {
		urls := make(map[string]string, len(s.Endpoints))
		pods := make(map[string]bool, len(s.Endpoints))
		for addr, e := range s.Endpoints {
			urls[addr] = e.URL()
			pods[e.Pod] = true
		}
		r.scraper.Sync(viewCtx, urls)
		r.picker.Forget(s.Endpoints)
		r.metrics.endpoints.Set(float64(len(s.Endpoints)))
		// A pod's series go with it, or /metrics grows with every pod that ever served.
		r.metrics.forgetPods(pods)
	})
	if r.gateway != nil {
		r.runGateway(viewCtx)
	}
	if r.fromZero != nil {
		go r.runFromZero(viewCtx)
	}
	if r.shared != nil {
		sharedDone := make(chan struct{})
		go func() { r.shared.Run(viewCtx); close(sharedDone) }()
		defer func() { stopView(); <-sharedDone }()
	}
	viewErr := make(chan error, 1)
	go func() { viewErr <- r.view.Run(viewCtx) }()
	if r.listenerCert != nil {
		go func() {
			if err := r.listenerCert.Run(viewCtx); err != nil {
				r.log.Error(err, "watching the TLS certificate failed; serving the one last read")
			}
		}()
	}
	if r.upstreamCA != nil {
		go r.upstreamCA.Run(viewCtx)
	}
	var picker *eppServers
	if r.opts.Mode == ModeEPP {
		// Health answers from the start (liveness), ready only once synced.
		var err error
		if picker, err = r.startEPPHealth(); err != nil {
			return err
		}
		defer picker.stop(context.Background())
	}
	for !r.view.Synced() {
		select {
		case err := <-viewErr:
			return fmt.Errorf("watching routes, servers and pods: %w", err)
		case <-ctx.Done():
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}

	if err := r.startTenants(viewCtx); err != nil {
		return err
	}
	if r.deletionCosts != nil {
		go r.deletionCosts.run(viewCtx, r.view.Snapshot)
	}

	var servers []*http.Server
	errc := make(chan error, 3)
	var addr string
	if picker != nil {
		if err := r.serveEPP(picker, errc); err != nil {
			return err
		}
		addr = r.EPPAddr()
	} else {
		api := &http.Server{Handler: r.Handler(), ReadHeaderTimeout: r.opts.ReadHeaderTimeout, IdleTimeout: r.opts.IdleTimeout,
			MaxHeaderBytes: 1 << 20, ErrorLog: nil}
		ln, err := net.Listen("tcp", r.opts.Addr)
		if err != nil {
			return err
		}
		addr = ln.Addr().String()
		r.addr.Store(&addr)
		servers = append(servers, api)
		if r.listenerCert != nil {
			api.TLSConfig = r.listenerCert.Config()
		}
		go func() {
			var err error
			if r.listenerCert != nil {
				err = api.ServeTLS(ln, "", "") // the certificate comes from TLSConfig.GetCertificate
			} else {
				err = api.Serve(ln)
			}
			errc <- err
		}()
	}
	if r.opts.AdminAddr != "" {
		admin, aln, err := r.adminServer()
		if err != nil {
			for _, s := range servers {
				_ = s.Close()
			}
			return err
		}
		a := aln.Addr().String()
		r.admin.Store(&a)
		servers = append(servers, admin)
		go func() { errc <- admin.Serve(aln) }()
	}
	if r.tracer != nil {
		r.log.Info("exporting trace spans over OTLP/gRPC", "endpoint", r.tracer.Target, "sampler", r.tracer.Sampler)
	}
	r.log.Info("berth-router serving", "mode", r.opts.Mode, "tracing", r.tracer != nil, "addr", addr, "admin", r.AdminAddr(), "tls", r.opts.TLSCertFile != "" || (picker != nil && r.opts.EPPSecureServing), "policy", r.opts.Policy, "scorers", r.picker.ScorerNames())
	close(r.ready)

	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	case err := <-viewErr:
		return fmt.Errorf("watching routes, servers and pods: %w", err)
	}
	// Readiness goes false first so a load balancer stops sending, while requests that
	// still come are served; then drain.
	r.stopping.Store(true)
	if picker != nil {
		picker.health.SetReady(false)
	}
	if d := r.opts.ShutdownDelay; d > 0 {
		r.log.Info("not ready; serving on while endpoints drop this replica", "delay", d)
		select {
		case <-time.After(d):
		case err := <-errc:
			if !errors.Is(err, http.ErrServerClosed) {
				return err
			}
		}
	}
	r.log.Info("draining in-flight requests", "timeout", r.opts.ShutdownTimeout)
	close(r.draining)
	sctx, cancel := context.WithTimeout(context.Background(), r.opts.ShutdownTimeout)
	defer cancel()
	if picker != nil {
		picker.stop(sctx)
	}
	if r.gateway != nil {
		r.gateway.listeners.Shutdown(sctx)
	}
	for _, s := range servers {
		if err := s.Shutdown(sctx); err != nil {
			r.log.Info("requests still in flight at shutdown timeout were cut", "timeout", r.opts.ShutdownTimeout)
			_ = s.Close()
		}
	}
	return nil
}

// uniform picks among weighted targets; math/rand/v2's top-level source is safe for
// concurrent use without a lock of ours.
func (r *Router) uniform(n uint64) uint64 { return rand.Uint64N(n) }
