// Package certs keeps berth-router's TLS material current while it runs: the API
// listener's certificate and key (controller-runtime's certwatcher: a file watch plus a
// poll, as a Secret mounted in a pod is swapped through a symlink) and the CA bundle the
// router trusts for https model servers. A rotated certificate reaches new connections
// without a restart; connections already open keep the one they were made with.
package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// DefaultInterval is how often files are read again when no file event came (certwatcher's
// own default).
const DefaultInterval = 10 * time.Second

// Listener serves the certificate in certFile/keyFile and follows its changes.
type Listener struct{ w *certwatcher.CertWatcher }

// NewListener reads the pair once (an error if it is not a valid pair); Run follows it.
func NewListener(certFile, keyFile string, interval time.Duration) (*Listener, error) {
	w, err := certwatcher.New(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &Listener{w: w.WithWatchInterval(interval)}, nil
}

// Run follows the files until ctx ends. A pair that does not load (a certificate written
// before its key) is logged by certwatcher and the last good one kept.
func (l *Listener) Run(ctx context.Context) error { return l.w.Start(ctx) }

// Config is a server TLS configuration that hands out the current certificate.
func (l *Listener) Config() *tls.Config {
	return &tls.Config{GetCertificate: l.w.GetCertificate, MinVersion: tls.VersionTLS12}
}

// CAPool is a CA bundle read from a file and read again when its content changes.
type CAPool struct {
	file     string
	interval time.Duration
	log      logr.Logger
	pem      []byte
	pool     atomic.Pointer[x509.CertPool]
	// Reloads counts the bundles loaded after the first, for tests and logs.
	Reloads atomic.Int64
}

// NewCAPool reads file, which must hold at least one PEM certificate.
func NewCAPool(file string, interval time.Duration, log logr.Logger) (*CAPool, error) {
	p := &CAPool{file: file, interval: interval, log: log}
	if _, err := p.load(); err != nil {
		return nil, err
	}
	return p, nil
}

// load reads the file and swaps the pool in when its content changed; changed says it did.
func (p *CAPool) load() (changed bool, err error) {
	b, err := os.ReadFile(p.file)
	if err != nil {
		return false, fmt.Errorf("upstream CA file: %w", err)
	}
	if p.pool.Load() != nil && bytes.Equal(b, p.pem) {
		return false, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return false, fmt.Errorf("upstream CA file %s: no PEM certificate in it", p.file)
	}
	p.pem = b
	p.pool.Store(pool)
	return true, nil
}

// Run reads the file every interval until ctx ends. A file that is briefly missing or
// half-written keeps the last good bundle in use.
func (p *CAPool) Run(ctx context.Context) {
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := p.load()
		switch {
		case err != nil:
			p.log.Error(err, "keeping the upstream CA bundle last read")
		case changed:
			p.Reloads.Add(1)
			p.log.Info("upstream CA bundle reloaded", "file", p.file)
		}
	}
}

// Roots is the bundle as last read: what a new connection to a model server is verified
// against (proxy.Proxy.UpstreamRoots asks for it at every handshake).
func (p *CAPool) Roots() *x509.CertPool { return p.pool.Load() }
