package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
)

// A gated program (exec.gate) asks for approval however its exec spells
// it, runs once with exactly the approved argv and mode, and never runs
// when reached any other way: the policy holds in the sandbox, not in a
// pattern over the command line.
func TestHostileExecGateApprovals(t *testing.T) {
	if _, err := os.Stat("/usr/bin/curl"); err != nil {
		t.Skip("the host view has no /usr/bin/curl")
	}
	g := &gatewayRig{t: t, dir: t.TempDir()}
	g.start(writePolicy(t, t.TempDir(), "exec:\n  gate: [curl]\n  require_approval: ['^echo marked']\n"))
	ctx := context.Background()
	agent, op := g.r.client(t, false), g.r.client(t, true)
	sb := daemontest.CreateSandbox(t, agent)
	need := func(t *testing.T, req client.ExecRequest) client.Approval {
		t.Helper()
		var out bytes.Buffer
		req.Stdout, req.Stderr = &out, &out
		_, err := agent.Exec(ctx, sb.ID, req)
		var ar *client.ApprovalRequiredError
		if !errors.As(err, &ar) || ar.Approval.Kind != "exec.command" || out.Len() != 0 {
			t.Fatalf("%+v: %v, output %q; want 202 exec.command", req, err, out.String())
		}
		return ar.Approval
	}
	data := func(t *testing.T, a client.Approval) (d struct {
		Argv    []string `json:"argv"`
		Mode    string   `json:"mode"`
		Command string   `json:"command"`
	}) {
		t.Helper()
		if err := json.Unmarshal(a.Data, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}

	// Every direct spelling asks, binding argv and mode.
	for _, c := range []struct {
		req  client.ExecRequest
		argv []string
	}{
		{client.ExecRequest{Argv: []string{"curl", "--version"}}, []string{"curl", "--version"}},
		{client.ExecRequest{Argv: []string{"/usr/bin/curl", "--version"}}, []string{"/usr/bin/curl", "--version"}},
		{client.ExecRequest{Argv: []string{"/bin/curl", "-V"}}, []string{"/bin/curl", "-V"}},
		{client.ExecRequest{Argv: []string{"./curl", "-V"}, Cwd: "/usr/bin"}, []string{"./curl", "-V"}},
		{client.ExecRequest{Cmd: "curl --version"}, []string{"curl", "--version"}},
	} {
		d := data(t, need(t, c.req))
		if !slices.Equal(d.Argv, c.argv) || d.Mode != "stream" || d.Command == "" {
			t.Errorf("%+v: approval data %+v, want argv %q mode stream", c.req, d, c.argv)
		}
	}
	// Spellings the API cannot see meet the stub in the sandbox.
	for _, cmd := range []string{"c''url --version", "env curl --version", "x=cu; ${x}rl --version", "bash -c 'exec -a x curl --version'",
		"cp /usr/bin/curl /tmp/c && /tmp/c --version", "ln -s /usr/bin/curl /workspace/c && /workspace/c --version"} {
		var stdout, stderr bytes.Buffer
		res, err := agent.Exec(ctx, sb.ID, client.ExecRequest{Cmd: cmd, Stdout: &stdout, Stderr: &stderr})
		if err != nil || res.Exit != 126 || strings.Contains(stdout.String(), "libcurl") || !strings.Contains(stderr.String(), "curl needs approval") {
			t.Errorf("%q: %v, exit %d, stdout %q, stderr %q", cmd, err, res.Exit, stdout.String(), stderr.String())
		}
	}

	// Approved: once, exactly that argv and mode.
	a := need(t, client.ExecRequest{Argv: []string{"curl", "--version"}})
	if got := need(t, client.ExecRequest{Argv: []string{"curl", "--version"}}); got.ID != a.ID {
		t.Errorf("the same exec filed a second request %s", got.ID)
	}
	if _, err := op.Approve(ctx, a.ID, "", ""); err != nil {
		t.Fatal(err)
	}
	for _, req := range []client.ExecRequest{
		{Argv: []string{"curl", "-V"}, Approval: a.ID},
		{Argv: []string{"curl", "--version", "http://x"}, Approval: a.ID},
		{Argv: []string{"/usr/bin/curl", "--version"}, Approval: a.ID},
		{Cmd: "curl --version; id", Approval: a.ID},
	} {
		if _, err := agent.Exec(ctx, sb.ID, req); !client.IsCode(err, "conflict") {
			t.Errorf("another argv with the approval %+v: %v", req, err)
		}
	}
	if code, body := execWait(t, g.r, sb.ID, map[string]any{"argv": []string{"curl", "--version"}, "approval": a.ID}); code != http.StatusConflict {
		t.Errorf("the approved argv in another mode (wait): %d %s", code, body)
	}
	var out bytes.Buffer
	res, err := agent.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"curl", "--version"}, Approval: a.ID, Stdout: &out})
	if err != nil || res.Exit != 0 || !strings.Contains(out.String(), "libcurl") {
		t.Fatalf("the approved exec: %+v %v %q", res, err, out.String())
	}
	if _, err := agent.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"curl", "--version"}, Approval: a.ID}); !client.IsCode(err, "conflict") {
		t.Errorf("the approval used twice: %v", err)
	}

	// Wait mode binds too; a plain-word cmd runs as its words.
	code, body := execWait(t, g.r, sb.ID, map[string]any{"cmd": "curl -V"})
	var filed struct {
		Approval client.Approval `json:"approval"`
	}
	if code != http.StatusAccepted || json.Unmarshal(body, &filed) != nil {
		t.Fatalf("wait mode: %d %s", code, body)
	}
	if d := data(t, filed.Approval); d.Mode != "wait" || !slices.Equal(d.Argv, []string{"curl", "-V"}) || d.Command != "curl -V" {
		t.Fatalf("wait-mode approval data %+v", d)
	}
	if _, err := op.Approve(ctx, filed.Approval.ID, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "curl -V", Approval: filed.Approval.ID}); !client.IsCode(err, "conflict") {
		t.Errorf("a wait-mode approval spent in stream mode: %v", err)
	}
	code, body = execWait(t, g.r, sb.ID, map[string]any{"cmd": "curl -V", "approval": filed.Approval.ID})
	var fr struct {
		Stdout string `json:"stdout"`
		Exit   int    `json:"exit"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &fr) != nil || fr.Exit != 0 || !strings.Contains(fr.Stdout, "libcurl") {
		t.Fatalf("the approved wait-mode exec: %d %s", code, body)
	}

	// The advisory pattern still files first; ungated commands just run.
	need(t, client.ExecRequest{Cmd: "echo marked x"})
	out.Reset()
	if res, err := agent.Exec(ctx, sb.ID, client.ExecRequest{Cmd: "echo ok; wget --version >/dev/null 2>&1; echo $?", Stdout: &out}); err != nil || res.Exit != 0 || !strings.HasPrefix(out.String(), "ok\n") {
		t.Fatalf("ungated: %+v %v %q", res, err, out.String())
	}
}

// execWait posts an exec with ?wait=1 and returns the status and body.
func execWait(t *testing.T, r *running, id string, body map[string]any) (int, []byte) {
	t.Helper()
	tok, err := os.ReadFile(filepath.Join(r.dir, AgentTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://%s/v1/sandboxes/%s/exec?wait=1", r.addr, id), bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}
