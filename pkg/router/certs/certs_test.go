package certs

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func caPEM(t *testing.T, name string) ([]byte, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	c, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), c
}

// The bundle follows the file; a file that is briefly not a bundle keeps the last good one.
func TestCAPoolFollowsTheFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ca.crt")
	_, err := NewCAPool(file, time.Millisecond, logr.Discard())
	require.Error(t, err, "a missing file is an error at start")
	require.NoError(t, os.WriteFile(file, []byte("not pem"), 0o600))
	_, err = NewCAPool(file, time.Millisecond, logr.Discard())
	require.ErrorContains(t, err, "no PEM certificate")

	first, firstCert := caPEM(t, "first")
	require.NoError(t, os.WriteFile(file, first, 0o600))
	p, err := NewCAPool(file, 10*time.Millisecond, logr.Discard())
	require.NoError(t, err)
	trusts := func(c *x509.Certificate) bool {
		_, err := c.Verify(x509.VerifyOptions{Roots: p.Roots()})
		return err == nil
	}
	require.True(t, trusts(firstCert))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)

	require.NoError(t, os.WriteFile(file, []byte("half-written"), 0o600))
	time.Sleep(50 * time.Millisecond)
	assert.True(t, trusts(firstCert), "a bad file keeps the last good bundle")

	second, secondCert := caPEM(t, "second")
	require.NoError(t, os.WriteFile(file, second, 0o600))
	require.Eventually(t, func() bool { return trusts(secondCert) }, 5*time.Second, 10*time.Millisecond)
	assert.False(t, trusts(firstCert), "the old CA is no longer trusted")
	assert.EqualValues(t, 1, p.Reloads.Load())
}
