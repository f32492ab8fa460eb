// Package jsonscan walks JSON without decoding it: it finds the members of an object and the
// extent of each value, checking the syntax as strictly as encoding/json does. It is the
// router's fast path for request and response bodies, where a reflective decode of the
// whole body (every message, every choice) was the largest share of the router's own CPU
// per request. Callers read the few fields they need from the spans it hands them and fall
// back to encoding/json for anything unusual, so that what a client sees never depends on
// which path ran: any input this package refuses, encoding/json decides.
package jsonscan

import (
	"bytes"
	"strconv"
	"unicode/utf8"
)

// MaxDepth bounds nesting; deeper values are refused (encoding/json allows 10000, and a
// caller falls back to it).
const MaxDepth = 512

// SkipSpace returns the index of the first byte at or after i that is not JSON whitespace.
func SkipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// Value returns the end of the JSON value that starts at b[i] (no leading whitespace), and
// false if it is not one valid value.
func Value(b []byte, i int) (int, bool) { return value(b, i, 0) }

func value(b []byte, i, depth int) (int, bool) {
	if i >= len(b) {
		return i, false
	}
	switch c := b[i]; {
	case c == '"':
		return String(b, i)
	case c == '{':
		return object(b, i, depth+1, nil)
	case c == '[':
		return array(b, i, depth+1, nil)
	case c == '-' || (c >= '0' && c <= '9'):
		return number(b, i)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	}
	return i, false
}

func literal(b []byte, i int, lit string) (int, bool) {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit), true
	}
	return i, false
}

// String returns the end of the JSON string that starts at b[i] ('"').
func String(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return i, false
	}
	i++
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 >= len(b) {
				return i, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 || !hex(b[i+2]) || !hex(b[i+3]) || !hex(b[i+4]) || !hex(b[i+5]) {
					return i, false
				}
				i += 6
			default:
				return i, false
			}
		case c < 0x20:
			return i, false
		default:
			i++
		}
	}
	return i, false
}

func hex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// number returns the end of the JSON number at b[i]: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func number(b []byte, i int) (int, bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return i, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return i, false
		}
		i = j
	}
	return i, true
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// Member is called for each member of an object with its key as written between the quotes
// (escapes not decoded) and its value's bytes; it returns false to stop the walk, which
// then reports failure.
type Member func(key, value []byte) bool

// Object walks the object that starts at b[i] ('{'), calling member (if not nil) for each
// member in order, and returns the end of the object.
func Object(b []byte, i int, member Member) (int, bool) { return object(b, i, 1, member) }

func object(b []byte, i, depth int, member Member) (int, bool) {
	if depth > MaxDepth || i >= len(b) || b[i] != '{' {
		return i, false
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, true
	}
	for {
		ks := i
		ke, ok := String(b, i)
		if !ok {
			return i, false
		}
		i = SkipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return i, false
		}
		vs := SkipSpace(b, i+1)
		ve, ok := value(b, vs, depth)
		if !ok {
			return ve, false
		}
		if member != nil && !member(b[ks+1:ke-1], b[vs:ve]) {
			return ve, false
		}
		i = SkipSpace(b, ve)
		if i >= len(b) {
			return i, false
		}
		switch b[i] {
		case ',':
			i = SkipSpace(b, i+1)
		case '}':
			return i + 1, true
		default:
			return i, false
		}
	}
}

// Array walks the array that starts at b[i] ('['), calling elem (if not nil) with each
// element's bytes, and returns the end of the array.
func Array(b []byte, i int, elem func(value []byte) bool) (int, bool) {
	return array(b, i, 1, elem)
}

func array(b []byte, i, depth int, elem func([]byte) bool) (int, bool) {
	if depth > MaxDepth || i >= len(b) || b[i] != '[' {
		return i, false
	}
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1, true
	}
	for {
		ve, ok := value(b, i, depth)
		if !ok {
			return ve, false
		}
		if elem != nil && !elem(b[i:ve]) {
			return ve, false
		}
		i = SkipSpace(b, ve)
		if i >= len(b) {
			return i, false
		}
		switch b[i] {
		case ',':
			i = SkipSpace(b, i+1)
		case ']':
			return i + 1, true
		default:
			return i, false
		}
	}
}

// PlainString returns the contents of v, a JSON string as Value delimits it, when they
// decode to themselves: no escape and valid UTF-8, which is what encoding/json returns
// unchanged. false: decode v with encoding/json.
func PlainString(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return nil, false
	}
	s := v[1 : len(v)-1]
	if bytes.IndexByte(s, '\\') >= 0 || !utf8.Valid(s) {
		return nil, false
	}
	return s, true
}

// PlainKey reports whether key (as Member receives it) is plain ASCII without escapes, the
// only keys a caller may compare byte for byte: encoding/json also matches a struct field
// case-insensitively, so a caller must still refuse a key that folds to one of its fields.
func PlainKey(key []byte) bool {
	for _, c := range key {
		if c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// Int reads v, a JSON value as Value delimits it, as an int64 field would decode it: null
// is reported as such (encoding/json leaves the field as it was); a number that is an
// integer in range is returned. false: not one of those (a string, a fraction, too big).
func Int(v []byte) (n int64, null, ok bool) {
	if string(v) == "null" {
		return 0, true, true
	}
	if len(v) == 0 || v[0] != '-' && (v[0] < '0' || v[0] > '9') {
		return 0, false, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, false, err == nil
}
