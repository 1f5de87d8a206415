package egress

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
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
	"github.com/ironclaw/ironclaw/internal/netlimit"
)

// Secrets tells the broker which requests carry brokered credentials. The
// daemon's secrets store implements it (package secrets); the broker never
// sees a secret's value except inside the header values Swap fills in.
type Secrets interface {
	// Intercept: must the broker terminate TLS for (sandbox, host, port)?
	// True when a secret granted or pending for the sandbox lists
	// host:port.
	Intercept(sandbox, host string, port int) bool
	// Swap replaces the sandbox's placeholders in h for host: in every
	// header value, and inside Basic credentials (decode, replace,
	// re-encode). It returns the names of the secrets swapped. A
	// placeholder of a secret whose hosts do not include host -> an error
	// wrapping ErrSecretMisuse (the broker refuses 403 and audits
	// secret.misuse, never the value). A pending grant blocks until
	// decided or ctx ends; a denied one -> an error wrapping
	// ErrSecretDenied.
	Swap(ctx context.Context, sandbox, host string, port int, h http.Header) (swapped []string, err error)
	// Contains reports whether b contains any placeholder of the sandbox
	// (for misuse checks of plain-HTTP requests to hosts without secrets,
	// and of URLs).
	Contains(sandbox string, b []byte) bool
}

var (
	// ErrSecretMisuse: a placeholder was sent where its secret may not go.
	ErrSecretMisuse = errors.New("a secret's placeholder was sent to a host the secret is not for")
	// ErrSecretDenied: the secret's use by this sandbox was denied.
	ErrSecretDenied = errors.New("the use of the secret by this sandbox was denied")
)

// Audit kinds the broker writes for brokered credentials.
const (
	KindSecretInject = "secret.inject"
	KindSecretMisuse = "secret.misuse"
)

// Interception defaults (Config's zero values).
const (
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultMaxRequests      = 256      // intercepted requests in flight, per sandbox
	DefaultMaxStreams       = 32       // HTTP/2 streams per intercepted connection
	DefaultMaxHeaderBytes   = 64 << 10 // one intercepted request's head
	interceptHeadTimeout    = 30 * time.Second
)

// placeholderPrefix starts every placeholder (package secrets): a cheap
// pre-check before asking Contains.
const placeholderPrefix = "ironclaw-secret-"

// intercepted is one CONNECT whose TLS the broker terminates.
type intercepted struct {
	b     *Broker
	a     *attempt // the CONNECT's
	addrs []netip.Addr
	srv   *http.Server
	wg    sync.WaitGroup // requests being served
}

// icConn is the client connection beneath the broker's TLS: it counts
// bytes and says when it is closed.
type icConn struct {
	net.Conn
	r        io.Reader // bytes the client sent with the CONNECT, then the conn
	up, down *atomic.Int64
	once     sync.Once
	done     chan struct{}
}

func (c *icConn) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.up.Add(int64(n))
	return n, err
}

func (c *icConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.down.Add(int64(n))
	return n, err
}

func (c *icConn) Close() error {
	var err error
	c.once.Do(func() {
		err = c.Conn.Close()
		close(c.done)
	})
	return err
}

// oneListener hands out one connection, then waits until it is closed.
type oneListener struct {
	c      net.Conn
	done   <-chan struct{}
	mu     sync.Mutex
	given  bool
	closed chan struct{}
	once   sync.Once
}

func (l *oneListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if !l.given {
		l.given = true
		l.mu.Unlock()
		return l.c, nil
	}
	l.mu.Unlock()
	select {
	case <-l.done:
	case <-l.closed:
	}
	return nil, net.ErrClosed
}

func (l *oneListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneListener) Addr() net.Addr { return l.c.LocalAddr() }

// hostMatches reports whether a TLS server name or Host authority names
// host (and, if it has a port, port).
func hostMatches(authority, host string, port int, isSNI bool) bool {
	if authority == "" {
		return isSNI // a client may omit SNI (IP targets); never the Host
	}
	h, p := authority, ""
	if !isSNI {
		var err error
		if h, p, err = splitHostPortOpt(strings.ToLower(authority)); err != nil {
			return false
		}
	}
	n, _, err := normalizeHost(strings.ToLower(h))
	if err != nil || n != host {
		return false
	}
	return p == "" || p == strconv.Itoa(port)
}

// serveIntercept answers the CONNECT, terminates the client's TLS with a
// leaf of the daemon's CA and serves the requests inside (HTTP/1.1 or
// HTTP/2), forwarding each to the upstream over verified TLS.
func (b *Broker) serveIntercept(w http.ResponseWriter, r *http.Request, a *attempt, addrs []netip.Addr) {
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		a.err = "hijack: " + err.Error()
		a.status = http.StatusInternalServerError
		b.record(audit.KindEgressAllow, a)
		http.Error(w, "ironclaw egress: CONNECT needs HTTP/1.1", http.StatusInternalServerError)
		return
	}
	client.SetDeadline(time.Time{})
	var rd io.Reader = client
	if brw.Reader.Buffered() > 0 {
		rd = io.MultiReader(bytes.NewReader(append([]byte(nil), must(brw.Reader.Peek(brw.Reader.Buffered()))...)), client)
	}
	raw := &icConn{Conn: client, r: rd, up: &a.up, down: &a.down, done: make(chan struct{})}
	ic := &intercepted{b: b, a: a, addrs: addrs}
	ic.srv = &http.Server{
		// GuardBodies detaches a body from its ResponseWriter when the
		// handler returns: the proxy's Transport may still be forwarding
		// the body then (its request-writing goroutine outlives the
		// handler), and a deadline set through a finished HTTP/2
		// ResponseWriter panics, in a goroutine no handler recovers: the
		// whole daemon. ServeHTTP's LimitBody takes that body over.
		Handler:           netlimit.GuardBodies(ic, b.cfg.Body),
		ReadHeaderTimeout: interceptHeadTimeout,
		MaxHeaderBytes:    b.cfg.MaxHeaderBytes,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams:          b.cfg.MaxStreams,
			MaxDecoderHeaderTableSize:     4 << 10,
			MaxEncoderHeaderTableSize:     4 << 10,
			MaxReceiveBufferPerConnection: 1 << 20,
			MaxReceiveBufferPerStream:     256 << 10,
		},
		ErrorLog: log.New(logWriter{b}, "", 0),
	}
	// The server's goroutine for the connection ends after it reports
	// the connection closed or hijacked: wait for that, not just Serve.
	connDone := make(chan struct{})
	var connOnce sync.Once
	ic.srv.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed || st == http.StateHijacked {
			connOnce.Do(func() { close(connDone) })
		}
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		raw.Close()
		a.err = "broker closed"
		b.record(audit.KindEgressAllow, a)
		return
	}
	b.intercepts[ic] = struct{}{}
	b.wg.Add(1)
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.intercepts, ic)
		b.mu.Unlock()
		b.wg.Done()
	}()

	if _, err := io.WriteString(raw, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		raw.Close()
		a.err = "reply: " + err.Error()
		b.record(audit.KindEgressAllow, a)
		return
	}
	var sniBad atomic.Pointer[string]
	tc := tls.Server(raw, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if !hostMatches(hello.ServerName, a.host, a.port, true) {
				sni := hello.ServerName
				sniBad.Store(&sni)
				return nil, fmt.Errorf("TLS server name %q is not the CONNECT host %s", sni, a.host)
			}
			return b.cfg.CA.Leaf(a.host)
		},
	})
	tc.SetDeadline(time.Now().Add(b.cfg.HandshakeTimeout))
	hctx, cancel := context.WithTimeout(b.ctx, b.cfg.HandshakeTimeout)
	err = tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		tc.Close()
		raw.Close()
		if p := sniBad.Load(); p != nil {
			a.err = fmt.Sprintf("TLS server name %q is not the CONNECT host", *p)
			b.noteDeny(a, "sni_mismatch")
		} else {
			a.err = "client TLS handshake: " + err.Error()
		}
		b.record(audit.KindEgressAllow, a)
		return
	}
	tc.SetDeadline(time.Time{})
	stopIdle := b.watchIdle(a, raw)
	ic.srv.Serve(&oneListener{c: tc, done: raw.done, closed: make(chan struct{})})
	ic.srv.Close()
	raw.Close()
	<-connDone
	ic.wg.Wait()
	stopIdle()
	b.record(audit.KindEgressAllow, a)
}

func must[T any](v T, _ error) T { return v }

// watchIdle closes c once no byte has passed either way for IdleTimeout.
func (b *Broker) watchIdle(a *attempt, c io.Closer) (stop func()) {
	idle := b.cfg.IdleTimeout
	if idle <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(idle / 4)
		defer tick.Stop()
		moved, last := int64(-1), time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				if n := a.up.Load() + a.down.Load(); n != moved {
					moved, last = n, now
				} else if now.Sub(last) >= idle {
					a.err = fmt.Sprintf("closed after %v without traffic", idle)
					c.Close()
					return
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

type logWriter struct{ b *Broker }

func (l logWriter) Write(p []byte) (int, error) {
	l.b.logf("egress: intercepted: %s", strings.TrimSpace(string(p)))
	return len(p), nil
}

// noteDeny records a refusal inside an intercepted connection (or of its
// handshake) as egress.deny, aggregated like the others.
func (b *Broker) noteDeny(a *attempt, reason string) {
	d := &attempt{start: time.Now(), method: a.method, host: a.host, port: a.port, reason: reason, err: a.err, addr: a.addr}
	if b.denials.note(denyKey{d.host, d.port, reason}) {
		b.record(audit.KindEgressDeny, d)
	}
}

// audit appends one record; an error means it is not durable.
func (b *Broker) audit(kind string, data map[string]any) error {
	if b.cfg.Log == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := b.cfg.Log.Append(ctx, audit.Entry{Session: b.cfg.Session, Actor: Actor, Kind: kind, Data: data})
	if err != nil {
		b.logf("egress: audit %s: %v", kind, err)
	}
	return err
}

// misuse refuses a request that carries a placeholder where it may not go
// and records secret.misuse (never the placeholder, never a value).
func (b *Broker) misuse(w http.ResponseWriter, host string, port int, method, path, where string, err error) {
	data := map[string]any{"host": host, "port": port, "method": method, "path": path, "where": where}
	if err != nil {
		data["error"] = err.Error()
	}
	if b.misuses.note(denyKey{host, port, where}) {
		// Aggregated like refusals: the first of each (host, port,
		// where) a window in full, then a summary with the count.
		_ = b.audit(KindSecretMisuse, data)
	}
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusForbidden)
	if where == "plain_http" {
		io.WriteString(w, fmt.Sprintf("ironclaw egress: this plain-HTTP request to %s:%d carries the placeholder of a brokered secret; "+
			"secrets are only injected over TLS (use https://); it was refused and recorded\n", host, port))
		return
	}
	io.WriteString(w, fmt.Sprintf("ironclaw egress: this request carries the placeholder of a brokered secret (in its %s) "+
		"that is not for host %s:%d; it was refused and recorded\n", where, host, port))
}

// hasPlaceholder reports whether b holds one of the sandbox's
// placeholders.
func (b *Broker) hasPlaceholder(p []byte) bool {
	return bytes.Contains(p, []byte(placeholderPrefix)) && b.cfg.Secrets.Contains(b.cfg.Session, p)
}

// headerPlaceholder reports whether any header name or value holds a
// placeholder.
func (b *Broker) headerPlaceholder(h http.Header) bool {
	var buf bytes.Buffer
	for k, vs := range h {
		buf.WriteString(k)
		buf.WriteByte('\n')
		for _, v := range vs {
			buf.WriteString(v)
			buf.WriteByte('\n')
		}
	}
	return b.hasPlaceholder(buf.Bytes())
}

// swap fills in the secrets of r's headers for host:port, refusing (and
// recording) misuse and denial; ok is false if r was answered. It records
// secret.inject before the request goes anywhere, and returns what its
// response is to be scrubbed of (scrub.go).
func (b *Broker) swap(w http.ResponseWriter, r *http.Request, host string, port int) (pairs []scrubPair, ok bool) {
	path := r.URL.Path
	if b.hasPlaceholder([]byte(r.URL.RequestURI())) {
		b.misuse(w, host, port, r.Method, path, "url", nil)
		return nil, false
	}
	delete(r.Header, "Proxy-Authorization") // never forwarded; not swapped either
	before := r.Header.Clone()
	names, err := b.cfg.Secrets.Swap(r.Context(), b.cfg.Session, host, port, r.Header)
	switch {
	case errors.Is(err, ErrSecretMisuse):
		b.misuse(w, host, port, r.Method, path, "headers", err)
		return nil, false
	case errors.Is(err, ErrSecretDenied):
		d := &attempt{start: time.Now(), method: r.Method, host: host, port: port, err: err.Error()}
		b.refuseSimple(w, d, http.StatusForbidden, "secret_denied",
			fmt.Sprintf("the use of a secret this request carries was denied for this sandbox: %v", err))
		return nil, false
	case r.Context().Err() != nil:
		return nil, false
	case err != nil:
		d := &attempt{start: time.Now(), method: r.Method, host: host, port: port, err: err.Error()}
		b.refuseSimple(w, d, http.StatusServiceUnavailable, "secret_error", "the brokered secrets could not be filled in")
		return nil, false
	}
	if b.headerPlaceholder(r.Header) {
		// Swap left a placeholder: never forward one.
		b.misuse(w, host, port, r.Method, path, "headers", errors.New("a placeholder was left after the swap"))
		return nil, false
	}
	if len(names) > 0 {
		if err := b.audit(KindSecretInject, map[string]any{"names": names, "host": host, "port": port,
			"method": r.Method, "path": path}); err != nil {
			http.Error(w, "ironclaw egress: the injection's audit record could not be written; the request was not sent", http.StatusServiceUnavailable)
			return nil, false
		}
	}
	pairs = scrubPairs(before, r.Header)
	if len(pairs) > 0 {
		// Identity bodies only, so that the response can be scrubbed.
		r.Header.Del("Accept-Encoding")
	}
	return pairs, true
}

// refuseSimple answers a refusal inside an admitted connection.
func (b *Broker) refuseSimple(w http.ResponseWriter, a *attempt, status int, reason, msg string) {
	b.noteDeny(a, reason)
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	io.WriteString(w, "ironclaw egress: "+msg+"\n")
}

// ServeHTTP serves one request inside an intercepted connection.
func (ic *intercepted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ic.wg.Add(1)
	defer ic.wg.Done()
	b, a := ic.b, ic.a
	if !hostMatches(r.Host, a.host, a.port, false) {
		d := &attempt{start: time.Now(), method: r.Method, host: a.host, port: a.port, err: fmt.Sprintf("Host %q", r.Host)}
		b.refuseSimple(w, d, http.StatusMisdirectedRequest, "host_mismatch",
			fmt.Sprintf("the request's Host %q is not the CONNECT host %s:%d", r.Host, a.host, a.port))
		return
	}
	if r.Method == http.MethodConnect {
		d := &attempt{start: time.Now(), method: r.Method, host: a.host, port: a.port}
		b.refuseSimple(w, d, http.StatusMethodNotAllowed, "bad_request", "CONNECT inside an intercepted connection is not supported")
		return
	}
	if n := b.requests.Add(1); n > int64(b.cfg.MaxRequests) {
		b.requests.Add(-1)
		d := &attempt{start: time.Now(), method: r.Method, host: a.host, port: a.port}
		b.refuseSimple(w, d, http.StatusTooManyRequests, "too_many_requests",
			fmt.Sprintf("this sandbox already has %d requests in flight through intercepted connections, its limit", b.cfg.MaxRequests))
		return
	}
	defer b.requests.Add(-1)
	guarded := netlimit.LimitBody(w, r, b.cfg.Body)
	pairs, ok := b.swap(w, r, a.host, a.port)
	if !ok {
		return
	}
	ra := &attempt{start: time.Now(), method: r.Method, host: a.host, port: a.port}
	plan := &dialPlan{addrs: ic.addrs, port: a.port, a: ra, body: guarded, host: a.host, scrub: pairs,
		h1only: r.ProtoMajor == 1 && httpguts(r.Header)}
	ctx, cancel := context.WithCancel(context.WithValue(r.Context(), ctxKey{}, plan))
	defer cancel()
	stop := context.AfterFunc(b.ctx, cancel)
	defer stop()
	out := r.WithContext(ctx)
	out.URL.Scheme = "https"
	out.URL.Host = net.JoinHostPort(a.host, strconv.Itoa(a.port))
	b.iproxy.ServeHTTP(w, out)
	if p := ra.proxyFail.Load(); p != nil {
		b.logf("egress: intercepted %s %s:%d: %v", r.Method, a.host, a.port, *p)
	}
}

// httpguts reports whether h asks for a protocol upgrade (WebSocket),
// which only HTTP/1.1 carries upstream.
func httpguts(h http.Header) bool {
	for _, v := range h["Connection"] {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), "upgrade") {
				return true
			}
		}
	}
	return false
}

// irewrite prepares an intercepted request for the upstream: the Host the
// client sent (checked to name the CONNECT host), no Proxy-* headers, no
// request trailers (they would pass unchecked).
func irewrite(pr *httputil.ProxyRequest) {
	pr.Out.Host = pr.In.Host
	pr.Out.Trailer = nil
	for k := range pr.Out.Header {
		if strings.HasPrefix(k, "Proxy-") {
			pr.Out.Header.Del(k)
		}
	}
}

// dialTLSFromContext dials an intercepted request's upstream: only the
// addresses admit checked, over TLS verified against UpstreamRoots for
// the CONNECT host.
func (b *Broker) dialTLSFromContext(ctx context.Context, network, addr string) (net.Conn, error) {
	p, ok := ctx.Value(ctxKey{}).(*dialPlan)
	if !ok || len(p.addrs) == 0 || p.host == "" {
		return nil, fmt.Errorf("egress: dial %s without checked addresses", addr)
	}
	c, _, err := b.dialChecked(ctx, p.addrs, p.port)
	if err != nil {
		return nil, err
	}
	protos := []string{"h2", "http/1.1"}
	if p.h1only {
		protos = []string{"http/1.1"}
	}
	tc := tls.Client(c, &tls.Config{ServerName: p.host, RootCAs: b.cfg.UpstreamRoots, NextProtos: protos, MinVersion: tls.VersionTLS12})
	hctx, cancel := context.WithTimeout(ctx, b.cfg.HandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// iproxyError answers an intercepted request the upstream did not.
func (b *Broker) iproxyError(w http.ResponseWriter, r *http.Request, err error) {
	p, _ := r.Context().Value(ctxKey{}).(*dialPlan)
	if p != nil && p.body != nil && p.body.Err() != nil {
		err = p.body.Err()
	}
	if p != nil {
		p.a.proxyFail.Store(&err)
	}
	if errors.Is(err, netlimit.ErrSlowBody) {
		http.Error(w, "ironclaw egress: the request body arrived too slowly", http.StatusRequestTimeout)
		return
	}
	if r.Context().Err() != nil {
		return
	}
	var verr *tls.CertificateVerificationError
	var uerr x509.UnknownAuthorityError
	var herr x509.HostnameError
	var cerr x509.CertificateInvalidError
	if errors.As(err, &verr) || errors.As(err, &uerr) || errors.As(err, &herr) || errors.As(err, &cerr) {
		host := ""
		if p != nil {
			host = p.host
		}
		if p != nil {
			b.noteDeny(&attempt{method: r.Method, host: p.host, port: p.port, err: err.Error()}, "upstream_untrusted")
		}
		http.Error(w, fmt.Sprintf("ironclaw egress: the TLS certificate of %s could not be verified; the request was not sent", host), http.StatusBadGateway)
		return
	}
	http.Error(w, "ironclaw egress: upstream request failed", http.StatusBadGateway)
}

// checkPlain runs the secrets rules for a plain-HTTP request (or a
// CONNECT that is passed through): a placeholder in its target, URL or
// headers is refused and recorded, whatever the host (a host with secrets
// gets them only over TLS). ok is false if r was answered.
func (b *Broker) checkPlain(w http.ResponseWriter, r *http.Request, host string, port int) bool {
	if b.cfg.Secrets == nil {
		return true
	}
	if r.Method != http.MethodConnect && b.cfg.Secrets.Intercept(b.cfg.Session, host, port) {
		// A host with secrets, in cleartext: the broker never puts a
		// value on the wire unencrypted (a sandbox could downgrade
		// https:// to http:// for anyone on the path to read it). A
		// request without placeholders passes; one with them is refused.
		if b.hasPlaceholder([]byte(r.URL.String())) || b.headerPlaceholder(r.Header) {
			b.misuse(w, host, port, r.Method, r.URL.Path, "plain_http",
				errors.New("secrets are injected only into TLS connections the broker terminates; use https://"))
			return false
		}
		return true
	}
	path := r.URL.Path
	target := r.URL.String()
	if r.Method == http.MethodConnect {
		target, path = r.Host+" "+r.URL.Host, ""
	}
	switch {
	case b.hasPlaceholder([]byte(target)):
		b.misuse(w, host, port, r.Method, path, "url", nil)
		return false
	case b.headerPlaceholder(r.Header):
		b.misuse(w, host, port, r.Method, path, "headers", nil)
		return false
	}
	return true
}
