// Package modelproxy is the daemon's model-provider proxy: agents hold
// proxy tokens ("icp_..."), the proxy swaps them for the real provider key
// on the way upstream, so provider keys never leave the daemon.
//
// # Tokens and where they work
//
// A sandbox token (MintSandbox) belongs to one sandbox and to the
// principal that created it; it is accepted only by SandboxHandler of that
// sandbox, the proxy the daemon serves on that sandbox's own loopback. A
// host token (MintHost, POST /v1/model/tokens) belongs to the principal
// that minted it, expires (Config.HostTokenTTL) and is accepted only by
// Handler, the daemon's /v1/model route. Any other token, including a
// valid one of another sandbox or of the other kind, is 401 with the same
// answer as an unknown one: the token is hashed and compared in constant
// time against the one the handler accepts, so neither the answer nor its
// timing says whether a token is valid somewhere else. A principal holds
// at most Config.MaxHostTokens live host tokens; minting more is refused
// until one expires or is revoked.
//
// # Routes
//
// Both handlers serve exactly these paths (relative to where they are
// mounted: the daemon mounts Handler under /v1/model/ with the prefix
// stripped, sandboxes see theirs at the root):
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
// # Bodies
//
// Request bodies (at most Config.MaxRequestBytes; how slowly they may
// arrive is the serving http.Server's to bound, netlimit's inside a
// sandbox and the API's on the host) must be strict JSON objects (see
// jsonbody.go):
// UTF-8, no lone surrogates, nothing after the object, and no two member
// names in any object equal even ignoring case. The members the proxy
// reads (model, stream, stream_options.include_usage, n, max_tokens,
// max_completion_tokens, max_output_tokens) must be spelled exactly. Any
// other body is 400 before anything goes upstream, so the proxy and the
// provider cannot read a body differently. The model allowlist
// (Config.Models) is checked against the one "model" member.
//
// # Headers
//
// Both directions go by allowlist (headers.go): upstream get only
// Content-Type, Accept, User-Agent and the provider's version and beta
// headers (OpenAI-Beta; anthropic-version, defaulting to 2023-06-01, and
// anthropic-beta), plus the real key (OpenAI "Authorization: Bearer KEY",
// Anthropic "x-api-key: KEY") and Accept-Encoding: identity, so usage can
// be read from the relayed bytes. Clients get back only Content-Type,
// Content-Length, Cache-Control, Retry-After(-Ms), X-Should-Retry and the
// request ids; status and body pass unchanged.
//
// # Budgets
//
// Tokens (input+output, as the provider reports them) are budgeted per
// sandbox (Config.SandboxBudget, in memory: sandboxes end with the daemon)
// and per principal (Config.PrincipalBudget: everything its sandboxes and
// its host tokens spend, kept in Config.Spend so it survives a restart,
// optionally per Config.BudgetWindow). Before a request goes upstream the
// proxy reserves on both budgets its input estimate (one token per
// InputBytesPerToken body bytes) plus its output bound (max_tokens,
// max_completion_tokens or max_output_tokens, times n); a request without
// an output bound gets one, in the provider's field, of what the budgets
// have left (at most Config.DefaultMaxOutput); a request the budgets
// cannot hold is 429 limit_exceeded. Reservations are held while requests
// run, so concurrent requests cannot together spend past a budget. When
// the request ends its reservation is settled to the usage the provider
// reported: in the JSON body's "usage", or, for streams, OpenAI chat's
// final usage chunk (the proxy sets stream_options.include_usage, and
// drops that chunk again if the client had not asked for it), the
// Responses API's response.completed (or .incomplete, .failed), and
// Anthropic's message_start and message_delta. A successful response or
// stream that ends without final usage (cut, or the client left) is
// charged its whole reservation; a stream whose output passes its bound
// (an upstream ignoring it) is cut there. Input beyond the estimate (text
// that tokenizes denser than the estimate assumes, images by URL) is
// charged as reported, so a budget can be exceeded by at most that excess
// of the requests in flight.
//
// RequestsPerMinute is a further per-token sliding one-minute window.
//
// # Streaming and cost
//
// Responses are relayed as they arrive: every read from the upstream is
// written to the client and flushed at once (what httputil.ReverseProxy
// calls FlushInterval -1), so no SSE event is held back; the usage
// stripper holds at most a partial line, never a complete event
// (TestSSEStreamsUnbuffered proves it with a handshake). Usage is read
// from the bytes as they pass, in the relaying goroutine: SSE data lines
// are decoded only when they may carry a usage object (not OpenAI's
// "usage":null chunks), a JSON response's top-level "usage" by a byte
// scanner that keeps at most that member (a usage value over 64 KiB
// counts as none). Upstream connections are kept alive and reused (up
// to 128 idle per provider host with the default transport). What the
// proxy adds to a request, measured against the same request sent
// straight to the same upstream, is BenchmarkProxyOverhead's
// p50-overhead-ms (docs/performance.md).
package modelproxy

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/errdefs"
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
	DefaultHostTokenTTL           = defaults.ModelTokenTTL
	DefaultMaxHostTokens          = defaults.ModelMaxTokens
	// DefaultMaxOutput is the output bound given to a request that sets
	// none while a budget applies: within the output limit of current
	// OpenAI models (gpt-4o and later; a bound above a model's limit is
	// the provider's 400, so for older models lower it).
	DefaultMaxOutput    = defaults.ModelMaxOutput
	DefaultWriteTimeout = time.Minute
	// InputBytesPerToken is the input estimate's ratio: prose, code and
	// JSON tokenize at 3-4 bytes per token, so 2 errs high for them.
	InputBytesPerToken = 2
	// TokenPrefix starts every proxy token.
	TokenPrefix = "icp_"
	// Actor is the audit actor of model requests.
	Actor = "model-proxy"
)

// Errors of minting and revoking.
var (
	ErrTooManyTokens = errdefs.New(errdefs.ErrLimitExceeded, "too many live model-proxy tokens for this principal")
	ErrUnknownToken  = errdefs.New(errdefs.ErrNotFound, "no such model-proxy token")
)

// Upstream is a real provider endpoint.
type Upstream struct {
	BaseURL string // provider base including /v1, e.g. https://api.openai.com/v1
	APIKey  string
}

// Config configures a Proxy. Zero values take the defaults above; a zero
// budget is no limit.
type Config struct {
	OpenAI, Anthropic *Upstream                 // nil => Mock[provider] or 503
	Mock              map[Provider]http.Handler // offline mock per provider
	Models            []string                  // allowlist of model names (empty = any)
	RequestsPerMinute int                       // per token; 0 = unlimited

	// SandboxBudget bounds the input+output tokens of each sandbox (all
	// requests with its token); PrincipalBudget those of each principal
	// (its sandboxes' and its host tokens' requests together), per
	// BudgetWindow (0: the budget never renews). Spend, if set, keeps
	// principal spend across restarts; nil keeps it in memory.
	SandboxBudget   int64
	PrincipalBudget int64
	BudgetWindow    time.Duration
	Spend           SpendStore
	// DefaultMaxOutput bounds the output of a request that sets no bound
	// while a budget applies (default DefaultMaxOutput); the bound given is
	// never above what the budgets have left.
	DefaultMaxOutput int64

	// HostTokenTTL is how long a host token lives (default 24h);
	// MaxHostTokens how many live ones a principal may hold (default 32).
	HostTokenTTL  time.Duration
	MaxHostTokens int

	MaxRequestBytes  int64         // default 8 MiB
	MaxResponseBytes int64         // default 64 MiB
	WriteTimeout     time.Duration // each write to the client must finish within it; default 1m

	Log       *audit.Log           // may be nil
	Logf      func(string, ...any) // may be nil
	Transport http.RoundTripper    // nil => clone of http.DefaultTransport, more idle connections kept
	Now       func() time.Time     // nil => time.Now
}

// Proxy is the model proxy. It is safe for concurrent use.
type Proxy struct {
	cfg     Config
	models  map[string]bool
	targets map[Provider]*target
	logf    func(string, ...any)
	now     func() time.Time

	mu         sync.Mutex
	hostTokens map[[32]byte]*grant // host tokens by hash
	sessions   map[string]*grant   // every token by session
	byOwner    map[string][]*grant // host tokens by principal
	principals map[string]*ledger  // principal budgets

	// spendMu guards the write-behind queue of principal spend.
	spendMu    sync.Mutex
	dirty      map[spendKey]int64 // settled, not yet handed to the writer
	writing    map[spendKey]int64 // being written
	kick       chan struct{}
	stop       chan struct{}
	writerDone chan struct{}
	closeOnce  sync.Once

	auditWG sync.WaitGroup
}

// target is where one provider's requests go.
type target struct {
	provider Provider
	base     *url.URL // nil when unavailable
	// urls is the upstream URL of each route (by route.sub), built once:
	// base with the route's path appended.
	urls     map[string]string
	key      string
	rt       http.RoundTripper
	upstream string // "provider" | "mock"
}

// grant is one proxy token (one per session: a sandbox, or one host
// token).
type grant struct {
	session   string
	principal string
	hash      [32]byte
	host      bool      // a host token (else a sandbox's)
	expires   time.Time // host tokens
	sandbox   *ledger   // the sandbox's budget; nil for host tokens

	mu     sync.Mutex
	recent []time.Time // request times within the last minute, oldest first
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

// New checks cfg and returns a Proxy. Close it when done.
func New(cfg Config) (*Proxy, error) {
	if cfg.MaxRequestBytes <= 0 {
		cfg.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.HostTokenTTL <= 0 {
		cfg.HostTokenTTL = DefaultHostTokenTTL
	}
	if cfg.MaxHostTokens <= 0 {
		cfg.MaxHostTokens = DefaultMaxHostTokens
	}
	if cfg.DefaultMaxOutput <= 0 {
		cfg.DefaultMaxOutput = DefaultMaxOutput
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.RequestsPerMinute < 0 || cfg.SandboxBudget < 0 || cfg.PrincipalBudget < 0 || cfg.BudgetWindow < 0 {
		return nil, errors.New("modelproxy: negative budget")
	}
	if cfg.BudgetWindow > 0 && cfg.BudgetWindow < time.Second {
		return nil, errors.New("modelproxy: budget window under a second")
	}
	rt := cfg.Transport
	if rt == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DisableCompression = true
		t.ResponseHeaderTimeout = 10 * time.Minute
		// Every sandbox's requests go to the same one or two provider
		// hosts: keep as many connections idle as run at once, so a burst
		// does not close all but two of them and pay TCP and TLS set-up
		// again on the next (the default keeps 2 per host).
		t.MaxIdleConns = 256
		t.MaxIdleConnsPerHost = 128
		rt = t
	}
	p := &Proxy{
		cfg:        cfg,
		targets:    map[Provider]*target{},
		logf:       cfg.Logf,
		now:        cfg.Now,
		hostTokens: map[[32]byte]*grant{},
		sessions:   map[string]*grant{},
		byOwner:    map[string][]*grant{},
		principals: map[string]*ledger{},
		dirty:      map[spendKey]int64{},
		writing:    map[spendKey]int64{},
		kick:       make(chan struct{}, 1),
		stop:       make(chan struct{}),
		writerDone: make(chan struct{}),
	}
	if p.logf == nil {
		p.logf = func(string, ...any) {}
	}
	if p.now == nil {
		p.now = time.Now
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
		if t.base != nil {
			t.urls = map[string]string{}
			for _, rt := range routes {
				if rt.provider == prov {
					u := *t.base
					u.Path, u.RawPath = t.base.Path+rt.sub, ""
					t.urls[rt.sub] = u.String()
				}
			}
		}
		p.targets[prov] = t
	}
	if cfg.Spend != nil {
		go p.writeSpend()
	} else {
		close(p.writerDone)
	}
	return p, nil
}

func newToken() (string, [32]byte, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", b, fmt.Errorf("modelproxy: mint: %w", err)
	}
	tok := TokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return tok, sha256.Sum256([]byte(tok)), nil
}

// MintSandbox returns the token of sandbox session, owned by principal
// (the sandbox's creator). It is accepted only by SandboxHandler(session);
// Revoke(session) ends it.
func (p *Proxy) MintSandbox(session, principal string) (string, error) {
	if session == "" || principal == "" {
		return "", errors.New("modelproxy: mint: empty session or principal")
	}
	tok, h, err := newToken()
	if err != nil {
		return "", err
	}
	g := &grant{session: session, principal: principal, hash: h, sandbox: &ledger{limit: p.cfg.SandboxBudget, loaded: true}}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sessions[session] != nil {
		return "", fmt.Errorf("modelproxy: mint: session %s already has a token", session)
	}
	p.sessions[session] = g
	return tok, nil
}

// HostToken is a minted host token.
type HostToken struct {
	Token     string
	Session   string // names the token (for the audit log and RevokeHost)
	ExpiresAt time.Time
}

// MintHost returns a host token of principal: accepted only by Handler,
// until it expires or is revoked, and spending principal's budget. A
// principal holding MaxHostTokens live ones gets ErrTooManyTokens.
func (p *Proxy) MintHost(principal string) (HostToken, error) {
	if principal == "" {
		return HostToken{}, errors.New("modelproxy: mint: empty principal")
	}
	tok, h, err := newToken()
	if err != nil {
		return HostToken{}, err
	}
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return HostToken{}, fmt.Errorf("modelproxy: mint: %w", err)
	}
	now := p.now()
	g := &grant{session: "api-" + hex.EncodeToString(id[:]), principal: principal, hash: h, host: true,
		expires: now.Add(p.cfg.HostTokenTTL)}
	p.mu.Lock()
	defer p.mu.Unlock()
	live := p.byOwner[principal][:0]
	for _, o := range p.byOwner[principal] {
		if now.Before(o.expires) {
			live = append(live, o)
		} else {
			p.dropLocked(o)
		}
	}
	if len(live) >= p.cfg.MaxHostTokens {
		p.byOwner[principal] = live
		return HostToken{}, fmt.Errorf("%w: %d live (each lives %v; the oldest expires at %s); revoke one with DELETE /v1/model/tokens/{session}",
			ErrTooManyTokens, len(live), p.cfg.HostTokenTTL, live[0].expires.UTC().Format(time.RFC3339))
	}
	p.byOwner[principal] = append(live, g)
	p.hostTokens[h] = g
	p.sessions[g.session] = g
	return HostToken{Token: tok, Session: g.session, ExpiresAt: g.expires}, nil
}

// RevokeHost revokes principal's host token named session; a session
// that is not principal's own host token is ErrUnknownToken.
func (p *Proxy) RevokeHost(principal, session string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	g := p.sessions[session]
	if g == nil || !g.host || g.principal != principal {
		return ErrUnknownToken
	}
	p.dropLocked(g)
	list := p.byOwner[principal]
	for i, o := range list {
		if o == g {
			p.byOwner[principal] = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	return nil
}

// dropLocked forgets g's token (not its place in byOwner).
func (p *Proxy) dropLocked(g *grant) {
	if p.sessions[g.session] == g {
		delete(p.sessions, g.session)
	}
	if g.host && p.hostTokens[g.hash] == g {
		delete(p.hostTokens, g.hash)
	}
}

// Revoke revokes the token of session (a sandbox's, or a host token's).
// Requests already in flight finish and are settled.
func (p *Proxy) Revoke(session string) {
	p.mu.Lock()
	g := p.sessions[session]
	p.mu.Unlock()
	if g == nil {
		return
	}
	if g.host {
		_ = p.RevokeHost(g.principal, session)
		return
	}
	p.mu.Lock()
	p.dropLocked(g)
	p.mu.Unlock()
}

// Close writes the remaining principal spend and waits for pending audit
// appends. The handlers must no longer be serving.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() { close(p.stop) })
	<-p.writerDone
	p.auditWG.Wait()
	return nil
}

// hostGrant returns the live host token tok, or nil.
func (p *Proxy) hostGrant(tok string) *grant {
	if !strings.HasPrefix(tok, TokenPrefix) {
		return nil
	}
	// Keyed by the token's SHA-256: which bucket a lookup probes depends
	// on a hash the caller cannot steer, so its timing tells nothing
	// about other tokens.
	h := sha256.Sum256([]byte(tok))
	p.mu.Lock()
	g := p.hostTokens[h]
	p.mu.Unlock()
	if g == nil || !p.now().Before(g.expires) {
		return nil
	}
	return g
}

// sandboxGrant returns session's token if tok is it, else nil. Only the
// sandbox's own token is compared (in constant time), so another
// sandbox's valid token and garbage take the same path.
func (p *Proxy) sandboxGrant(session, tok string) *grant {
	h := sha256.Sum256([]byte(tok))
	p.mu.Lock()
	g := p.sessions[session]
	p.mu.Unlock()
	if g == nil || g.host {
		var zero [32]byte
		subtle.ConstantTimeCompare(h[:], zero[:])
		return nil
	}
	if subtle.ConstantTimeCompare(h[:], g.hash[:]) != 1 {
		return nil
	}
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
