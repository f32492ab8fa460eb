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
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"

	"github.com/berth-sh/berth/pkg/router"
)

// With a certificate and key, the router serves the API over HTTPS only; a client that
// trusts the certificate gets answers, a plain-HTTP one does not.
func TestTLSListener(t *testing.T) {
	w := newWorld(t, 1)
	w.servedPods("secure", 1, "", nil)
	certFile, keyFile, pool := selfSigned(t)
	r, err := router.New(cp.RESTConfig(), router.Options{Addr: "127.0.0.1:0", TLSCertFile: certFile, TLSKeyFile: keyFile,
		ShutdownTimeout: time.Second}, klog.Background().WithName("router-tls"))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-r.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("TLS router not ready")
	}
	w.eventually("the TLS router sees the endpoint", 10*time.Second, func() bool {
		s := r.View().Snapshot().Server(w.ns, "secure")
		return s != nil && len(s.Endpoints) == 1
	})
	httpsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	c := openai.NewClient(option.WithBaseURL("https://"+r.Addr()+"/v1"), option.WithAPIKey("test"), option.WithMaxRetries(0),
		option.WithHTTPClient(httpsClient))
	out, _, err := chat(w.ctx, c, "secure", "over TLS")
	require.NoError(t, err)
	assert.NotEmpty(t, out.Choices[0].Message.Content)

	// A TLS listener answers a plain-HTTP request with Go's own 400 and nothing of the API:
	// the status alone would not tell it from the router refusing the empty body over HTTP.
	res, err := http.Post("http://"+r.Addr()+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"secure"}`))
	require.NoError(t, err, "a TLS listener answers plain HTTP with a 400, not by dropping the connection")
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, http.StatusBadRequest, res.StatusCode, "plain HTTP to a TLS listener is refused: %s", body)
	assert.Contains(t, string(body), "Client sent an HTTP request to an HTTPS server", "plain HTTP was answered by something other than the TLS listener's refusal")
}

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns a pool trusting it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "berth-router"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
