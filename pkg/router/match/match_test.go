package match

import (
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
)

func s(v string) *string { return &v }
func w(v uint32) *uint32 { return &v }

func target(name string, weight *uint32) []networkingv1alpha1.TargetModel {
	return []networkingv1alpha1.TargetModel{{ModelServerName: name, Weight: weight}}
}

func mr(name string, age time.Duration, spec networkingv1alpha1.ModelRouteSpec) *networkingv1alpha1.ModelRoute {
	return &networkingv1alpha1.ModelRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, CreationTimestamp: metav1.NewTime(time.Unix(1e9, 0).Add(-age))},
		Spec:       spec,
	}
}

func first(uint64) uint64 { return 0 }

func TestRuleKinds(t *testing.T) {
	routes := []*networkingv1alpha1.ModelRoute{mr("r", 0, networkingv1alpha1.ModelRouteSpec{
		ModelName:    "llama",
		LoraAdapters: []string{"sql-lora"},
		Rules: []networkingv1alpha1.Rule{
			{Name: "header-exact", ModelMatch: &networkingv1alpha1.ModelMatch{Headers: map[string]networkingv1alpha1.StringMatch{"x-tier": {Exact: s("gold")}}}, TargetModels: target("gold", nil)},
			{Name: "header-regex", ModelMatch: &networkingv1alpha1.ModelMatch{Headers: map[string]networkingv1alpha1.StringMatch{"X-User": {Regex: s("^team-[0-9]+$")}}}, TargetModels: target("teams", nil)},
			{Name: "uri-prefix", ModelMatch: &networkingv1alpha1.ModelMatch{URI: &networkingv1alpha1.StringMatch{Prefix: s("/v1/completions")}}, TargetModels: target("legacy", nil)},
			{Name: "body-lora", ModelMatch: &networkingv1alpha1.ModelMatch{Body: &networkingv1alpha1.BodyMatch{Model: s("sql-lora")}}, TargetModels: target("lora", nil)},
			{Name: "uri-exact", ModelMatch: &networkingv1alpha1.ModelMatch{URI: &networkingv1alpha1.StringMatch{Exact: s("/v1/chat/completions")}}, TargetModels: target("chat", nil)},
		},
	})}
	table, errs := NewTable(routes)
	require.Empty(t, errs)
	for _, tc := range []struct {
		name    string
		in      Input
		target  string
		adapter bool
		err     error
	}{
		{"exact header wins first", Input{Model: "llama", Path: "/v1/chat/completions", Header: http.Header{"X-Tier": {"gold"}}}, "gold", false, nil},
		{"header regex", Input{Model: "llama", Path: "/v1/chat/completions", Header: http.Header{"X-User": {"team-42"}}}, "teams", false, nil},
		{"header regex miss falls through", Input{Model: "llama", Path: "/v1/chat/completions", Header: http.Header{"X-User": {"team-x"}}}, "chat", false, nil},
		{"uri prefix", Input{Model: "llama", Path: "/v1/completions"}, "legacy", false, nil},
		{"lora by body", Input{Model: "sql-lora", Path: "/v1/chat/completions"}, "lora", true, nil},
		{"uri exact", Input{Model: "llama", Path: "/v1/chat/completions"}, "chat", false, nil},
		{"no rule", Input{Model: "llama", Path: "/v2/other"}, "", false, ErrNoRule},
		{"no route", Input{Model: "mistral", Path: "/v1/chat/completions"}, "", false, ErrNoRoute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := table.Match(tc.in, first)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.target, res.Target.Name)
			assert.Equal(t, tc.adapter, res.Adapter)
		})
	}
	assert.Equal(t, []string{"llama", "sql-lora"}, table.Models())
}

func TestEmptyMatchMatchesAllAndOldestRouteWins(t *testing.T) {
	table, errs := NewTable([]*networkingv1alpha1.ModelRoute{
		mr("newer", time.Minute, networkingv1alpha1.ModelRouteSpec{ModelName: "m", Rules: []networkingv1alpha1.Rule{{TargetModels: target("b", nil)}}}),
		mr("older", time.Hour, networkingv1alpha1.ModelRouteSpec{ModelName: "m", Rules: []networkingv1alpha1.Rule{{ModelMatch: &networkingv1alpha1.ModelMatch{}, TargetModels: target("a", nil)}}}),
		mr("bad", 2*time.Hour, networkingv1alpha1.ModelRouteSpec{ModelName: "m", Rules: []networkingv1alpha1.Rule{{ModelMatch: &networkingv1alpha1.ModelMatch{URI: &networkingv1alpha1.StringMatch{Regex: s("(")}}}}}),
	})
	require.Len(t, errs, 1)
	assert.Contains(t, errs[0].Error(), "ModelRoute ns/bad: rules[0].modelMatch.uri: regex")
	res, err := table.Match(Input{Model: "m", Path: "/anything"}, first)
	require.NoError(t, err)
	assert.Equal(t, "a", res.Target.Name)
	assert.Equal(t, "rule-0", res.RuleName)
}

func TestZeroWeightTakesNoTraffic(t *testing.T) {
	table, _ := NewTable([]*networkingv1alpha1.ModelRoute{mr("r", 0, networkingv1alpha1.ModelRouteSpec{ModelName: "m", Rules: []networkingv1alpha1.Rule{
		{TargetModels: []networkingv1alpha1.TargetModel{{ModelServerName: "off", Weight: w(0)}, {ModelServerName: "on", Weight: w(1)}}},
	}})})
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		res, err := table.Match(Input{Model: "m", Path: "/"}, rng.Uint64N)
		require.NoError(t, err)
		require.Equal(t, "on", res.Target.Name)
	}
	table, _ = NewTable([]*networkingv1alpha1.ModelRoute{mr("r", 0, networkingv1alpha1.ModelRouteSpec{ModelName: "m", Rules: []networkingv1alpha1.Rule{
		{TargetModels: []networkingv1alpha1.TargetModel{{ModelServerName: "off", Weight: w(0)}}},
	}})})
	_, err := table.Match(Input{Model: "m", Path: "/"}, rng.Uint64N)
	require.ErrorIs(t, err, ErrNoTraffic)
}

// A target whose ModelServer has no Ready endpoint (a backend scaled to zero) takes none of
// the traffic while another target can serve; the others keep their relative weights.
func TestTargetsWithoutEndpointsAreSkipped(t *testing.T) {
	table, _ := NewTable([]*networkingv1alpha1.ModelRoute{mr("r", 0, networkingv1alpha1.ModelRouteSpec{ModelName: "m", Rules: []networkingv1alpha1.Rule{
		{TargetModels: []networkingv1alpha1.TargetModel{{ModelServerName: "h100", Weight: w(60)}, {ModelServerName: "a100", Weight: w(30)}, {ModelServerName: "l40", Weight: w(10)}}},
	}})})
	rng := rand.New(rand.NewPCG(3, 4))
	up := map[string]bool{"h100": true, "l40": true}
	in := Input{Model: "m", Path: "/", Serving: func(ns string, tg Target) bool { assert.Equal(t, "ns", ns); return up[tg.Name] }}
	counts := map[string]int{}
	for range 7000 {
		res, err := table.Match(in, rng.Uint64N)
		require.NoError(t, err)
		counts[res.Target.Name]++
	}
	assert.Zero(t, counts["a100"])
	assert.InDelta(t, 6000, counts["h100"], 300, "60:10 of the serving targets")
	assert.InDelta(t, 1000, counts["l40"], 300)

	// Nothing serving: the draw is over every target, so the failure names one.
	up = map[string]bool{}
	counts = map[string]int{}
	for range 1000 {
		res, err := table.Match(in, rng.Uint64N)
		require.NoError(t, err)
		counts[res.Target.Name]++
	}
	assert.Len(t, counts, 3)
}

// TestWeightsChiSquared: over many requests the split follows the weights (chi-squared test
// at 3 degrees of freedom, p = 0.001 critical value 16.27).
func TestWeightsChiSquared(t *testing.T) {
	weights := []uint32{10, 20, 30, 40}
	var targets []networkingv1alpha1.TargetModel
	for i, wt := range weights {
		targets = append(targets, networkingv1alpha1.TargetModel{ModelServerName: string(rune('a' + i)), Weight: w(wt)})
	}
	table, _ := NewTable([]*networkingv1alpha1.ModelRoute{mr("r", 0, networkingv1alpha1.ModelRouteSpec{ModelName: "m", Rules: []networkingv1alpha1.Rule{{TargetModels: targets}}})})
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	const n = 20000
	counts := map[string]float64{}
	for range n {
		res, err := table.Match(Input{Model: "m", Path: "/"}, rng.Uint64N)
		require.NoError(t, err)
		counts[res.Target.Name]++
	}
	chi := 0.0
	for i, wt := range weights {
		exp := n * float64(wt) / 100
		d := counts[string(rune('a'+i))] - exp
		chi += d * d / exp
	}
	assert.Less(t, chi, 16.27, "counts %v", counts)
}

// A target names a ModelServer or an ExternalModelProvider; Draw leaves out tried and
// weight-0 targets and prefers serving ones, for a retry on another target.
func TestProviderTargetsAndDraw(t *testing.T) {
	table, errs := NewTable([]*networkingv1alpha1.ModelRoute{mr("r", 0, networkingv1alpha1.ModelRouteSpec{ModelName: "m", Rules: []networkingv1alpha1.Rule{{
		TargetModels: []networkingv1alpha1.TargetModel{
			{ModelServerName: "local", Weight: w(0)},
			{ExternalModelProviderName: "hosted", Weight: w(30)},
			{ModelServerName: "gpu", Weight: w(70)},
		}}}})})
	require.Empty(t, errs)
	res, err := table.Match(Input{Model: "m", Path: "/v1/messages"}, first)
	require.NoError(t, err)
	assert.Equal(t, Target{Kind: Provider, Name: "hosted", Weight: 30}, res.Target)
	assert.Len(t, res.Targets, 3)

	tried := func(t Target) bool { return t.Name == "hosted" }
	next, ok := Draw(res.Targets, tried, nil, first)
	require.True(t, ok)
	assert.Equal(t, "gpu", next.Name, "the weight-0 target is never drawn, the tried one is left out")
	_, ok = Draw(res.Targets, func(t Target) bool { return t.Name != "local" }, nil, first)
	assert.False(t, ok, "only a weight-0 target left")

	up := func(t Target) bool { return t.Kind == ModelServer }
	for range 20 {
		got, ok := Draw(res.Targets, nil, up, rand.Uint64N)
		require.True(t, ok)
		assert.Equal(t, "gpu", got.Name, "the serving target is preferred")
	}
	got, ok := Draw(res.Targets, nil, func(Target) bool { return false }, first)
	require.True(t, ok)
	assert.Equal(t, "hosted", got.Name, "none serving: drawn over all, to name one in the error")
}
