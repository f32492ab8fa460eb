package forwarded

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestHeadersAppendNeverReplace(t *testing.T) {
	req := httptest.NewRequest(http.MethodPost, "http://router.example:8080/v1/embeddings", nil)
	req.RemoteAddr = "10.0.0.7:51234"
	h := Headers(req)
	assert.Equal(t, "10.0.0.7", h["X-Forwarded-For"])
	assert.Equal(t, `for=10.0.0.7;proto=http;host="router.example:8080"`, h["Forwarded"])
	assert.Equal(t, "http", h["X-Forwarded-Proto"])
	assert.Equal(t, "router.example:8080", h["X-Forwarded-Host"])

	req.Header.Add("X-Forwarded-For", "203.0.113.9, 198.51.100.2")
	req.Header.Add("X-Forwarded-For", "192.0.2.1")
	req.Header.Set("Forwarded", "for=203.0.113.9;proto=https")
	req.Header.Set("X-Forwarded-Proto", "https")
	req.RemoteAddr = "[2001:db8::1]:443"
	req.TLS = &tls.ConnectionState{}
	h = Headers(req)
	assert.Equal(t, "203.0.113.9, 198.51.100.2, 192.0.2.1, 2001:db8::1", h["X-Forwarded-For"], "every hop kept, in order, the router's last")
	assert.Equal(t, `for=203.0.113.9;proto=https, for="[2001:db8::1]";proto=https;host="router.example:8080"`, h["Forwarded"])
	_, set := h["X-Forwarded-Proto"]
	assert.False(t, set, "the first proxy's X-Forwarded-Proto is left as it came")
}
