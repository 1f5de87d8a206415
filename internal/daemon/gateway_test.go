package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
	"golang.org/x/sys/unix"
)

// fakeDNS maps made-up names to addresses, as the host's resolver would.
type fakeDNS map[string]string

func (f fakeDNS) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

type gatewayRig struct {
	t    *testing.T
	r    *running
	port string
	dir  string
}

func writePolicy(t *testing.T, dir, body string) string {
	t.Helper()
	p := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func (g *gatewayRig) start(policyFile string) {
	g.r = startDaemon(g.t, g.dir, func(c *Config) {
		c.Model.Provider = "mock"
		c.PolicyFile = policyFile
		c.Egress.Resolver = fakeDNS{
			"stand-in.test": "127.0.0.1", "deny.test": "127.0.0.1", "slow.test": "127.0.0.1",
			"global.test": "127.0.0.1", "rebind.test": "10.0.0.5", "meta.test": "169.254.169.254",
		}
	})
}

// curlVia runs curl through the sandbox's egress broker and returns what
// it printed: the body, or the broker's refusal, then the status.
func curlVia(ctx context.Context, cl *client.Client, id, url string) (string, error) {
	var out bytes.Buffer
	res, err := cl.Exec(ctx, id, client.ExecRequest{Stdout: &out, Stderr: &out,
		Cmd: fmt.Sprintf(`curl -sS --noproxy '' -x "$HTTP_PROXY" -w ' status=%%{http_code}' %s`, url)})
	if err != nil {
		return "", err
	}
	if res.Exit != 0 {
		return out.String(), fmt.Errorf("curl exit %d", res.Exit)
	}
	return out.String(), nil
}

// curlResult is how a curlVia run in the background ended, and when.
type curlResult struct {
	out string
	err error
	at  time.Time
}

// String is what curl printed, then the error if there was one.
func (r curlResult) String() string {
	if r.err != nil {
		return r.out + " " + r.err.Error()
	}
	return r.out
}

// curlHeld runs curlVia in the background, for a request the broker holds
// until a decision; the channel gets its result.
func curlHeld(ctx context.Context, cl *client.Client, id, url string) <-chan curlResult {
	ch := make(chan curlResult, 1)
	go func() {
		out, err := curlVia(ctx, cl, id, url)
		ch <- curlResult{out, err, time.Now()}
	}()
	return ch
}

// upstream serves answer(r) to every request on the host's loopback until
// the test ends (a stand-in for a host on the internet) and returns its
// port.
func upstream(t *testing.T, answer func(r *http.Request) string) string {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, answer(r)) }))
	t.Cleanup(up.Close)
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	return port
}

// heldRequest is a sandbox's request to a host off its list
// (stand-in.test, served by an upstream on the host), held by the broker
// while the egress.host request it filed waits for a decision.
type heldRequest struct {
	g         *gatewayRig
	agent, op *client.Client
	sb        client.Sandbox
	curl      <-chan curlResult // how the held request ended
	approval  client.Approval   // the egress.host request it filed
}

// holdRequest starts a daemon whose approvals time out after timeout, an
// upstream answering answer, and a sandbox whose request to it is held.
func holdRequest(t *testing.T, answer func(*http.Request) string, timeout string) *heldRequest {
	t.Helper()
	port := upstream(t, answer)
	g := &gatewayRig{t: t, dir: t.TempDir(), port: port}
	g.start(writePolicy(t, t.TempDir(), "egress:\n  allow_private: [\"127.0.0.0/8\"]\napprovals:\n  timeout: "+timeout+"\n"))
	h := &heldRequest{g: g, agent: g.r.client(t, false), op: g.r.client(t, true)}
	h.sb = daemontest.CreateSandbox(t, h.agent)
	h.curl = curlHeld(context.Background(), h.agent, h.sb.ID, "http://stand-in.test:"+port+"/")
	h.approval = waitPending(t, h.op, h.sb.ID, "egress.host")
	return h
}

// waitPending polls for the one pending request of a kind for a sandbox.
func waitPending(t *testing.T, op *client.Client, session, kind string) client.Approval {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		list, err := op.ListApprovals(context.Background(), client.ApprovalFilter{State: "pending", Session: session, Kind: kind})
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 1 {
			return list[0]
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no pending %s request for %s", kind, session)
	return client.Approval{}
}

// The unknown-host flow end to end: a sandbox reaches a host off its list,
// the broker files an egress.host request and holds the connection; an
// approval lets it through (and the host joins the list), a denial or the
// timeout answers 403. Decisions need an operator token, record the
// operator behind it, and are idempotent; every step is in a chain that
// verifies.
func TestApprovalGatewayEndToEnd(t *testing.T) {
	port := upstream(t, func(r *http.Request) string { return "hello from " + r.Host })
	g := &gatewayRig{t: t, dir: t.TempDir(), port: port}
	alicePath, err := AddOperator(g.dir, "alice")
	if err != nil {
		t.Fatal(err)
	}
	g.start(writePolicy(t, t.TempDir(), fmt.Sprintf(`
egress:
  allow: ["rebind.test:%[1]s", "meta.test:%[1]s"]
  unknown: ask
  allow_private: ["127.0.0.0/8"]
approvals:
  timeout: 3s
`, port)))
	ctx := context.Background()
	agent, op := g.r.client(t, false), g.r.client(t, true)
	aliceTok, _ := os.ReadFile(alicePath)
	alice := &client.Client{Addr: g.r.addr, Token: strings.TrimSpace(string(aliceTok))}
	sb := daemontest.CreateSandbox(t, agent)

	// Approve: the held request proceeds.
	url := "http://stand-in.test:" + port + "/"
	held := curlHeld(ctx, agent, sb.ID, url)
	a := waitPending(t, op, sb.ID, "egress.host")
	// Filed by the broker on behalf of the sandbox's principal.
	if !strings.Contains(string(a.Data), `"stand-in.test"`) || a.RequestedBy != "agent" || a.Via != "egress" {
		t.Fatalf("request: %+v %s", a, a.Data)
	}
	select {
	case r := <-held:
		t.Fatalf("the connection was not held: %q %v", r.out, r.err)
	case <-time.After(200 * time.Millisecond):
	}
	// The agent cannot decide, and cannot name the decider.
	if _, err := agent.Approve(ctx, a.ID, "", ""); !client.IsCode(err, "forbidden") {
		t.Fatalf("agent token approving: %v", err)
	}
	if code, b := daemontest.Do(t, "POST", "http://"+g.r.addr+"/v1/approvals/"+a.ID+"/approve", op.Token, `{"decided_by":"mallory"}`); code != http.StatusBadRequest {
		t.Fatalf("an operator naming the decider: %d %s, want 400", code, b)
	}
	if _, err := op.Approve(ctx, "apr-0000000000000000", "", ""); !client.IsCode(err, "not_found") {
		t.Fatalf("unknown id: %v", err)
	}
	decidedAt := time.Now()
	got, err := alice.Approve(ctx, a.ID, "", "the stand-in is fine")
	if err != nil {
		t.Fatal(err)
	}
	if got.State != "approved" || got.DecidedBy != "alice" || got.Scope != "sandbox" {
		t.Fatalf("decision: %+v", got)
	}
	r := <-held
	if r.err != nil || !strings.Contains(r.out, "hello from stand-in.test") || !strings.Contains(r.out, "status=200") {
		t.Fatalf("held request after approval: %q %v", r.out, r.err)
	}
	t.Logf("decision -> held connection answered: %v", r.at.Sub(decidedAt))
	if again, err := op.Approve(ctx, a.ID, "", ""); err != nil || again.DecidedBy != "alice" {
		t.Fatalf("approving again: %+v %v", again, err)
	}
	if _, err := op.Deny(ctx, a.ID, ""); !client.IsCode(err, "conflict") {
		t.Fatalf("denying an approved request: %v", err)
	}
	// Now on the sandbox's list: no second request.
	if out, err := curlVia(ctx, agent, sb.ID, url); err != nil || !strings.Contains(out, "status=200") {
		t.Fatalf("second request: %q %v", out, err)
	}

	// Deny: a clear 403 naming the decision.
	held2 := curlHeld(ctx, agent, sb.ID, "http://deny.test:"+port+"/")
	d := waitPending(t, op, sb.ID, "egress.host")
	if _, err := op.Deny(ctx, d.ID, "not today"); err != nil {
		t.Fatal(err)
	}
	if r := <-held2; !strings.Contains(r.out, "status=403") || !strings.Contains(r.out, "denied by operator: not today") {
		t.Fatalf("denied request: %q %v", r.out, r.err)
	}

	// Timeout: no decision within the policy's 3 s.
	start := time.Now()
	out, _ := curlVia(ctx, agent, sb.ID, "http://slow.test:"+port+"/")
	if !strings.Contains(out, "status=403") || !strings.Contains(out, "timed out") {
		t.Fatalf("timed-out request: %q", out)
	}
	if el := time.Since(start); el < 2*time.Second || el > 15*time.Second {
		t.Fatalf("timeout took %v", el)
	}

	// Allowlisted names that resolve to private or metadata addresses are
	// refused (DNS rebinding), with no request filed.
	for _, host := range []string{"rebind.test", "meta.test"} {
		out, _ := curlVia(ctx, agent, sb.ID, "http://"+host+":"+port+"/")
		if !strings.Contains(out, "status=403") || !strings.Contains(out, "private address") {
			t.Fatalf("%s: %q", host, out)
		}
	}

	// Privileged routes answer 202 and act only once approved.
	tool, err := agent.RegisterTool(ctx, map[string]any{"name": "lint", "description": "run the linter", "command": "eslint ."})
	if err != nil || tool.State != "pending" || tool.Kind != "tool.register" {
		t.Fatalf("tool: %+v %v", tool, err)
	}
	var tools struct {
		Tools []json.RawMessage `json:"tools"`
	}
	getJSON(t, g.r.addr, daemontest.Token(t, g.dir, AgentTokenFile), "/v1/tools", &tools)
	if len(tools.Tools) != 0 {
		t.Fatalf("tool registered before approval: %s", tools.Tools)
	}
	// A global approval, remembered across the restart below.
	held3 := curlHeld(ctx, agent, sb.ID, "http://global.test:"+port+"/")
	ga := waitPending(t, op, sb.ID, "egress.host")
	if _, err := op.Approve(ctx, ga.ID, "global", ""); err != nil {
		t.Fatal(err)
	}
	if r := <-held3; !strings.Contains(r.out, "status=200") {
		t.Fatalf("globally approved: %q %v", r.out, r.err)
	}

	// Restart with the tool request pending, then decide it.
	g.r.stop(t)
	g.start(writePolicy(t, t.TempDir(), `
egress:
  unknown: deny
  allow_private: ["127.0.0.0/8"]
`))
	agent, op = g.r.client(t, false), g.r.client(t, true)
	still, err := op.GetApproval(ctx, tool.ID, 0)
	if err != nil || still.State != "pending" {
		t.Fatalf("after restart: %+v %v", still, err)
	}
	if got, err := op.Approve(ctx, tool.ID, "", ""); err != nil || string(got.Result) != `{"tool":"lint"}` {
		t.Fatalf("approving after restart: %+v %v", got, err)
	}
	getJSON(t, g.r.addr, daemontest.Token(t, g.dir, AgentTokenFile), "/v1/tools", &tools)
	if len(tools.Tools) != 1 || !strings.Contains(string(tools.Tools[0]), `"approval":"`+tool.ID) {
		t.Fatalf("tools after approval: %s", tools.Tools)
	}
	sb2 := daemontest.CreateSandbox(t, agent)
	if out, err := curlVia(ctx, agent, sb2.ID, "http://global.test:"+port+"/"); err != nil || !strings.Contains(out, "status=200") {
		t.Fatalf("global rule after restart: %q %v", out, err)
	}
	if out, _ := curlVia(ctx, agent, sb2.ID, "http://stand-in.test:"+port+"/"); !strings.Contains(out, "status=403") {
		t.Fatalf("a sandbox-scoped approval leaked to another sandbox: %q", out)
	}

	// The chain verifies and shows every step, with alice as the decider.
	recs := daemontest.VerifiedAudit(t, op)
	count := map[string]int{}
	aliceDecided := false
	for _, rec := range recs {
		count[rec.Kind]++
		if rec.Kind == "approval.decide" && rec.Actor == "alice" {
			aliceDecided = true
		}
	}
	if count["approval.request"] < 5 || count["approval.decide"] < 5 || count["approval.apply"] < 3 ||
		count["egress.allow"] < 3 || count["egress.deny"] < 5 || !aliceDecided {
		t.Fatalf("audit kinds %v (alice decided: %v)", count, aliceDecided)
	}
}

// A command the policy marks waits for approval, runs once with it, and
// not again; agents and widening act only once approved.
func TestPolicyGatedActions(t *testing.T) {
	g := &gatewayRig{t: t, dir: t.TempDir()}
	g.start(writePolicy(t, t.TempDir(), `
egress:
  unknown: deny
exec:
  require_approval: ["^echo gated"]
`))
	ctx := context.Background()
	agent, op := g.r.client(t, false), g.r.client(t, true)
	sb, err := agent.CreateSandbox(ctx, client.CreateRequest{EgressAllow: []string{"example.org:443"}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_, err = agent.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "echo gated run", Stdout: &out})
	var need *client.ApprovalRequiredError
	if !errors.As(err, &need) || need.Approval.Kind != "exec.command" || out.Len() != 0 {
		t.Fatalf("marked command: %v, output %q", err, out.String())
	}
	if _, err := agent.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "echo gated run", Approval: need.Approval.ID}); !client.IsCode(err, "conflict") {
		t.Fatalf("running with a pending approval: %v", err)
	}
	if _, err := op.Approve(ctx, need.Approval.ID, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "echo gated other", Approval: need.Approval.ID}); !client.IsCode(err, "conflict") {
		t.Fatalf("another command with the approval: %v", err)
	}
	res, err := agent.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "echo gated run", Approval: need.Approval.ID, Stdout: &out})
	if err != nil || res.Exit != 0 || out.String() != "gated run\n" {
		t.Fatalf("approved command: %+v %v %q", res, err, out.String())
	}
	if _, err := agent.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "echo gated run", Approval: need.Approval.ID}); !client.IsCode(err, "conflict") {
		t.Fatalf("approval used twice: %v", err)
	}

	// The create above asked for a host the policy does not cover: filed.
	widen := waitPending(t, op, sb.ID, "sandbox.widen")
	if !strings.Contains(string(widen.Data), "example.org:443") {
		t.Fatalf("widen request: %s", widen.Data)
	}
	lim, err := agent.WidenLimits(ctx, sb.ID, map[string]any{"memory": "1G", "timeout": "2m"})
	if err != nil || lim.State != "pending" {
		t.Fatalf("limits: %+v %v", lim, err)
	}
	if _, err := agent.WidenLimits(ctx, sb.ID, map[string]any{"workspace": "1G"}); !client.IsCode(err, "invalid_argument") {
		t.Fatalf("widening a fixed limit: %v", err)
	}
	if _, err := op.Approve(ctx, lim.ID, "", ""); err != nil {
		t.Fatal(err)
	}
	if got := memoryLimit(t, sb.ID); got != "1073741824" {
		t.Fatalf("memory limit after widening: %q", got)
	}

	// An agent: nothing until approved, then a sandbox running the command.
	spawn, err := agent.SpawnAgent(ctx, map[string]any{"cmd": "echo spawned; id -u", "labels": map[string]string{"team": "t"}})
	if err != nil || spawn.State != "pending" {
		t.Fatalf("spawn: %+v %v", spawn, err)
	}
	if list, _ := agent.ListSandboxes(ctx, map[string]string{"ironclaw.agent": spawn.ID}); len(list) != 0 {
		t.Fatal("agent sandbox before approval")
	}
	if _, err := agent.SpawnAgent(ctx, map[string]any{"cmd": ""}); !client.IsCode(err, "invalid_argument") {
		t.Fatalf("empty agent command: %v", err)
	}
	got, err := op.Approve(ctx, spawn.ID, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var result struct {
		Sandbox string `json:"sandbox"`
	}
	if err := json.Unmarshal(got.Result, &result); err != nil || result.Sandbox == "" {
		t.Fatalf("spawn result %s: %v", got.Result, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var log bytes.Buffer
		if err := agent.GetFile(ctx, result.Sandbox, AgentOutputPath, &log); err == nil {
			if log.String() != "spawned\n65532\n" {
				t.Fatalf("agent output %q", log.String())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no agent output")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Free-form requests: tool.call is filed and decided; unknown kinds and
	// kinds with their own routes are refused.
	tc, err := agent.FileApproval(ctx, "tool.call", sb.ID, "", map[string]any{"tool": "deploy", "input": map[string]any{"env": "prod"}})
	if err != nil || tc.State != "pending" {
		t.Fatalf("tool.call: %+v %v", tc, err)
	}
	for _, kind := range []string{"tool.register", "agent.spawn", "sandbox.widen", "root.shell"} {
		if _, err := agent.FileApproval(ctx, kind, sb.ID, "", map[string]any{}); !client.IsCode(err, "invalid_argument") {
			t.Fatalf("filing %s: %v", kind, err)
		}
	}
	if w, err := agent.GetApproval(ctx, tc.ID, 100*time.Millisecond); err != nil || w.State != "pending" {
		t.Fatalf("long poll: %+v %v", w, err)
	}
}

// memoryLimit reads a sandbox's memory limit from its cgroup on the host.
func memoryLimit(t *testing.T, id string) string {
	t.Helper()
	for _, d := range cgroupDirs("ic-", "-"+id) {
		for _, f := range []string{"memory.limit_in_bytes", "memory.max"} {
			if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
				return strings.TrimSpace(string(b))
			}
		}
	}
	t.Fatalf("no memory cgroup for %s", id)
	return ""
}

func getJSON(t *testing.T, addr, tok, path string, out any) {
	t.Helper()
	code, b := daemontest.Do(t, "GET", "http://"+addr+path, tok, "")
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}

// An API client cannot make a host directory its root: local images only
// beneath --image-dir, and a daemon without one serves no images at all.
func TestImagePolicy(t *testing.T) {
	images := t.TempDir()
	root := filepath.Join(images, "root")
	if err := os.MkdirAll(filepath.Join(root, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "data", "hello.txt"), []byte("from the image dir\n"), 0o644)
	// The root needs binaries: the host's /usr, bound in for the test.
	if err := os.Mkdir(filepath.Join(root, "usr"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("/usr", filepath.Join(root, "usr"), "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		t.Skipf("bind /usr for the image root: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(filepath.Join(root, "usr"), unix.MNT_DETACH) })
	for _, d := range []string{"bin", "lib", "lib64"} {
		os.Symlink("usr/"+d, filepath.Join(root, d))
	}
	r := startDaemon(t, t.TempDir(), func(c *Config) {
		c.Model.Provider = "mock"
		c.ImageDirs = []string{images}
	})
	ctx := context.Background()
	agent := r.client(t, false)
	for _, bad := range []string{"/", "/etc", "/usr", images + "/../", "ghcr.io/org/app:1"} {
		if _, err := agent.CreateSandbox(ctx, client.CreateRequest{Image: bad}); !client.IsCode(err, "invalid_argument") {
			t.Fatalf("image %q: %v", bad, err)
		}
	}
	if list, _ := agent.ListSandboxes(ctx, nil); len(list) != 0 {
		t.Fatalf("refused creates left sandboxes: %v", list)
	}
	sb, err := agent.CreateSandbox(ctx, client.CreateRequest{Image: root})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := agent.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"/usr/bin/cat", "/data/hello.txt"}, Stdout: &out, Stderr: &out}); err != nil || out.String() != "from the image dir\n" {
		t.Fatalf("exec in the image root: %v %q", err, out.String())
	}
}
