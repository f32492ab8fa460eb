// Package promsource reads one number from a Prometheus server: the instant query of an
// AutoscalingPolicy metric source (Kthena 1.0's metricSources[].prometheus). It speaks the
// Prometheus HTTP API (/api/v1/query), so anything that serves it works: Prometheus, Thanos,
// Mimir, VictoriaMetrics.
package promsource

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Auth is how a request authenticates to the server and verifies it.
type Auth struct {
	// BearerToken is sent as "Authorization: Bearer <token>" when set.
	BearerToken string
	// CA is a PEM bundle the server's certificate must chain to (the system's roots when empty).
	CA []byte
	// InsecureSkipVerify accepts any server certificate.
	InsecureSkipVerify bool
}

// Client runs instant queries. It keeps one connection pool per TLS setting; it is safe for
// concurrent use.
type Client struct {
	timeout time.Duration
	mu      sync.Mutex
	pools   map[[32]byte]*http.Client
}

// New makes a client whose queries time out after timeout.
func New(timeout time.Duration) *Client {
	return &Client{timeout: timeout, pools: map[[32]byte]*http.Client{}}
}

// Close releases idle connections.
func (c *Client) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, h := range c.pools {
		h.CloseIdleConnections()
	}
}

// Query evaluates query at time at on the server at serverURL (its base URL, which may carry
// a path prefix) and returns its value. The result must be a scalar or a vector of exactly
// one sample, and finite: anything else is an error that says what came back.
func (c *Client) Query(ctx context.Context, serverURL, query string, at time.Time, auth Auth) (float64, error) {
	base, err := url.Parse(serverURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return 0, fmt.Errorf("serverURL %q is not an http or https URL", serverURL)
	}
	h, err := c.pool(auth)
	if err != nil {
		return 0, err
	}
	endpoint := base.JoinPath("api", "v1", "query").String()
	form := url.Values{"query": {query}, "time": {strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64)}}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	body, status, err := c.post(ctx, h, endpoint, form, auth)
	if err == nil && status == http.StatusMethodNotAllowed {
		// Some Prometheus-compatible servers take the query only as a GET.
		body, status, err = c.get(ctx, h, endpoint+"?"+form.Encode(), auth)
	}
	if err != nil {
		return 0, fmt.Errorf("query %s: %w", endpoint, err)
	}
	return decode(body, status)
}

func (c *Client) post(ctx context.Context, h *http.Client, endpoint string, form url.Values, auth Auth) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return do(h, req, auth)
}

func (c *Client) get(ctx context.Context, h *http.Client, u string, auth Auth) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, 0, err
	}
	return do(h, req, auth)
}

func do(h *http.Client, req *http.Request, auth Auth) ([]byte, int, error) {
	req.Header.Set("Accept", "application/json")
	if auth.BearerToken != "" {
		req.Header.Set("Authorization", "Bearer "+auth.BearerToken)
	}
	resp, err := h.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return body, resp.StatusCode, err
}

// response is the Prometheus HTTP API's envelope.
type response struct {
	Status    string   `json:"status"`
	ErrorType string   `json:"errorType"`
	Error     string   `json:"error"`
	Warnings  []string `json:"warnings"`
	Data      struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	} `json:"data"`
}

func decode(body []byte, status int) (float64, error) {
	var r response
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, fmt.Errorf("HTTP %d, not a Prometheus API response: %.200s", status, strings.TrimSpace(string(body)))
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("HTTP %d: %s: %s", status, r.ErrorType, r.Error)
	}
	var v string
	switch r.Data.ResultType {
	case "scalar":
		var pair []json.RawMessage
		if err := json.Unmarshal(r.Data.Result, &pair); err != nil || len(pair) != 2 {
			return 0, fmt.Errorf("malformed scalar %s", r.Data.Result)
		}
		if err := json.Unmarshal(pair[1], &v); err != nil {
			return 0, fmt.Errorf("malformed scalar %s", r.Data.Result)
		}
	case "vector":
		var samples []struct {
			Metric map[string]string  `json:"metric"`
			Value  [2]json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(r.Data.Result, &samples); err != nil {
			return 0, fmt.Errorf("malformed vector: %w", err)
		}
		if len(samples) != 1 {
			return 0, fmt.Errorf("the query must return one sample, it returned %d (aggregate it, e.g. sum(...))", len(samples))
		}
		if err := json.Unmarshal(samples[0].Value[1], &v); err != nil {
			return 0, fmt.Errorf("malformed sample %s", samples[0].Value[1])
		}
	default:
		return 0, fmt.Errorf("the query must return a scalar or a vector, it returned a %s", r.Data.ResultType)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0, fmt.Errorf("sample value %q: %w", v, err)
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("the query returned %s", v)
	}
	return f, nil
}

// pool is the HTTP client for auth's TLS settings.
func (c *Client) pool(auth Auth) (*http.Client, error) {
	key := sha256.Sum256(append(auth.CA, boolByte(auth.InsecureSkipVerify)))
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.pools[key]; h != nil {
		return h, nil
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 2
	tr.IdleConnTimeout = time.Minute
	if len(auth.CA) > 0 || auth.InsecureSkipVerify {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: auth.InsecureSkipVerify} //nolint:gosec // the user asked for it
		if len(auth.CA) > 0 {
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(auth.CA) {
				return nil, errors.New("the CA bundle holds no PEM certificate")
			}
			cfg.RootCAs = roots
		}
		tr.TLSClientConfig = cfg
	}
	h := &http.Client{Transport: tr}
	c.pools[key] = h
	return h, nil
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}
