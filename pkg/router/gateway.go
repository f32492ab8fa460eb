package router

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"time"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/berth-sh/berth/pkg/router/forwarded"
	"github.com/berth-sh/berth/pkg/router/gateway"
	"github.com/berth-sh/berth/pkg/router/match"
	"github.com/berth-sh/berth/pkg/router/pick"
	"github.com/berth-sh/berth/pkg/router/proxy"
	"github.com/berth-sh/berth/pkg/router/request"
	"github.com/berth-sh/berth/pkg/router/view"
)

// gatewayServing is the router as a Gateway API implementation: the Gateways' listener
// ports and the status writer (package gateway); the view compiles the objects.
type gatewayServing struct {
	listeners *gateway.Listeners
	status    *gateway.StatusWriter
}

func (r *Router) enableGateway() error {
	c, err := client.New(r.cfg, client.Options{Scheme: view.Scheme()})
	if err != nil {
		return err
	}
	log := r.log.WithName("gateway")
	g := &gatewayServing{
		listeners: &gateway.Listeners{Host: r.opts.GatewayHost, Handler: r.gatewayHandler, Certificate: r.gatewayCertificate,
			ReadHeaderTimeout: r.opts.ReadHeaderTimeout, IdleTimeout: r.opts.IdleTimeout, Log: log},
		status: gateway.NewStatusWriter(c, r.view.Reader(), log),
	}
	g.status.Addresses = gateway.StatusAddresses(r.opts.GatewayAddresses, r.opts.GatewayHost)
	kube, err := kubernetes.NewForConfig(r.cfg)
	if err != nil {
		return err
	}
	r.view.EnableGateway(kube, g.listeners.Sync)
	r.gateway = g
	log.Info("serving the Gateway API", "controllerName", gateway.ControllerName)
	return nil
}

// readInferencePools makes the view resolve InferencePools (with the rest of the Gateway
// API objects, compiled but never served): the endpoint picker's candidates.
func (r *Router) readInferencePools() error {
	kube, err := kubernetes.NewForConfig(r.cfg)
	if err != nil {
		return err
	}
	r.view.EnableGateway(kube, func(map[int32]bool) map[int32]error { return nil })
	return nil
}

// runGateway writes every snapshot's Gateway API status until ctx ends, then closes the
// listener ports (Run drains them first when it stops in order).
func (r *Router) runGateway(ctx context.Context) {
	r.view.OnChange(func(s *view.Snapshot) {
		if s.GatewayStatus != nil {
			r.gateway.status.Publish(s.GatewayStatus)
		}
	})
	go r.gateway.status.Run(ctx)
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r.gateway.listeners.Shutdown(sctx)
	}()
}

// GatewayAddr is the address a Gateway listener port is served on ("" when it is not).
func (r *Router) GatewayAddr(port int32) string {
	if r.gateway == nil {
		return ""
	}
	return r.gateway.listeners.Addr(port)
}

func (r *Router) gatewayCertificate(port int32, hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	p := r.view.Snapshot().Gateway.Ports[port]
	if p == nil {
		return nil, fmt.Errorf("port %d serves no Gateway listener", port)
	}
	if c := p.Certificate(hello.ServerName); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("no HTTPS listener on port %d has a certificate", port)
}

func (r *Router) gatewayHandler(port int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { r.serveGateway(port, w, req) })
}

// serveGateway answers a request to a Gateway listener: the HTTPRoute rule that matches it
// (package gateway) draws a backendRef by weight; the rule's and the backendRef's filters
// change the request; an endpoint of the InferencePool or Service is picked by the same
// scorers as a ModelServer's (for OpenAI requests the prompt's prefix counts too), and the
// answer is relayed, streaming, with the response filters applied.
func (r *Router) serveGateway(port int32, w http.ResponseWriter, req *http.Request) {
	kind := request.KindOf(req.URL.Path)
	snap := r.view.Snapshot()
	routed, ok := snap.Gateway.Route(port, req)
	if ok && routed.Listener.Models != nil && kind != "" && req.Method == http.MethodPost && r.servesModel(w, req, routed.Listener.Models) {
		return
	}
	r.metrics.inflight.Inc()
	defer r.metrics.inflight.Dec()
	x := &exchange{start: time.Now(), kind: kind}
	defer r.finish(x)
	req = r.startRequest(req, x)
	fail := func(status int, code, msg string) {
		x.status, x.reason = status, msg
		if req.Method == http.MethodHead {
			// A HEAD answer has no body, so it says no JSON either: a client (the Gateway
			// API conformance suite's, HTTPRouteMethodMatching) would parse the empty body.
			w.WriteHeader(status)
			return
		}
		writeError(w, status, code, "", msg)
	}
	if !ok {
		fail(http.StatusNotFound, "not_found", fmt.Sprintf("no Gateway listener on port %d takes host %q", port, req.Host))
		return
	}
	rule := routed.Rule
	if rule == nil {
		l := routed.Listener
		fail(http.StatusNotFound, "route_not_found", fmt.Sprintf("no HTTPRoute rule attached to Gateway %s listener %s matches %s %s", l.Gateway, l.Name, req.Method, req.URL.Path))
		return
	}
	x.route = rule.Label()
	b, ok := drawBackend(rule.Backends, r.uniform)
	switch {
	case !ok:
		fail(http.StatusInternalServerError, "no_backend", fmt.Sprintf("%s has no backendRef with weight above 0", x.route))
		return
	case b.Invalid != "":
		fail(http.StatusInternalServerError, "invalid_backend", fmt.Sprintf("HTTPRoute %s %s", rule.Route, b.Invalid))
		return
	}
	srv := snap.Backend(b)
	x.server, x.targetKind = b.NamespacedName.String(), match.Kind(b.Kind)
	if srv == nil {
		fail(http.StatusInternalServerError, "invalid_backend", fmt.Sprintf("%s sends to %s, which is not known yet", x.route, b))
		return
	}
	if len(srv.Endpoints) == 0 {
		why := "no Ready pod matches its selector"
		if b.Kind == gateway.ServiceBackend {
			why = "its EndpointSlices list no ready address"
		}
		fail(http.StatusServiceUnavailable, "no_endpoint", fmt.Sprintf("%s sends to %s, which has no Ready endpoint: %s", x.route, srv, why))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			fail(http.StatusRequestEntityTooLarge, "request_too_large", fmt.Sprintf("request body exceeds %d bytes", tooBig.Limit))
			return
		}
		fail(http.StatusBadRequest, "invalid_request", "reading the request body: "+err.Error())
		return
	}
	preq := &pick.Request{}
	if kind != "" && req.Method == http.MethodPost {
		if in, err := request.ParseContent(kind, req.Header.Get("Content-Type"), body); err == nil {
			x.asked, x.model = in.Model, in.Model
			preq = &pick.Request{Model: in.Model, Prefix: pick.HashPrompt(in.Prompt)}
		}
	}
	header := req.Header.Clone()
	// Before the filters, so a RequestHeaderModifier can still change them.
	for k, v := range forwarded.Headers(req) {
		header.Set(k, v)
	}
	path, host := req.URL.Path, req.Host
	for _, f := range []gateway.Filters{rule.Filters, b.Filters} {
		f.RequestHeaders.Apply(header)
		if rw := f.Rewrite; rw != nil {
			path = gateway.RewritePath(rw.Path, &rule.Match, path)
			if rw.Hostname != nil {
				host = string(*rw.Hostname)
			}
		}
	}
	// header is the request's own copy: the filters changed it, and every attempt sends it.
	proxy.StripHopByHop(header)
	header.Del("Content-Length")
	target := path
	if req.URL.RawQuery != "" {
		target += "?" + req.URL.RawQuery
	}
	ctx := req.Context()
	if rule.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rule.Timeout)
		defer cancel()
	}
	tried := map[string]bool{}
	for attempt := 1; ; attempt++ {
		x.attempts = attempt
		dst, ends, err := r.choose(srv, preq, tried)
		if err != nil {
			fail(http.StatusServiceUnavailable, "no_endpoint", fmt.Sprintf("%s sends to %s: %v", x.route, srv, err))
			return
		}
		x.endpoint = dst.name
		out, err := http.NewRequestWithContext(ctx, req.Method, dst.url+target, bytes.NewReader(body))
		if err != nil {
			ends(math.NaN())
			fail(http.StatusBadRequest, "invalid_request", err.Error())
			return
		}
		out.Header = header
		out.Host, out.ContentLength = host, int64(len(body))
		sent := time.Now()
		resp, err := r.proxy.Client().Do(out)
		if err != nil {
			ends(pick.Failed)
			tried[dst.url] = true
			for _, a := range dst.addrs {
				tried[a] = true
			}
			if ctx.Err() == nil && attempt <= freeRetries && (proxy.DialFailed(err) || proxy.ClosedBeforeAnswer(err)) {
				r.metrics.retries.WithLabelValues(x.server, "transport").Inc()
				continue
			}
			switch {
			case errors.Is(ctx.Err(), context.DeadlineExceeded):
				fail(http.StatusGatewayTimeout, "timeout", fmt.Sprintf("%s endpoint %s did not answer within the rule's timeout %s", srv, dst.name, rule.Timeout))
			case req.Context().Err() != nil:
				x.status, x.reason = 499, "the client went away"
			default:
				fail(http.StatusBadGateway, "upstream_error", fmt.Sprintf("%s endpoint %s: %v", srv, dst.name, err))
			}
			return
		}
		for _, f := range []gateway.Filters{rule.Filters, b.Filters} {
			f.ResponseHeaders.Apply(resp.Header)
		}
		if r.opts.EndpointHeader {
			w.Header().Set("X-Berth-Endpoint", dst.name)
		}
		relayed := proxy.Relay(w, resp, kind != "" && kind != request.Speech)
		ttft := math.NaN()
		switch {
		case relayed.Status >= 500 || relayed.Status == http.StatusTooManyRequests:
			ttft = pick.Failed
		case relayed.Status/100 == 2 && !relayed.FirstByte.IsZero():
			ttft = relayed.FirstByte.Sub(sent).Seconds()
		}
		ends(ttft)
		x.status = relayed.Status
		if relayed.Err != nil {
			x.reason = relayed.Err.Error()
		}
		return
	}
}

// servesModel answers req by the ModelRoutes bound to a listener when one of them serves the
// model it names (they come before the listener's HTTPRoutes: they say which model they
// serve, an HTTPRoute does not), and reports whether it did.
func (r *Router) servesModel(w http.ResponseWriter, req *http.Request, models *match.Table) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.opts.MaxBodyBytes))
	req.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		// serveModelRoutes reads the (now short) body again and answers as for its own port.
		req.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), errReader{err}))
		r.serveModelRoutes(w, req, models, nil)
		return true
	}
	in, err := request.ParseContent(request.KindOf(req.URL.Path), req.Header.Get("Content-Type"), body)
	if err != nil {
		return false
	}
	if _, err := models.Match(match.Input{Model: in.Model, Path: req.URL.Path, Header: req.Header}, func(uint64) uint64 { return 0 }); errors.Is(err, match.ErrNoRoute) {
		return false
	}
	r.serveModelRoutes(w, req, models, in) // parsed once
	return true
}

// drawBackend picks one of a rule's backendRefs by weight (0 takes none).
func drawBackend(bs []gateway.Backend, rnd func(n uint64) uint64) (gateway.Backend, bool) {
	var total uint64
	for _, b := range bs {
		if b.Weight > 0 {
			total += uint64(b.Weight)
		}
	}
	if total == 0 {
		return gateway.Backend{}, false
	}
	n := rnd(total)
	for _, b := range bs {
		if b.Weight <= 0 {
			continue
		}
		if n < uint64(b.Weight) {
			return b, true
		}
		n -= uint64(b.Weight)
	}
	return gateway.Backend{}, false
}

// errReader fails every read with err: a body already read up to a failure keeps failing.
type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
