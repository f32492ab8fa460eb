package router

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"

	"github.com/berth-sh/berth/pkg/version"
)

// adminServer builds the admin listener: /metrics (behind the apiserver's authentication
// and authorization when MetricsAuth is set, over HTTPS), /healthz, /readyz and /version.
func (r *Router) adminServer() (*http.Server, net.Listener, error) {
	var metrics http.Handler = promhttp.HandlerFor(r.metrics.registry, promhttp.HandlerOpts{})
	mux := http.NewServeMux()
	r.health(mux)
	mux.Handle("GET /version", version.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: r.opts.ReadHeaderTimeout}
	if r.opts.MetricsAuth {
		hc, err := rest.HTTPClientFor(r.cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("admin listener: %w", err)
		}
		// The same filter controller-runtime puts in front of berth-controller's metrics:
		// TokenReview, then a SubjectAccessReview for GET /metrics, cached briefly.
		filter, err := filters.WithAuthenticationAndAuthorization(r.cfg, hc)
		if err != nil {
			return nil, nil, fmt.Errorf("admin listener: %w", err)
		}
		if metrics, err = filter(r.log.WithName("metrics-auth"), metrics); err != nil {
			return nil, nil, fmt.Errorf("admin listener: %w", err)
		}
		// A self-signed certificate made at start (nothing written to disk: the root file
		// system is read-only), as kube-controller-manager and controller-runtime do by
		// default: what matters is that the token is encrypted.
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{{127, 0, 0, 1}}, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("admin listener certificate: %w", err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, nil, fmt.Errorf("admin listener certificate: %w", err)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	mux.Handle("GET /metrics", metrics)
	ln, err := net.Listen("tcp", r.opts.AdminAddr)
	if err != nil {
		return nil, nil, err
	}
	if srv.TLSConfig != nil {
		ln = tls.NewListener(ln, srv.TLSConfig)
	}
	return srv, ln, nil
}
