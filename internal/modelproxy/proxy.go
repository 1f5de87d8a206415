// Package modelproxy is the daemon's model-provider proxy: agents hold a
// per-session proxy token ("icp_..."), the proxy swaps it for the real
// provider key on the way upstream, so provider keys never leave the daemon.
//
// # Routes
//
// Handler serves exactly these paths (relative to where it is mounted: the
// daemon mounts it under /v1/model/ with the prefix stripped, sandboxes see
// it at the root):
//
//	POST /openai/v1/chat/completions
//	POST /openai/v1/responses
//	POST /openai/v1/embeddings
//	GET  /openai/v1/models
//	POST /anthropic/v1/messages
//	GET  /anthropic/v1/models
//
// Any other path is 404 (no open relay; paths are compared exactly, escaped
// form included, so "/openai/v1/../x", "/openai/v1/chat%2Fcompletions" or
// "/openai/chat/completions" without /v1 are refused); a listed path with
// another method is 405.
//
// # Upstreams
//
// Upstream.BaseURL is the provider's API base INCLUDING the /v1 segment for
// both providers, e.g. "https://api.openai.com/v1" and
// "https://api.anthropic.com/v1". "/openai/v1/chat/completions" goes to
// BaseURL+"/chat/completions", the query string is kept. A provider with no
// Upstream is served in-process by Config.Mock[provider] (which receives the
// path with the provider prefix removed: "/v1/chat/completions"), through the
// same authentication, allowlist, budget, streaming and audit path; with no
// mock either it answers 503.
//
// # Headers
//
// The client's Authorization, X-Api-Key, Proxy-Authorization, Cookie,
// OpenAI-Organization, OpenAI-Project, Forwarded/X-Forwarded-*, Host and all
// hop-by-hop headers are dropped; the real key is set (OpenAI
// "Authorization: Bearer KEY", Anthropic "x-api-key: KEY");
// anthropic-version and anthropic-beta pass through (anthropic-version
// defaults to 2023-06-01 when absent). Accept-Encoding is forced to identity
// so usage can be read from the relayed bytes. Set-Cookie and hop-by-hop
// headers of the response are dropped; status and body pass unchanged.
//
// # Budgets
//
// Per token: RequestsPerMinute is a sliding one-minute window; TokensPerSession
// is checked before each request against the input+output tokens the provider
// reported in earlier responses (non-streaming JSON "usage"; SSE: OpenAI
// chat's final chunk usage, Responses' response.completed, Anthropic
// message_start / message_delta). Requests in flight when the budget runs out
// can overshoot it by their own usage.
package modelproxy

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
)

// Provider names a model provider.
type Provider string

// Providers served.
const (
	OpenAI    Provider = "openai"
	Anthropic Provider = "anthropic"
)

// Defaults for Config's zero values.
const (
	DefaultMaxRequestBytes  int64 = 8 << 20
	DefaultMaxResponseBytes int64 = 64 << 20
	DefaultAnthropicVersion       = "2023-06-01"
	// TokenPrefix starts every proxy token.
	TokenPrefix = "icp_"
	// Actor is the audit actor of model requests.
	Actor = "model-proxy"
)

// Upstream is a real provider endpoint.
type Upstream struct {
	BaseURL string // provider base including /v1, e.g. https://api.openai.com/v1
	APIKey  string
}

// Config configures a Proxy.
type Config struct {
	OpenAI, Anthropic *Upstream                 // nil => Mock[provider] or 503
	Mock              map[Provider]http.Handler // offline mock per provider
	Models            []string                  // allowlist of model names (empty = any)
	RequestsPerMinute int                       // per token; 0 = unlimited
	TokensPerSession  int64                     // input+output tokens per token; 0 = unlimited
	MaxRequestBytes   int64                     // default 8 MiB
	MaxResponseBytes  int64                     // default 64 MiB
	Log               *audit.Log                // may be nil
	Logf              func(string, ...any)      // may be nil
	Transport         http.RoundTripper         // nil => clone of http.DefaultTransport
}

// Proxy is the model proxy. It is safe for concurrent use.
type Proxy struct {
	cfg     Config
	models  map[string]bool
	targets map[Provider]*target
	logf    func(string, ...any)

	mu       sync.Mutex
	tokens   map[[32]byte]*grant
	sessions map[string][][32]byte

	auditWG sync.WaitGroup
}

// target is where one provider's requests go.
type target struct {
	provider Provider
	base     *url.URL // nil when unavailable
	key      string
	rt       http.RoundTripper
	upstream string // "provider" | "mock"
}

// grant is the state of one proxy token.
type grant struct {
	session string

	mu     sync.Mutex
	recent []time.Time // request times within the last minute, oldest first
	used   int64       // tokens reported so far
}

type route struct {
	provider Provider
	method   string
	sub      string // path after /<provider>/v1
}

var routes = map[string]route{
	"/openai/v1/chat/completions": {OpenAI, http.MethodPost, "/chat/completions"},
	"/openai/v1/responses":        {OpenAI, http.MethodPost, "/responses"},
	"/openai/v1/embeddings":       {OpenAI, http.MethodPost, "/embeddings"},
	"/openai/v1/models":           {OpenAI, http.MethodGet, "/models"},
	"/anthropic/v1/messages":      {Anthropic, http.MethodPost, "/messages"},
	"/anthropic/v1/models":        {Anthropic, http.MethodGet, "/models"},
}

// New checks cfg and returns a Proxy.
func New(cfg Config) (*Proxy, error) {
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.RequestsPerMinute < 0 || cfg.TokensPerSession < 0 {
		return nil, errors.New("modelproxy: negative budget")
	}
	rt := cfg.Transport
	if rt == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DisableCompression = true
		t.ResponseHeaderTimeout = 10 * time.Minute
		rt = t
	}
	p := &Proxy{
		cfg:      cfg,
		targets:  map[Provider]*target{},
		logf:     cfg.Logf,
		tokens:   map[[32]byte]*grant{},
		sessions: map[string][][32]byte{},
	}
	if p.logf == nil {
		p.logf = func(string, ...any) {}
	}
	if len(cfg.Models) > 0 {
		p.models = make(map[string]bool, len(cfg.Models))
		for _, m := range cfg.Models {
			p.models[m] = true
		}
	}
	for prov, up := range map[Provider]*Upstream{OpenAI: cfg.OpenAI, Anthropic: cfg.Anthropic} {
		t := &target{provider: prov}
		switch {
		case up != nil:
			u, err := url.Parse(strings.TrimRight(up.BaseURL, "/"))
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				// The URL is not secret, but err may quote it; keep the message generic anyway.
				return nil, fmt.Errorf("modelproxy: %s: base URL must be an absolute http(s) URL", prov)
			}
			if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
				return nil, fmt.Errorf("modelproxy: %s: base URL must not carry credentials, query or fragment", prov)
			}
			if up.APIKey == "" || strings.ContainsAny(up.APIKey, "\r\n\x00") {
				return nil, fmt.Errorf("modelproxy: %s: missing or malformed API key", prov)
			}
			t.base, t.key, t.rt, t.upstream = u, up.APIKey, rt, "provider"
		case cfg.Mock[prov] != nil:
			t.base = &url.URL{Scheme: "http", Host: "mock." + string(prov), Path: "/v1"}
			t.rt, t.upstream = handlerTransport{cfg.Mock[prov]}, "mock"
		}
		p.targets[prov] = t
	}
	return p, nil
}

// Mint returns a new proxy token bound to session.
func (p *Proxy) Mint(session string) (string, error) {
	if session == "" {
		return "", errors.New("modelproxy: mint: empty session")
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("modelproxy: mint: %w", err)
	}
	tok := TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	h := sha256.Sum256([]byte(tok))
	p.mu.Lock()
	p.tokens[h] = &grant{session: session}
	p.sessions[session] = append(p.sessions[session], h)
	p.mu.Unlock()
	return tok, nil
}

// Revoke revokes every token of session. Requests already in flight finish.
func (p *Proxy) Revoke(session string) {
	p.mu.Lock()
	for _, h := range p.sessions[session] {
		delete(p.tokens, h)
	}
	delete(p.sessions, session)
	p.mu.Unlock()
}

// Close waits for pending audit appends. The handler must no longer be
// serving.
func (p *Proxy) Close() error {
	p.auditWG.Wait()
	return nil
}

func (p *Proxy) lookup(tok string) *grant {
	if !strings.HasPrefix(tok, TokenPrefix) {
		return nil
	}
	h := sha256.Sum256([]byte(tok))
	p.mu.Lock()
	g := p.tokens[h]
	p.mu.Unlock()
	return g
}

// clientToken returns the proxy token from either auth header.
func clientToken(r *http.Request) string {
	if v := r.Header.Get("x-api-key"); v != "" {
		return strings.TrimSpace(v)
	}
	v := r.Header.Get("Authorization")
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return ""
}

// allow records a request against g's rate budget; it returns how long to
// wait when the budget is spent.
func (g *grant) allow(now time.Time, rpm int) (bool, time.Duration) {
	if rpm <= 0 {
		return true, 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	cut := now.Add(-time.Minute)
	i := 0
	for i < len(g.recent) && !g.recent[i].After(cut) {
		i++
	}
	g.recent = g.recent[i:]
	if len(g.recent) >= rpm {
		return false, g.recent[0].Add(time.Minute).Sub(now)
	}
	g.recent = append(g.recent, now)
	return true, 0
}

func (g *grant) tokensUsed() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.used
}

func (g *grant) addTokens(n int64) {
	g.mu.Lock()
	g.used += n
	g.mu.Unlock()
}

// hopHeaders are dropped in both directions.
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// clientOnly are request headers never forwarded upstream.
var clientOnly = []string{
	"Authorization", "X-Api-Key", "Cookie", "Host", "Content-Length", "Accept-Encoding",
	"Openai-Organization", "Openai-Project", "Forwarded", "X-Forwarded-For",
	"X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-Ip",
}

func removeHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// handlerTransport serves requests with an in-process handler, streaming its
// output through a pipe so a mock goes through the same relay as a provider.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	in := req.Clone(req.Context())
	in.RequestURI = req.URL.RequestURI()
	in.URL.Scheme, in.URL.Host = "", ""
	in.RemoteAddr = "127.0.0.1:0"
	go func() {
		defer func() {
			if v := recover(); v != nil {
				w.start(http.StatusInternalServerError)
				pw.CloseWithError(fmt.Errorf("mock handler panic: %v", v))
				return
			}
			w.start(http.StatusOK)
			pw.Close()
		}()
		t.h.ServeHTTP(w, in)
	}()
	select {
	case <-w.ready:
	case <-req.Context().Done():
		pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	resp := &http.Response{
		Status:        fmt.Sprintf("%d %s", w.code, http.StatusText(w.code)),
		StatusCode:    w.code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.sent,
		Body:          pr,
		ContentLength: -1,
		Request:       req,
	}
	return resp, nil
}

type pipeWriter struct {
	header http.Header
	sent   http.Header
	pw     *io.PipeWriter
	once   sync.Once
	code   int
	ready  chan struct{}
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) start(code int) {
	w.once.Do(func() {
		w.code = code
		w.sent = w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeWriter) WriteHeader(code int) {
	if code >= 100 && code < 200 {
		return
	}
	w.start(code)
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.start(http.StatusOK)
	return w.pw.Write(b)
}

// Flush is a no-op: the pipe hands every write to the reader directly.
func (w *pipeWriter) Flush() {}
