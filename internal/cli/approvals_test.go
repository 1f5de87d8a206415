package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
	"github.com/ironclaw/ironclaw/internal/textsafe"
)

// rawUnsafe returns the first character of out a terminal could act on
// (newlines separate lines and are allowed), or "".
func rawUnsafe(out string) string {
	for _, r := range out {
		if r != '\n' && textsafe.Unsafe(r) {
			return string(r)
		}
	}
	return ""
}

// Every value the CLI prints about approvals, sandboxes and the audit log
// is escaped; the agent's words are labelled as its note and never shown
// as what will be applied; JSON output stays valid and exact.
func TestHostileApprovalCLI(t *testing.T) {
	startDaemon(t)
	ctx := context.Background()
	cl := &client.Client{}
	sb := daemontest.CreateSandbox(t, cl)
	spoof, err := cl.FileApproval(ctx, "egress.host", sb.ID, "read-only docs host", map[string]any{"host": "evil.example", "port": 443})
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{"curl", "https://docs.example/\u202egpj.exe", "\x1b[2K\rapproved: docs.example", "\u009b31m\U000e0041", `back\slash`}
	esc, err := cl.FileApproval(ctx, "exec.command", sb.ID, "", map[string]any{"argv": argv, "mode": "exec"})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := cl.FileApproval(ctx, "tool.call", "", "", map[string]any{"tool": "deploy", "input": map[string]string{"target": "\u202eprod\x1b]0;title\x07"}})
	if err != nil {
		t.Fatal(err)
	}
	// A label with an escape: refused at create, or escaped by sandbox ls.
	_, labelErr := cl.CreateSandbox(ctx, client.CreateRequest{Labels: map[string]string{"team": "\x1b[31mred\u202e"}})
	if labelErr != nil && !client.IsCode(labelErr, "invalid_argument") {
		t.Fatal(labelErr)
	}

	outputs := map[string]string{}
	for _, args := range [][]string{
		{"approvals", "ls"},
		{"approvals", "ls", "--json"},
		{"approvals", "show", spoof.ID},
		{"approvals", "show", esc.ID},
		{"approvals", "show", tc.ID, "--json"},
		{"sandbox", "ls"},
		{"audit", "tail"},
	} {
		code, out, stderr := run(t, "", args...)
		name := strings.Join(args, " ")
		if code != 0 {
			t.Fatalf("%s: exit %d %s", name, code, stderr)
		}
		if c := rawUnsafe(out + stderr); c != "" {
			t.Errorf("%s prints the raw character %U:\n%s", name, []rune(c)[0], out)
		}
		outputs[name] = out
	}

	ls := outputs["approvals ls"]
	for _, want := range []string{"evil.example:443", `agent's note (its own words, not checked): "read-only docs host"`, `\u202egpj.exe`, `\x1b[2K\rapproved`, `mode: exec`} {
		if !strings.Contains(ls, want) {
			t.Errorf("approvals ls lacks %q:\n%s", want, ls)
		}
	}
	for _, line := range strings.Split(ls, "\n") {
		if strings.Contains(line, spoof.ID) && strings.Contains(line, "read-only") {
			t.Errorf("the agent's words in the summary line: %q", line)
		}
	}
	show := outputs["approvals show "+spoof.ID]
	if !strings.Contains(show, "host:port:") || !strings.Contains(show, "evil.example:443") || !strings.Contains(show, "agent's note") {
		t.Errorf("show:\n%s", show)
	}
	if before, _, _ := strings.Cut(show, "agent's note"); strings.Contains(before, "read-only") {
		t.Errorf("the agent's words before its note label:\n%s", show)
	}
	showEsc := outputs["approvals show "+esc.ID]
	if !strings.Contains(showEsc, `\u202e`) || !strings.Contains(showEsc, `\u009b`) || !strings.Contains(showEsc, `\U000e0041`) {
		t.Errorf("show of the escapes:\n%s", showEsc)
	}
	// JSON output: valid, and the exact argv comes back.
	var decoded []string
	for _, line := range strings.Split(strings.TrimSpace(outputs["approvals ls --json"]), "\n") {
		var a client.Approval
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatalf("ls --json line %q: %v", line, err)
		}
		if a.ID == esc.ID {
			var d struct {
				Argv []string `json:"argv"`
			}
			json.Unmarshal(a.Data, &d)
			decoded = d.Argv
		}
	}
	if strings.Join(decoded, "\x00") != strings.Join(argv, "\x00") {
		t.Errorf("argv through ls --json: %q", decoded)
	}
	var shown client.Approval
	if err := json.Unmarshal([]byte(outputs["approvals show "+tc.ID+" --json"]), &shown); err != nil || !bytes.Contains(shown.Data, []byte("prod")) {
		t.Errorf("show --json: %v %s", err, shown.Data)
	}
	if labelErr == nil && !strings.Contains(outputs["sandbox ls"], `\x1b[31mred\u202e`) {
		t.Errorf("sandbox ls:\n%s", outputs["sandbox ls"])
	}
	// Deciding prints the result escaped too.
	code, out, _ := run(t, "", "approvals", "deny", esc.ID, "--reason", "no \u202espoof")
	if code != 0 || rawUnsafe(out) != "" {
		t.Fatalf("deny: %d %q", code, out)
	}
	code, out, _ = run(t, "", "approvals", "show", esc.ID)
	if code != 0 || rawUnsafe(out) != "" || !strings.Contains(out, `reason:`) {
		t.Fatalf("show after deny: %d %q", code, out)
	}
}
