// Package forwarded builds the headers that tell an engine who called the router:
// X-Forwarded-For, X-Forwarded-Proto, X-Forwarded-Host and RFC 7239's Forwarded.
//
// Trust: the router appends, never replaces. A client may send these headers itself, and
// the router cannot tell a proxy in front of it from a client that lies, so what came in is
// kept as the earlier hops and the router adds the one hop it knows: the address the
// connection came from. Whoever reads the headers trusts only the entries added by proxies
// it runs, counting from the right (the router's entry is the last).
package forwarded

import (
	"net"
	"net/http"
	"strings"
)

// Headers are the forwarding headers for req's upstream request, set (not added) on it.
func Headers(req *http.Request) map[string]string {
	host, _, err := net.SplitHostPort(req.RemoteAddr)
	if err != nil {
		host = req.RemoteAddr
	}
	proto := "http"
	if req.TLS != nil {
		proto = "https"
	}
	xff := host
	if prior := req.Header.Values("X-Forwarded-For"); len(prior) > 0 {
		xff = strings.Join(prior, ", ") + ", " + host
	}
	elem := "for=" + node(host) + ";proto=" + proto
	if req.Host != "" {
		elem += ";host=" + quoteIfNeeded(req.Host)
	}
	fwd := elem
	if prior := req.Header.Values("Forwarded"); len(prior) > 0 {
		fwd = strings.Join(prior, ", ") + ", " + elem
	}
	h := map[string]string{"X-Forwarded-For": xff, "Forwarded": fwd}
	// X-Forwarded-Proto and -Host say what the first proxy saw; a client's own values would
	// be no more trustworthy than its X-Forwarded-For, but replacing them would lose what a
	// proxy in front of the router said. So they are set only when absent.
	if req.Header.Get("X-Forwarded-Proto") == "" {
		h["X-Forwarded-Proto"] = proto
	}
	if req.Header.Get("X-Forwarded-Host") == "" && req.Host != "" {
		h["X-Forwarded-Host"] = req.Host
	}
	return h
}

// node is a Forwarded for= value: an IPv6 address is bracketed and quoted (RFC 7239 §6),
// an IPv4 address or a name as is, anything else quoted.
func node(addr string) string {
	if ip := net.ParseIP(addr); ip != nil && ip.To4() == nil {
		return `"[` + addr + `]"`
	}
	return quoteIfNeeded(addr)
}

// quoteIfNeeded quotes v when it is not an RFC 7230 token (a host with a port has a colon).
func quoteIfNeeded(v string) string {
	for _, c := range v {
		if !isToken(c) {
			return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
		}
	}
	return v
}

func isToken(c rune) bool {
	return c < 0x7f && c > 0x20 && !strings.ContainsRune(`"(),/:;<=>?@[\]{}`, c)
}
