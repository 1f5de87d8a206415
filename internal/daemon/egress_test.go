package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/client"
)

// A sandbox's one way out is its egress broker: an allowlisted host is
// reached through HTTP_PROXY, anything else is refused with a clear 403,
// and both are audited. The stand-in "internet" is a server on the host's
// loopback, reachable only because the test allows 127.0.0.0/8.
func TestEgressFromInsideSandbox(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello from the allowlisted host")
	}))
	defer up.Close()
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
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
