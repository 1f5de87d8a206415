package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/audittest"
	"github.com/ironclaw/ironclaw/internal/netlimit"
)

// echoServer accepts TCP connections and echoes them.
func echoServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// rawConnect sends a CONNECT and returns the connection and the status.
func rawConnect(t *testing.T, e *env, target string) (net.Conn, *bufio.Reader, int, string) {
	t.Helper()
	c, br, resp := connect(t, e, target)
	b := ""
	if resp.StatusCode != 200 {
		b = body(resp)
	}
	c.SetDeadline(time.Time{})
	return c, br, resp.StatusCode, b
}

func ping(t *testing.T, c net.Conn, br *bufio.Reader) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("tunnel: %q %v", buf, err)
	}
}

// A sandbox opening more tunnels than MaxActive gets 429 for the excess,
// and brokers sharing a Total budget cannot together exceed it.
func TestHostileTunnelFlood(t *testing.T) {
	p := echoServer(t)
	total := netlimit.NewBudget(5)
	target := fmt.Sprintf("echo.example:%d", p)
	mk := func(session string) *env {
		return setup(t, newResolver("echo.example", "127.0.0.1"), func(c *Config) {
			c.Session, c.MaxActive, c.Total = session, 3, total
		}, target)
	}
	e1, e2 := mk("sb-1"), mk("sb-2")
	var tunnels []net.Conn
	for range 3 {
		c, br, code, _ := rawConnect(t, e1, target)
		if code != 200 {
			t.Fatalf("tunnel within the cap: %d", code)
		}
		ping(t, c, br)
		tunnels = append(tunnels, c)
	}
	for range 20 {
		if _, _, code, b := rawConnect(t, e1, target); code != 429 || !strings.Contains(b, "already has 3 connections") {
			t.Fatalf("over MaxActive: %d %q", code, b)
		}
	}
	for range 2 {
		if _, _, code, _ := rawConnect(t, e2, target); code != 200 {
			t.Fatalf("second sandbox within Total: %d", code)
		}
	}
	if _, _, code, b := rawConnect(t, e2, target); code != 503 || !strings.Contains(b, "all sandboxes") {
		t.Fatalf("over Total: %d %q", code, b)
	}
	tunnels[0].Close()
	waitFor(t, func() bool { return e1.b.active.Load() == 2 })
	c, br, code, _ := rawConnect(t, e1, target)
	if code != 200 {
		t.Fatalf("after a tunnel ended: %d", code)
	}
	ping(t, c, br)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Connections waiting for a decision on one host are capped, and so are
// all of a sandbox's waiting ones: the excess is refused at once with 429,
// without reaching the hook.
func TestHostileHeldOnApproval(t *testing.T) {
	var calls atomic.Int32
	release := make(chan struct{})
	_, l := audittest.Open(t)
	e := setup(t, newResolver(), func(c *Config) {
		c.Log, c.MaxWaitingPerHost, c.MaxWaiting = l, 3, 5
		c.Unknown = func(ctx context.Context, session, host string, port int) (bool, error) {
			calls.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return false, &Denied{Detail: "test"}
		}
	})
	results := make(chan int, 100)
	hold := func(host string) {
		go func() {
			c, err := net.Dial("tcp", e.proxy.Listener.Addr().String())
			if err != nil {
				results <- -1
				return
			}
			defer c.Close()
			fmt.Fprintf(c, "CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n", host, host)
			resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
			if err != nil {
				results <- -1
				return
			}
			results <- resp.StatusCode
		}()
	}
	// Fill a cap with held connections; ten more are then refused at once.
	for _, step := range []struct {
		held  string // n more connections held on this host
		n     int
		calls int32  // the hook calls made by then, in all
		over  string // the host of the ten refused ones
		which string // the cap they are over
	}{
		{"a.example", 3, 3, "a.example", "the per-host cap"}, // one approval's cap
		{"b.example", 2, 5, "c.example", "the sandbox's cap"},
	} {
		for range step.n {
			hold(step.held)
		}
		waitFor(t, func() bool { return calls.Load() == step.calls })
		for range 10 {
			hold(step.over)
		}
		for range 10 {
			if code := <-results; code != 429 {
				t.Fatalf("over %s: %d", step.which, code)
			}
		}
	}
	if n := calls.Load(); n != 5 {
		t.Fatalf("hook called %d times, want 5", n)
	}
	close(release)
	for range 5 {
		if code := <-results; code != 403 {
			t.Fatalf("held then denied: %d", code)
		}
	}
	e.b.Close() // writes the summaries
	recs, err := l.Tail(context.Background(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	waiting := 0
	for _, r := range recs {
		d := data(t, r)
		if d["reason"] == "too_many_waiting" {
			waiting++
			if d["summary"] == true {
				waiting += int(d["count"].(float64)) - 1
			}
		}
	}
	if waiting != 20 {
		t.Fatalf("%d too_many_waiting refusals recorded, want 20", waiting)
	}
}

// A tunnel without traffic either way is closed after IdleTimeout; one
// that keeps talking is not.
func TestHostileIdleTunnel(t *testing.T) {
	p := echoServer(t)
	target := fmt.Sprintf("echo.example:%d", p)
	_, l := audittest.Open(t)
	e := setup(t, newResolver("echo.example", "127.0.0.1"), func(c *Config) {
		c.Log, c.IdleTimeout = l, 400*time.Millisecond
	}, target)
	busy, bbr, code, _ := rawConnect(t, e, target)
	if code != 200 {
		t.Fatal(code)
	}
	idle, ibr, code, _ := rawConnect(t, e, target)
	if code != 200 {
		t.Fatal(code)
	}
	// The busy one talks every 50ms all the while, for more than the idle
	// tunnel's life (which is past IdleTimeout), and stays open.
	talked := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(talked)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				ping(t, busy, bbr)
			}
		}
	}()
	ping(t, idle, ibr)
	idle.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := ibr.ReadByte(); err != io.EOF {
		t.Fatalf("idle tunnel: %v, want EOF", err)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	<-talked
	recs := waitRecords(t, l, 1)
	d := data(t, recs[0])
	if recs[0].Kind != audit.KindEgressAllow || !strings.Contains(fmt.Sprint(d["error"]), "without traffic") {
		t.Fatalf("idle tunnel's record: %v %v", recs[0].Kind, d)
	}
	if len(recs) != 1 {
		t.Fatalf("%d records: the busy tunnel ended too", len(recs))
	}
}

// Half of a plain-HTTP body, then nothing: the broker, which streams the
// body upstream, cuts it (408) instead of holding the connection.
func TestHostileHalfSentBodyThroughBroker(t *testing.T) {
	got := make(chan int64, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		got <- n
	}))
	defer up.Close()
	_, l := audittest.Open(t)
	e := setup(t, newResolver("up.example", "127.0.0.1"), func(c *Config) {
		c.Log, c.Body = l, netlimit.BodyLimits{Timeout: 300 * time.Millisecond, Idle: 300 * time.Millisecond}
	}, fmt.Sprintf("up.example:%d", port(t, up)))
	c, err := net.Dial("tcp", e.proxy.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST http://up.example:%d/ HTTP/1.1\r\nHost: up.example\r\nContent-Length: %d\r\n\r\n", port(t, up), 8<<20)
	c.Write(make([]byte, 1<<20))
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	if b := body(resp); resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(b, "too slowly") {
		t.Fatalf("stalled body: %d %q", resp.StatusCode, b)
	}
	if n := <-got; n >= 8<<20 {
		t.Fatalf("upstream got %d bytes", n)
	}
	recs := waitRecords(t, l, 1)
	if d := data(t, recs[0]); d["status"] != float64(408) || !strings.Contains(fmt.Sprint(d["error"]), "too slowly") {
		t.Fatalf("record %v", d)
	}
}

// A refusal loop costs a bounded number of audit records: 10,000 refused
// attempts at one host give one full record and one summary counting the
// rest; 10,000 at as many hosts give at most MaxDenyKeys full records and
// one overflow summary.
func TestHostileRefusalLoop(t *testing.T) {
	_, l := audittest.Open(t)
	e := setup(t, newResolver(), func(c *Config) { c.Log = l })
	const n = 10000
	hammer := func(host func(i int) string) {
		var wg sync.WaitGroup
		var next atomic.Int64
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tr := &http.Transport{Proxy: http.ProxyURL(mustURL(e.proxy.URL))}
				defer tr.CloseIdleConnections()
				cl := &http.Client{Transport: tr}
				for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
					resp, err := cl.Get("http://" + host(i) + "/")
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 403 {
						t.Errorf("status %d", resp.StatusCode)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	start := time.Now()
	hammer(func(int) string { return "exfil.example" })
	hammer(func(i int) string { return fmt.Sprintf("h%d.example", i) })
	windows := int(time.Since(start)/DefaultDenyWindow) + 1
	e.b.Close()

	recs, err := l.Tail(context.Background(), 0, 10*n)
	if err != nil {
		t.Fatal(err)
	}
	if max := windows * (2*DefaultMaxDenyKeys + 1 + 2); len(recs) > max {
		t.Fatalf("%d records for %d refusals in %d windows, want at most %d", len(recs), 2*n, windows, max)
	}
	same, others := 0, 0
	for _, r := range recs {
		if r.Kind != audit.KindEgressDeny || r.Session != "sb-1" {
			t.Fatalf("record %+v", r)
		}
		d := data(t, r)
		count := 1
		if d["summary"] == true {
			count = int(d["count"].(float64))
		}
		if d["host"] == "exfil.example" {
			if d["reason"] != "not_allowlisted" || d["port"] != float64(80) {
				t.Fatalf("record %v", d)
			}
			same += count
		} else {
			others += count
			if d["overflow"] == true && d["reasons"].(map[string]any)["not_allowlisted"] != d["count"] {
				t.Fatalf("overflow record %v", d)
			}
		}
	}
	if same != n || others != n {
		t.Fatalf("records count %d refusals of one host and %d of many, want %d each", same, others, n)
	}
	t.Logf("%d refusals: %d audit records", 2*n, len(recs))
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

// With aggregation off every refusal is a record (the old behaviour, and
// the control for the test above).
func TestRefusalsUnaggregated(t *testing.T) {
	_, l := audittest.Open(t)
	e := setup(t, newResolver(), func(c *Config) { c.Log, c.DenyWindow = l, -1 })
	c := e.client(t, nil)
	for range 5 {
		if code, _ := get(t, c, "http://exfil.example/"); code != 403 {
			t.Fatal(code)
		}
	}
	if recs := waitRecords(t, l, 5); len(recs) != 5 {
		t.Fatalf("%d records", len(recs))
	}
}

// A window's summaries are written when it ends, not only at Close.
func TestRefusalSummaryAtWindowEnd(t *testing.T) {
	_, l := audittest.Open(t)
	e := setup(t, newResolver(), func(c *Config) { c.Log, c.DenyWindow = l, 200*time.Millisecond })
	c := e.client(t, nil)
	for range 3 {
		get(t, c, "http://exfil.example/")
	}
	recs := waitRecords(t, l, 2)
	d := data(t, recs[1])
	if d["summary"] != true || d["count"] != float64(2) || d["host"] != "exfil.example" {
		t.Fatalf("summary %v", d)
	}
	// The next refusal opens a new window: recorded in full again.
	get(t, c, "http://exfil.example/")
	recs = waitRecords(t, l, 3)
	if d := data(t, recs[2]); d["summary"] == true {
		t.Fatalf("first refusal of a new window: %v", d)
	}
}
