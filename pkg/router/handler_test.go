package router

import (
	"testing"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
)

// A request's model label is one its ModelRoute declares: a client naming models nothing
// serves, or spelling a served one differently, creates no series of its own.
func TestMetricModel(t *testing.T) {
	route := &networkingv1alpha1.ModelRoute{Spec: networkingv1alpha1.ModelRouteSpec{ModelName: "llama", LoraAdapters: []string{"sql-lora"}}}
	for _, c := range []struct {
		route     *networkingv1alpha1.ModelRoute
		requested string
		want      string
	}{
		{nil, "random-model-8f3a", ""},
		{route, "llama", "llama"},
		{route, "sql-lora", "sql-lora"},
		{route, "anything-a-rule-let-through", "llama"},
	} {
		if got := metricModel(c.route, c.requested); got != c.want {
			t.Errorf("metricModel(%v, %q) = %q, want %q", c.route != nil, c.requested, got, c.want)
		}
	}
}
