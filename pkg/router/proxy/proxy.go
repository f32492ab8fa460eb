// Package proxy sends a request to an engine and relays the answer to the client. Sending
// and relaying are separate steps on purpose: the router may retry on another endpoint
// only while nothing has reached the client, that is between Send and Relay. Relay streams
// chunk by chunk with no buffering and counts the output tokens for rate limiting.
package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/berth-sh/berth/pkg/router/jsonscan"
	"github.com/berth-sh/berth/pkg/router/tracing"
)

// Proxy holds the upstream HTTP clients: one for engines, two for external providers (with
// and without certificate verification, in separate pools so one provider's
// insecureSkipVerify never weakens another's connections).
type Proxy struct {
	client                   *http.Client
	provider, providerNoAuth *http.Client
	tracer                   *tracing.Tracer // nil: no trace context written, no leg spans (trace.go)
}

// New returns a proxy. upstreamTLS is used for endpoints whose ModelServer says https (nil:
// the system roots).
func New(upstreamTLS *tls.Config) *Proxy {
	dialer := &net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext:         dialer.DialContext,
		TLSClientConfig:     upstreamTLS,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     90 * time.Second,
		// The body goes to the client as the engine sent it; decompressing would buffer
		// and change its length.
		DisableCompression:  true,
		TLSHandshakeTimeout: 5 * time.Second,
		ForceAttemptHTTP2:   false,
	}
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Proxy{
		client: &http.Client{
			Transport: tr,
			// An engine never redirects; following one could leave the selected pods.
			CheckRedirect: noRedirect,
		},
		// A redirect from a provider could send its credential to another host.
		provider:       &http.Client{Transport: providerTransport(false), CheckRedirect: noRedirect},
		providerNoAuth: &http.Client{Transport: providerTransport(true), CheckRedirect: noRedirect},
	}
}

// DialEndpointsWith makes the proxy (and the scraper sharing its transport) open connections
// to endpoints with dial instead of a plain net.Dialer; call it before the first request.
func (p *Proxy) DialEndpointsWith(dial func(ctx context.Context, network, addr string) (net.Conn, error)) {
	p.client.Transport.(*http.Transport).DialContext = dial
}

// UpstreamRoots makes the proxy (and the scraper sharing its transport) verify https
// endpoints against roots() as it is when each connection is made, in place of the RootCAs
// given to New: a CA bundle that is reloaded from disk. The handshake is the transport's
// own (server name from the address, its other settings from New's config); only the
// roots are read late, which the transport's per-connection clone of a config cannot do.
// Call it before the first request.
func (p *Proxy) UpstreamRoots(roots func() *x509.CertPool) {
	tr := p.client.Transport.(*http.Transport)
	base := tr.TLSClientConfig
	if base == nil {
		base = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		raw, err := tr.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := base.Clone()
		cfg.RootCAs = roots()
		if cfg.ServerName == "" {
			if cfg.ServerName, _, err = net.SplitHostPort(addr); err != nil {
				cfg.ServerName = addr
			}
		}
		hctx, cancel := context.WithTimeout(ctx, tr.TLSHandshakeTimeout)
		defer cancel()
		c := tls.Client(raw, cfg)
		if err := c.HandshakeContext(hctx); err != nil {
			_ = raw.Close()
			return nil, err
		}
		return c, nil
	}
}

// providerTransport reaches a provider across the internet: through the environment's
// proxy (HTTPS_PROXY, NO_PROXY), HTTP/2 when offered, the system's roots unless insecure.
func providerTransport(insecure bool) *http.Transport {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dialer.DialContext,
		MaxIdleConns:        512,
		MaxIdleConnsPerHost: 128,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2:   true,
	}
	if insecure {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the provider's insecureSkipVerify, off by default
	}
	return tr
}

// SendProvider posts body to url (a provider's endpoint) with exactly header: the caller
// built it from an allowlist, the provider's headers and its credential.
func (p *Proxy) SendProvider(ctx context.Context, url string, header http.Header, body []byte, insecureSkipVerify bool) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = header
	p.tracer.Inject(ctx, req.Header)
	req.ContentLength = int64(len(body))
	c := p.provider
	if insecureSkipVerify {
		c = p.providerNoAuth
	}
	return c.Do(req)
}

// Client is the proxy's HTTP client, shared with the metrics scraper.
func (p *Proxy) Client() *http.Client { return p.client }

// hopByHop are the headers a proxy must not forward (RFC 9110 §7.6.1).
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func copyHeader(dst, src http.Header) {
	_, srcConn := src["Connection"]
	_, dstConn := dst["Connection"]
	if srcConn || dstConn {
		for k, vs := range src {
			dst[k] = append([]string(nil), vs...)
		}
		StripHopByHop(dst)
		return
	}
	// No Connection header, so the hop-by-hop headers are the fixed ones: copy the rest
	// with one allocation for all values (as Header.Clone does) and delete those from dst,
	// which is what StripHopByHop would do, without its parsing and canonicalising.
	n := 0
	for _, vs := range src {
		n += len(vs)
	}
	all := make([]string, n)
	for k, vs := range src {
		if len(vs) == 0 {
			dst[k] = nil
			continue
		}
		n := copy(all, vs)
		dst[k], all = all[:n:n], all[n:]
	}
	for _, name := range hopByHop {
		delete(dst, name)
	}
}

// StripHopByHop deletes from h, in place, the headers a proxy must not forward: those the
// Connection header names, then the hop-by-hop ones.
func StripHopByHop(h http.Header) {
	for _, c := range h.Values("Connection") {
		for _, name := range strings.Split(c, ",") {
			h.Del(strings.TrimSpace(name))
		}
	}
	for _, name := range hopByHop {
		h.Del(name)
	}
}

// Send posts body to baseURL+path with the client's end-to-end headers (and extra ones
// set on top). The response is returned unread: the caller relays or discards it.
func (p *Proxy) Send(ctx context.Context, baseURL, path string, clientHeader http.Header, extra map[string]string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	copyHeader(req.Header, clientHeader)
	req.Header.Del("Content-Length")
	req.Header.Del("Accept-Encoding")
	req.Header.Set("Content-Type", "application/json")
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	p.tracer.Inject(ctx, req.Header)
	req.ContentLength = int64(len(body))
	// The transport directly: the client around it adds only redirect handling (none: an
	// engine never redirects, and CheckRedirect refuses to follow) at a cost on every
	// request. Errors are wrapped as http.Client wraps them, so messages read the same.
	resp, err := p.client.Transport.RoundTrip(req)
	if err != nil {
		return nil, &url.Error{Op: "Post", URL: req.URL.String(), Err: err}
	}
	return resp, nil
}

// Retryable reports whether an attempt's outcome allows trying another endpoint: a
// transport error (not the client's own cancellation), or a status the engine uses for
// "not now" (429, 5xx). 4xx means the request itself is wrong; another engine would agree.
func Retryable(ctx context.Context, resp *http.Response, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if err != nil {
		return true
	}
	return resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
}

// DialFailed reports whether err means the request never reached the engine (connection
// refused or unreachable), so a retry cannot run it twice. The router retries those even
// without a retry policy: it is how a pod that just went away looks.
func DialFailed(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// ClosedBeforeAnswer reports whether the engine closed the connection before any response
// header: a kept-alive connection the engine closed as the request went out (an engine
// shutting down closes its idle connections, as vLLM's server does on SIGTERM). Go's
// transport retries that only for idempotent methods; an inference request has no side
// effect besides compute, so the router may send it to another endpoint.
func ClosedBeforeAnswer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		strings.Contains(err.Error(), "server closed idle connection")
}

// Discard reads and closes a response the client will not see, so its connection is reused.
func Discard(resp *http.Response) {
	if resp == nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
}

// Relayed is what Relay saw.
type Relayed struct {
	Status int
	Bytes  int64
	// FirstByte is when the first body byte reached the client (zero if none did).
	FirstByte time.Time
	// OutputTokens is the response's usage.completion_tokens (OpenAI) or output_tokens
	// (Anthropic), or for a stream without usage the number of chunks that carried text.
	OutputTokens int64
	// InputTokens is the response's usage.prompt_tokens (OpenAI) or input_tokens plus
	// cache_creation_input_tokens and cache_read_input_tokens (Anthropic); 0 when the
	// response reported none.
	InputTokens int64
	// Err is a failure while copying (upstream broke, or the client went away).
	Err error
}

// usageCap bounds how much of a non-streaming body is kept to read its usage.
const usageCap = 4 << 20

// relayBuffers are reused across requests: a fresh 32 KiB buffer per request was the
// largest allocation on the router's path.
var relayBuffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// keptBuffers hold a non-streaming answer for its usage, reused across requests like
// relayBuffers; one grown past keptReuseMax is left to the GC rather than kept for ever.
var keptBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

const keptReuseMax = 64 << 10

func putKept(b *bytes.Buffer) {
	if b.Cap() <= keptReuseMax {
		b.Reset()
		keptBuffers.Put(b)
	}
}

// Relay writes resp to w, flushing each chunk of a stream as it arrives, and closes
// resp.Body. With countTokens it also counts the output tokens (for rate limits); without,
// it does not read the body's JSON at all.
func Relay(w http.ResponseWriter, resp *http.Response, countTokens bool) Relayed {
	defer resp.Body.Close()
	copyHeader(w.Header(), resp.Header)
	w.Header().Del("Content-Length") // may change if the engine sent it chunked; let net/http decide
	if resp.ContentLength >= 0 {
		w.Header().Set("Content-Length", fmt.Sprint(resp.ContentLength))
	}
	w.WriteHeader(resp.StatusCode)
	out := Relayed{Status: resp.StatusCode}
	rc := http.NewResponseController(w)
	stream := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	var counter tokenCounter
	kept := keptBuffers.Get().(*bytes.Buffer)
	defer putKept(kept)
	bp := relayBuffers.Get().(*[]byte)
	defer relayBuffers.Put(bp)
	buf := *bp
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if out.FirstByte.IsZero() {
				out.FirstByte = time.Now()
			}
			if _, werr := w.Write(buf[:n]); werr != nil {
				out.Err = fmt.Errorf("writing to the client: %w", werr)
				return out
			}
			out.Bytes += int64(n)
			switch {
			case stream:
				_ = rc.Flush()
				if countTokens {
					counter.feed(buf[:n])
				}
			case countTokens && kept.Len() < usageCap:
				kept.Write(buf[:n])
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			out.Err = fmt.Errorf("reading from the engine: %w", rerr)
			break
		}
	}
	switch {
	case !countTokens:
	case stream:
		out.InputTokens, out.OutputTokens = counter.tokens()
	default:
		out.InputTokens, out.OutputTokens = usageOf(kept.Bytes())
	}
	return out
}

// usage is the usage object of either API: OpenAI's prompt/completion tokens, Anthropic's
// input/output tokens (with the cached input counted apart).
type usage struct {
	PromptTokens             int64 `json:"prompt_tokens"`
	CompletionTokens         int64 `json:"completion_tokens"`
	InputTokens              int64 `json:"input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
}

func (u *usage) counts() (in, out int64) {
	return u.PromptTokens + u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens, u.CompletionTokens + u.OutputTokens
}

type usageBody struct {
	Type  string `json:"type"`
	Usage *usage `json:"usage"`
	// Message is Anthropic's message_start event's message, with the input usage.
	Message *struct {
		Usage *usage `json:"usage"`
	} `json:"message"`
}

func usageOf(body []byte) (in, out int64) {
	if raw, ok := scanUsage(body); ok {
		// Only the usage object is decoded: the body's other members (choices, their text)
		// are checked for syntax and skipped, which is what cost the most here.
		if raw == nil || string(raw) == "null" { // no usage
			return 0, 0
		}
		u, ok := scanUsageCounts(raw)
		if !ok && json.Unmarshal(raw, &u) != nil {
			return 0, 0
		}
		return u.counts()
	}
	return decodeUsage(body)
}

// decodeUsage is usageOf by encoding/json alone.
func decodeUsage(body []byte) (in, out int64) {
	var u usageBody
	if json.Unmarshal(body, &u) != nil || u.Usage == nil {
		return 0, 0
	}
	return u.Usage.counts()
}

// tokenCounter reads SSE "data:" lines as they pass.
type tokenCounter struct {
	partial []byte
	// skipping: the current line grew past usageCap; it is dropped up to its newline (a
	// chunk that large is no token chunk, and keeping it would let a stream grow memory).
	skipping      bool
	chunks        int64
	input, output int64
	sawUse        bool
}

func (c *tokenCounter) feed(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if !c.skipping {
				c.partial = append(c.partial, p...)
				if len(c.partial) > usageCap {
					c.partial, c.skipping = c.partial[:0], true
				}
			}
			return
		}
		if !c.skipping {
			c.partial = append(c.partial, p[:i]...)
			if len(c.partial) <= usageCap {
				c.line(c.partial)
			}
		}
		c.partial, c.skipping = c.partial[:0], false
		p = p[i+1:]
	}
}

func (c *tokenCounter) line(l []byte) {
	data, ok := bytes.CutPrefix(bytes.TrimRight(l, "\r"), []byte("data:"))
	if !ok {
		return
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' {
		return
	}
	// Only chunks that mention usage are decoded: on a stream of one chunk per token,
	// decoding every chunk would be the relay's main cost.
	chunk := bytes.Contains(data, []byte(`"content_block_delta"`)) ||
		(bytes.Contains(data, []byte(`"choices"`)) && !bytes.Contains(data, []byte(`"choices":[]`)))
	if !bytes.Contains(data, []byte(`"usage"`)) {
		if chunk {
			c.chunks++
		}
		return
	}
	var u usageBody
	if json.Unmarshal(data, &u) != nil {
		return
	}
	if chunk {
		c.chunks++
	}
	switch {
	case u.Type == "message_start" && u.Message != nil && u.Message.Usage != nil:
		// Anthropic: input at the start; output_tokens here is a placeholder.
		c.input, _ = u.Message.Usage.counts()
		c.sawUse = true
	case u.Type == "message_delta" && u.Usage != nil:
		// Anthropic: the cumulative output (and, lately, input) at the end.
		in, out := u.Usage.counts()
		if in > 0 {
			c.input = in
		}
		c.output, c.sawUse = out, true
	case u.Usage != nil:
		c.input, c.output = u.Usage.counts()
		c.sawUse = true
	}
}

func (c *tokenCounter) tokens() (in, out int64) {
	if c.sawUse {
		return c.input, c.output
	}
	return 0, c.chunks
}

// Translator turns an upstream answer in one API into the client's (package anthropic's
// translation of chat completions into Messages answers).
type Translator interface {
	// Body translates a whole non-streaming body of the given status.
	Body(status int, body []byte) (out []byte, in, outTokens int64)
	// Stream translates streaming bytes as they arrive; End closes the stream.
	Stream(p []byte) []byte
	End() []byte
	// Usage is the stream's token counts once it ended.
	Usage() (in, out int64)
	// ContentType is the translated body's type (streaming or not).
	ContentType(stream bool) string
}

// RelayTranslated is Relay through t: a streaming answer is translated and flushed as it
// arrives; any other answer (an error too) is read whole, translated and written. Token
// counts come from the translation.
func RelayTranslated(w http.ResponseWriter, resp *http.Response, t Translator) Relayed {
	defer resp.Body.Close()
	stream := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") && resp.StatusCode/100 == 2
	copyHeader(w.Header(), resp.Header)
	w.Header().Del("Content-Length")
	w.Header().Set("Content-Type", t.ContentType(stream))
	out := Relayed{Status: resp.StatusCode}
	if !stream {
		body, err := io.ReadAll(io.LimitReader(resp.Body, usageCap))
		if err != nil {
			out.Err = fmt.Errorf("reading from the engine: %w", err)
		}
		b, in, o := t.Body(resp.StatusCode, body)
		w.Header().Set("Content-Length", fmt.Sprint(len(b)))
		w.WriteHeader(resp.StatusCode)
		out.FirstByte = time.Now()
		n, werr := w.Write(b)
		out.Bytes, out.InputTokens, out.OutputTokens = int64(n), in, o
		if werr != nil && out.Err == nil {
			out.Err = fmt.Errorf("writing to the client: %w", werr)
		}
		return out
	}
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	bp := relayBuffers.Get().(*[]byte)
	defer relayBuffers.Put(bp)
	buf := *bp
	write := func(b []byte) bool {
		if len(b) == 0 {
			return true
		}
		if out.FirstByte.IsZero() {
			out.FirstByte = time.Now()
		}
		n, err := w.Write(b)
		out.Bytes += int64(n)
		if err != nil {
			out.Err = fmt.Errorf("writing to the client: %w", err)
			return false
		}
		_ = rc.Flush()
		return true
	}
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 && !write(t.Stream(buf[:n])) {
			return out
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			out.Err = fmt.Errorf("reading from the engine: %w", rerr)
			break
		}
	}
	if out.Err == nil {
		write(t.End())
	}
	out.InputTokens, out.OutputTokens = t.Usage()
	return out
}

// ReadAll reads a small response body (a prefill answer) and closes it.
func ReadAll(resp *http.Response) ([]byte, error) {
	defer resp.Body.Close()
	return io.ReadAll(io.LimitReader(bufio.NewReader(resp.Body), usageCap))
}

// Usage reads an answer's token usage from its body as the body passes by in pieces, the
// way Relay does, for a caller that sees the bytes but does not relay them itself (the
// endpoint picker, which Envoy shows the response body chunk by chunk).
type Usage struct {
	// Stream: the body is server-sent events (read line by line); otherwise one JSON
	// document (kept up to usageCap).
	Stream  bool
	counter tokenCounter
	kept    bytes.Buffer
}

// Feed reads the next piece of the body.
func (u *Usage) Feed(p []byte) {
	switch {
	case u.Stream:
		u.counter.feed(p)
	case u.kept.Len() < usageCap:
		u.kept.Write(p)
	}
}

// Tokens are the input and output tokens the answer reported (see Relayed); for a stream
// without usage, output is the number of chunks that carried text.
func (u *Usage) Tokens() (in, out int64) {
	if u.Stream {
		return u.counter.tokens()
	}
	return usageOf(u.kept.Bytes())
}

// scanUsage finds the usage member of a non-streaming body without decoding the rest, for
// the common answer: one JSON object with plain keys, usage at most once, no top-level
// message (Anthropic puts one only in stream events) and a string type if any. raw is nil
// when there is no usage. false: usageOf decodes the whole body with encoding/json, which
// decides every other case (TestUsageScanAgreesWithDecode).
func scanUsage(body []byte) (raw []byte, ok bool) {
	i := jsonscan.SkipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, false
	}
	seen := false
	end, ok := jsonscan.Object(body, i, func(key, v []byte) bool {
		if !jsonscan.PlainKey(key) {
			return false
		}
		switch string(key) {
		case "usage":
			if seen {
				return false
			}
			seen, raw = true, v
		case "type":
			return v[0] == '"' || string(v) == "null"
		default:
			return !strings.EqualFold(string(key), "usage") && !strings.EqualFold(string(key), "type") && !strings.EqualFold(string(key), "message")
		}
		return true
	})
	if !ok || jsonscan.SkipSpace(body, end) != len(body) {
		return nil, false
	}
	return raw, true
}

// usageFields are usage's members by their JSON names.
var usageFields = []string{"prompt_tokens", "completion_tokens", "input_tokens", "cache_creation_input_tokens",
	"cache_read_input_tokens", "output_tokens"}

// scanUsageCounts reads a usage object (raw as scanUsage found it) whose keys are plain and
// whose counts are integers or null; false: decode it with encoding/json.
func scanUsageCounts(raw []byte) (u usage, ok bool) {
	if raw[0] != '{' {
		return u, false
	}
	fields := [...]*int64{&u.PromptTokens, &u.CompletionTokens, &u.InputTokens, &u.CacheCreationInputTokens,
		&u.CacheReadInputTokens, &u.OutputTokens}
	_, ok = jsonscan.Object(raw, 0, func(key, v []byte) bool {
		if !jsonscan.PlainKey(key) {
			return false
		}
		for i, name := range usageFields {
			if string(key) == name {
				n, null, ok := jsonscan.Int(v)
				if ok && !null { // null: encoding/json leaves the field as it is
					*fields[i] = n
				}
				return ok
			}
			if strings.EqualFold(string(key), name) {
				return false
			}
		}
		return true
	})
	return u, ok
}
