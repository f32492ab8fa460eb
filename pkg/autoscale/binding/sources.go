package binding

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
	"github.com/berth-sh/berth/pkg/autoscale"
	"github.com/berth-sh/berth/pkg/autoscale/podmetrics"
	"github.com/berth-sh/berth/pkg/autoscale/promsource"
)

// metricRead is how one policy metric of a target is read: scraped from its pods, or
// queried from Prometheus.
type metricRead struct {
	key string // the policy metric's name
	// Pod sources: the metric's name in the pods' output, where they serve it, and which of
	// the target's pods (nil: all).
	name string
	ep   podmetrics.Endpoint
	sel  labels.Selector
	// prom is a Prometheus source.
	prom *workloadv1alpha1.PrometheusMetricSource
}

// planReads says how each of keys is read for a target: by its metricSources entry
// (Kthena 1.0), or else from the pods under its own name at the metricEndpoint (the spec's;
// :8100/metrics by default).
func planReads(spec workloadv1alpha1.Target, keys []string, field string) ([]metricRead, error) {
	port, path := int32(defaultMetricPort), defaultMetricPath
	if ep := spec.MetricEndpoint; ep != nil {
		if ep.Port != 0 {
			port = ep.Port
		}
		if ep.URI != "" {
			path = ep.URI
		}
	}
	out := make([]metricRead, 0, len(keys))
	for _, k := range keys {
		src, ok := spec.MetricSources[k]
		switch {
		case !ok:
			out = append(out, metricRead{key: k, name: k, ep: podmetrics.Endpoint{Port: port, Path: path}})
		case src.Prometheus != nil:
			out = append(out, metricRead{key: k, prom: src.Prometheus})
		case src.Pod != nil:
			p := src.Pod
			rd := metricRead{key: k, name: p.Name, ep: podmetrics.Endpoint{Port: p.Port, Path: p.Uri}}
			if rd.name == "" {
				rd.name = k
			}
			if rd.ep.Port == 0 {
				rd.ep.Port = defaultMetricPort
			}
			if rd.ep.Path == "" {
				rd.ep.Path = defaultMetricPath
			}
			if p.LabelSelector != nil {
				sel, err := metav1.LabelSelectorAsSelector(p.LabelSelector)
				if err != nil {
					return nil, &problem{ReasonMetricSource, fmt.Sprintf("%s.metricSources[%s].pod.labelSelector: %v", field, k, err)}
				}
				rd.sel = sel
			}
			out = append(out, rd)
		default:
			return nil, &problem{ReasonMetricSource, fmt.Sprintf("%s.metricSources[%s]: set pod or prometheus", field, k)}
		}
	}
	return out, nil
}

// targetRead is one target's metrics at one decision.
type targetRead struct {
	samples  map[string]autoscale.Sample // by policy metric
	answered int                         // ready pods that served their metrics
	errors   []string                    // pods that did not answer, queries that failed
}

// readTarget reads every metric of a target: the pod sources grouped by endpoint and pod
// selector (each pod is scraped once per group), the Prometheus sources one query each.
func (r *Reconciler) readTarget(ctx context.Context, namespace string, st *state, t *target, reads []metricRead, now time.Time) (targetRead, error) {
	out := targetRead{samples: map[string]autoscale.Sample{}}
	type group struct {
		ep    podmetrics.Endpoint
		sel   labels.Selector
		names []string
		reads []metricRead
	}
	groups := map[string]*group{}
	var order []string
	for _, rd := range reads {
		if rd.prom != nil {
			v, err := r.query(ctx, namespace, rd.prom, now)
			if err != nil {
				out.errors = append(out.errors, fmt.Sprintf("metric %s from Prometheus %s: %v", rd.key, rd.prom.ServerURL, err))
				continue
			}
			out.samples[rd.key] = autoscale.Sample{Sum: v, Reported: 1, External: true}
			continue
		}
		sel := ""
		if rd.sel != nil {
			sel = rd.sel.String()
		}
		gk := strconv.Itoa(int(rd.ep.Port)) + rd.ep.Path + "|" + sel
		g := groups[gk]
		if g == nil {
			g = &group{ep: rd.ep, sel: rd.sel}
			groups[gk] = g
			order = append(order, gk)
		}
		g.reads = append(g.reads, rd)
		g.names = appendUnique(g.names, rd.name)
	}
	for _, gk := range order {
		g := groups[gk]
		pods := t.pods
		if g.sel != nil {
			pods = podmetrics.FromPods(filterPods(t.podList, g.sel))
		}
		res := st.reader(t.key+"|"+gk, r.MetricReadTimeout).Read(ctx, pods, g.ep, g.names, now)
		out.answered = max(out.answered, res.Answered)
		out.errors = append(out.errors, res.Errors...)
		if len(res.Unexposed) > 0 {
			return out, &problem{ReasonUnknownMetric, fmt.Sprintf("metric %s is not exposed by any of the %d ready pods of %s at :%d%s; check the policy's metric name (or its pod source's name)",
				strings.Join(quoteAll(res.Unexposed), ", "), res.Answered, t.key, g.ep.Port, g.ep.Path)}
		}
		for _, rd := range g.reads {
			out.samples[rd.key] = res.Samples[rd.name]
		}
	}
	return out, nil
}

// query runs a Prometheus source's query, with the credentials its auth names.
func (r *Reconciler) query(ctx context.Context, namespace string, src *workloadv1alpha1.PrometheusMetricSource, now time.Time) (float64, error) {
	var auth promsource.Auth
	if a := src.Auth; a != nil {
		var err error
		if a.BearerTokenSecret != nil {
			var tok []byte
			if tok, err = r.secretKey(ctx, namespace, a.BearerTokenSecret); err != nil {
				return 0, fmt.Errorf("auth.bearerTokenSecret: %w", err)
			}
			auth.BearerToken = strings.TrimSpace(string(tok))
		}
		if c := a.TLSConfig; c != nil {
			auth.InsecureSkipVerify = c.InsecureSkipVerify
			if c.CASecret != nil {
				if auth.CA, err = r.secretKey(ctx, namespace, c.CASecret); err != nil {
					return 0, fmt.Errorf("auth.tlsConfig.caSecret: %w", err)
				}
			}
		}
	}
	return r.prom.Query(ctx, src.ServerURL, src.Query, now, auth)
}

// secretKey reads one key of a Secret in namespace.
func (r *Reconciler) secretKey(ctx context.Context, namespace string, sel *corev1.SecretKeySelector) ([]byte, error) {
	var s corev1.Secret
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: sel.Name}, &s); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("Secret %s not found in namespace %s", sel.Name, namespace)
		}
		return nil, err
	}
	v, ok := s.Data[sel.Key]
	if !ok {
		keys := make([]string, 0, len(s.Data))
		for k := range s.Data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return nil, fmt.Errorf("Secret %s has no key %q (it has %s)", sel.Name, sel.Key, strings.Join(keys, ", "))
	}
	return v, nil
}

func filterPods(pods []corev1.Pod, sel labels.Selector) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if sel.Matches(labels.Set(p.Labels)) {
			out = append(out, p)
		}
	}
	return out
}

func appendUnique(xs []string, x string) []string {
	for _, y := range xs {
		if y == x {
			return xs
		}
	}
	return append(xs, x)
}

func quoteAll(xs []string) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = strconv.Quote(x)
	}
	return out
}
