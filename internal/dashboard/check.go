package dashboard

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// JobVariable is the template variable that selects a component's scrape jobs:
// scheduler_job for "scheduler".
func JobVariable(component string) string { return component + "_job" }

// Check returns what is wrong with the dashboard's queries, given the metric families each
// component exports (component name → families):
//
//   - every expression parses, and every panel query has one;
//   - every selector of a panel says whose metric it reads, with job=~"$<component>_job"
//     (several components joined by |, for a metric each of them exports), and names a
//     metric each of those components exports: a family, or a histogram's _bucket/_sum/_count
//     or a summary's _sum/_count;
//   - a counter (and a histogram's or summary's series) is read through rate(), irate() or
//     increase() over a range, a gauge never is, and a histogram's _bucket goes to
//     histogram_quantile() through aggregations that keep le;
//   - a query variable <component>_job selects a metric that component exports; any other
//     query variable one some component exports.
func Check(d *Dashboard, components map[string]Families) ([]string, error) {
	queries, err := d.Queries()
	if err != nil {
		return nil, err
	}
	jobVars := map[string]string{}
	var names []string
	for c := range components {
		jobVars[JobVariable(c)] = c
		names = append(names, c)
	}
	sort.Strings(names)
	var problems []string
	report := func(q Query, format string, args ...any) {
		problems = append(problems, q.Where+": "+fmt.Sprintf(format, args...))
	}
	for _, q := range queries {
		if strings.TrimSpace(q.Expr) == "" {
			report(q, "no expression")
			continue
		}
		selectors, err := Selectors(q.Expr)
		if err != nil {
			report(q, "%v", err)
			continue
		}
		if len(selectors) == 0 {
			report(q, "selects no metric: %s", q.Expr)
		}
		for _, s := range selectors {
			var owners []string
			switch c, ok := jobVars[q.Variable]; {
			case q.Variable == "":
				owners, err = jobOwners(s, jobVars)
				if err != nil {
					report(q, "%s: %v", s.Metric, err)
					continue
				}
			case ok:
				owners = []string{c}
			default:
				owners = names
			}
			found := false
			for _, c := range owners {
				family, typ, ok := components[c].Lookup(s.Metric)
				if !ok {
					if q.Variable == "" || len(owners) == 1 {
						report(q, "%s is not a metric berth-%s exports%s", s.Metric, c, components[c].hint(s.Metric))
					}
					continue
				}
				found = true
				if q.Variable == "" {
					if p := typeProblem(s, family, typ); p != "" {
						report(q, "%s", p)
					}
				}
			}
			if !found && q.Variable != "" && len(owners) > 1 {
				report(q, "%s is not a metric any component exports", s.Metric)
			}
		}
	}
	return problems, nil
}

// jobOwners are the components whose job variables the selector's job matcher names.
func jobOwners(s Selector, jobVars map[string]string) ([]string, error) {
	m, ok := s.Matcher("job")
	if !ok {
		return nil, fmt.Errorf(`no job matcher: say whose metric it is (job=~"$<component>_job")`)
	}
	if m.Op != "=~" && m.Op != "=" {
		return nil, fmt.Errorf("job%s%q: want =~ with job variables", m.Op, m.Value)
	}
	var owners []string
	for _, alt := range strings.Split(m.Value, "|") {
		v := strings.TrimSpace(alt)
		if strings.HasPrefix(v, "${") && strings.HasSuffix(v, "}") {
			v = v[2 : len(v)-1]
		} else {
			v = strings.TrimPrefix(v, "$")
		}
		c, ok := jobVars[v]
		if !ok || !strings.Contains(alt, "$") {
			return nil, fmt.Errorf("job%s%q: want only $<component>_job variables, joined by |", m.Op, m.Value)
		}
		owners = append(owners, c)
	}
	return owners, nil
}

var rangeCounterFuncs = set("rate", "irate", "increase")

// typeProblem is what is wrong with how s reads a series of family, of type typ ("" if nothing).
func typeProblem(s Selector, family, typ string) string {
	fn := s.Innermost()
	counterLike := typ == Counter || typ == Histogram || (typ == Summary && s.Metric != family)
	switch {
	case typ == Untyped:
		return ""
	case counterLike && !rangeCounterFuncs[fn]:
		what := "a counter"
		if typ != Counter {
			what = "a " + typ + "'s series and only grows"
		}
		return fmt.Sprintf("%s is %s: read it through rate(), irate() or increase(), not %s", s.Metric, what, orNothing(fn))
	case !counterLike && rangeCounterFuncs[fn]:
		return fmt.Sprintf("%s is a gauge: %s() is for counters", s.Metric, fn)
	case rangeCounterFuncs[fn] && !s.Range:
		return fmt.Sprintf("%s: %s() needs a range ([$__rate_interval])", s.Metric, fn)
	}
	if typ != Histogram || s.Metric != family+"_bucket" {
		return ""
	}
	h := slices.IndexFunc(s.Calls, func(c *Call) bool { return c.Func == "histogram_quantile" })
	if h < 0 {
		return fmt.Sprintf("%s is a histogram's buckets: give them to histogram_quantile()", s.Metric)
	}
	for _, c := range s.Calls[h+1:] {
		if !c.Aggregation {
			continue
		}
		keeps := (c.Grouping == "by" && slices.Contains(c.Labels, "le")) ||
			(c.Grouping == "without" && !slices.Contains(c.Labels, "le"))
		if !keeps {
			return fmt.Sprintf("%s: %s between histogram_quantile() and the buckets drops le (want by (le, ...))", s.Metric, c.Func)
		}
	}
	return ""
}

func orNothing(fn string) string {
	if fn == "" {
		return "bare"
	}
	return fn + "()"
}

// hint names the family closest to a name that is not exported, and says when a histogram
// is queried by its own name.
func (f Families) hint(series string) string {
	if f[series] == Histogram {
		return fmt.Sprintf(" (a histogram: query %s_bucket, _sum or _count)", series)
	}
	best, bestDist := "", 4
	for family, typ := range f {
		candidates := []string{family}
		switch typ {
		case Histogram:
			candidates = []string{family + "_bucket", family + "_sum", family + "_count"}
		case Summary:
			candidates = append(candidates, family+"_sum", family+"_count")
		}
		for _, c := range candidates {
			if d := distance(series, c); d < bestDist || (d == bestDist && c < best) {
				best, bestDist = c, d
			}
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
