package router

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/berth-sh/berth/pkg/router"
	"github.com/berth-sh/berth/pkg/sim/engine"
)

// testCA is a certificate authority that issues server certificates for IP addresses.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue is a server certificate for ip with the given serial, as PEM certificate and key.
func (ca *testCA) issue(t *testing.T, ip string, serial int64) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: ip}, IPAddresses: []net.IP{net.ParseIP(ip)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	require.NoError(t, err)
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// startRouter runs a router of its own with o until the test ends.
func startRouter(t *testing.T, o router.Options) *router.Router {
	t.Helper()
	o.Addr, o.ShutdownTimeout = "127.0.0.1:0", time.Second
	r, err := router.New(cp.RESTConfig(), o, klog.Background().WithName("router-"+t.Name()))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-r.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("router not ready")
	}
	return r
}

// The listener's certificate and key are read again when rotated on disk: a new connection
// gets the new certificate, with no restart.
func TestTLSListenerRotation(t *testing.T) {
	startSystem(t)
	ca := newCA(t, "listener-ca")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	write := func(serial int64) {
		c, k := ca.issue(t, "127.0.0.1", serial)
		// Key first, then certificate: a reader between the two sees a mismatched pair and
		// keeps the one it has.
		require.NoError(t, os.WriteFile(keyFile, k, 0o600))
		require.NoError(t, os.WriteFile(certFile, c, 0o600))
	}
	write(1)
	r := startRouter(t, router.Options{TLSCertFile: certFile, TLSKeyFile: keyFile, TLSReloadInterval: 100 * time.Millisecond})
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	serial := func() int64 {
		conn, err := tls.Dial("tcp", r.Addr(), &tls.Config{RootCAs: pool})
		if err != nil {
			return 0
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	require.EqualValues(t, 1, serial(), "the listener serves the certificate on disk")
	write(2)
	w := &world{t: t, ctx: context.Background()}
	w.eventually("a new connection gets the rotated certificate", 30*time.Second, func() bool { return serial() == 2 })
}

// --upstream-ca-file: an https model server is verified against the bundle in the file, and
// a rotated bundle is trusted without a restart. The engine's certificate moves to a new CA;
// until the file names it, the router refuses the engine; once it does, requests pass.
func TestUpstreamCARotation(t *testing.T) {
	w := newWorld(t, 1)
	w.pod("secure-0", map[string]string{"app": "secure-up"})
	w.apply(`
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelServer
metadata: {name: secure-up}
spec:
  model: base-model
  inferenceEngine: vLLM
  workloadSelector: {matchLabels: {app: secure-up}}
  workloadPort: {port: 8000, protocol: https}
`, `
apiVersion: networking.serving.volcano.sh/v1alpha1
kind: ModelRoute
metadata: {name: secure-up}
spec:
  modelName: secure-up
  rules:
  - targetModels: [{modelServerName: secure-up}]
`)
	var podIP string
	w.eventually("pod secure-0 has an IP", 60*time.Second, func() bool {
		p, err := kube.CoreV1().Pods(w.ns).Get(w.ctx, "secure-0", metav1.GetOptions{})
		podIP = p.Status.PodIP
		return err == nil && podIP != ""
	})

	// The https engine: a simulated engine behind TLS whose certificate can be swapped.
	eng := engine.New(engine.Config{Model: "base-model", ID: "https-engine", TimeScale: defaultTimeScale})
	t.Cleanup(func() { _ = eng.Close() })
	oldCA, nextCA := newCA(t, "old-ca"), newCA(t, "new-ca")
	var leaf atomic.Pointer[tls.Certificate]
	setLeaf := func(ca *testCA, serial int64) {
		c, k := ca.issue(t, podIP, serial)
		pair, err := tls.X509KeyPair(c, k)
		require.NoError(t, err)
		leaf.Store(&pair)
	}
	setLeaf(oldCA, 1)
	// Not httptest's TLS server: it adds a certificate of its own, which a client sending no
	// server name (an IP address) would get in place of GetCertificate's.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: eng.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	// Every request on a new connection, so a swapped certificate is presented at once.
	srv.SetKeepAlivesEnabled(false)
	engineAddr := ln.Addr().String()
	go func() {
		_ = srv.Serve(tls.NewListener(ln, &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return leaf.Load(), nil }}))
	}()
	t.Cleanup(func() { _ = srv.Close() })

	caFile := filepath.Join(t.TempDir(), "ca.crt")
	require.NoError(t, os.WriteFile(caFile, oldCA.pem, 0o600))
	var d net.Dialer
	r := startRouter(t, router.Options{UpstreamCAFile: caFile, TLSReloadInterval: 100 * time.Millisecond, EndpointHeader: true,
		// The pod's address leads to the https engine (the simulated kubelet's engine
		// speaks plain HTTP).
		DialEndpoint: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == net.JoinHostPort(podIP, "8000") {
				addr = engineAddr
			}
			return d.DialContext(ctx, network, addr)
		}})
	w.eventually("the router sees the https endpoint", 30*time.Second, func() bool {
		s := r.View().Snapshot().Server(w.ns, "secure-up")
		return s != nil && len(s.Endpoints) == 1 && s.Endpoints[0].Scheme == "https"
	})
	c := openai.NewClient(option.WithBaseURL("http://"+r.Addr()+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0))
	w.eventually("a request reaches the https engine, verified by the old CA", 30*time.Second, func() bool {
		_, resp, err := chat(w.ctx, c, "secure-up", "over https")
		return err == nil && resp.Header.Get("X-Sim-Engine") == "https-engine"
	})

	setLeaf(nextCA, 2)
	_, _, err = chat(w.ctx, c, "secure-up", "new certificate, old bundle")
	require.Error(t, err, "an engine whose certificate the bundle does not sign is refused")
	require.Contains(t, []int{http.StatusBadGateway, http.StatusServiceUnavailable}, statusOf(err), "%v", err)

	require.NoError(t, os.WriteFile(caFile, nextCA.pem, 0o600))
	w.eventually("the rotated bundle is trusted without a restart", 30*time.Second, func() bool {
		_, resp, err := chat(w.ctx, c, "secure-up", fmt.Sprintf("after rotation %d", time.Now().UnixNano()))
		return err == nil && resp.Header.Get("X-Sim-Engine") == "https-engine"
	})
}
