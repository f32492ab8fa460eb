package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
)

// Listeners are the router's Gateway listener ports: Sync opens and closes them as the
// Gateways say, and each serves handler(port). A port that cannot be opened (another
// process holds it) is reported, never fatal; the next Sync tries again.
type Listeners struct {
	// Host is the address the ports are opened on ("" every interface).
	Host string
	// Handler serves the requests of one port.
	Handler func(port int32) http.Handler
	// Certificate picks an HTTPS port's certificate for a TLS handshake (by SNI); it is
	// asked on every handshake, so a rotated Secret is used for the next connection.
	Certificate func(port int32, hello *tls.ClientHelloInfo) (*tls.Certificate, error)
	// ReadHeaderTimeout and IdleTimeout as for the router's own listener.
	ReadHeaderTimeout, IdleTimeout time.Duration
	Log                            logr.Logger

	mu     sync.Mutex
	open   map[int32]*served
	closed bool // after Shutdown: Sync opens nothing
}

type served struct {
	https  bool
	server *http.Server
	addr   string
}

// Sync makes the open ports exactly want (port → HTTPS) and returns the error of each
// port it could not open.
func (l *Listeners) Sync(want map[int32]bool) map[int32]error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil {
		l.open = map[int32]*served{}
	}
	if l.closed {
		want = nil
	}
	for port, s := range l.open {
		if https, ok := want[port]; !ok || https != s.https {
			l.Log.Info("closing Gateway listener", "port", port)
			_ = s.server.Close()
			delete(l.open, port)
		}
	}
	errs := map[int32]error{}
	for port, https := range want {
		if _, ok := l.open[port]; ok {
			continue
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(l.Host, strconv.Itoa(int(port))))
		if err != nil {
			errs[port] = err
			continue
		}
		srv := &http.Server{Handler: l.Handler(port), ReadHeaderTimeout: l.ReadHeaderTimeout, IdleTimeout: l.IdleTimeout, MaxHeaderBytes: 1 << 20}
		if https {
			srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
				return l.Certificate(port, h)
			}}
			ln = tls.NewListener(ln, srv.TLSConfig)
		}
		s := &served{https: https, server: srv, addr: ln.Addr().String()}
		l.open[port] = s
		l.Log.Info("serving Gateway listener", "port", port, "addr", s.addr, "https", https)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				l.Log.Error(err, "Gateway listener stopped", "port", port)
			}
		}()
	}
	return errs
}

// Addr is the address port is served on ("" when it is not open).
func (l *Listeners) Addr(port int32) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.open[port]; s != nil {
		return s.addr
	}
	return ""
}

// Shutdown stops taking requests on every port and waits for those in flight until ctx
// ends, then closes what is left.
func (l *Listeners) Shutdown(ctx context.Context) {
	l.mu.Lock()
	open := l.open
	l.open, l.closed = map[int32]*served{}, true
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range open {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.server.Shutdown(ctx); err != nil {
				_ = s.server.Close()
			}
		}()
	}
	wg.Wait()
}
