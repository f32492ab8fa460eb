// Package match decides which target (a ModelServer, or an ExternalModelProvider as Kthena
// writes it since v1.0) a request goes to, with ModelRoute's semantics (seed 001): the
// request's model selects a route by modelName, else by loraAdapters; the route's rules are
// tried in order and the first whose modelMatch holds wins (an absent or empty modelMatch
// matches everything); the rule's targetModels share its traffic by weight (default 100, 0
// sends none). It is pure: the view builds a Table, the handler asks it.
package match

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"

	networkingv1alpha1 "github.com/berth-sh/berth/pkg/apis/networking/v1alpha1"
)

// Input is what a rule can look at.
type Input struct {
	Model  string
	Path   string
	Header http.Header
	// Serving, when set, says whether a target of a route in namespace can take this
	// request now (a ModelServer with a Ready endpoint; a provider whose credential is
	// loaded and that speaks the request's API). The weighted draw then skips targets that
	// cannot serve, as long as another target of the rule can: a backend scaled to zero
	// must not fail its share of the traffic.
	Serving func(namespace string, t Target) bool
}

// Kind is what a target names.
type Kind string

const (
	// ModelServer: targetModels[].modelServerName.
	ModelServer Kind = "ModelServer"
	// Provider: targetModels[].externalModelProviderName.
	Provider Kind = "ExternalModelProvider"
)

// Target is one of a rule's targetModels.
type Target struct {
	Kind   Kind
	Name   string // in the route's namespace
	Weight uint32
}

// String is "ModelServer name" or "ExternalModelProvider name".
func (t Target) String() string { return string(t.Kind) + " " + t.Name }

// Result is the chosen route, rule and target.
type Result struct {
	Route    *networkingv1alpha1.ModelRoute
	RuleName string // the rule's name, or "rule-<index>" when it has none
	Target   Target
	// Targets are all of the rule's targets, for a retry that goes to another one.
	Targets []Target
	// Adapter is true when the model matched one of the route's loraAdapters: the engine
	// serves it under that name, so the router must not rewrite it to the base model.
	Adapter bool
}

// Errors the handler maps to HTTP statuses.
var (
	// ErrNoRoute: no ModelRoute names the model (404, like an engine's unknown model).
	ErrNoRoute = errors.New("no ModelRoute serves this model")
	// ErrNoRule: a route serves the model but none of its rules matches (404, seed 001).
	ErrNoRule = errors.New("no rule matches")
	// ErrNoTraffic: the matching rule has no target with weight above zero (503).
	ErrNoTraffic = errors.New("no target takes traffic")
)

// Table is an immutable, compiled set of ModelRoutes.
type Table struct {
	byModel map[string][]*route
	byLora  map[string][]*route
	models  []string
}

type route struct {
	obj   *networkingv1alpha1.ModelRoute
	rules []rule
}

type rule struct {
	name    string
	uri     *stringMatch
	headers map[string]*stringMatch // canonical header name
	model   *string
	targets []Target
}

type stringMatch struct {
	exact, prefix *string
	re            *regexp.Regexp
}

func (m *stringMatch) matches(v string) bool {
	switch {
	case m.exact != nil:
		return v == *m.exact
	case m.prefix != nil:
		return strings.HasPrefix(v, *m.prefix)
	case m.re != nil:
		return m.re.MatchString(v)
	}
	return true
}

// NewTable compiles routes. A route whose rules cannot compile (a bad regex) is left out
// and reported in the returned errors, one per route, so one bad route never blocks others.
// Routes sharing a model name are tried oldest first, then by namespace/name, so every
// router replica picks the same one.
func NewTable(routes []*networkingv1alpha1.ModelRoute) (*Table, []error) {
	sorted := append([]*networkingv1alpha1.ModelRoute(nil), routes...)
	sort.SliceStable(sorted, func(i, j int) bool { return ServedBefore(sorted[i], sorted[j]) })
	t := &Table{byModel: map[string][]*route{}, byLora: map[string][]*route{}}
	var errs []error
	seen := map[string]bool{}
	for _, mr := range sorted {
		r, err := compile(mr)
		if err != nil {
			errs = append(errs, fmt.Errorf("ModelRoute %s/%s: %w", mr.Namespace, mr.Name, err))
			continue
		}
		if name := mr.Spec.ModelName; name != "" {
			t.byModel[name] = append(t.byModel[name], r)
			if !seen[name] {
				seen[name] = true
				t.models = append(t.models, name)
			}
		}
		for _, lora := range mr.Spec.LoraAdapters {
			t.byLora[lora] = append(t.byLora[lora], r)
			if !seen[lora] {
				seen[lora] = true
				t.models = append(t.models, lora)
			}
		}
	}
	sort.Strings(t.models)
	return t, errs
}

// ServedBefore is the order among routes sharing a model name: oldest first, then by
// namespace/name. The first is the one that serves the name.
func ServedBefore(a, b *networkingv1alpha1.ModelRoute) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

func compile(mr *networkingv1alpha1.ModelRoute) (*route, error) {
	r := &route{obj: mr}
	for i, ru := range mr.Spec.Rules {
		c := rule{name: ru.Name}
		if c.name == "" {
			c.name = fmt.Sprintf("rule-%d", i)
		}
		for _, tm := range ru.TargetModels {
			t := Target{Kind: ModelServer, Name: tm.ModelServerName, Weight: weightOf(tm)}
			if tm.ExternalModelProviderName != "" {
				t.Kind, t.Name = Provider, tm.ExternalModelProviderName
			}
			c.targets = append(c.targets, t)
		}
		if m := ru.ModelMatch; m != nil {
			var err error
			if m.URI != nil {
				if c.uri, err = compileString(*m.URI); err != nil {
					return nil, fmt.Errorf("rules[%d].modelMatch.uri: %w", i, err)
				}
			}
			for name, sm := range m.Headers {
				if c.headers == nil {
					c.headers = map[string]*stringMatch{}
				}
				if c.headers[http.CanonicalHeaderKey(name)], err = compileString(sm); err != nil {
					return nil, fmt.Errorf("rules[%d].modelMatch.headers[%s]: %w", i, name, err)
				}
			}
			if m.Body != nil {
				c.model = m.Body.Model
			}
		}
		r.rules = append(r.rules, c)
	}
	return r, nil
}

func compileString(sm networkingv1alpha1.StringMatch) (*stringMatch, error) {
	m := &stringMatch{exact: sm.Exact, prefix: sm.Prefix}
	if sm.Regex != nil {
		// Unanchored, as Kthena's router matches: write ^...$ for a whole-value match.
		re, err := regexp.Compile(*sm.Regex)
		if err != nil {
			return nil, fmt.Errorf("regex %q: %w", *sm.Regex, err)
		}
		m.re = re
	}
	return m, nil
}

func weightOf(tm networkingv1alpha1.TargetModel) uint32 {
	if tm.Weight == nil {
		return 100
	}
	return *tm.Weight
}

// Draw picks one of targets by weight, leaving out those tried (nil: none) and those with
// weight 0. Among the rest it prefers those serving (nil: all are): only when none of them
// serves does it draw over all, so that the request then fails naming the target it drew,
// which is what the user needs to see. ok is false when no target is left.
func Draw(targets []Target, tried func(Target) bool, serving func(Target) bool, rnd func(n uint64) uint64) (Target, bool) {
	var all, up uint64
	for _, t := range targets {
		if t.Weight == 0 || (tried != nil && tried(t)) {
			continue
		}
		all += uint64(t.Weight)
		if serving == nil || serving(t) {
			up += uint64(t.Weight)
		}
	}
	if all == 0 {
		return Target{}, false
	}
	total, usable := all, func(Target) bool { return true }
	if up > 0 && up < all {
		total, usable = up, serving
	}
	n := rnd(total)
	for _, t := range targets {
		if t.Weight == 0 || (tried != nil && tried(t)) || !usable(t) {
			continue
		}
		if n < uint64(t.Weight) {
			return t, true
		}
		n -= uint64(t.Weight)
	}
	return Target{}, false // not reached: n < total
}

// Models lists every model name and adapter some route serves, sorted (for /v1/models).
func (t *Table) Models() []string { return t.models }

// Match finds the target for in. rnd(n) returns a uniform integer in [0, n); it picks
// among weighted targets.
func (t *Table) Match(in Input, rnd func(n uint64) uint64) (Result, error) {
	routes, adapter := t.byModel[in.Model], false
	if len(routes) == 0 {
		routes, adapter = t.byLora[in.Model], true
	}
	if len(routes) == 0 {
		return Result{}, ErrNoRoute
	}
	r := routes[0]
	for _, ru := range r.rules {
		if !ru.matches(in) {
			continue
		}
		res := Result{Route: r.obj, RuleName: ru.name, Targets: ru.targets, Adapter: adapter}
		var serving func(Target) bool
		if in.Serving != nil {
			serving = func(t Target) bool { return in.Serving(r.obj.Namespace, t) }
		}
		t, ok := Draw(ru.targets, nil, serving, rnd)
		if !ok {
			return res, fmt.Errorf("%w: rule %s of ModelRoute %s/%s has no target with weight above 0", ErrNoTraffic, ru.name, r.obj.Namespace, r.obj.Name)
		}
		res.Target = t
		return res, nil
	}
	return Result{Route: r.obj, Adapter: adapter}, fmt.Errorf("%w ModelRoute %s/%s for this request", ErrNoRule, r.obj.Namespace, r.obj.Name)
}

func (ru *rule) matches(in Input) bool {
	uri := ru.uri
	if uri == nil {
		// Seed 001: without a uri match, a prefix match on "/" applies.
		uri = &stringMatch{prefix: ptr("/")}
	}
	if !uri.matches(in.Path) {
		return false
	}
	for name, m := range ru.headers {
		vals, ok := in.Header[name]
		if !ok {
			return false
		}
		any := false
		for _, v := range vals {
			if m.matches(v) {
				any = true
				break
			}
		}
		if !any {
			return false
		}
	}
	if ru.model != nil && *ru.model != in.Model {
		return false
	}
	return true
}

func ptr[T any](v T) *T { return &v }
