// Package dashboard checks a Grafana dashboard against the metrics Berth's components
// export: it reads every query of the dashboard (panels, panels inside rows, template
// variables), finds the metrics each PromQL expression selects, reads the metric families a
// Prometheus registry serves, and reports queries of metrics nobody exports or read against
// their type. The test of manifests/observability/berth-dashboard.json uses it with the
// components' real registries (pkg/scheduler/dashboard_test.go).
package dashboard

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Dashboard is the part of a Grafana dashboard's JSON model that holds queries.
type Dashboard struct {
	Title      string  `json:"title"`
	Panels     []Panel `json:"panels"`
	Templating struct {
		List []Variable `json:"list"`
	} `json:"templating"`
}

// Panel is a panel, or a row (Type "row") whose Panels are the ones it holds while collapsed.
type Panel struct {
	Title   string   `json:"title"`
	Type    string   `json:"type"`
	Panels  []Panel  `json:"panels"`
	Targets []Target `json:"targets"`
}

// Target is one query of a panel.
type Target struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
}

// Variable is a template variable. A query variable's query is a string, or an object with
// the string in "query" (Grafana 8 and later).
type Variable struct {
	Name  string          `json:"name"`
	Type  string          `json:"type"`
	Query json.RawMessage `json:"query"`
}

// Load reads a dashboard's JSON model.
func Load(path string) (*Dashboard, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d Dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &d, nil
}

// Query is one PromQL expression of the dashboard and where it is.
type Query struct {
	Where    string // `row "x" panel "y" query A`, or `variable z`
	Variable string // the template variable's name, for a variable's query
	Expr     string
}

// Queries are every PromQL expression of the dashboard: each target of each panel, in rows
// open or collapsed, and the expression inside each query variable's label_values(...) or
// query_result(...). A panel target without an expression is returned with Expr "".
func (d *Dashboard) Queries() ([]Query, error) {
	var out []Query
	row := ""
	var walk func(panels []Panel)
	walk = func(panels []Panel) {
		for _, p := range panels {
			if p.Type == "row" {
				row = p.Title
				walk(p.Panels)
				continue
			}
			for _, t := range p.Targets {
				out = append(out, Query{Where: fmt.Sprintf("row %q panel %q query %s", row, p.Title, t.RefID), Expr: t.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, err := v.query()
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", v.Name, err)
		}
		expr, err := variableExpr(q)
		if err != nil {
			return nil, fmt.Errorf("variable %s: %w", v.Name, err)
		}
		if expr != "" {
			out = append(out, Query{Where: "variable " + v.Name, Variable: v.Name, Expr: expr})
		}
	}
	return out, nil
}

func (v Variable) query() (string, error) {
	var s string
	if err := json.Unmarshal(v.Query, &s); err == nil {
		return s, nil
	}
	var o struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(v.Query, &o); err != nil {
		return "", fmt.Errorf("query %s: %w", v.Query, err)
	}
	return o.Query, nil
}

// variableExpr is the PromQL inside a Prometheus query variable: label_values(expr, label)
// and query_result(expr) hold one; label_values(label), label_names() and metrics(regex) do
// not select a metric.
func variableExpr(q string) (string, error) {
	q = strings.TrimSpace(q)
	call := func(fn string) (string, bool) {
		if !strings.HasPrefix(q, fn+"(") || !strings.HasSuffix(q, ")") {
			return "", false
		}
		return strings.TrimSpace(q[len(fn)+1 : len(q)-1]), true
	}
	if args, ok := call("label_values"); ok {
		// The label is after the last comma outside braces and parentheses.
		depth, comma := 0, -1
		for i, c := range args {
			switch c {
			case '(', '{', '[':
				depth++
			case ')', '}', ']':
				depth--
			case ',':
				if depth == 0 {
					comma = i
				}
			}
		}
		if comma < 0 {
			return "", nil
		}
		return strings.TrimSpace(args[:comma]), nil
	}
	if expr, ok := call("query_result"); ok {
		return expr, nil
	}
	if _, ok := call("label_names"); ok {
		return "", nil
	}
	if _, ok := call("metrics"); ok {
		return "", nil
	}
	return "", fmt.Errorf("query %q: want label_values, query_result, label_names or metrics", q)
}
