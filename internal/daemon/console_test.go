package daemon

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/daemontest"
)

// needChromium returns the browser and the driver's directory, or skips
// (fails under IRONCLAW_REQUIRE_CHROMIUM=1, as in CI).
func needChromium(t *testing.T) (chromium, driverDir string) {
	t.Helper()
	skip := func(why string) {
		if os.Getenv("IRONCLAW_REQUIRE_CHROMIUM") == "1" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	chromium = os.Getenv("CHROMIUM")
	if chromium == "" {
		chromium = "/usr/bin/chromium"
	}
	if _, err := os.Stat(chromium); err != nil {
		skip("no Chromium (apt-get install chromium): " + err.Error())
	}
	if _, err := exec.LookPath("node"); err != nil {
		skip("no node")
	}
	driverDir, _ = filepath.Abs("testdata/console")
	if _, err := os.Stat(filepath.Join(driverDir, "node_modules", "playwright-core")); err != nil {
		// The driver's one dependency comes from the npm registry, pinned by
		// its lock file.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = driverDir
		if out, err := cmd.CombinedOutput(); err != nil {
			skip(fmt.Sprintf("npm ci in %s: %v\n%s", driverDir, err, out))
		}
	}
	return chromium, driverDir
}

// The web console in real headless Chromium: an operator pastes the
// token, sees the pending egress.host request a sandbox's held connection
// filed, clicks approve, and the held request proceeds.
func TestConsoleApprovesHeldRequest(t *testing.T) {
	chromium, driverDir := needChromium(t)
	h := holdRequest(t, func(r *http.Request) string { return "hello from " + r.Host }, "2m")
	g, op, sb, held, a := h.g, h.op, h.sb, h.curl, h.approval
	ctx := context.Background()

	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, "node", "console.mjs")
	cmd.Dir = driverDir
	cmd.Env = append(os.Environ(), "IRONCLAW_URL=http://"+g.r.addr, "IRONCLAW_OPERATOR_TOKEN="+daemontest.Token(t, g.dir, OperatorTokenFile),
		"APPROVAL_ID="+a.ID, "DECISION=approve", "EXPECT_SANDBOX="+sb.ID, "CHROMIUM="+chromium)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("console driver: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), `"ok":true`) {
		t.Fatalf("console driver said: %s", out)
	}
	select {
	case r := <-held:
		got := r.String()
		if !strings.Contains(got, "hello from stand-in.test") || !strings.Contains(got, "status=200") {
			t.Fatalf("held request after the click: %q", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the held request did not proceed after the click")
	}
	decided, err := op.GetApproval(ctx, a.ID, 0)
	if err != nil || decided.State != "approved" || decided.DecidedBy != "operator" || !strings.Contains(decided.Reason, "console test") {
		t.Fatalf("decision made in the console: %+v %v", decided, err)
	}
}

// A spoofing attempt in real headless Chromium: the agent's note says
// "read-only docs host" while the request is for evil.example:443, and an
// exec.command's argv carries terminal escapes, a bidi override and a
// long tail. The console shows what will be applied (summary and fields)
// from the data, the agent's words only in their labelled cell, every
// control and bidi character escaped, and the argv in full.
func TestHostileApprovalConsoleSpoof(t *testing.T) {
	chromium, driverDir := needChromium(t)
	g := &gatewayRig{t: t, dir: t.TempDir()}
	g.start("")
	ctx := context.Background()
	agent := g.r.client(t, false)
	sb := daemontest.CreateSandbox(t, agent)
	spoof, err := agent.FileApproval(ctx, "egress.host", sb.ID, "read-only docs host", map[string]any{"host": "evil.example", "port": 443})
	if err != nil {
		t.Fatal(err)
	}
	esc, err := agent.FileApproval(ctx, "exec.command", sb.ID, "", map[string]any{"argv": []string{
		"curl", "https://docs.example/\u202egpj.exe", "\x1b[2K\rapproved: docs.example", strings.Repeat("A", 2000) + "END-OF-ARGUMENT"}})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, "node", "console.mjs")
	cmd.Dir = driverDir
	cmd.Env = append(os.Environ(), "IRONCLAW_URL=http://"+g.r.addr, "IRONCLAW_OPERATOR_TOKEN="+daemontest.Token(t, g.dir, OperatorTokenFile),
		"MODE=spoof", "APPROVAL_ID="+spoof.ID, "EXPECT_APPLY=evil.example:443", "EXPECT_NOTE=read-only docs host",
		"ESC_ID="+esc.ID, "ESC_TAIL=END-OF-ARGUMENT", "CHROMIUM="+chromium)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"ok":true`) {
		t.Fatalf("console driver: %v\n%s", err, out)
	}
}
