package router

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A pick counted after its pod left the view (the request chose it just before) must not
// leave a series behind: the next view change deletes every series of a pod not in the view,
// whether or not the previous view had it.
func TestForgetPodsRemovesLateSeries(t *testing.T) {
	m := newMetrics()
	m.picks.WithLabelValues("ns/srv", "a", "").Inc()
	m.picks.WithLabelValues("ns/srv", "b", "").Inc()
	m.picks.WithLabelValues("ns/srv", "b", "decode").Inc()
	m.forgetPods(map[string]bool{"a": true})
	// "b" was already gone from the view when its late pick re-created its series.
	m.picks.WithLabelValues("ns/srv", "b", "").Inc()
	m.forgetPods(map[string]bool{"a": true})
	if n := testutil.CollectAndCount(m.picks); n != 1 {
		t.Fatalf("want only pod a's series, got %d series", n)
	}
	fams, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var pods []string
	for _, f := range fams {
		if f.GetName() != "berth_router_endpoint_picks_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "pod" {
					pods = append(pods, l.GetValue())
				}
			}
		}
	}
	if strings.Join(pods, ",") != "a" {
		t.Fatalf("pick series left for pods %v, want only a", pods)
	}
}
