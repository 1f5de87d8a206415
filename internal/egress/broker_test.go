package egress

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/audittest"
)

// fakeResolver maps names to addresses; unknown names fail, so no test ever
// reaches real DNS. fn, if set, overrides the map.
type fakeResolver struct {
	mu    sync.Mutex
	m     map[string][]netip.Addr
	fn    func(host string, call int) []netip.Addr
	calls map[string]int
}

func newResolver(pairs ...string) *fakeResolver {
	r := &fakeResolver{m: map[string][]netip.Addr{}, calls: map[string]int{}}
	for i := 0; i < len(pairs); i += 2 {
		for _, a := range strings.Split(pairs[i+1], ",") {
			r.m[pairs[i]] = append(r.m[pairs[i]], netip.MustParseAddr(a))
		}
	}
	return r
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[host]++
	if r.fn != nil {
		return r.fn(host, r.calls[host]), nil
	}
	if a, ok := r.m[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (r *fakeResolver) count(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[host]
}

// dialRecorder is the broker's Dial hook: it records every address and
// refuses anything but an IP literal on loopback.
type dialRecorder struct {
	t     *testing.T
	mu    sync.Mutex
	addrs []string
}

func (d *dialRecorder) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.addrs = append(d.addrs, addr)
	d.mu.Unlock()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().IsLoopback() || !ap.Addr().Is4() {
		d.t.Errorf("broker dialed %q: want a 127.x IP literal", addr)
		return nil, errors.New("test: refusing non-loopback dial")
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

func (d *dialRecorder) dialed() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.addrs...)
}

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

type env struct {
	b     *Broker
	proxy *httptest.Server
	res   *fakeResolver
	dial  *dialRecorder
	allow *Allowlist
}

func setup(t *testing.T, res *fakeResolver, mod func(*Config), rules ...string) *env {
	t.Helper()
	allow, err := NewAllowlist(rules...)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{res: res, dial: &dialRecorder{t: t}, allow: allow}
	cfg := Config{
		Session:      "sb-1",
		Allow:        allow,
		AllowPrivate: loopback,
		Resolver:     res,
		Dial:         e.dial.Dial,
		Logf:         t.Logf,
	}
	if mod != nil {
		mod(&cfg)
	}
	e.b, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.proxy = httptest.NewServer(e.b)
	t.Cleanup(func() { e.proxy.Close(); e.b.Close() })
	return e
}

// client goes through the broker; TLS is verified against srv's
// certificate, whose names include example.com.
func (e *env) client(t *testing.T, tlsSrv *httptest.Server) *http.Client {
	pu, _ := url.Parse(e.proxy.URL)
	tr := &http.Transport{Proxy: http.ProxyURL(pu)}
	if tlsSrv != nil {
		tr.TLSClientConfig = tlsSrv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		tr.TLSClientConfig.ServerName = "example.com"
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func port(t *testing.T, s *httptest.Server) int {
	u, _ := url.Parse(s.URL)
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// echo is an upstream reporting what it received.
func echo(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var hs []string
	for k := range r.Header {
		hs = append(hs, k)
	}
	fmt.Fprintf(w, "host=%s path=%s body=%s headers=%s", r.Host, r.URL.Path, body, strings.Join(hs, ","))
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// connect sends a raw CONNECT and returns the connection, its reader and
// the response.
func connect(t *testing.T, e *env, target string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", e.proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatal(err)
	}
	return c, br, resp
}

func body(r *http.Response) string {
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	return string(b)
}

func TestConnectAllowed(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(echo))
	defer up.Close()
	p := port(t, up)
	e := setup(t, newResolver("api.github.com", "127.0.0.1"), nil, fmt.Sprintf("api.github.com:%d", p))
	code, got := get(t, e.client(t, up), fmt.Sprintf("https://api.github.com:%d/repos", p))
	if code != 200 || !strings.Contains(got, "host=api.github.com:") || !strings.Contains(got, "path=/repos") {
		t.Fatalf("%d %q", code, got)
	}
	if d := e.dial.dialed(); len(d) != 1 || d[0] != fmt.Sprintf("127.0.0.1:%d", p) {
		t.Fatalf("dialed %v", d)
	}
}

func TestPlainHTTPAllowed(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(echo))
	defer up.Close()
	p := port(t, up)
	e := setup(t, newResolver("example.org", "127.0.0.1"), nil, fmt.Sprintf("example.org:%d", p))
	req, _ := http.NewRequest("POST", fmt.Sprintf("http://Example.ORG:%d/p?q=1", p), strings.NewReader("payload"))
	req.Header.Set("Proxy-Authorization", "Basic c2VjcmV0")
	req.Header.Set("Proxy-Foo", "x")
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "1")
	req.Header.Set("X-Keep", "1")
	resp, err := e.client(t, nil).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got := body(resp)
	got = strings.Replace(got, "Example.ORG", "example.org", 1) // the URL's authority is forwarded as sent
	if resp.StatusCode != 200 || !strings.Contains(got, "body=payload") || !strings.Contains(got, "path=/p") ||
		!strings.Contains(got, fmt.Sprintf("host=example.org:%d", p)) {
		t.Fatalf("%d %q", resp.StatusCode, got)
	}
	for _, h := range []string{"Proxy-Authorization", "Proxy-Foo", "X-Hop", "Connection"} {
		if strings.Contains(got, h) {
			t.Errorf("upstream saw %s: %q", h, got)
		}
	}
	if !strings.Contains(got, "X-Keep") {
		t.Errorf("end-to-end header dropped: %q", got)
	}
	if d := e.dial.dialed(); len(d) != 1 || d[0] != fmt.Sprintf("127.0.0.1:%d", p) {
		t.Fatalf("dialed %v", d)
	}
}

func TestUnlistedDenied(t *testing.T) {
	e := setup(t, newResolver("example.com", "127.0.0.1", "api.github.com", "127.0.0.1"), nil, "api.github.com")
	_, _, resp := connect(t, e, "example.com:443")
	if b := body(resp); resp.StatusCode != 403 || !strings.Contains(b, "ironclaw egress: host example.com:443 is not on this sandbox's allowlist") {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
	code, b := get(t, e.client(t, nil), "http://example.com/x")
	if code != 403 || !strings.Contains(b, "example.com:80 is not on this sandbox's allowlist") {
		t.Fatalf("%d %q", code, b)
	}
	if n := e.res.count("example.com"); n != 0 {
		t.Errorf("unlisted name resolved %d times (DNS leak)", n)
	}
	if d := e.dial.dialed(); len(d) != 0 {
		t.Errorf("dialed %v", d)
	}
}

func TestWildcard(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(echo))
	defer up.Close()
	p := port(t, up)
	res := newResolver("sub.pypi.org", "127.0.0.1", "a.b.pypi.org", "127.0.0.1", "pypi.org", "127.0.0.1", "evilpypi.org", "127.0.0.1")
	e := setup(t, res, nil, fmt.Sprintf("*.pypi.org:%d", p))
	c := e.client(t, nil)
	for host, want := range map[string]int{"sub.pypi.org": 200, "a.b.pypi.org": 200, "pypi.org": 403, "evilpypi.org": 403} {
		if code, b := get(t, c, fmt.Sprintf("http://%s:%d/", host, p)); code != want {
			t.Errorf("%s: %d %q, want %d", host, code, b, want)
		}
	}
}

func TestPortRules(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(echo))
	defer up.Close()
	p := port(t, up)
	e := setup(t, newResolver("example.org", "127.0.0.1", "other.org", "127.0.0.1"), nil,
		"example.org", fmt.Sprintf("other.org:%d", p+0))
	c := e.client(t, nil)
	// Port 0 rules admit 80 and 443 only.
	if code, b := get(t, c, fmt.Sprintf("http://example.org:%d/", p)); code != 403 {
		t.Errorf("example.org:%d: %d %q", p, code, b)
	}
	if code, b := get(t, c, fmt.Sprintf("http://other.org:%d/", p)); code != 200 {
		t.Errorf("other.org:%d: %d %q", p, code, b)
	}
	_, _, resp := connect(t, e, "other.org:443")
	if resp.StatusCode != 403 {
		t.Errorf("other.org:443 %d", resp.StatusCode)
	}
}

func TestPrivateRefused(t *testing.T) {
	res := newResolver(
		"rfc1918.example", "10.0.0.5",
		"metadata.example", "169.254.169.254",
		"v6loop.example", "::1",
		"mapped.example", "::ffff:10.0.0.5",
		"loop.example", "127.0.0.1",
		"mixed.example", "127.0.0.1,10.0.0.5",
	)
	rules := []string{"rfc1918.example", "metadata.example", "v6loop.example", "mapped.example", "loop.example", "mixed.example", "rfc1918.example:8080"}
	noPriv := setup(t, res, func(c *Config) { c.AllowPrivate = nil }, rules...)
	withLoop := setup(t, res, nil, rules...)
	cases := []struct {
		e    *env
		host string
		addr string
	}{
		{noPriv, "rfc1918.example", "10.0.0.5"},
		{noPriv, "metadata.example", "169.254.169.254"},
		{noPriv, "v6loop.example", "::1"},
		{noPriv, "mapped.example", "::ffff:10.0.0.5"},
		{noPriv, "loop.example", "127.0.0.1"},
		{withLoop, "rfc1918.example", "10.0.0.5"},
		{withLoop, "mixed.example", "10.0.0.5"},
	}
	for _, tc := range cases {
		_, _, resp := connect(t, tc.e, tc.host+":443")
		want := fmt.Sprintf("ironclaw egress: host %s resolves to a private address %s", tc.host, tc.addr)
		if b := body(resp); resp.StatusCode != 403 || !strings.Contains(b, want) {
			t.Errorf("%s: %d %q, want %q", tc.host, resp.StatusCode, b, want)
		}
		code, b := get(t, tc.e.client(t, nil), "http://"+tc.host+":8080/")
		if tc.host == "rfc1918.example" && (code != 403 || !strings.Contains(b, "private address")) {
			t.Errorf("plain %s: %d %q", tc.host, code, b)
		}
	}
	if d := append(noPriv.dial.dialed(), withLoop.dial.dialed()...); len(d) != 0 {
		t.Errorf("dialed %v", d)
	}
}

func TestRebinding(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(echo))
	defer up.Close()
	p := port(t, up)
	res := newResolver()
	res.fn = func(host string, call int) []netip.Addr {
		if call == 1 {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}
		}
		return []netip.Addr{netip.MustParseAddr("10.0.0.1")}
	}
	// AllowPrivate is only loopback; 10.0.0.1 must never be dialed, and the
	// name must never reach the dialer.
	e := setup(t, res, nil, fmt.Sprintf("rebind.example:%d", p))
	c := e.client(t, nil)
	if code, b := get(t, c, fmt.Sprintf("http://rebind.example:%d/one", p)); code != 200 {
		t.Fatalf("first: %d %q", code, b)
	}
	if n := res.count("rebind.example"); n != 1 {
		t.Fatalf("resolved %d times for one request", n)
	}
	if code, b := get(t, c, fmt.Sprintf("http://rebind.example:%d/two", p)); code != 403 || !strings.Contains(b, "private address 10.0.0.1") {
		t.Fatalf("second: %d %q", code, b)
	}
	// CONNECT: resolution #3 gives 10.0.0.1 too.
	_, _, resp := connect(t, e, fmt.Sprintf("rebind.example:%d", p))
	if resp.StatusCode != 403 {
		t.Fatalf("connect: %d", resp.StatusCode)
	}
	want := fmt.Sprintf("127.0.0.1:%d", p)
	for _, d := range e.dial.dialed() {
		if d != want {
			t.Errorf("dialed %q, want only %q", d, want)
		}
	}

	// A CONNECT whose first resolution is the checked one dials that IP
	// even though later resolutions would differ.
	res2 := newResolver()
	res2.fn = res.fn
	e2 := setup(t, res2, nil, fmt.Sprintf("rebind.example:%d", p))
	conn, br, resp := connect(t, e2, fmt.Sprintf("rebind.example:%d", p))
	if resp.StatusCode != 200 {
		t.Fatalf("connect: %d", resp.StatusCode)
	}
	fmt.Fprintf(conn, "GET /t HTTP/1.1\r\nHost: rebind.example\r\nConnection: close\r\n\r\n")
	r2, err := http.ReadResponse(br, nil)
	if err != nil || r2.StatusCode != 200 {
		t.Fatalf("tunnelled request: %v %v", r2, err)
	}
	if d := e2.dial.dialed(); len(d) != 1 || d[0] != want || res2.count("rebind.example") != 1 {
		t.Fatalf("dialed %v, resolved %d", d, res2.count("rebind.example"))
	}
}

func TestLiteralIP(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(echo))
	defer up.Close()
	p := port(t, up)
	var hookCalls atomic.Int32
	hook := func(c *Config) {
		c.Unknown = func(ctx context.Context, s, h string, port int) (bool, error) { hookCalls.Add(1); return true, nil }
	}
	target := fmt.Sprintf("127.0.0.1:%d", p)
	e := setup(t, newResolver(), hook)
	_, _, resp := connect(t, e, target)
	if b := body(resp); resp.StatusCode != 403 || !strings.Contains(b, "is an IP address") {
		t.Fatalf("no rule: %d %q", resp.StatusCode, b)
	}
	if hookCalls.Load() != 0 {
		t.Error("Unknown consulted for a literal IP")
	}
	e = setup(t, newResolver(), nil, target)
	if code, b := get(t, e.client(t, nil), "http://"+target+"/"); code != 200 {
		t.Fatalf("with rule: %d %q", code, b)
	}
	e = setup(t, newResolver(), func(c *Config) { c.AllowPrivate = nil }, target)
	_, _, resp = connect(t, e, target)
	if b := body(resp); resp.StatusCode != 403 || !strings.Contains(b, "private") {
		t.Fatalf("rule without AllowPrivate: %d %q", resp.StatusCode, b)
	}
}

func TestUnknownHook(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(echo))
	defer up.Close()
	p := port(t, up)
	type call struct {
		session, host string
		port          int
	}
	var mu sync.Mutex
	var calls []call
	decide := map[string]error{"yes.example": nil, "no.example": errors.New("deny"), "err.example": errors.New("gateway down")}
	e := setup(t, newResolver("yes.example", "127.0.0.1", "no.example", "127.0.0.1", "err.example", "127.0.0.1"), func(c *Config) {
		c.Unknown = func(ctx context.Context, session, host string, port int) (bool, error) {
			mu.Lock()
			calls = append(calls, call{session, host, port})
			mu.Unlock()
			switch err := decide[host]; {
			case err == nil:
				return true, nil
			case err.Error() == "deny":
				return false, nil
			default:
				return false, err
			}
		}
	})
	c := e.client(t, nil)
	if code, b := get(t, c, fmt.Sprintf("http://yes.example:%d/", p)); code != 200 {
		t.Fatalf("approved: %d %q", code, b)
	}
	if code, b := get(t, c, fmt.Sprintf("http://no.example:%d/", p)); code != 403 || !strings.Contains(b, "was not approved") {
		t.Fatalf("denied: %d %q", code, b)
	}
	if code, b := get(t, c, fmt.Sprintf("http://err.example:%d/", p)); code != 403 || !strings.Contains(b, "approval failed") {
		t.Fatalf("error: %d %q", code, b)
	}
	if res := e.res; res.count("no.example") != 0 || res.count("err.example") != 0 {
		t.Error("unapproved names were resolved")
	}
	// Approval is per request: not added to the list, so asked again.
	if len(e.allow.Rules()) != 0 {
		t.Errorf("approval added rules: %v", e.allow.Rules())
	}
	get(t, c, fmt.Sprintf("http://yes.example:%d/", p))
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 4 || calls[0] != (call{"sb-1", "yes.example", p}) || calls[3] != calls[0] {
		t.Fatalf("calls %v", calls)
	}
}

func TestUnknownHookCancel(t *testing.T) {
	returned := make(chan error, 4)
	started := make(chan struct{}, 4)
	blocking := func(c *Config) {
		c.Unknown = func(ctx context.Context, session, host string, port int) (bool, error) {
			started <- struct{}{}
			<-ctx.Done()
			returned <- ctx.Err()
			return true, nil // must be ignored: the client is gone
		}
	}
	_, l := audittest.Open(t)
	e := setup(t, newResolver("slow.example", "127.0.0.1"), func(c *Config) { blocking(c); c.Log = l })
	c, err := net.Dial("tcp", e.proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT slow.example:443 HTTP/1.1\r\nHost: slow.example:443\r\n\r\n")
	<-started
	c.Close()
	select {
	case err := <-returned:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ctx err %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("hook not cancelled when the client went away")
	}
	recs := waitRecords(t, l, 1)
	if d := data(t, recs[0]); recs[0].Kind != audit.KindEgressDeny || d["reason"] != "canceled" {
		t.Fatalf("record %v %v", recs[0].Kind, d)
	}
	if n := e.res.count("slow.example"); n != 0 {
		t.Errorf("resolved after cancel: %d", n)
	}

	// Close cancels pending decisions too.
	e2 := setup(t, newResolver("slow.example", "127.0.0.1"), blocking)
	c2, err := net.Dial("tcp", e2.proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	fmt.Fprintf(c2, "CONNECT slow.example:443 HTTP/1.1\r\nHost: slow.example:443\r\n\r\n")
	<-started
	e2.b.Close()
	select {
	case <-returned:
	case <-time.After(5 * time.Second):
		t.Fatal("hook not cancelled by Close")
	}
}

func TestBadRequests(t *testing.T) {
	e := setup(t, newResolver(), nil, "example.com")
	direct := &http.Client{Transport: &http.Transport{Proxy: nil}}
	resp, err := direct.Get(e.proxy.URL + "/foo")
	if err != nil {
		t.Fatal(err)
	}
	if b := body(resp); resp.StatusCode != 400 || !strings.Contains(b, "HTTP_PROXY") {
		t.Fatalf("origin-form: %d %q", resp.StatusCode, b)
	}
	for _, target := range []string{"example.com", "example.com:0", "example.com:99999", "*.example.com:443", "bad host:443", "127.1:443"} {
		c, err := net.Dial("tcp", e.proxy.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: x\r\n\r\n", target)
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "CONNECT"})
		c.Close()
		if err != nil || resp.StatusCode != 400 {
			t.Errorf("CONNECT %q: %v %v", target, resp, err)
		}
	}
	c, _ := net.Dial("tcp", e.proxy.Listener.Addr().String())
	defer c.Close()
	fmt.Fprintf(c, "GET https://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 400 || !strings.Contains(body(resp), "CONNECT") {
		t.Errorf("absolute https: %v %v", resp, err)
	}
}

// TestTunnelHalfClose checks early data, byte-exact splicing and that the
// client's EOF reaches the upstream while the reply still flows back.
func TestTunnelHalfClose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c) // until the client's half-close
		fmt.Fprintf(c, "got %d bytes: %s", len(b), b)
	}()
	p := ln.Addr().(*net.TCPAddr).Port
	_, l := audittest.Open(t)
	e := setup(t, newResolver("raw.example", "127.0.0.1"), func(c *Config) { c.Log = l }, fmt.Sprintf("raw.example:%d", p))
	c, err := net.Dial("tcp", e.proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	// Request and payload in one write: the payload arrives buffered.
	fmt.Fprintf(c, "CONNECT raw.example:%d HTTP/1.1\r\nHost: raw.example\r\n\r\nhello", p)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	io.WriteString(c, " world")
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(br)
	if err != nil || string(got) != "got 11 bytes: hello world" {
		t.Fatalf("%q %v", got, err)
	}
	recs := waitRecords(t, l, 1)
	d := data(t, recs[0])
	if recs[0].Kind != audit.KindEgressAllow || d["bytes_up"] != float64(11) || d["bytes_down"] != float64(len(got)) {
		t.Fatalf("record %v", d)
	}
}

func TestCloseEndsTunnels(t *testing.T) {
	p := echoServer(t)
	e := setup(t, newResolver("echo.example", "127.0.0.1"), nil, fmt.Sprintf("echo.example:%d", p))
	c, br, resp := connect(t, e, fmt.Sprintf("echo.example:%d", p))
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("%q %v", buf, err)
	}
	done := make(chan struct{})
	go func() { e.b.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung")
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("tunnel still open after Close")
	}
}

// waitRecords waits for n records of what connections did (an allowed
// one's result, a refusal); the intent records written before each dial
// are left out (TestHostileEgressIntentBeforeDial checks them).
func waitRecords(t *testing.T, l *audit.Log, n int) []audit.Record {
	t.Helper()
	return audittest.Wait(t, l, n, func(r audit.Record) bool { return !strings.HasSuffix(r.Kind, audit.IntentSuffix) })
}

func data(t *testing.T, r audit.Record) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// audited is a broker with an audit log in front of two allowlisted
// upstreams that echo what they get: example.com over TLS (reached with
// CONNECT) and plain.example over plain HTTP.
type audited struct {
	e       *env
	l       *audit.Log
	c       *http.Client // through the broker, trusting example.com's certificate
	tlsPort int
	tls     string // "https://example.com:PORT"
	plain   string // "http://plain.example:PORT"
}

func newAudited(t *testing.T) *audited {
	t.Helper()
	tlsUp := httptest.NewTLSServer(http.HandlerFunc(echo))
	t.Cleanup(tlsUp.Close)
	up := httptest.NewServer(http.HandlerFunc(echo))
	t.Cleanup(up.Close)
	_, l := audittest.Open(t)
	a := &audited{l: l, tlsPort: port(t, tlsUp)}
	a.tls, a.plain = fmt.Sprintf("https://example.com:%d", a.tlsPort), fmt.Sprintf("http://plain.example:%d", port(t, up))
	a.e = setup(t, newResolver("example.com", "127.0.0.1", "plain.example", "127.0.0.1"), func(c *Config) { c.Log = l },
		fmt.Sprintf("example.com:%d", a.tlsPort), fmt.Sprintf("plain.example:%d", port(t, up)))
	a.c = a.e.client(t, tlsUp)
	return a
}

func TestAudit(t *testing.T) {
	a := newAudited(t)
	l, c := a.l, a.c
	if code, _ := get(t, c, a.tls+"/tls"); code != 200 {
		t.Fatal(code)
	}
	resp, err := c.Post(a.plain+"/p", "text/plain", strings.NewReader("0123456789"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatal(resp, err)
	}
	plainBody := body(resp)
	if code, _ := get(t, c, "http://denied.example/"); code != 403 {
		t.Fatal(code)
	}
	c.Transport.(*http.Transport).CloseIdleConnections() // ends the tunnel
	recs := waitRecords(t, l, 3)
	if len(recs) != 3 {
		t.Fatalf("%d records", len(recs))
	}
	byMethod := map[string]map[string]any{}
	for _, r := range recs {
		if r.Session != "sb-1" || r.Actor != "egress" {
			t.Fatalf("record %+v", r)
		}
		d := data(t, r)
		d["kind"] = r.Kind
		byMethod[d["method"].(string)+" "+d["host"].(string)] = d
	}
	tun := byMethod["CONNECT example.com"]
	if tun == nil || tun["kind"] != audit.KindEgressAllow || tun["reason"] != "allowlist" || tun["addr"] != "127.0.0.1" ||
		tun["port"] != float64(a.tlsPort) || tun["bytes_up"].(float64) < 100 || tun["bytes_down"].(float64) < 100 {
		t.Errorf("connect record %v", tun)
	}
	pl := byMethod["POST plain.example"]
	if pl == nil || pl["kind"] != audit.KindEgressAllow || pl["bytes_up"] != float64(10) ||
		pl["bytes_down"] != float64(len(plainBody)) || pl["status"] != float64(200) {
		t.Errorf("plain record %v", pl)
	}
	dn := byMethod["GET denied.example"]
	if dn == nil || dn["kind"] != audit.KindEgressDeny || dn["reason"] != "not_allowlisted" || dn["port"] != float64(80) ||
		dn["bytes_up"] != float64(0) || dn["status"] != float64(403) {
		t.Errorf("deny record %v", dn)
	}
}

// Compile-time checks.
var (
	_ http.Handler = (*Broker)(nil)
	_ Resolver     = net.DefaultResolver
)

// A connection whose audit record cannot be made durable first is not
// made: with the log gone, an allowlisted host is refused and never
// dialled, both for CONNECT and for plain HTTP; and each made one has its
// intent on record before its result.
func TestHostileEgressIntentBeforeDial(t *testing.T) {
	a := newAudited(t)
	e, l, c := a.e, a.l, a.c
	if code, _ := get(t, c, a.plain+"/p"); code != 200 {
		t.Fatal(code)
	}
	all, _ := l.Tail(context.Background(), 0, 100)
	if len(all) < 1 || all[0].Kind != audit.KindEgressAllow+audit.IntentSuffix {
		t.Fatalf("first record %+v, want the intent", all)
	}
	dialled := e.dial.count()
	l.Close()
	if code, _ := get(t, c, a.plain+"/q"); code != http.StatusServiceUnavailable {
		t.Fatalf("plain HTTP with no audit log: %d", code)
	}
	if _, err := c.Get(a.tls + "/tls"); err == nil {
		t.Fatal("a CONNECT with no audit log went through")
	}
	if n := e.dial.count(); n != dialled {
		t.Fatalf("%d dials after the log closed", n-dialled)
	}
}

func (d *dialRecorder) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.addrs)
}
