package router

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strings"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"k8s.io/apimachinery/pkg/types"
	certutil "k8s.io/client-go/util/cert"

	"github.com/berth-sh/berth/pkg/router/epp"
)

// eppServers are the endpoint picker's two gRPC listeners: health from the start, ext_proc
// once the view is synced.
type eppServers struct {
	health  *epp.Health
	hsrv    *grpc.Server
	extproc *grpc.Server
}

// startEPPHealth serves grpc.health.v1 on EPPHealthAddr: liveness SERVING, readiness and
// the ext_proc service NOT_SERVING until serveEPP.
func (r *Router) startEPPHealth() (*eppServers, error) {
	ln, err := net.Listen("tcp", r.opts.EPPHealthAddr)
	if err != nil {
		return nil, fmt.Errorf("endpoint picker health listener: %w", err)
	}
	a := ln.Addr().String()
	r.eppHAddr.Store(&a)
	s := &eppServers{health: epp.NewHealth(), hsrv: grpc.NewServer()}
	healthpb.RegisterHealthServer(s.hsrv, s.health)
	go func() {
		if err := s.hsrv.Serve(ln); err != nil {
			r.log.Error(err, "endpoint picker health listener stopped")
		}
	}()
	return s, nil
}

// serveEPP starts ext_proc on EPPAddr with the chooser (over ModelRoutes, or over EPPPool's
// pods) and reports ready.
func (r *Router) serveEPP(s *eppServers, errc chan<- error) error {
	ln, err := net.Listen("tcp", r.opts.EPPAddr)
	if err != nil {
		return fmt.Errorf("endpoint picker listener: %w", err)
	}
	a := ln.Addr().String()
	r.eppAddr.Store(&a)
	// A body chunk may be as large as the body (BUFFERED mode): the gRPC limit sits above
	// MaxBodyBytes so that an oversized body meets the picker's own 413, not a transport
	// error.
	limit := int(min(r.opts.MaxBodyBytes+1<<20, 1<<30))
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(limit), grpc.MaxSendMsgSize(limit)}
	if r.opts.EPPSecureServing {
		cfg, err := r.eppTLS()
		if err != nil {
			ln.Close()
			return err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	s.extproc = grpc.NewServer(opts...)
	chooser := &routeChooser{r: r, fallbacks: r.opts.EPPFallbacks}
	if ns, name, ok := strings.Cut(r.opts.EPPPool, "/"); ok {
		chooser.pool = &types.NamespacedName{Namespace: ns, Name: name}
	}
	extprocv3.RegisterExternalProcessorServer(s.extproc, epp.New(chooser, epp.Options{MaxBodyBytes: r.opts.MaxBodyBytes},
		r.log.WithName("epp"), r.metrics.registry))
	go func() { errc <- s.extproc.Serve(ln) }()
	s.health.SetReady(true)
	r.log.Info("endpoint picker serving ext_proc", "addr", a, "tls", r.opts.EPPSecureServing, "health", r.EPPHealthAddr(), "fallbacks", r.opts.EPPFallbacks, "pool", r.opts.EPPPool)
	return nil
}

// eppTLS is the ext_proc listener's TLS: the --tls-cert-file pair, else a self-signed
// certificate made at start (nothing written to disk).
func (r *Router) eppTLS() (*tls.Config, error) {
	var cert tls.Certificate
	var err error
	if r.opts.TLSCertFile != "" {
		cert, err = tls.LoadX509KeyPair(r.opts.TLSCertFile, r.opts.TLSKeyFile)
	} else {
		var certPEM, keyPEM []byte
		if certPEM, keyPEM, err = certutil.GenerateSelfSignedCertKey("berth-router-epp", nil, nil); err == nil {
			cert, err = tls.X509KeyPair(certPEM, keyPEM)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("endpoint picker certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}, nil
}

// stop lets open streams finish until ctx ends, then cuts them.
func (s *eppServers) stop(ctx context.Context) {
	for _, g := range []*grpc.Server{s.extproc, s.hsrv} {
		if g == nil {
			continue
		}
		done := make(chan struct{})
		go func() { g.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			g.Stop()
		}
	}
}
