package daemon

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
)

// A server inside answers with its request line and the Authorization
// header it saw (perl is in every Debian base system).
const echoServer = `perl -MIO::Socket::INET -e '
$s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:3000", Listen => 16, ReuseAddr => 1) or die "listen: $!";
while ($c = $s->accept) {
	$l = <$c>; $l =~ s/\r?\n$//; $a = "";
	while (defined($h = <$c>) && $h =~ /\S/) { $a = $1 if $h =~ /^Authorization:\s*(.*?)\r?$/i }
	print $c "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nline=[$l] auth=[$a]\n"; close $c;
}' >/dev/null 2>&1 </dev/null &`

// A server that takes any upgrade: it answers 101 and then echoes one
// line as "upgraded:<line>" (what a WebSocket server does, minus framing).
const upgradeServer = `perl -MIO::Socket::INET -e '
$s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:3001", Listen => 16, ReuseAddr => 1) or die "listen: $!";
while ($c = $s->accept) {
	$c->autoflush(1); $u = "";
	while (defined($h = <$c>) && $h =~ /\S/) { $u = $1 if $h =~ /^Upgrade:\s*(\S+)/i }
	print $c "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: $u\r\n\r\n";
	$l = <$c>; print $c "upgraded:$l"; close $c;
}' >/dev/null 2>&1 </dev/null &`

// Inbound ports: a signed URL on the ports listener reaches the sandbox's
// server (and nothing of the caller's credentials does), a tunnel does the
// same, and nothing else is reachable: unlisted ports, other agents'
// sandboxes, forged or stale URLs, ended sandboxes.
func TestHostileInboundPorts(t *testing.T) {
	daemontest.NeedSandbox(t)
	dir := t.TempDir()
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte("ports:\n  inbound: true\n  url_ttl: 10m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mkOther := agentClient(t, dir, "other")
	r := startDaemon(t, dir, func(c *Config) { c.PolicyFile, c.PortsListen = pol, "127.0.0.1:0" })
	ag := r.client(t, false)
	ctx := context.Background()
	sb, err := ag.CreateSandbox(ctx, client.CreateRequest{Ports: []uint16{3000, 3001}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ag.Exec(ctx, sb.ID, client.ExecRequest{Cmd: echoServer + "\n" + upgradeServer}); err != nil {
		t.Fatal(err)
	}
	u, err := ag.OpenPort(ctx, sb.ID, 3000, 0)
	if err != nil {
		t.Fatal(err)
	}
	if time.Until(u.ExpiresAt) > 10*time.Minute || time.Until(u.ExpiresAt) < 9*time.Minute || !strings.Contains(u.URL, "/p/") {
		t.Fatalf("url %+v", u)
	}
	if strings.Contains(u.URL, strings.TrimPrefix(r.addr, "http://")) {
		t.Fatalf("the port URL %s is on the API's own origin %s", u.URL, r.addr)
	}
	get := func(url string) (int, string) {
		t.Helper()
		var body string
		var code int
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			req, _ := http.NewRequest("GET", url, nil)
			req.Header.Set("Authorization", "Bearer "+ag.Token)
			req.Header.Set("Cookie", "session=secret")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			code, body = resp.StatusCode, string(b)
			if code != http.StatusBadGateway || time.Now().After(deadline) {
				return code, body // 502 until the server inside listens
			}
		}
	}
	code, body := get(u.URL + "some/path?q=1")
	if code != 200 || body != "line=[GET /some/path?q=1 HTTP/1.1] auth=[]\n" {
		t.Fatalf("through the URL: %d %q", code, body)
	}

	// An upgrade (WebSocket's handshake) passes through, and the bytes
	// after it flow both ways.
	ws, err := ag.OpenPort(ctx, sb.ID, 3001, 0)
	if err != nil {
		t.Fatal(err)
	}
	wsURL, _ := url.Parse(ws.URL)
	var raw net.Conn
	var hello string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if raw, err = net.Dial("tcp", wsURL.Host); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(raw, "GET %sws HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", wsURL.Path, wsURL.Host)
		br := bufio.NewReader(raw)
		hello, _ = br.ReadString('\n')
		if strings.Contains(hello, " 101 ") {
			for line, _ := br.ReadString('\n'); strings.TrimSpace(line) != ""; line, _ = br.ReadString('\n') {
			}
			fmt.Fprintf(raw, "ping\n")
			got, _ := br.ReadString('\n')
			raw.Close()
			if got != "upgraded:ping\n" {
				t.Fatalf("after the upgrade: %q", got)
			}
			break
		}
		raw.Close()
		if time.Now().After(deadline) {
			t.Fatalf("upgrade through the URL: %q", hello)
		}
	}

	// A paused sandbox is resumed by an inbound request, as by any other.
	if _, err := ag.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if code, body := get(u.URL + "after-pause"); code != 200 || !strings.Contains(body, "GET /after-pause") {
		t.Fatalf("through the URL of a paused sandbox: %d %q", code, body)
	}
	if got, _ := ag.GetSandbox(ctx, sb.ID); got.State != "running" {
		t.Fatalf("state after an inbound request: %s", got.State)
	}

	// A tunnel reaches the same server.
	tun, err := ag.ConnectPort(ctx, sb.ID, 3000)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(tun, "GET /tunnel HTTP/1.0\r\n\r\n")
	got, _ := io.ReadAll(bufio.NewReader(tun))
	tun.Close()
	if !strings.HasSuffix(string(got), "line=[GET /tunnel HTTP/1.0] auth=[]\n") {
		t.Fatalf("through a tunnel: %q", got)
	}

	// Nothing else: a port the create did not list, another agent, a
	// forged ticket, an ended sandbox.
	if _, err := ag.OpenPort(ctx, sb.ID, 4000, 0); !client.IsCode(err, "invalid_argument") {
		t.Fatalf("the model proxy's port: %v", err)
	}
	if _, err := ag.ConnectPort(ctx, sb.ID, 22); !client.IsCode(err, "invalid_argument") {
		t.Fatalf("a tunnel to an unlisted port: %v", err)
	}
	if _, err := ag.OpenPort(ctx, sb.ID, 3000, time.Hour); !client.IsCode(err, "invalid_argument") {
		t.Fatalf("a URL longer than the policy allows: %v", err)
	}
	other := mkOther(r)
	if _, err := other.OpenPort(ctx, sb.ID, 3000, 0); !client.IsCode(err, "not_found") {
		t.Fatalf("another agent's URL: %v", err)
	}
	if _, err := other.ConnectPort(ctx, sb.ID, 3000); !client.IsCode(err, "not_found") {
		t.Fatalf("another agent's tunnel: %v", err)
	}
	i := strings.LastIndex(u.URL, ".")
	forged := u.URL[:i+1] + strings.Repeat("0", 32) + "/"
	if code, _ := get(forged); code != http.StatusNotFound {
		t.Fatalf("a forged URL: %d", code)
	}
	if code, _ := get(strings.Replace(u.URL, ".3000.", ".3001.", 1)); code != http.StatusNotFound {
		t.Fatalf("a URL for another port: %d", code)
	}
	if _, err := ag.CreateSandbox(ctx, client.CreateRequest{Ports: []uint16{80}}); !client.IsCode(err, "invalid_argument") {
		t.Fatalf("a privileged port: %v", err)
	}
	if _, err := ag.CreateSandbox(ctx, client.CreateRequest{Ports: []uint16{4001}}); !client.IsCode(err, "invalid_argument") {
		t.Fatalf("the egress broker's port: %v", err)
	}
	if _, err := ag.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(u.URL); code != http.StatusNotFound {
		t.Fatalf("the URL of an ended sandbox: %d", code)
	}
}

// With the policy's ports.inbound off (the default), no URL is issued and
// no tunnel opened.
func TestInboundPortsOffByDefault(t *testing.T) {
	daemontest.NeedSandbox(t)
	r := startDaemon(t, t.TempDir(), nil)
	ag := r.client(t, false)
	ctx := context.Background()
	sb, err := ag.CreateSandbox(ctx, client.CreateRequest{Ports: []uint16{3000}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ag.OpenPort(ctx, sb.ID, 3000, 0); !client.IsCode(err, "forbidden") {
		t.Fatalf("a URL with inbound ports off: %v", err)
	}
	if _, err := ag.ConnectPort(ctx, sb.ID, 3000); !client.IsCode(err, "forbidden") {
		t.Fatalf("a tunnel with inbound ports off: %v", err)
	}
}
