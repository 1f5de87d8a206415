package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/netlimit"
)

// Actor is the audit actor of every record the broker writes.
const Actor = "egress"

// Defaults for Config's zero values: limits a real agent never meets.
const (
	DefaultDialTimeout       = 30 * time.Second
	DefaultResolveTimeout    = 10 * time.Second
	DefaultHalfCloseTimeout  = 5 * time.Minute
	DefaultIdleTimeout       = defaults.EgressTunnelIdle
	DefaultMaxActive         = defaults.EgressMaxConns
	DefaultMaxWaiting        = defaults.EgressMaxWaiting
	DefaultMaxWaitingPerHost = defaults.EgressMaxWaitingPerHost
)

// UnknownFunc decides about a host that is not on the allowlist (at that
// port). It may block, e.g. while a human decides; ctx is cancelled when the
// client goes away or the broker is closed. Returning true admits this one
// request only; the broker does not add the host to the allowlist.
//
// To refuse with an explanation (who denied, or that the request timed
// out), return false and a *Denied error: its Detail is shown to the client.
type UnknownFunc func(ctx context.Context, session, host string, port int) (allow bool, err error)

// Denied is the error an UnknownFunc returns to refuse a host with an
// explanation; the request is recorded as unknown_denied.
type Denied struct{ Detail string }

func (d *Denied) Error() string { return "not approved: " + d.Detail }

// Resolver resolves names on the host side; *net.Resolver implements it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a Broker.
type Config struct {
	Session      string         // the sandbox id, for audit and the hook
	Allow        *Allowlist     // per sandbox; nil admits nothing (but Unknown may)
	Shared       *Allowlist     // rules every sandbox shares (approved globally); may be nil
	Unknown      UnknownFunc    // nil denies every host not on Allow
	AllowPrivate []netip.Prefix // special-use ranges reachable anyway (tests: 127.0.0.0/8)
	Resolver     Resolver       // nil => net.DefaultResolver
	// Dial connects to a checked "ip:port"; it is never given a name.
	// Nil => a net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	Log  *audit.Log           // may be nil
	Logf func(string, ...any) // may be nil

	DialTimeout      time.Duration // per dial attempt; 0 => DefaultDialTimeout
	ResolveTimeout   time.Duration // 0 => DefaultResolveTimeout
	HalfCloseTimeout time.Duration // after one tunnel direction ends; 0 => default, <0 => none
	// IdleTimeout closes a tunnel through which no byte has passed either
	// way for that long (up to a quarter more); 0 => DefaultIdleTimeout,
	// <0 => none.
	IdleTimeout time.Duration

	// MaxActive bounds this sandbox's tunnels and plain-HTTP requests at
	// once, including those waiting for Unknown; 0 => DefaultMaxActive.
	MaxActive int
	// Total, if set, is shared by the brokers of all sandboxes: one unit
	// per tunnel or request in flight.
	Total *netlimit.Budget
	// MaxWaiting bounds this sandbox's requests waiting for Unknown at
	// once, and MaxWaitingPerHost those waiting for one host:port's
	// decision; 0 => DefaultMaxWaiting, DefaultMaxWaitingPerHost.
	MaxWaiting, MaxWaitingPerHost int
	// Body bounds how slowly plain-HTTP request bodies may arrive (they
	// are streamed upstream, never buffered); the zero value means
	// netlimit.DefaultBody.
	Body netlimit.BodyLimits
	// DenyWindow and MaxDenyKeys aggregate refusals (see the package
	// doc); 0 => DefaultDenyWindow, DefaultMaxDenyKeys; a negative window
	// records every refusal in full.
	DenyWindow  time.Duration
	MaxDenyKeys int

	// Secrets, if set, brokers credentials (see the package doc): the
	// broker terminates TLS for the hosts it names, with CA, swaps the
	// sandbox's placeholders for the real values in request headers and
	// refuses placeholders sent anywhere else. Nil: no interception, every
	// CONNECT is passed through.
	Secrets Secrets
	// CA signs the leaf certificates of intercepted hosts; required with
	// Secrets.
	CA *CA
	// UpstreamRoots verifies intercepted hosts' own certificates; nil is
	// the system's roots (see UpstreamRoots for adding more).
	UpstreamRoots *x509.CertPool
	// HandshakeTimeout bounds each TLS handshake of an intercepted
	// connection, the client's with the broker and the broker's with the
	// upstream; 0 => DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// MaxRequests bounds this sandbox's requests in flight inside
	// intercepted connections (beyond: 429); 0 => DefaultMaxRequests.
	MaxRequests int
	// MaxStreams bounds the concurrent HTTP/2 streams of one intercepted
	// connection; 0 => DefaultMaxStreams.
	MaxStreams int
	// MaxHeaderBytes bounds one intercepted request's head; 0 =>
	// DefaultMaxHeaderBytes.
	MaxHeaderBytes int
}

// Broker is the egress proxy for one sandbox. It is an http.Handler.
type Broker struct {
	cfg       Config
	allow     *Allowlist
	resolver  Resolver
	dial      func(ctx context.Context, network, addr string) (net.Conn, error)
	transport *http.Transport
	proxy     *httputil.ReverseProxy
	// itransport and iproxy carry intercepted requests upstream over TLS.
	itransport *http.Transport
	iproxy     *httputil.ReverseProxy

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	misuses  denials      // secret.misuse records, aggregated like refusals
	active   atomic.Int64 // tunnels and requests in flight
	requests atomic.Int64 // requests in flight inside intercepted connections
	denials  denials

	mu         sync.Mutex
	closed     bool
	tunnels    map[*tunnel]struct{}
	intercepts map[*intercepted]struct{}
	waiting    int            // requests waiting for Unknown
	waitingOn  map[string]int // host:port -> requests waiting for its decision
	wg         sync.WaitGroup // tunnels, summary writes
}

// New checks cfg and returns a Broker.
func New(cfg Config) (*Broker, error) {
	for _, p := range cfg.AllowPrivate {
		if !p.IsValid() {
			return nil, errors.New("egress: invalid AllowPrivate prefix")
		}
	}
	b := &Broker{cfg: cfg, allow: cfg.Allow, resolver: cfg.Resolver, dial: cfg.Dial, tunnels: map[*tunnel]struct{}{}, intercepts: map[*intercepted]struct{}{}, waitingOn: map[string]int{}}
	if b.allow == nil {
		b.allow = &Allowlist{}
	}
	if b.resolver == nil {
		b.resolver = net.DefaultResolver
	}
	if b.dial == nil {
		b.dial = (&net.Dialer{KeepAlive: 30 * time.Second}).DialContext
	}
	if b.cfg.DialTimeout <= 0 {
		b.cfg.DialTimeout = DefaultDialTimeout
	}
	if b.cfg.ResolveTimeout <= 0 {
		b.cfg.ResolveTimeout = DefaultResolveTimeout
	}
	if b.cfg.HalfCloseTimeout == 0 {
		b.cfg.HalfCloseTimeout = DefaultHalfCloseTimeout
	}
	if b.cfg.IdleTimeout == 0 {
		b.cfg.IdleTimeout = DefaultIdleTimeout
	}
	if b.cfg.MaxActive <= 0 {
		b.cfg.MaxActive = DefaultMaxActive
	}
	if b.cfg.MaxWaiting <= 0 {
		b.cfg.MaxWaiting = DefaultMaxWaiting
	}
	if b.cfg.MaxWaitingPerHost <= 0 {
		b.cfg.MaxWaitingPerHost = DefaultMaxWaitingPerHost
	}
	if b.cfg.Body == (netlimit.BodyLimits{}) {
		b.cfg.Body = netlimit.DefaultBody
	}
	if b.cfg.DenyWindow == 0 {
		b.cfg.DenyWindow = DefaultDenyWindow
	}
	if b.cfg.MaxDenyKeys <= 0 {
		b.cfg.MaxDenyKeys = DefaultMaxDenyKeys
	}
	if cfg.Secrets != nil && cfg.CA == nil {
		return nil, errors.New("egress: Secrets needs a CA")
	}
	if b.cfg.HandshakeTimeout <= 0 {
		b.cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if b.cfg.MaxRequests <= 0 {
		b.cfg.MaxRequests = DefaultMaxRequests
	}
	if b.cfg.MaxStreams <= 0 {
		b.cfg.MaxStreams = DefaultMaxStreams
	}
	if b.cfg.MaxHeaderBytes <= 0 {
		b.cfg.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	b.denials = denials{b: b, window: b.cfg.DenyWindow, maxKeys: b.cfg.MaxDenyKeys}
	b.misuses = denials{b: b, kind: KindSecretMisuse, window: b.cfg.DenyWindow, maxKeys: b.cfg.MaxDenyKeys}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.transport = &http.Transport{
		Proxy:                  nil, // never chain to the daemon's own proxy settings
		DialContext:            b.dialFromContext,
		DisableCompression:     true, // pass bodies through byte for byte
		MaxIdleConns:           16,   // descriptors held for no client; bounded per sandbox
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 1 << 20,
	}
	b.proxy = &httputil.ReverseProxy{
		Rewrite:        rewrite,
		Transport:      b.transport,
		FlushInterval:  -1, // stream
		ErrorHandler:   b.proxyError,
		ModifyResponse: scrubResponse,
	}
	b.itransport = &http.Transport{
		Proxy:                  nil,
		DialTLSContext:         b.dialTLSFromContext,
		ForceAttemptHTTP2:      true,
		DisableCompression:     true,
		MaxIdleConns:           16,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 1 << 20,
	}
	b.iproxy = &httputil.ReverseProxy{
		Rewrite:        irewrite,
		Transport:      b.itransport,
		FlushInterval:  -1,
		ErrorHandler:   b.iproxyError,
		ModifyResponse: scrubResponse,
	}
	return b, nil
}

// Allowlist returns the list the broker consults (Config.Allow, or the
// empty list New created).
func (b *Broker) Allowlist() *Allowlist { return b.allow }

// Close cancels pending Unknown decisions, ends open tunnels, drops idle
// upstream connections, writes the summaries of aggregated refusals and
// waits for the tunnels' audit records. In-flight plain HTTP requests end
// with their clients; stop the http.Server first. Refusals after Close are
// recorded in full.
func (b *Broker) Close() error {
	b.mu.Lock()
	b.closed = true
	ts := make([]*tunnel, 0, len(b.tunnels))
	for t := range b.tunnels {
		ts = append(ts, t)
	}
	ics := make([]*intercepted, 0, len(b.intercepts))
	for ic := range b.intercepts {
		ics = append(ics, ic)
	}
	b.mu.Unlock()
	b.cancel()
	for _, t := range ts {
		t.close()
	}
	for _, ic := range ics {
		ic.srv.Close()
	}
	b.transport.CloseIdleConnections()
	b.itransport.CloseIdleConnections()
	b.denials.flush(true)
	b.misuses.flush(true)
	b.wg.Wait()
	return nil
}

func (b *Broker) logf(format string, args ...any) {
	if b.cfg.Logf != nil {
		b.cfg.Logf(format, args...)
	}
}

// attempt is what is known about one request, for audit.
type attempt struct {
	start     time.Time
	method    string
	host      string
	port      int
	reason    string
	addr      string
	status    int
	err       string
	up, down  atomic.Int64
	proxyFail atomic.Pointer[error]
	// intent is the connection's audit record, durable before the dial;
	// record ends it.
	intent *audit.Intent
	// intercepted: the broker terminated the CONNECT's TLS (secrets).
	intercepted bool
}

func (b *Broker) record(kind string, a *attempt) {
	if b.cfg.Log == nil {
		return
	}
	data := map[string]any{
		"host":       a.host,
		"port":       a.port,
		"method":     a.method,
		"bytes_up":   a.up.Load(),
		"bytes_down": a.down.Load(),
		"reason":     a.reason,
	}
	if a.addr != "" {
		data["addr"] = a.addr
	}
	if a.status != 0 {
		data["status"] = a.status
	}
	if a.err != "" {
		data["error"] = a.err
	}
	if a.intercepted {
		data["intercepted"] = true
	}
	if kind == audit.KindEgressAllow {
		data["duration_ms"] = time.Since(a.start).Milliseconds()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var err error
	if kind == audit.KindEgressAllow && a.intent != nil {
		_, err = a.intent.End(ctx, data)
	} else {
		_, err = b.cfg.Log.Append(ctx, audit.Entry{Session: b.cfg.Session, Actor: Actor, Kind: kind, Data: data})
	}
	if err != nil {
		b.logf("egress: audit %s %s:%d: %v", kind, a.host, a.port, err)
	}
}

// admitAndBegin is what a tunnel and a plain request both pass between
// taking their place (enter) and dialling: admit, then, if it lets them
// through, begin.
func (b *Broker) admitAndBegin(ctx context.Context, a *attempt, isIP bool) ([]netip.Addr, *refusal) {
	addrs, f := b.admit(ctx, a, isIP)
	if f == nil {
		f = b.begin(ctx, a)
	}
	return addrs, f
}

// begin makes an admitted connection's audit record durable before it is
// dialled: a connection the log cannot show is not made.
func (b *Broker) begin(ctx context.Context, a *attempt) *refusal {
	if b.cfg.Log == nil {
		return nil
	}
	in, err := b.cfg.Log.Begin(ctx, audit.Entry{Session: b.cfg.Session, Actor: Actor, Kind: audit.KindEgressAllow,
		Data: map[string]any{"host": a.host, "port": a.port, "method": a.method, "reason": a.reason}})
	if err != nil {
		b.logf("egress: audit %s:%d: %v", a.host, a.port, err)
		return &refusal{http.StatusServiceUnavailable, "audit_unavailable", "the connection's audit record could not be written; it was not made"}
	}
	a.intent = in
	return nil
}

// refusal is a request the broker will not carry.
type refusal struct {
	status int
	reason string // audit code
	msg    string // body, without the "ironclaw egress: " prefix
}

func (b *Broker) refuse(w http.ResponseWriter, a *attempt, f *refusal) {
	a.reason = f.reason
	a.status = f.status
	if b.denials.note(denyKey{a.host, a.port, a.reason}) {
		b.record(audit.KindEgressDeny, a)
	}
	if f.status == 0 {
		return // client gone
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Connection", "close")
	w.WriteHeader(f.status)
	io.WriteString(w, "ironclaw egress: "+f.msg+"\n")
}

// ServeHTTP serves one proxy request.
func (b *Broker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a := &attempt{start: time.Now(), method: r.Method}
	if r.Method == http.MethodConnect {
		b.serveConnect(w, r, a)
		return
	}
	if !r.URL.IsAbs() {
		a.host = r.Host
		b.refuse(w, a, &refusal{http.StatusBadRequest, "not_proxy_request",
			"this is an HTTP forward proxy, not a web server: send absolute-form requests (GET http://host/path) or CONNECT host:port, e.g. by setting HTTP_PROXY and HTTPS_PROXY"})
		return
	}
	b.servePlain(w, r, a)
}

// enter takes a place for one tunnel or request, or says why there is none.
func (b *Broker) enter() *refusal {
	if b.active.Add(1) > int64(b.cfg.MaxActive) {
		b.active.Add(-1)
		return &refusal{http.StatusTooManyRequests, "too_many_connections",
			fmt.Sprintf("this sandbox already has %d connections open through the broker, its limit; close some and retry", b.cfg.MaxActive)}
	}
	if b.cfg.Total != nil && !b.cfg.Total.TryAcquire() {
		b.active.Add(-1)
		return &refusal{http.StatusServiceUnavailable, "broker_busy",
			fmt.Sprintf("the broker is carrying its limit of %d connections for all sandboxes; retry later", b.cfg.Total.Max())}
	}
	return nil
}

// enterFor records the parsed target in a, so that a refusal's audit
// record names it, and takes a place for it (enter), refusing a when
// there is none; true means the caller holds a place and must leave.
func (b *Broker) enterFor(w http.ResponseWriter, a *attempt, host string, port int) bool {
	a.host, a.port = host, port
	if f := b.enter(); f != nil {
		b.refuse(w, a, f)
		return false
	}
	return true
}

// leave frees the place enter took.
func (b *Broker) leave() {
	b.active.Add(-1)
	if b.cfg.Total != nil {
		b.cfg.Total.Release()
	}
}

// wait takes a place among the requests waiting for a decision on hp.
func (b *Broker) wait(hp string) (release func(), f *refusal) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := b.waitingOn[hp]; n >= b.cfg.MaxWaitingPerHost {
		return nil, &refusal{http.StatusTooManyRequests, "too_many_waiting",
			fmt.Sprintf("%d connections are already waiting for the decision on host %s, the limit; retry once it is decided", n, hp)}
	}
	if b.waiting >= b.cfg.MaxWaiting {
		return nil, &refusal{http.StatusTooManyRequests, "too_many_waiting",
			fmt.Sprintf("%d connections of this sandbox are already waiting for approvals, the limit; retry once they are decided", b.waiting)}
	}
	b.waiting++
	b.waitingOn[hp]++
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.waiting--
		if b.waitingOn[hp]--; b.waitingOn[hp] == 0 {
			delete(b.waitingOn, hp)
		}
	}, nil
}

// target parses an authority into a normalised host and port; defPort 0
// means the port is required.
func parseTarget(authority string, defPort int) (host string, port int, isIP bool, err error) {
	if authority == "" {
		return "", 0, false, errors.New("missing host")
	}
	h, p, err := splitHostPortOpt(strings.ToLower(authority))
	if err != nil {
		return "", 0, false, err
	}
	if p == "" {
		if defPort == 0 {
			return "", 0, false, errors.New("missing port")
		}
		port = defPort
	} else if port, err = parsePort(p); err != nil {
		return "", 0, false, err
	}
	if strings.Contains(h, "*") {
		return "", 0, false, fmt.Errorf("bad host %q", h)
	}
	host, isIP, err = normalizeHost(h)
	return host, port, isIP, err
}

// admit runs the policy for host:port and returns the checked addresses.
func (b *Broker) admit(ctx context.Context, a *attempt, isIP bool) ([]netip.Addr, *refusal) {
	hp := net.JoinHostPort(a.host, strconv.Itoa(a.port))
	if isIP {
		if !b.allow.allows(a.host, a.port) && !b.cfg.Shared.Allows(a.host, a.port) {
			return nil, &refusal{http.StatusForbidden, "literal_ip",
				fmt.Sprintf("%s is an IP address and no rule names it; use the host's name", hp)}
		}
		ip := netip.MustParseAddr(a.host)
		if isSpecial(ip) && !allowedPrivate(ip, b.cfg.AllowPrivate) {
			return nil, &refusal{http.StatusForbidden, "private_address",
				fmt.Sprintf("%s is a private or special-use address", hp)}
		}
		a.reason = "allowlist"
		return []netip.Addr{ip}, nil
	}
	if b.allow.allows(a.host, a.port) || b.cfg.Shared.Allows(a.host, a.port) {
		a.reason = "allowlist"
	} else if b.cfg.Unknown == nil {
		return nil, &refusal{http.StatusForbidden, "not_allowlisted",
			fmt.Sprintf("host %s is not on this sandbox's allowlist", hp)}
	} else {
		release, f := b.wait(hp)
		if f != nil {
			return nil, f
		}
		hctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(b.ctx, cancel)
		ok, err := b.cfg.Unknown(hctx, b.cfg.Session, a.host, a.port)
		stop()
		cancel()
		release()
		switch {
		case ctx.Err() != nil:
			return nil, &refusal{0, "canceled", ""}
		case errors.As(err, new(*Denied)):
			var d *Denied
			errors.As(err, &d)
			a.err = d.Detail
			return nil, &refusal{http.StatusForbidden, "unknown_denied",
				fmt.Sprintf("host %s is not on this sandbox's allowlist and was not approved: %s", hp, d.Detail)}
		case err != nil:
			a.err = err.Error()
			return nil, &refusal{http.StatusForbidden, "unknown_error",
				fmt.Sprintf("host %s is not on this sandbox's allowlist and approval failed", hp)}
		case !ok:
			return nil, &refusal{http.StatusForbidden, "unknown_denied",
				fmt.Sprintf("host %s is not on this sandbox's allowlist and was not approved", hp)}
		}
		a.reason = "approved"
	}
	rctx, cancel := context.WithTimeout(ctx, b.cfg.ResolveTimeout)
	addrs, err := b.resolver.LookupNetIP(rctx, "ip", a.host)
	cancel()
	if err == nil && len(addrs) == 0 {
		err = errors.New("no addresses")
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, &refusal{0, "canceled", ""}
		}
		a.err = err.Error()
		return nil, &refusal{http.StatusBadGateway, "resolve_failed",
			fmt.Sprintf("cannot resolve host %s", a.host)}
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, ip := range addrs {
		if isSpecial(ip) && !allowedPrivate(ip, b.cfg.AllowPrivate) {
			a.addr = ip.String()
			return nil, &refusal{http.StatusForbidden, "private_address",
				fmt.Sprintf("host %s resolves to a private address %s", a.host, ip)}
		}
		ip = ip.Unmap()
		if !containsAddr(out, ip) {
			out = append(out, ip)
		}
	}
	return out, nil
}

func containsAddr(s []netip.Addr, a netip.Addr) bool {
	for _, x := range s {
		if x == a {
			return true
		}
	}
	return false
}

// dialChecked dials the checked addresses in order until one answers.
func (b *Broker) dialChecked(ctx context.Context, addrs []netip.Addr, port int) (net.Conn, netip.Addr, error) {
	var errs []error
	for _, ip := range addrs {
		dctx, cancel := context.WithTimeout(ctx, b.cfg.DialTimeout)
		c, err := b.dial(dctx, "tcp", netip.AddrPortFrom(ip, uint16(port)).String())
		cancel()
		if err == nil {
			return c, ip, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, netip.Addr{}, errors.Join(errs...)
}

func (b *Broker) serveConnect(w http.ResponseWriter, r *http.Request, a *attempt) {
	authority := r.URL.Host
	if authority == "" {
		authority = r.Host
	}
	host, port, isIP, err := parseTarget(authority, 0)
	if err != nil {
		a.host = authority
		b.refuse(w, a, &refusal{http.StatusBadRequest, "bad_request",
			fmt.Sprintf("bad CONNECT target %q: %v (want host:port)", authority, err)})
		return
	}
	if !b.enterFor(w, a, host, port) {
		return
	}
	defer b.leave()
	intercept := b.cfg.Secrets != nil && b.cfg.Secrets.Intercept(b.cfg.Session, host, port)
	if !intercept {
		if !b.checkPlain(w, r, host, port) {
			return
		}
	}
	addrs, f := b.admitAndBegin(r.Context(), a, isIP)
	if f != nil {
		b.refuse(w, a, f)
		return
	}
	if intercept {
		a.intercepted = true
		b.serveIntercept(w, r, a, addrs)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	stop := context.AfterFunc(b.ctx, cancel)
	up, ip, err := b.dialChecked(ctx, addrs, port)
	stop()
	cancel()
	if err != nil {
		a.err = "dial: " + err.Error()
		a.status = http.StatusBadGateway
		b.record(audit.KindEgressAllow, a)
		http.Error(w, fmt.Sprintf("ironclaw egress: cannot connect to %s:%d", host, port), http.StatusBadGateway)
		return
	}
	a.addr = ip.String()
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		a.err = "hijack: " + err.Error()
		a.status = http.StatusInternalServerError
		b.record(audit.KindEgressAllow, a)
		http.Error(w, "ironclaw egress: CONNECT needs HTTP/1.1", http.StatusInternalServerError)
		return
	}
	t := &tunnel{client: client, up: up}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		t.close()
		a.err = "broker closed"
		b.record(audit.KindEgressAllow, a)
		return
	}
	b.tunnels[t] = struct{}{}
	b.wg.Add(1)
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.tunnels, t)
		b.mu.Unlock()
		b.wg.Done()
	}()

	client.SetDeadline(time.Time{})
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		t.close()
		a.err = "reply: " + err.Error()
		b.record(audit.KindEgressAllow, a)
		return
	}
	// brw.Reader may hold bytes the client sent right after the request.
	b.splice(t, brw.Reader, a)
	b.record(audit.KindEgressAllow, a)
}

// tunnel is one spliced CONNECT.
type tunnel struct {
	client, up net.Conn
	once       sync.Once
}

func (t *tunnel) close() {
	t.once.Do(func() {
		t.client.Close()
		t.up.Close()
	})
}

// countWriter counts bytes written through it.
type countWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// splice copies both ways until both directions end, the tunnel has been
// idle for IdleTimeout, or one direction has been ended for
// HalfCloseTimeout.
func (b *Broker) splice(t *tunnel, clientR io.Reader, a *attempt) {
	done := make(chan struct{}, 2)
	pipe := func(dst net.Conn, src io.Reader, n *atomic.Int64) {
		// Avoid io.Copy's ReaderFrom/WriterTo fast paths bypassing the counter.
		_, err := io.CopyBuffer(countWriter{dst, n}, src, make([]byte, 32*1024))
		if err != nil || !closeWrite(dst) {
			t.close()
		}
		done <- struct{}{}
	}
	go pipe(t.up, clientR, &a.up)
	go pipe(t.client, t.up, &a.down)

	// The idle check compares the byte counts every quarter of the
	// timeout, so the copying pays nothing for it.
	var idleC, halfC <-chan time.Time
	idle := b.cfg.IdleTimeout
	var tick *time.Ticker
	if idle > 0 {
		tick = time.NewTicker(idle / 4)
		defer tick.Stop()
		idleC = tick.C
	}
	moved, lastMoved := int64(0), time.Now()
	for ended := 0; ended < 2; {
		select {
		case <-done:
			if ended++; ended == 1 && b.cfg.HalfCloseTimeout > 0 {
				half := time.NewTimer(b.cfg.HalfCloseTimeout)
				defer half.Stop()
				halfC = half.C
			}
		case now := <-idleC:
			if n := a.up.Load() + a.down.Load(); n != moved {
				moved, lastMoved = n, now
			} else if now.Sub(lastMoved) >= idle {
				a.err = fmt.Sprintf("closed after %v without traffic", idle)
				idleC = nil
				t.close()
			}
		case <-halfC:
			halfC = nil
			t.close()
		}
	}
	t.close()
}

func closeWrite(c net.Conn) bool {
	cw, ok := c.(interface{ CloseWrite() error })
	return ok && cw.CloseWrite() == nil
}

// ctxKey carries a plain HTTP request's checked addresses to the dialer.
type ctxKey struct{}

type dialPlan struct {
	addrs  []netip.Addr
	port   int
	a      *attempt
	body   *netlimit.Body   // nil without a body
	host   string           // intercepted: the TLS server name to verify
	h1only bool             // intercepted: offer only HTTP/1.1 (upgrades)
	scrub  []scrubPair      // what the response is scrubbed of (scrub.go)
	scan   *placeholderScan // plain HTTP: the body's look-out (nil: none)
}

// dialFromContext is the forwarding Transport's dialer: it dials only the
// addresses admit checked for this request, never the name in addr.
func (b *Broker) dialFromContext(ctx context.Context, network, addr string) (net.Conn, error) {
	p, ok := ctx.Value(ctxKey{}).(*dialPlan)
	if !ok || len(p.addrs) == 0 {
		return nil, fmt.Errorf("egress: dial %s without checked addresses", addr)
	}
	c, _, err := b.dialChecked(ctx, p.addrs, p.port)
	return c, err
}

// rewrite prepares the outgoing request. ReverseProxy has already removed
// hop-by-hop headers (Connection and those it names, Keep-Alive,
// Proxy-Connection, Proxy-Authenticate, Proxy-Authorization, TE, Trailer,
// Transfer-Encoding, Upgrade unless upgrading) and X-Forwarded-*/Forwarded.
func rewrite(pr *httputil.ProxyRequest) {
	pr.Out.Host = "" // use the URL's authority, as RFC 9112 3.2.2 asks
	for k := range pr.Out.Header {
		if strings.HasPrefix(k, "Proxy-") {
			pr.Out.Header.Del(k)
		}
	}
}

func (b *Broker) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	p, _ := r.Context().Value(ctxKey{}).(*dialPlan)
	if p != nil && p.body != nil && p.body.Err() != nil {
		err = p.body.Err() // the Transport reports the cancel the failed read caused
	}
	if p != nil {
		p.a.proxyFail.Store(&err)
	}
	if p != nil && p.scan != nil && p.scan.hit.Load() {
		b.misuse(w, p.a.host, p.port, r.Method, r.URL.Path, "body", nil)
		return
	}
	if errors.Is(err, netlimit.ErrSlowBody) {
		// Before the context check: the failed read cancelled the request.
		w.Header().Set("Connection", "close")
		http.Error(w, "ironclaw egress: the request body arrived too slowly", http.StatusRequestTimeout)
		return
	}
	if r.Context().Err() != nil {
		return
	}
	http.Error(w, "ironclaw egress: upstream request failed", http.StatusBadGateway)
}

// statusWriter counts response body bytes and remembers the status.
type statusWriter struct {
	http.ResponseWriter
	a      *attempt
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(p)
	s.a.down.Add(int64(n))
	return n, err
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// countBody counts request body bytes.
type countBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c countBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

func (b *Broker) servePlain(w http.ResponseWriter, r *http.Request, a *attempt) {
	if r.URL.Scheme != "http" {
		a.host = r.URL.Host
		b.refuse(w, a, &refusal{http.StatusBadRequest, "bad_request",
			fmt.Sprintf("cannot proxy %q URLs in absolute form; use CONNECT for https", r.URL.Scheme)})
		return
	}
	if r.URL.User != nil {
		r.URL.User = nil // never forward credentials embedded in the URL's authority form
	}
	host, port, isIP, err := parseTarget(r.URL.Host, 80)
	if err != nil {
		a.host = r.URL.Host
		b.refuse(w, a, &refusal{http.StatusBadRequest, "bad_request",
			fmt.Sprintf("bad target %q: %v", r.URL.Host, err)})
		return
	}
	if !b.enterFor(w, a, host, port) {
		return
	}
	defer b.leave()
	// Before anything wraps the body, and before admit: a refusal leaves
	// the body unread, and the server's discarding of it is bounded too.
	guarded := netlimit.LimitBody(w, r, b.cfg.Body)
	// Placeholders never travel in cleartext (see checkPlain).
	if !b.checkPlain(w, r, host, port) {
		return
	}
	addrs, f := b.admitAndBegin(r.Context(), a, isIP)
	if f != nil {
		b.refuse(w, a, f)
		return
	}
	plan := &dialPlan{addrs: addrs, port: port, a: a, body: guarded}
	ctx, cancel := context.WithCancel(context.WithValue(r.Context(), ctxKey{}, plan))
	defer cancel()
	stop := context.AfterFunc(b.ctx, cancel)
	defer stop()
	out := r.WithContext(ctx)
	var scan *placeholderScan
	if r.Body != nil && r.Body != http.NoBody {
		out.Body = countBody{r.Body, &a.up}
		if b.cfg.Secrets != nil {
			scan = &placeholderScan{ReadCloser: out.Body, b: b}
			out.Body = scan
			plan.scan = scan
		}
	}
	sw := &statusWriter{ResponseWriter: w, a: a}
	b.proxy.ServeHTTP(sw, out)
	a.status = sw.status
	if p := a.proxyFail.Load(); p != nil {
		a.err = (*p).Error()
		if a.status == 0 {
			a.status = http.StatusBadGateway
		}
	}
	if len(addrs) == 1 {
		a.addr = addrs[0].String()
	}
	b.record(audit.KindEgressAllow, a)
}
