package promsource

import (
	"context"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// server answers /prefix/api/v1/query with body for the query "q", checking the token.
func server(t *testing.T, tls bool, token string, postAllowed bool, body string) *httptest.Server {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/prefix/api/v1/query" {
			http.NotFound(w, r)
			return
		}
		if r.Method == http.MethodPost && !postAllowed {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = fmt.Fprint(w, `{"status":"error","errorType":"unauthorized","error":"bad token"}`)
			return
		}
		require.NoError(t, r.ParseForm())
		assert.Equal(t, "q", r.Form.Get("query"))
		assert.NotEmpty(t, r.Form.Get("time"))
		_, _ = fmt.Fprint(w, body)
	})
	var s *httptest.Server
	if tls {
		s = httptest.NewTLSServer(h)
	} else {
		s = httptest.NewServer(h)
	}
	t.Cleanup(s.Close)
	return s
}

func TestQuery(t *testing.T) {
	vector := func(v string) string {
		return `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1700000000.5,"` + v + `"]}]}}`
	}
	c := New(2 * time.Second)
	defer c.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		name, body string
		want       float64
		err        string
	}{
		{"one-sample vector", vector("12.5"), 12.5, ""},
		{"scalar", `{"status":"success","data":{"resultType":"scalar","result":[1700000000,"3"]}}`, 3, ""},
		{"empty vector", `{"status":"success","data":{"resultType":"vector","result":[]}}`, 0, "it returned 0 (aggregate it"},
		{"two samples", `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"1"},"value":[1,"1"]},{"metric":{"a":"2"},"value":[1,"2"]}]}}`, 0, "it returned 2"},
		{"matrix", `{"status":"success","data":{"resultType":"matrix","result":[]}}`, 0, "it returned a matrix"},
		{"NaN", vector("NaN"), 0, "the query returned NaN"},
		{"error envelope", `{"status":"error","errorType":"bad_data","error":"parse error at char 4"}`, 0, "bad_data: parse error at char 4"},
		{"not the API", `<html>hello</html>`, 0, "not a Prometheus API response"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := server(t, false, "", true, tc.body)
			got, err := c.Query(ctx, s.URL+"/prefix", "q", time.Now(), Auth{})
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}

	t.Run("GET when POST is not allowed", func(t *testing.T) {
		s := server(t, false, "", false, vector("7"))
		got, err := c.Query(ctx, s.URL+"/prefix/", "q", time.Now(), Auth{})
		require.NoError(t, err)
		assert.Equal(t, 7.0, got)
	})
	t.Run("bearer token", func(t *testing.T) {
		s := server(t, false, "s3cret", true, vector("1"))
		_, err := c.Query(ctx, s.URL+"/prefix", "q", time.Now(), Auth{})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "HTTP 401: unauthorized: bad token")
		got, err := c.Query(ctx, s.URL+"/prefix", "q", time.Now(), Auth{BearerToken: "s3cret"})
		require.NoError(t, err)
		assert.Equal(t, 1.0, got)
	})
	t.Run("https with the server's CA", func(t *testing.T) {
		s := server(t, true, "", true, vector("2"))
		_, err := c.Query(ctx, s.URL+"/prefix", "q", time.Now(), Auth{})
		require.Error(t, err, "an unknown CA is refused")
		ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
		got, err := c.Query(ctx, s.URL+"/prefix", "q", time.Now(), Auth{CA: ca})
		require.NoError(t, err)
		assert.Equal(t, 2.0, got)
		got, err = c.Query(ctx, s.URL+"/prefix", "q", time.Now(), Auth{InsecureSkipVerify: true})
		require.NoError(t, err)
		assert.Equal(t, 2.0, got)
		_, err = c.Query(ctx, s.URL+"/prefix", "q", time.Now(), Auth{CA: []byte("junk")})
		assert.ErrorContains(t, err, "no PEM certificate")
	})
	t.Run("not a URL", func(t *testing.T) {
		_, err := c.Query(ctx, "prometheus:9090", "q", time.Now(), Auth{})
		assert.ErrorContains(t, err, `serverURL "prometheus:9090" is not an http or https URL`)
	})
}
