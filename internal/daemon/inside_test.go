package daemon

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/netlimit"
)

// needPython skips without the host's python3, which the host-toolchain
// view shows inside sandboxes; the attacks below are python programs run
// inside a real sandbox.
func needPython(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3 on this host")
	}
}

// openFDs counts this process's descriptors (the daemon runs in it).
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// floodPy opens PER connections to each port from each of WORKERS
// processes (a sandbox's open-file limit is per process) and holds them:
// on the first port each sends half a request head, on the second a
// request announcing an 8 MiB body and 1 KiB of it.
// Once every worker has connected, one more connection per port must be
// refused: accepts are in order, so by then the daemon has decided about
// every earlier one (a sentinel held for 5s means there is no cap). Then
// the workers count the connections still open
// (no answer, no EOF), the sum is printed per port, "ready" follows, and
// all is held until /workspace/release exists.
const floodPy = `
import os, socket, sys, time
ports = [int(p) for p in sys.argv[1].split(",")]
per, workers = int(sys.argv[2]), int(sys.argv[3])
send = {ports[0]: b"POST /openai/v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n",
        ports[1]: ("POST http://%s/ HTTP/1.1\r\nHost: %s\r\nContent-Length: 8388608\r\n\r\n" % (sys.argv[4], sys.argv[4])).encode() + b"x" * 1024}

def worker(wr, rd):
    socks = {p: [] for p in ports}
    failed = 0
    for p in ports:
        for _ in range(per):
            s = socket.socket()
            try:
                s.connect(("127.0.0.1", p))
                socks[p].append(s)
            except OSError:
                failed += 1
                s.close()
                continue
            try:
                s.sendall(send[p])
            except OSError:
                pass  # refused before it could send
    os.write(wr, b"c")
    os.read(rd, 1)  # count
    out = []
    for p in ports:
        held = 0
        for s in socks[p]:
            s.setblocking(False)
            try:
                s.recv(1, socket.MSG_PEEK)
            except BlockingIOError:
                held += 1
            except OSError:
                pass
        out.append("%d:%d:%d" % (p, held, len(socks[p])))
    os.write(wr, (" ".join(out) + " failed:%d\n" % failed).encode())
    os.read(rd, 1)  # exit
    os._exit(0)

kids = []
for _ in range(workers):
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    if os.fork() == 0:
        worker(w1, r2)
    kids.append((r1, w2))
for r, _ in kids:
    assert os.read(r, 1) == b"c"
sentinels = [(p, socket.create_connection(("127.0.0.1", p), timeout=3)) for p in ports]
for p, s in sentinels:
    try:
        got = s.recv(64)
    except socket.timeout:
        got = b"(held)"
    print("sentinel %d: %r" % (p, got[:12]), flush=True)
    s.close()
for _, w in kids:
    os.write(w, b"n")
held, opened = {p: 0 for p in ports}, {p: 0 for p in ports}
failed = 0
for r, _ in kids:
    line = b""
    while not line.endswith(b"\n"):
        line += os.read(r, 4096)
    for f in line.decode().split():
        a = f.split(":")
        if a[0] == "failed":
            failed += int(a[1])
        else:
            held[int(a[0])] += int(a[1])
            opened[int(a[0])] += int(a[2])
for p in ports:
    print("port %d: held %d of %d" % (p, held[p], opened[p]), flush=True)
print("connect failures %d" % failed, flush=True)
print("ready", flush=True)
while not os.path.exists("/workspace/release"):
    time.sleep(0.05)
for _, w in kids:
    os.write(w, b"x")
for _ in kids:
    os.wait()
print("done", flush=True)
`

// lineWriter calls fn for every complete line written to it.
type lineWriter struct {
	mu  sync.Mutex
	buf strings.Builder
	all strings.Builder
	fn  func(string)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	w.buf.Write(p)
	for {
		s := w.buf.String()
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			break
		}
		w.buf.Reset()
		w.buf.WriteString(s[i+1:])
		w.fn(s[:i])
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}

// From inside one sandbox, 2,000 connections each to the model proxy
// (half a request head each) and the egress broker (a half-sent 8 MiB
// body each, to an allowlisted host): each server holds its cap and
// refuses the rest, the daemon's descriptors grow by no more than the
// caps, and meanwhile another sandbox's exec and model proxy and the API's
// /healthz answer. (The head and body deadlines are set out of reach here:
// the caps are tested.)
func TestHostileInsideConnectionFlood(t *testing.T) {
	needPython(t)
	const maxConns = 64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	defer up.Close()
	upHost := fmt.Sprintf("up.test:%d", up.Listener.Addr().(*net.TCPAddr).Port)
	slow := netlimit.BodyLimits{Timeout: 10 * time.Minute, Idle: 10 * time.Minute}
	r := startDaemon(t, t.TempDir(), func(c *Config) {
		c.Model.Provider = "mock"
		c.Egress.DenyUnknown = true
		c.Egress.AllowPrivate = []string{"127.0.0.0/8"}
		c.Egress.Resolver = fakeDNS{"up.test": "127.0.0.1"}
		c.Egress.Allow = []string{upHost}
		c.Egress.Body = slow
		c.Inside = netlimit.Config{MaxConns: maxConns, HeaderTimeout: 10 * time.Minute, Body: slow}
	})
	cl := r.client(t, false)
	ctx := context.Background()
	attacker := daemontest.CreateSandbox(t, cl)
	bystander := daemontest.CreateSandbox(t, cl)
	base := openFDs(t)

	ready := make(chan struct{})
	out := &lineWriter{fn: func(l string) {
		if l == "ready" {
			close(ready)
		}
	}}
	done := make(chan error, 1)
	go func() {
		res, err := cl.Exec(ctx, attacker.ID, client.ExecRequest{Stdout: out, Stderr: out, Timeout: 3 * time.Minute,
			Cmd: fmt.Sprintf("/usr/bin/python3 - %d,%d 500 4 %s <<'EOF'\n%sEOF\n", defaults.ModelPort, defaults.EgressPort, upHost, floodPy)})
		if err == nil && res.Exit != 0 {
			err = fmt.Errorf("flood exit %d", res.Exit)
		}
		done <- err
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("flood ended early: %v\n%s", err, out)
	case <-time.After(3 * time.Minute):
		t.Fatalf("flood not ready:\n%s", out)
	}

	// While it holds everything it could get:
	during := openFDs(t)
	if err := cl.Health(ctx); err != nil {
		t.Errorf("healthz during the flood: %v", err)
	}
	var echo strings.Builder
	if res, err := cl.Exec(ctx, bystander.ID, client.ExecRequest{Cmd: "echo alive", Stdout: &echo}); err != nil || res.Exit != 0 || echo.String() != "alive\n" {
		t.Errorf("another sandbox's exec during the flood: %v %+v %q", err, res, echo.String())
	}
	var model strings.Builder
	if res, err := cl.Exec(ctx, bystander.ID, client.ExecRequest{Stdout: &model, Stderr: &model,
		Cmd: `curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $OPENAI_API_KEY" "$OPENAI_BASE_URL/models"`}); err != nil || res.Exit != 0 {
		t.Errorf("another sandbox's model proxy during the flood: %v %+v %q", err, res, model.String())
	}
	if err := cl.PutFile(ctx, attacker.ID, "/workspace/release", strings.NewReader(""), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("flood: %v\n%s", err, out)
	}
	got := out.String()
	t.Logf("descriptors: %d before, %d during the flood\n%s", base, during, got)
	for _, p := range []int{defaults.ModelPort, defaults.EgressPort} {
		if !strings.Contains(got, fmt.Sprintf("port %d: held %d of 2000", p, maxConns)) {
			t.Errorf("port %d: the cap of %d did not hold exactly", p, maxConns)
		}
		if !strings.Contains(got, fmt.Sprintf("sentinel %d: b'HTTP/1.1 503'", p)) {
			t.Errorf("port %d: an over-cap connection was not told why", p)
		}
	}
	// Two servers' caps, the broker's upstream connections and the
	// upstream's own (it runs in this process too), plus slack for the
	// daemon's own work (the other sandbox's exec, the API's connections,
	// the store).
	if during > base+4*maxConns+64 {
		t.Errorf("descriptors grew from %d to %d during the flood: more than the caps (%d each)", base, during, maxConns)
	}
}

// inside.py runs slow-client attacks from inside a sandbox, each in its
// own thread, and prints for each whether the daemon closed the
// connection (within 20s) or still held it.
const slowPy = `
import os, socket, sys, threading, time
model, broker, upPort, echoPort = [int(a) for a in sys.argv[1:5]]
tok = os.environ.get("OPENAI_API_KEY", "")
results = {}

def closed(s):
    s.settimeout(20)
    got = b""
    start = time.time()
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            got += d
    except socket.timeout:
        return "held " + repr(got[:40])
    except OSError as e:
        return "closed (%s) %r" % (e.__class__.__name__, got[:40])
    return "closed %r" % got[:40]

def half_body(name, port, head):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(head.encode() + b"\r\nContent-Length: 8388608\r\n\r\n" + b"{" * (1 << 20))
    results[name] = closed(s)

def slow_head():
    s = socket.create_connection(("127.0.0.1", broker))
    s.sendall(b"CONNECT up.test:%d HTTP/1.1\r\n" % upPort)
    results["head"] = closed(s)

def idle_tunnel():
    s = socket.create_connection(("127.0.0.1", broker))
    s.sendall(b"CONNECT echo.test:%d HTTP/1.1\r\nHost: echo.test\r\n\r\n" % echoPort)
    reply = b""
    while b"\r\n\r\n" not in reply:
        reply += s.recv(1024)
    s.sendall(b"ping")
    echo = s.recv(4)
    results["tunnel"] = ("established " if reply.startswith(b"HTTP/1.1 200") and echo == b"ping" else "failed %r %r " % (reply, echo)) + closed(s)

ts = [
    threading.Thread(target=half_body, args=("model", model,
        "POST /openai/v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAuthorization: Bearer " + tok)),
    threading.Thread(target=half_body, args=("broker", broker,
        "POST http://up.test:%d/ HTTP/1.1\r\nHost: up.test" % upPort)),
    threading.Thread(target=slow_head),
    threading.Thread(target=idle_tunnel),
]
for t in ts: t.start()
for t in ts: t.join()
for k in sorted(results):
    print("%s: %s" % (k, results[k]))
`

// From inside a sandbox: half of an 8 MiB body to the model proxy and
// through the broker, a request head that never ends, and a tunnel that
// goes quiet. The daemon closes every one of them.
func TestHostileInsideSlowClients(t *testing.T) {
	needPython(t)
	var upGot sync.WaitGroup
	upGot.Add(1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer upGot.Done()
		io.Copy(io.Discard, r.Body)
	}))
	defer up.Close()
	echoLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer echoLn.Close()
	go func() {
		for {
			c, err := echoLn.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	upPort := up.Listener.Addr().(*net.TCPAddr).Port
	echoPort := echoLn.Addr().(*net.TCPAddr).Port
	body := netlimit.BodyLimits{Timeout: time.Second, Idle: time.Second}
	r := startDaemon(t, t.TempDir(), func(c *Config) {
		c.Model.Provider = "mock"
		c.Inside = netlimit.Config{HeaderTimeout: time.Second, Body: body}
		c.Egress.DenyUnknown = true
		c.Egress.AllowPrivate = []string{"127.0.0.0/8"}
		c.Egress.Resolver = fakeDNS{"up.test": "127.0.0.1", "echo.test": "127.0.0.1"}
		c.Egress.Allow = []string{fmt.Sprintf("up.test:%d", upPort), fmt.Sprintf("echo.test:%d", echoPort)}
		c.Egress.Body = body
		c.Egress.TunnelIdle = time.Second
	})
	cl := r.client(t, false)
	ctx := context.Background()
	sb := daemontest.CreateSandbox(t, cl)
	var out strings.Builder
	res, err := cl.Exec(ctx, sb.ID, client.ExecRequest{Stdout: &out, Stderr: &out,
		Cmd: fmt.Sprintf("/usr/bin/python3 - %d %d %d %d <<'EOF'\n%sEOF\n", defaults.ModelPort, defaults.EgressPort, upPort, echoPort, slowPy)})
	if err != nil || res.Exit != 0 {
		t.Fatalf("exec: %v %+v\n%s", err, res, out.String())
	}
	got := out.String()
	t.Log(got)
	lines := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(got))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ": "); ok {
			lines[k] = v
		}
	}
	for _, k := range []string{"model", "broker", "head", "tunnel"} {
		if !strings.Contains(lines[k], "closed") {
			t.Errorf("%s: the daemon still held the connection after 20s: %q", k, lines[k])
		}
	}
	if !strings.HasPrefix(lines["tunnel"], "established") {
		t.Errorf("tunnel: %q", lines["tunnel"])
	}
	if !strings.Contains(lines["broker"], "408") {
		t.Errorf("broker: a stalled body should be answered 408: %q", lines["broker"])
	}
	upGot.Wait() // the upstream saw the cut body end
}

// The API's server: a request body that stalls is cut and its connection
// closed, while an exec whose output streams for longer than the body
// limits is not.
func TestHostileAPIStalledBody(t *testing.T) {
	dir := t.TempDir()
	r := startDaemon(t, dir, func(c *Config) { c.BodyTimeout = 500 * time.Millisecond })
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/sandboxes HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"+
		"Content-Length: 100000\r\n\r\n{\"labels\": {", r.addr, daemontest.Token(t, dir, AgentTokenFile))
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the API held a stalled body for 30s (got %q)", got)
	}
	t.Logf("stalled body: %q", got)
	if !strings.HasPrefix(string(got), "HTTP/1.1 ") || strings.HasPrefix(string(got), "HTTP/1.1 2") {
		t.Fatalf("stalled body answered %q", got)
	}

	cl := r.client(t, false)
	ctx := context.Background()
	sb := daemontest.CreateSandbox(t, cl)
	var out strings.Builder
	res, err := cl.Exec(ctx, sb.ID, client.ExecRequest{Stdout: &out, Cmd: "echo start; sleep 2; echo done"})
	if err != nil || res.Exit != 0 || out.String() != "start\ndone\n" {
		t.Fatalf("exec streamed past the body limits: %v %+v %q", err, res, out.String())
	}
}
