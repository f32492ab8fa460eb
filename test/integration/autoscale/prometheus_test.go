package autoscale

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

// miniProm is a Prometheus-compatible HTTP API over the simulated engines, as small as the
// autoscaler's source needs: /api/v1/query answers the instant query
// sum(<metric>{namespace="<ns>",modelserving="<name>"}) with the metric summed over the
// ModelServing's ready entry pods, scraped from their engines at the moment of the query,
// in the Prometheus API's JSON. It serves https only and wants a bearer token.
type miniProm struct {
	srv     *httptest.Server
	token   string
	queries atomic.Int64 // answered
	denied  atomic.Int64 // refused for their token
}

var sumQuery = regexp.MustCompile(`^sum\(([a-zA-Z_:][a-zA-Z0-9_:]*)\{namespace="([^"]+)",modelserving="([^"]+)"\}\)$`)

func (w *world) startMiniProm(token string) *miniProm {
	m := &miniProm{token: token}
	m.srv = httptest.NewTLSServer(http.HandlerFunc(m.serve))
	w.t.Cleanup(m.srv.Close)
	return m
}

// caPEM is the certificate the server's clients must trust.
func (m *miniProm) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.srv.Certificate().Raw})
}

func (m *miniProm) serve(w http.ResponseWriter, r *http.Request) {
	fail := func(code int, typ, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(map[string]string{"status": "error", "errorType": typ, "error": msg})
	}
	if r.URL.Path != "/api/v1/query" {
		fail(http.StatusNotFound, "not_found", r.URL.Path)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+m.token {
		m.denied.Add(1)
		fail(http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token")
		return
	}
	if err := r.ParseForm(); err != nil {
		fail(http.StatusBadRequest, "bad_data", err.Error())
		return
	}
	q := sumQuery.FindStringSubmatch(r.Form.Get("query"))
	if q == nil {
		fail(http.StatusBadRequest, "bad_data", "this server only answers sum(metric{namespace=\"..\",modelserving=\"..\"})")
		return
	}
	metric, ns, name := q[1], q[2], q[3]
	var pods corev1.PodList
	if err := cl.List(r.Context(), &pods, client.InNamespace(ns),
		client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: name, workloadv1alpha1.EntryLabel: "true"}); err != nil {
		fail(http.StatusServiceUnavailable, "unavailable", err.Error())
		return
	}
	var sum float64
	found := false
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil || p.Status.PodIP == "" {
			continue
		}
		v, ok := scrapeGauge(r.Context(), net.JoinHostPort(p.Status.PodIP, "8000"), metric)
		if ok {
			sum += v
			found = true
		}
	}
	result := []any{}
	if found { // like Prometheus: a sum over no series is an empty vector
		at := float64(time.Now().UnixMilli()) / 1000
		result = append(result, map[string]any{"metric": map[string]string{}, "value": []any{at, fmt.Sprint(sum)}})
	}
	m.queries.Add(1)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": result}})
}

func scrapeGauge(ctx context.Context, addr, metric string) (float64, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil || families[metric] == nil {
		return 0, false
	}
	var v float64
	for _, m := range families[metric].Metric {
		v += m.GetGauge().GetValue()
	}
	return v, true
}

// A homogeneousTarget whose metric comes from Prometheus: the query's value is the whole
// target's (running requests over all its engines), so the target asks for ceil(value /
// targetValue) replicas. The server is reached over https with the CA and bearer token the
// policy's auth names in a Secret; with a wrong token nothing is scaled and the policy says
// why.
func TestPrometheusSourceScalesOnAQuery(t *testing.T) {
	w := newWorld(t, 1)
	w.served("promtarget", "prom-model", "promtarget", 1)
	w.route("promtarget", "prom-model")
	w.waitAvailable("promtarget", 1)
	log := w.watchReplicas("promtarget")["promtarget"]
	prom := w.startMiniProm("right-token")

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prom-auth", Namespace: w.ns},
		Data: map[string][]byte{"token": []byte("wrong-token\n"), "ca.crt": prom.caPEM()}}
	require.NoError(t, cl.Create(w.ctx, secret))
	query := fmt.Sprintf(`sum(%s{namespace="%s",modelserving="promtarget"})`, running, w.ns)
	w.apply(fmt.Sprintf(`
apiVersion: workload.serving.volcano.sh/v1alpha1
kind: AutoscalingPolicy
metadata: {name: prom}
spec:
  tolerancePercent: 10
  metrics:
  - {name: inflight, targetValue: "2"}
  homogeneousTarget:
    target:
      targetRef: {name: promtarget}
      metricSources:
        inflight:
          prometheus:
            serverURL: %s
            query: '%s'
            auth:
              bearerTokenSecret: {name: prom-auth, key: token}
              tlsConfig: {caSecret: {name: prom-auth, key: ca.crt}}
    minReplicas: 1
    maxReplicas: 4
  behavior:
    scaleUp:
      stablePolicy: {instances: 1, percent: 100, period: 1s}
      panicPolicy: {panicThresholdPercent: 1000}
    scaleDown: {instances: 1, percent: 100, period: 1s, stabilizationWindow: 2s}
`, prom.srv.URL, query))

	// 8 requests in flight against 2 per replica: 4 replicas, once the token is right.
	l := w.startLoad("prom-model", 8, 400)
	w.eventually("the wrong token is reported", 20*time.Second, func() bool {
		s, reason, msg := policyCondition(w.policy("prom"), "Ready")
		return s == "False" && reason == "NoRecommendation" && strings.Contains(msg, "HTTP 401: unauthorized: missing or wrong bearer token")
	})
	assert.Positive(t, prom.denied.Load())
	assert.Equal(t, []int32{1}, log.values(), "nothing scaled without the metric")

	secret.Data["token"] = []byte("right-token")
	require.NoError(t, cl.Update(w.ctx, secret))
	w.eventually("scaled up to 4 on the query", 30*time.Second, func() bool { return log.last() == 4 })
	assert.Positive(t, prom.queries.Load())
	w.eventually("the status shows the query's value", 10*time.Second, func() bool {
		p := w.policy("prom")
		s, _, msg := policyCondition(p, "Ready")
		return s == "True" && strings.Contains(msg, "from Prometheus (target 2 per replica)") &&
			p.Status.HomogeneousStatus != nil && p.Status.HomogeneousStatus.CurrentReplicas == 4
	})

	l.end()
	w.eventually("scaled down to 1 when the query says 0", 30*time.Second, func() bool { return log.last() == 1 })
	for _, c := range log.snapshot() {
		assert.True(t, c.n >= 1 && c.n <= 4, "within the bounds: %v", log.values())
	}
	assert.Zero(t, l.bad.Load())
}
