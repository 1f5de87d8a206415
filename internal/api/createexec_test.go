package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/audit"
)

// createFrames is a create-with-exec's stream: the sandbox of its first
// line and the frames after it, each line checked to be one JSON object.
func createFrames(t *testing.T, resp *http.Response, body []byte) (wire.CreatedSandbox, []json.RawMessage) {
	t.Helper()
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("create with exec = %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var lines []json.RawMessage
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		lines = append(lines, json.RawMessage(slices.Clone(sc.Bytes())))
	}
	if len(lines) == 0 {
		t.Fatal("an empty stream")
	}
	var first wire.CreatedFrame
	if err := json.Unmarshal(lines[0], &first); err != nil || first.Sandbox.ID == "" {
		t.Fatalf("the first line is not the sandbox: %s (%v)", lines[0], err)
	}
	return first.Sandbox, lines[1:]
}

// recordsOf waits (up to 5 s) until the log holds at least n records of
// sandbox id, and returns its records in order: a command's end record is
// queued, and commits with the next batch.
func recordsOf(t *testing.T, e *env, id string, n int) []audit.Record {
	t.Helper()
	var out []audit.Record
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		all, err := e.log.Tail(t.Context(), 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		out = out[:0]
		for _, r := range all {
			if r.Session == id {
				out = append(out, r)
			}
		}
		if len(out) >= n || time.Now().After(deadline) {
			return out
		}
	}
}

// A create carrying its first command answers one stream: the sandbox,
// then the command's frames; the command is audited like any exec, after
// the create, its intent before it ran.
func TestCreateWithExec(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp, body := e.req("POST", "/v1/sandboxes", agentTok, map[string]any{
		"labels": map[string]string{"team": "a"},
		"exec":   map[string]any{"cmd": "echo hi; echo oops >&2; cat; exit 3", "stdin": "in\n", "env": map[string]string{"K": "V"}},
	})
	sb, frames := createFrames(t, resp, body)
	if sb.State != "running" || sb.Labels["team"] != "a" {
		t.Fatalf("the created sandbox: %+v", sb)
	}
	var stdout, stderr strings.Builder
	var exit *frame
	for _, raw := range frames {
		var f frame
		if err := json.Unmarshal(raw, &f); err != nil {
			t.Fatalf("frame %s: %v", raw, err)
		}
		switch {
		case f.Stdout != nil:
			stdout.WriteString(*f.Stdout)
		case f.Stderr != nil:
			stderr.WriteString(*f.Stderr)
		case f.Exit != nil:
			exit = &f
		}
	}
	if exit == nil || *exit.Exit != 3 || stdout.String() != "hi\nin\n" || stderr.String() != "oops\n" {
		t.Fatalf("the first command: exit %+v, stdout %q, stderr %q (%s)", exit, stdout.String(), stderr.String(), body)
	}
	var got sbx
	e.must(200, "GET", "/v1/sandboxes/"+sb.ID, agentTok, nil, &got)
	if got.State != "running" {
		t.Fatalf("after its first command the sandbox is %q", got.State)
	}
	// The command's end record is queued (it commits with the next batch).
	want := []string{audit.KindSandboxCreate, audit.KindSandboxExec + audit.IntentSuffix, audit.KindSandboxExec}
	var kinds []string
	for _, r := range recordsOf(t, e, sb.ID, len(want)) {
		kinds = append(kinds, r.Kind)
	}
	if strings.Join(kinds, " ") != strings.Join(want, " ") {
		t.Fatalf("records %v, want %v", kinds, want)
	}
	// A second command goes to the exec route as ever.
	if r := e.execWait(sb.ID, map[string]any{"argv": []string{"true"}}); r.Exit != 0 {
		t.Fatalf("the second command: %+v", r)
	}
}

// A bad first command is a 400 and creates nothing; so is one that
// names an approval (it would name a sandbox that does not exist yet).
func TestCreateWithBadExecCreatesNothing(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, bad := range []map[string]any{
		{"exec": map[string]any{}},
		{"exec": map[string]any{"cmd": "x", "argv": []string{"x"}}},
		{"exec": map[string]any{"cmd": "x", "cwd": "relative"}},
		{"exec": map[string]any{"cmd": "x", "approval": "apr-0123"}},
		{"exec": "echo hi"},
	} {
		e.wantError(400, wire.CodeInvalidArgument, "POST", "/v1/sandboxes", agentTok, bad)
	}
	var l wire.SandboxList
	e.must(200, "GET", "/v1/sandboxes", agentTok, nil, &l)
	if len(l.Sandboxes) != 0 {
		t.Fatalf("bad creates left %d sandboxes", len(l.Sandboxes))
	}
}

// A first command the policy marks is not run: the stream carries the
// exec.command request it filed for the new sandbox, in stream mode, and
// once approved the command runs on the exec route.
func TestCreateWithExecThatNeedsApproval(t *testing.T) {
	e := newEnv(t, envOpts{gateway: true, cfg: Config{Policy: markPolicy{}}})
	resp, body := e.req("POST", "/v1/sandboxes", agentTok, map[string]any{"exec": map[string]any{"cmd": "echo danger > /workspace/ran"}})
	sb, frames := createFrames(t, resp, body)
	if len(frames) != 1 {
		t.Fatalf("frames after the sandbox: %s", body)
	}
	var held wire.ExecPending
	if err := json.Unmarshal(frames[0], &held); err != nil || held.Approval.Kind != "exec.command" ||
		held.Approval.Session != sb.ID || !strings.Contains(string(held.Approval.Data), `"mode":"stream"`) {
		t.Fatalf("the second line: %s (%v)", frames[0], err)
	}
	if r := e.execWait(sb.ID, map[string]any{"cmd": "test -e /workspace/ran"}); r.Exit == 0 {
		t.Fatal("the command ran before its approval")
	}
	e.must(200, "POST", "/v1/approvals/"+held.Approval.ID+"/approve", operTok, map[string]any{}, nil)
	resp, body = e.req("POST", "/v1/sandboxes/"+sb.ID+"/exec", agentTok, map[string]any{"cmd": "echo danger > /workspace/ran", "approval": held.Approval.ID})
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"exit":0`) {
		t.Fatalf("the approved command: %d %s", resp.StatusCode, body)
	}
}

// A first command that cannot start still answers the 201 stream, its
// exit frame saying why; its intent, committed with the create's record,
// is the create's neighbour in the chain and has its result.
func TestCreateWithExecThatCannotStart(t *testing.T) {
	e := newEnv(t, envOpts{})
	resp, body := e.req("POST", "/v1/sandboxes", agentTok, map[string]any{"exec": map[string]any{"argv": []string{"/no/such/program"}}})
	sb, frames := createFrames(t, resp, body)
	var exit frame
	if len(frames) != 1 || json.Unmarshal(frames[len(frames)-1], &exit) != nil || exit.Exit == nil || *exit.Exit == 0 || exit.Error == "" {
		t.Fatalf("frames after the sandbox: %s", body)
	}
	recs := recordsOf(t, e, sb.ID, 3)
	if len(recs) != 3 || recs[0].Kind != audit.KindSandboxCreate || recs[1].Kind != audit.KindSandboxExec+audit.IntentSuffix ||
		recs[1].Seq != recs[0].Seq+1 || recs[2].Kind != audit.KindSandboxExec || !strings.Contains(string(recs[2].Data), `"error"`) {
		t.Fatalf("records of a first command that could not start: %+v", recs)
	}
}
