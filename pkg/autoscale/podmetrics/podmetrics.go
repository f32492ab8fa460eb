// Package podmetrics reads a scale target's metrics from its pods' Prometheus endpoints,
// the way an AutoscalingPolicyBinding's metricEndpoint says: gauges as the value per pod,
// counters as a rate per second since the previous read, histograms and summaries as the
// mean of the observations since the previous read. One Reader belongs to one binding: it
// remembers the previous read of every pod.
package podmetrics

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"

	"github.com/berth-sh/berth/pkg/autoscale"
)

// Pod is what the reader needs of a pod.
type Pod struct {
	UID   types.UID
	Name  string
	IP    string
	Ready bool
}

// FromPods is what the reader needs of the live pods among pods: those not deleted and not
// finished, ready when Running and Ready.
func FromPods(pods []corev1.Pod) []Pod {
	var out []Pod
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		out = append(out, Pod{UID: p.UID, Name: p.Name, IP: p.Status.PodIP, Ready: p.Status.Phase == corev1.PodRunning && podutil.IsPodReady(p)})
	}
	return out
}

// Endpoint is where the pods serve their metrics.
type Endpoint struct {
	Port int32
	Path string
}

// Result is one read: a Sample per metric name, and what went wrong where.
type Result struct {
	Samples map[string]autoscale.Sample
	// Answered is how many ready pods served their metrics.
	Answered int
	// Unexposed names the metrics no answering pod exposes (a misspelt metricName).
	Unexposed []string
	// Errors are the pods that did not answer, at most a few.
	Errors []string
}

type cumulative struct {
	sum, count float64 // count is 0 for a counter
	at         time.Time
	// value is the reading of the interval that ended at at, when there was one.
	value    float64
	hasValue bool
}

// minInterval is the shortest interval a rate or a mean is read over. A read sooner after the
// previous one (a sync triggered by the last sync's own writes, milliseconds later) would
// see a counter that has not moved and report no load; the previous interval's reading
// stands instead, and the baseline stays.
const minInterval = time.Second

// Reader reads metrics; safe for one caller at a time per Reader.
type Reader struct {
	client *http.Client
	mu     sync.Mutex
	last   map[types.UID]map[string]cumulative
}

// NewReader makes a reader whose requests time out after timeout.
func NewReader(timeout time.Duration) *Reader {
	return &Reader{
		client: &http.Client{Timeout: timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute}},
		last:   map[types.UID]map[string]cumulative{},
	}
}

// Close releases idle connections.
func (r *Reader) Close() { r.client.CloseIdleConnections() }

// Read scrapes every ready pod concurrently and aggregates names over them. Pods that are
// not ready, do not answer, lack a metric, or (for a rate) are read for the first time
// count as Missing for it.
func (r *Reader) Read(ctx context.Context, pods []Pod, ep Endpoint, names []string, now time.Time) Result {
	type scraped struct {
		pod      Pod
		families map[string]*dto.MetricFamily
		err      error
	}
	results := make([]scraped, len(pods))
	var wg sync.WaitGroup
	for i, p := range pods {
		results[i].pod = p
		if !p.Ready || p.IP == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i].families, results[i].err = r.scrape(ctx, p, ep)
		}()
	}
	wg.Wait()

	r.mu.Lock()
	defer r.mu.Unlock()
	res := Result{Samples: map[string]autoscale.Sample{}}
	exposed := map[string]bool{}
	seen := map[types.UID]bool{}
	for _, s := range results {
		seen[s.pod.UID] = true
		if s.families == nil {
			if s.err != nil && len(res.Errors) < 3 {
				res.Errors = append(res.Errors, fmt.Sprintf("pod %s: %v", s.pod.Name, s.err))
			}
			for _, n := range names {
				sm := res.Samples[n]
				sm.Missing++
				res.Samples[n] = sm
			}
			continue
		}
		res.Answered++
		for _, n := range names {
			sm := res.Samples[n]
			v, ok, found := r.value(s.pod.UID, n, s.families, now)
			exposed[n] = exposed[n] || found
			if ok {
				sm.Sum += v
				sm.Reported++
			} else {
				sm.Missing++
			}
			res.Samples[n] = sm
		}
	}
	for uid := range r.last {
		if !seen[uid] {
			delete(r.last, uid)
		}
	}
	if res.Answered > 0 {
		for _, n := range names {
			if !exposed[n] {
				res.Unexposed = append(res.Unexposed, n)
			}
		}
	}
	return res
}

// PodGauges is one pod's answer to ReadGauges: each gauge's value (its series summed),
// or the error that kept the pod from answering.
type PodGauges struct {
	Pod    Pod
	Values map[string]float64 // only the names the pod exposes as a gauge
	Err    error
}

// ReadGauges scrapes every ready pod concurrently and returns each one's gauges by name,
// one entry per ready pod in the order given, for callers that judge pods one by one
// rather than their sum. It keeps no state: a gauge needs no previous read.
func (r *Reader) ReadGauges(ctx context.Context, pods []Pod, ep Endpoint, names []string) []PodGauges {
	var out []PodGauges
	for _, p := range pods {
		if p.Ready && p.IP != "" {
			out = append(out, PodGauges{Pod: p})
		}
	}
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			families, err := r.scrape(ctx, out[i].Pod, ep)
			if err != nil {
				out[i].Err = err
				return
			}
			out[i].Values = map[string]float64{}
			for _, n := range names {
				f := families[n]
				if f == nil || (f.GetType() != dto.MetricType_GAUGE && f.GetType() != dto.MetricType_UNTYPED) {
					continue
				}
				var sum float64
				for _, m := range f.Metric {
					if f.GetType() == dto.MetricType_GAUGE {
						sum += m.GetGauge().GetValue()
					} else {
						sum += m.GetUntyped().GetValue()
					}
				}
				out[i].Values[n] = sum
			}
		}()
	}
	wg.Wait()
	return out
}

// value is the pod's reading of name: (value, usable, exposed).
func (r *Reader) value(uid types.UID, name string, families map[string]*dto.MetricFamily, now time.Time) (float64, bool, bool) {
	f := families[name]
	if f == nil {
		f = families[name+"_total"]
	}
	if f == nil {
		return 0, false, false
	}
	var sum, count float64
	for _, m := range f.Metric {
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			sum += m.GetCounter().GetValue()
		case dto.MetricType_GAUGE:
			sum += m.GetGauge().GetValue()
		case dto.MetricType_HISTOGRAM:
			sum += m.GetHistogram().GetSampleSum()
			count += float64(m.GetHistogram().GetSampleCount())
		case dto.MetricType_SUMMARY:
			sum += m.GetSummary().GetSampleSum()
			count += float64(m.GetSummary().GetSampleCount())
		default:
			sum += m.GetUntyped().GetValue()
		}
	}
	switch f.GetType() {
	case dto.MetricType_GAUGE, dto.MetricType_UNTYPED:
		return sum, true, true
	}
	// Cumulative: a rate (counter) or a mean over the interval (histogram, summary).
	byName := r.last[uid]
	if byName == nil {
		byName = map[string]cumulative{}
		r.last[uid] = byName
	}
	prev, had := byName[name]
	restarted := sum < prev.sum || count < prev.count
	if had && !restarted && now.Sub(prev.at) < minInterval {
		return prev.value, prev.hasValue, true
	}
	byName[name] = cumulative{sum: sum, count: count, at: now}
	if !had || restarted {
		return 0, false, true // first read, or the engine restarted
	}
	var v float64
	switch {
	case f.GetType() == dto.MetricType_COUNTER:
		v = (sum - prev.sum) / now.Sub(prev.at).Seconds()
	case count == prev.count:
		v = 0 // nothing observed since the last read
	default:
		v = (sum - prev.sum) / (count - prev.count)
	}
	byName[name] = cumulative{sum: sum, count: count, at: now, value: v, hasValue: true}
	return v, true, true
}

func (r *Reader) scrape(ctx context.Context, p Pod, ep Endpoint) (map[string]*dto.MetricFamily, error) {
	path := ep.Path
	if path == "" || path[0] != '/' {
		path = "/" + path
	}
	url := "http://" + net.JoinHostPort(p.IP, strconv.Itoa(int(ep.Port))) + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	return families, nil
}
