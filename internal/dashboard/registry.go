package dashboard

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	k8smetrics "k8s.io/component-base/metrics"
)

// Metric types, as Prometheus' exposition format names them.
const (
	Counter   = "counter"
	Gauge     = "gauge"
	Histogram = "histogram"
	Summary   = "summary"
	Untyped   = "untyped"
)

// Families are the metric families a component exports: name (as exposed, counters with
// their _total) → type.
type Families map[string]string

// Registry is what a component serves /metrics from: a *prometheus.Registry (berth-router's,
// controller-runtime's metrics.Registry, component-base's legacyregistry underneath).
type Registry interface {
	prometheus.Registerer
	prometheus.Gatherer
	prometheus.Collector
}

// Exported are the families r serves, including vectors that have no series yet (a
// counter of errors that never happened): every descriptor its collectors describe. The type
// of a family with series comes from gathering it; of one without, from the collector that
// registered it (a registration of its own descriptor is refused naming that collector).
// A family neither tells the type of (no series yet, from a collector of several families)
// is Untyped.
func Exported(r Registry) (Families, error) {
	f := Families{}
	gathered, err := r.Gather()
	if err != nil {
		return nil, fmt.Errorf("gather: %w", err)
	}
	for _, mf := range gathered {
		f[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	// Describe holds the registry's lock until it returns; probe only after.
	ch := make(chan *prometheus.Desc)
	go func() {
		r.Describe(ch)
		close(ch)
	}()
	var descs []*prometheus.Desc
	for d := range ch {
		descs = append(descs, d)
	}
	for _, d := range descs {
		name, err := descName(d)
		if err != nil {
			return nil, err
		}
		if _, ok := f[name]; ok {
			continue
		}
		typ, err := typeOf(r, d)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if typ == "" {
			typ = Untyped
		}
		f[name] = typ
	}
	return f, nil
}

// descName is a descriptor's fully-qualified name. Desc has no accessor for it; its String
// starts with it: Desc{fqName: "name", help: ...}.
func descName(d *prometheus.Desc) (string, error) {
	s := d.String()
	const prefix = "Desc{fqName: "
	if !strings.HasPrefix(s, prefix) {
		return "", fmt.Errorf("descriptor %s: unexpected form", s)
	}
	q, err := strconv.QuotedPrefix(s[len(prefix):])
	if err != nil {
		return "", fmt.Errorf("descriptor %s: %w", s, err)
	}
	return strconv.Unquote(q)
}

// probe describes one descriptor a registry already holds, so that registering it is refused.
type probe struct{ d *prometheus.Desc }

func (p probe) Describe(ch chan<- *prometheus.Desc) { ch <- p.d }
func (p probe) Collect(chan<- prometheus.Metric)    {}

// typeOf is the type of the collector that registered d in r, "" when d is one of several
// descriptors of its collector (the registry then names no collector).
func typeOf(r Registry, d *prometheus.Desc) (string, error) {
	err := r.Register(probe{d})
	if err == nil {
		r.Unregister(probe{d})
		return "", errors.New("the registry accepted its descriptor again: not registered")
	}
	var already prometheus.AlreadyRegisteredError
	if !errors.As(err, &already) {
		return "", nil
	}
	switch already.ExistingCollector.(type) {
	case *prometheus.CounterVec, *k8smetrics.CounterVec, *k8smetrics.Counter:
		return Counter, nil
	case *prometheus.GaugeVec, *k8smetrics.GaugeVec, *k8smetrics.Gauge:
		return Gauge, nil
	case *prometheus.HistogramVec, *k8smetrics.HistogramVec, *k8smetrics.Histogram,
		*k8smetrics.TimingHistogramVec, *k8smetrics.TimingHistogram:
		return Histogram, nil
	case *prometheus.SummaryVec, *k8smetrics.SummaryVec, *k8smetrics.Summary:
		return Summary, nil
	}
	// A single metric (prometheus.NewCounter, ...) always has its series, so gathering has
	// typed it already; anything else is a collector of its own.
	return "", nil
}

// Lookup resolves a series name a query selects to the family that exports it: the family
// itself, or a histogram's _bucket, _sum and _count, or a summary's _sum and _count. A
// histogram's own name is not a series.
func (f Families) Lookup(series string) (family, typ string, ok bool) {
	if typ, ok := f[series]; ok && typ != Histogram {
		return series, typ, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, found := strings.CutSuffix(series, suffix)
		if !found {
			continue
		}
		switch typ := f[base]; {
		case typ == Histogram, typ == Summary && suffix != "_bucket":
			return base, typ, true
		}
	}
	return "", "", false
}
