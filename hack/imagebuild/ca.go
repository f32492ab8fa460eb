package main

import (
	"bytes"
	"encoding/pem"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// CACertificates is the CA bundle the images carry at /etc/ssl/certs/ca-certificates.crt
// (where Go, and distroless, look): Mozilla's roots as golang.org/x/crypto/x509roots
// packages them, at the version go.mod pins, so the bundle, like the rest of the image, is
// the same on every machine. berth-router needs it for ModelServers served over https.
// Roots that Mozilla trusts only for certificates issued before a date are left out: a PEM
// file cannot carry that constraint, and trusting them without it would trust more.
func CACertificates() []byte {
	var b bytes.Buffer
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate})
	}
	return b.Bytes()
}
