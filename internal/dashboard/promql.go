package dashboard

import (
	"fmt"
	"strconv"
	"strings"
)

// Selector is one vector selector of a PromQL expression: the metric it reads, its label
// matchers, whether it is a range (`[5m]`), and the function and aggregation calls it sits in,
// outermost first.
type Selector struct {
	Metric   string
	Matchers []Matcher
	Range    bool
	Calls    []*Call
}

// Matcher is a label matcher of a selector: job=~"$router_job".
type Matcher struct{ Label, Op, Value string }

// Call is a function or aggregation call. An aggregation's Grouping is "by", "without" or ""
// (everything aggregated into one series), with its Labels.
type Call struct {
	Func        string
	Aggregation bool
	Grouping    string
	Labels      []string
}

// Innermost is the call directly around the selector ("" when there is none).
func (s Selector) Innermost() string {
	if len(s.Calls) == 0 {
		return ""
	}
	return s.Calls[len(s.Calls)-1].Func
}

// Matcher is the selector's matcher on label, if it has one.
func (s Selector) Matcher(label string) (Matcher, bool) {
	for _, m := range s.Matchers {
		if m.Label == label {
			return m, true
		}
	}
	return Matcher{}, false
}

var aggregations = set("sum", "avg", "min", "max", "count", "count_values", "stddev", "stdvar",
	"group", "topk", "bottomk", "quantile", "limitk", "limit_ratio")

var functions = set("abs", "absent", "absent_over_time", "acos", "acosh", "asin", "asinh", "atan",
	"atanh", "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "cos", "cosh",
	"count_over_time", "day_of_month", "day_of_week", "day_of_year", "days_in_month", "deg",
	"delta", "deriv", "double_exponential_smoothing", "end", "exp", "first_over_time", "floor",
	"histogram_avg", "histogram_count", "histogram_fraction", "histogram_quantile",
	"histogram_stddev", "histogram_stdvar", "histogram_sum", "holt_winters", "hour", "idelta",
	"increase", "info", "irate", "label_join", "label_replace", "last_over_time", "ln", "log10",
	"log2", "mad_over_time", "max_over_time", "min_over_time", "minute", "month", "pi",
	"predict_linear", "present_over_time", "quantile_over_time", "rad", "rate", "resets", "round",
	"scalar", "sgn", "sin", "sinh", "sort", "sort_by_label", "sort_by_label_desc", "sort_desc",
	"sqrt", "start", "stddev_over_time", "stdvar_over_time", "sum_over_time", "tan", "tanh",
	"time", "timestamp", "ts_of_first_over_time", "ts_of_last_over_time", "ts_of_max_over_time",
	"ts_of_min_over_time", "vector", "year")

// Binary and set operators, modifiers and literals written as words.
var keywords = set("and", "or", "unless", "atan2", "bool", "offset", "inf", "nan")

// Modifiers followed by a label list (group_left and group_right may stand alone).
var labelListModifiers = set("on", "ignoring", "group_left", "group_right")

func set(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

// Selectors are the vector selectors of a PromQL expression, as Grafana sends it (its
// variables, $var, ${var} and [[var]], may stand where a value or duration would). Label names
// in matchers and in by/without/on/ignoring/group_left/group_right lists, string literals,
// numbers, durations, functions, aggregations and keywords are not selectors. A selector
// without a metric name ({job="x"}, or a regex on __name__) is an error: nothing could check it.
func Selectors(expr string) ([]Selector, error) {
	toks, err := lex(expr)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	if err := p.parse(); err != nil {
		return nil, fmt.Errorf("%s: %w", expr, err)
	}
	return p.out, nil
}

type kind int

const (
	tIdent kind = iota
	tNumber
	tString
	tVariable
	tOp
	tComma
	tLParen
	tRParen
	tLBrace
	tRBrace
	tLBracket
	tRBracket
)

type token struct {
	kind kind
	text string // a string literal's value, unquoted
}

func lex(s string) ([]token, error) {
	var out []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(s) && s[j] != c {
				if s[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated string at %d in %s", i, s)
			}
			raw := s[i : j+1]
			if c == '\'' {
				raw = `"` + strings.ReplaceAll(strings.ReplaceAll(raw[1:len(raw)-1], `\'`, `'`), `"`, `\"`) + `"`
			}
			v, err := strconv.Unquote(raw)
			if err != nil {
				return nil, fmt.Errorf("string %s: %w", s[i:j+1], err)
			}
			out = append(out, token{tString, v})
			i = j + 1
		case c == '$':
			j := i + 1
			if j < len(s) && s[j] == '{' {
				for j < len(s) && s[j] != '}' {
					j++
				}
				j++
			} else {
				for j < len(s) && isIdent(s[j], false) {
					j++
				}
			}
			if j > len(s) || j == i+1 {
				return nil, fmt.Errorf("bad variable at %d in %s", i, s)
			}
			out = append(out, token{tVariable, s[i:j]})
			i = j
		case strings.HasPrefix(s[i:], "[["):
			j := strings.Index(s[i:], "]]")
			if j < 0 {
				return nil, fmt.Errorf("unterminated [[variable]] at %d in %s", i, s)
			}
			out = append(out, token{tVariable, s[i : i+j+2]})
			i += j + 2
		case isDigit(c) || (c == '.' && i+1 < len(s) && isDigit(s[i+1])):
			// Numbers (1, 0.5, 1e-3, 0x1f, Inf is a word) and durations (5m, 1h30m).
			j := i
			for j < len(s) && (isIdent(s[j], false) || s[j] == '.' ||
				((s[j] == '+' || s[j] == '-') && (s[j-1] == 'e' || s[j-1] == 'E') && isDecimal(s[i:j-1]))) {
				j++
			}
			out = append(out, token{tNumber, s[i:j]})
			i = j
		case isIdent(c, true):
			j := i
			for j < len(s) && isIdent(s[j], false) {
				j++
			}
			out = append(out, token{tIdent, s[i:j]})
			i = j
		default:
			if k, ok := map[byte]kind{',': tComma, '(': tLParen, ')': tRParen, '{': tLBrace, '}': tRBrace, '[': tLBracket, ']': tRBracket}[c]; ok {
				out = append(out, token{k, string(c)})
				i++
				continue
			}
			if !strings.ContainsRune("=!~<>+-*/%^@:", rune(c)) {
				return nil, fmt.Errorf("unexpected %q at %d in %s", c, i, s)
			}
			n := 1
			if i+1 < len(s) && strings.Contains("== != =~ !~ <= >=", s[i:i+2]) {
				n = 2
			}
			out = append(out, token{tOp, s[i : i+n]})
			i += n
		}
	}
	return out, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isIdent(c byte, first bool) bool {
	return c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (!first && isDigit(c))
}

func isDecimal(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) && s[i] != '.' {
			return false
		}
	}
	return true
}

type parser struct {
	toks  []token
	i     int
	stack []*Call // open parentheses: calls, and plain grouping (Func "")
	out   []Selector
}

func (p *parser) peek(k kind) bool { return p.i < len(p.toks) && p.toks[p.i].kind == k }

func (p *parser) peekWord(words ...string) bool {
	if !p.peek(tIdent) {
		return false
	}
	for _, w := range words {
		if strings.EqualFold(p.toks[p.i].text, w) {
			return true
		}
	}
	return false
}

func (p *parser) parse() error {
	var closed *Call // the call whose ")" the previous token was
	for p.i < len(p.toks) {
		t := p.toks[p.i]
		p.i++
		justClosed := closed
		closed = nil
		switch t.kind {
		case tIdent:
			word := strings.ToLower(t.text)
			switch {
			case keywords[word]:
			case labelListModifiers[word]:
				if p.peek(tLParen) {
					if _, err := p.labelList(); err != nil {
						return err
					}
				}
			case word == "by" || word == "without":
				// sum(...) by (le): the grouping written after the aggregation.
				if justClosed == nil || !justClosed.Aggregation || justClosed.Grouping != "" {
					return fmt.Errorf("%s without an aggregation before it", word)
				}
				if err := p.grouping(justClosed, word); err != nil {
					return err
				}
			case aggregations[word]:
				c := &Call{Func: word, Aggregation: true}
				if p.peekWord("by", "without") {
					p.i++
					if err := p.grouping(c, strings.ToLower(p.toks[p.i-1].text)); err != nil {
						return err
					}
				}
				if !p.peek(tLParen) {
					return fmt.Errorf("aggregation %s without (", word)
				}
				p.i++
				p.stack = append(p.stack, c)
			case p.peek(tLParen):
				if !functions[t.text] {
					return fmt.Errorf("unknown function %s", t.text)
				}
				p.i++
				p.stack = append(p.stack, &Call{Func: t.text})
			default:
				if err := p.selector(t.text); err != nil {
					return err
				}
			}
		case tLBrace:
			p.i--
			if err := p.selector(""); err != nil {
				return err
			}
		case tLParen:
			p.stack = append(p.stack, &Call{})
		case tRParen:
			if len(p.stack) == 0 {
				return fmt.Errorf("unbalanced )")
			}
			closed = p.stack[len(p.stack)-1]
			p.stack = p.stack[:len(p.stack)-1]
		case tLBracket:
			// A subquery's range, after ")": [5m:1m].
			if err := p.skipRange(); err != nil {
				return err
			}
		case tRBrace, tRBracket:
			return fmt.Errorf("unbalanced %s", t.text)
		}
	}
	if len(p.stack) > 0 {
		return fmt.Errorf("unbalanced (")
	}
	return nil
}

// selector reads a selector whose metric name (if any) has been read: {matchers} and [range].
func (p *parser) selector(name string) error {
	s := Selector{Metric: name}
	for _, c := range p.stack {
		if c.Func != "" {
			s.Calls = append(s.Calls, c)
		}
	}
	if p.peek(tLBrace) {
		p.i++
		for !p.peek(tRBrace) {
			if p.i >= len(p.toks) {
				return fmt.Errorf("unterminated {")
			}
			label := p.toks[p.i]
			p.i++
			if label.kind == tString && (p.peek(tComma) || p.peek(tRBrace)) {
				// {"metric.name"}: a quoted metric name (Prometheus 3).
				s.Metric = label.text
			} else {
				if label.kind != tIdent && label.kind != tString {
					return fmt.Errorf("label name expected in {}, got %s", label.text)
				}
				if !p.peek(tOp) || p.i+1 >= len(p.toks) || p.toks[p.i+1].kind != tString {
					return fmt.Errorf("matcher on %s: want an operator and a string", label.text)
				}
				m := Matcher{Label: label.text, Op: p.toks[p.i].text, Value: p.toks[p.i+1].text}
				p.i += 2
				switch {
				case m.Label != "__name__":
					s.Matchers = append(s.Matchers, m)
				case m.Op == "=":
					s.Metric = m.Value
				default:
					return fmt.Errorf("__name__%s%q: a metric chosen by pattern cannot be checked", m.Op, m.Value)
				}
			}
			if p.peek(tComma) {
				p.i++
			}
		}
		p.i++
	}
	if s.Metric == "" {
		return fmt.Errorf("a selector without a metric name")
	}
	if p.peek(tLBracket) {
		p.i++
		s.Range = true
		if err := p.skipRange(); err != nil {
			return err
		}
	}
	p.out = append(p.out, s)
	return nil
}

func (p *parser) skipRange() error {
	for !p.peek(tRBracket) {
		if p.i >= len(p.toks) {
			return fmt.Errorf("unterminated [")
		}
		p.i++
	}
	p.i++
	return nil
}

func (p *parser) grouping(c *Call, how string) error {
	labels, err := p.labelList()
	if err != nil {
		return err
	}
	c.Grouping, c.Labels = how, labels
	return nil
}

// labelList reads (a, b, c).
func (p *parser) labelList() ([]string, error) {
	if !p.peek(tLParen) {
		return nil, fmt.Errorf("label list expected")
	}
	p.i++
	labels := []string{}
	for !p.peek(tRParen) {
		if p.i >= len(p.toks) {
			return nil, fmt.Errorf("unterminated label list")
		}
		switch t := p.toks[p.i]; t.kind {
		case tIdent, tString:
			labels = append(labels, t.text)
		case tComma:
		default:
			return nil, fmt.Errorf("label name expected in list, got %s", t.text)
		}
		p.i++
	}
	p.i++
	return labels, nil
}
