package api

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/session"
)

// Pause and resume over HTTP: the state shows; the next exec resumes a
// paused sandbox; another agent's sandbox is not found; an ended one is
// 409.
func TestPauseResumeRoutes(t *testing.T) {
	const aTok, bTok = "agent-a-token-0123456789", "agent-b-token-0123456789"
	e := newEnv(t, envOpts{cfg: Config{Agents: []Agent{{Name: "a", Token: aTok}, {Name: "b", Token: bTok}}}})
	var a, got sbx
	e.must(201, "POST", "/v1/sandboxes", aTok, nil, &a)
	e.must(204, "PUT", "/v1/sandboxes/"+a.ID+"/files?path=/workspace/f", aTok, "kept", nil)
	for _, p := range []string{"/pause", "/resume"} {
		for _, tok := range []string{bTok, agentTok} {
			if msg := e.wantError(404, "not_found", "POST", "/v1/sandboxes/"+a.ID+p, tok, nil); !strings.Contains(msg, a.ID) {
				t.Errorf("%s by another agent: %q", p, msg)
			}
		}
		e.wantError(404, "not_found", "POST", "/v1/sandboxes/sbx-nope"+p, aTok, nil)
	}
	e.must(200, "POST", "/v1/sandboxes/"+a.ID+"/pause", aTok, nil, &got)
	if got.State != "paused" {
		t.Fatalf("after pause: %+v", got)
	}
	e.must(200, "POST", "/v1/sandboxes/"+a.ID+"/pause", aTok, nil, &got) // paused already: still 200
	e.must(200, "GET", "/v1/sandboxes/"+a.ID, aTok, nil, &got)
	if got.State != "paused" {
		t.Fatalf("GET of a paused sandbox: %+v", got)
	}
	var list struct{ Sandboxes []sbx }
	e.must(200, "GET", "/v1/sandboxes", aTok, nil, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].State != "paused" {
		t.Fatalf("list: %+v", list)
	}
	e.must(200, "POST", "/v1/sandboxes/"+a.ID+"/resume", aTok, nil, &got)
	if got.State != "running" {
		t.Fatalf("after resume: %+v", got)
	}
	e.must(200, "POST", "/v1/sandboxes/"+a.ID+"/pause", operTok, nil, &got) // the operator may too
	// The next request resumes it.
	var r result
	e.must(200, "POST", "/v1/sandboxes/"+a.ID+"/exec?wait=1", aTok, map[string]any{"cmd": "cat /workspace/f"}, &r)
	if r.Stdout != "kept" {
		t.Fatalf("exec on a paused sandbox: %+v", r)
	}
	e.must(200, "GET", "/v1/sandboxes/"+a.ID, aTok, nil, &got)
	if got.State != "running" {
		t.Fatalf("state after the exec: %+v", got)
	}
	// A streamed exec resumes it too.
	e.must(200, "POST", "/v1/sandboxes/"+a.ID+"/pause", aTok, nil, &got)
	if body := string(e.must(200, "POST", "/v1/sandboxes/"+a.ID+"/exec", aTok, map[string]any{"cmd": "cat /workspace/f"}, nil)); !strings.Contains(body, `"exit_code":0`) && !strings.Contains(body, `"exit":0`) {
		t.Fatalf("streamed exec on a paused sandbox: %s", body)
	}
	e.must(200, "DELETE", "/v1/sandboxes/"+a.ID, aTok, nil, nil)
	e.wantError(409, "conflict", "POST", "/v1/sandboxes/"+a.ID+"/pause", aTok, nil)
	e.wantError(409, "conflict", "POST", "/v1/sandboxes/"+a.ID+"/resume", aTok, nil)
}

// Snapshots over HTTP: taken, listed, forked into a new sandbox, deleted;
// another agent's are not found and cannot be forked.
func TestSnapshotRoutes(t *testing.T) {
	const aTok, bTok = "agent-a-token-0123456789", "agent-b-token-0123456789"
	e := newEnv(t, envOpts{cfg: Config{Agents: []Agent{{Name: "a", Token: aTok}, {Name: "b", Token: bTok}}},
		sess: session.Options{SnapshotDir: filepath.Join(t.TempDir(), "snaps")}})
	var a sbx
	e.must(201, "POST", "/v1/sandboxes", aTok, nil, &a)
	e.must(204, "PUT", "/v1/sandboxes/"+a.ID+"/files?path=/workspace/d/f", aTok, "in the snapshot", nil)
	e.wantError(404, "not_found", "POST", "/v1/sandboxes/"+a.ID+"/snapshots", bTok, nil)
	var snap wire.Snapshot
	e.must(201, "POST", "/v1/sandboxes/"+a.ID+"/snapshots", aTok, nil, &snap)
	if !strings.HasPrefix(snap.ID, "snap-") || snap.Sandbox != a.ID || snap.Files != 1 || snap.Dirs != 1 || snap.Bytes != int64(len("in the snapshot")) {
		t.Fatalf("snapshot = %+v", snap)
	}
	var list wire.SnapshotList
	e.must(200, "GET", "/v1/snapshots", aTok, nil, &list)
	if len(list.Snapshots) != 1 || list.Snapshots[0].ID != snap.ID {
		t.Fatalf("list = %+v", list)
	}
	e.must(200, "GET", "/v1/snapshots", bTok, nil, &list)
	if len(list.Snapshots) != 0 {
		t.Fatalf("b lists %+v", list)
	}
	for _, m := range []string{"GET", "DELETE"} {
		e.wantError(404, "not_found", m, "/v1/snapshots/"+snap.ID, bTok, nil)
	}
	e.wantError(404, "not_found", "POST", "/v1/sandboxes", bTok, map[string]any{"snapshot": snap.ID})
	var fork sbx
	e.must(201, "POST", "/v1/sandboxes", aTok, map[string]any{"snapshot": snap.ID}, &fork)
	if body := string(e.must(200, "GET", "/v1/sandboxes/"+fork.ID+"/files?path=/workspace/d/f", aTok, nil, nil)); body != "in the snapshot" {
		t.Fatalf("fork's file: %q", body)
	}
	e.must(204, "DELETE", "/v1/snapshots/"+snap.ID, aTok, nil, nil)
	e.wantError(404, "not_found", "GET", "/v1/snapshots/"+snap.ID, aTok, nil)
	e.wantError(404, "not_found", "POST", "/v1/sandboxes", aTok, map[string]any{"snapshot": snap.ID})
}
