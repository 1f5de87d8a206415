package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/session"
)

// An agent asking for huge limits at create gets the operator's ceilings
// and one sandbox.widen request for the rest, exactly as a change on a
// running sandbox would need; limits that cannot change later are refused.
func TestHostileCreateAboveTheCeiling(t *testing.T) {
	e := newEnv(t, envOpts{gateway: true, cfg: Config{Ceiling: &Ceiling{Limits: sandbox.DefaultLimits, TTL: 24 * time.Hour, Idle: 30 * time.Minute, DefaultIdle: 30 * time.Minute}}})
	var out struct {
		sbx
		Approvals []struct {
			ID, Kind, State string
			Data            json.RawMessage
		} `json:"approvals"`
	}
	e.must(201, "POST", "/v1/sandboxes", agentTok, map[string]any{
		"limits": map[string]any{"memory": "64G", "pids": 65536, "cpus": 512, "timeout": "24h", "output": "1G"},
		"ttl":    "1000h", "idle": "100h",
	}, &out)
	got, err := e.m.Limits(out.ID)
	if err != nil {
		t.Fatal(err)
	}
	d := sandbox.DefaultLimits
	if got.MemoryBytes != d.MemoryBytes || got.Pids != d.Pids || got.CPUs != d.CPUs || got.Timeout != d.Timeout || got.OutputBytes != d.OutputBytes {
		t.Fatalf("limits in force %+v, want the ceiling %+v", got, d)
	}
	info, _ := e.m.Get(context.Background(), out.ID)
	if left := time.Until(info.ExpiresAt); left > 24*time.Hour || left < 23*time.Hour || info.Idle != 30*time.Minute {
		t.Fatalf("ttl %v and idle %v, want the ceilings", left, info.Idle)
	}
	if len(out.Approvals) != 1 || out.Approvals[0].Kind != "sandbox.widen" || out.Approvals[0].State != "pending" {
		t.Fatalf("approvals %+v, want one pending sandbox.widen", out.Approvals)
	}
	var data struct {
		Limits struct {
			Memory  int64   `json:"memory"`
			Pids    int64   `json:"pids"`
			CPUs    float64 `json:"cpus"`
			Timeout string  `json:"timeout"`
			Output  int64   `json:"output"`
			TTL     string  `json:"ttl"`
			Idle    string  `json:"idle"`
		} `json:"limits"`
	}
	if err := json.Unmarshal(out.Approvals[0].Data, &data); err != nil {
		t.Fatal(err)
	}
	if l := data.Limits; l.Memory != 64<<30 || l.Pids != 65536 || l.CPUs != 512 || l.Timeout != "24h0m0s" || l.Output != 1<<30 || l.TTL != "1000h0m0s" || l.Idle != "100h0m0s" {
		t.Fatalf("widening asks %+v", l)
	}
	// Within the ceiling: no request.
	var plain struct {
		Approvals []any `json:"approvals"`
	}
	e.must(201, "POST", "/v1/sandboxes", agentTok, map[string]any{"limits": map[string]any{"memory": "256M"}}, &plain)
	if len(plain.Approvals) != 0 {
		t.Fatalf("a create within the ceiling filed %v", plain.Approvals)
	}
	// Fixed once running: refused, and nothing is created.
	before := e.m.Running()
	msg := e.wantError(400, "invalid_argument", "POST", "/v1/sandboxes", agentTok, map[string]any{"limits": map[string]any{"memory": "64G", "workspace": "2G"}})
	if !strings.Contains(msg, "ceiling") || e.m.Running() != before {
		t.Fatalf("workspace above the ceiling: %q, %d running (was %d)", msg, e.m.Running(), before)
	}
	// The operator is the one who sets ceilings, and is not held to them.
	var op sbx
	e.must(201, "POST", "/v1/sandboxes", operTok, map[string]any{"limits": map[string]any{"memory": "1G"}}, &op)
	if l, _ := e.m.Limits(op.ID); l.MemoryBytes != 1<<30 {
		t.Fatalf("operator's create got %+v", l)
	}
}

// Without a gateway to ask, a create above the ceiling is refused.
func TestHostileCreateAboveTheCeilingWithoutGateway(t *testing.T) {
	e := newEnv(t, envOpts{cfg: Config{Ceiling: &Ceiling{Limits: sandbox.DefaultLimits}}})
	e.wantError(400, "invalid_argument", "POST", "/v1/sandboxes", agentTok, map[string]any{"limits": map[string]any{"pids": 65536}})
	if e.m.Running() != 0 {
		t.Fatal("a refused create left a sandbox")
	}
}

// One agent token cannot see or use another's sandboxes: they are not
// found, exactly like ids that never existed.
func TestHostileAgentsAreIsolatedFromEachOther(t *testing.T) {
	const aTok, bTok = "agent-a-token-0123456789", "agent-b-token-0123456789"
	e := newEnv(t, envOpts{cfg: Config{Agents: []Agent{{Name: "a", Token: aTok}, {Name: "b", Token: bTok}}}})
	var a sbx
	e.must(201, "POST", "/v1/sandboxes", aTok, nil, &a)
	e.must(204, "PUT", "/v1/sandboxes/"+a.ID+"/files?path=/workspace/secret", aTok, "a's secret", nil)
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/sandboxes/" + a.ID},
		{"POST", "/v1/sandboxes/" + a.ID + "/exec"},
		{"GET", "/v1/sandboxes/" + a.ID + "/files?path=/workspace/secret"},
		{"GET", "/v1/sandboxes/" + a.ID + "/files?path=/workspace&list=1"},
		{"PUT", "/v1/sandboxes/" + a.ID + "/files?path=/workspace/secret"},
		{"DELETE", "/v1/sandboxes/" + a.ID},
	} {
		var body any
		if c.method == "POST" {
			body = map[string]any{"cmd": "cat /workspace/secret"}
		}
		if c.method == "PUT" {
			body = "overwritten by b"
		}
		for _, tok := range []string{bTok, agentTok} {
			msg := e.wantError(404, "not_found", c.method, c.path, tok, body)
			if !strings.Contains(msg, a.ID) {
				t.Errorf("%s %s: %q", c.method, c.path, msg)
			}
		}
	}
	var list struct{ Sandboxes []sbx }
	e.must(200, "GET", "/v1/sandboxes", bTok, nil, &list)
	if len(list.Sandboxes) != 0 {
		t.Fatalf("agent b lists %v", list.Sandboxes)
	}
	e.must(200, "GET", "/v1/sandboxes", operTok, nil, &list)
	if len(list.Sandboxes) != 1 {
		t.Fatalf("the operator lists %v", list.Sandboxes)
	}
	if got := e.must(200, "GET", "/v1/sandboxes/"+a.ID+"/files?path=/workspace/secret", aTok, nil, nil); string(got) != "a's secret" {
		t.Fatalf("a's file now holds %q", got)
	}
	// The audit log names who did what.
	recs, _ := e.log.Tail(context.Background(), 0, 100)
	if recs[0].Actor != "agent:a" {
		t.Fatalf("create recorded as %q", recs[0].Actor)
	}
}

// ?wait=1 holds a command's output in the daemon until the end: it is
// capped on its own, and its answer is encoded in pieces, so output that
// escapes to six times its size costs the daemon a few times the cap, not
// thirty times the output.
func TestHostileWaitOutputIsBounded(t *testing.T) {
	e := newEnv(t, envOpts{})
	s := e.create(map[string]any{"limits": map[string]any{"output": "16M", "memory": "256M"}})
	// 8 MiB of \x01, each escaped as \u0001 in JSON.
	body := map[string]any{"cmd": "head -c 8388608 /dev/zero | tr '\\0' '\\1'", "timeout": "30s"}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	resp, b := e.req("POST", "/v1/sandboxes/"+s.ID+"/exec?wait=1", agentTok, body)
	runtime.ReadMemStats(&after)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %.200s", resp.StatusCode, b)
	}
	var r result
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Stdout) != 1<<20 || !r.Truncated || strings.Trim(r.Stdout, "\x01") != "" {
		t.Fatalf("%d bytes kept, truncated %v", len(r.Stdout), r.Truncated)
	}
	// The figure is the whole process's: the runtime reading all 8 MiB, the
	// test's own read and decoding of the 6 MiB answer, and the race
	// detector's overhead when it runs. Encoding the whole output at once
	// took some 30 times the output (240 MiB here).
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 96<<20 {
		t.Fatalf("the exec allocated %d MiB for 8 MiB of output", alloc>>20)
	}
}

// A body that never finishes arriving is cut off, for JSON requests and
// uploads alike, and the daemon keeps answering.
func TestHostileStalledBodiesTimeOut(t *testing.T) {
	e := newEnv(t, envOpts{cfg: Config{BodyTimeout: 300 * time.Millisecond}})
	s := e.create(nil)
	u, _ := url.Parse(e.ts.URL)
	for _, c := range []struct{ head, part string }{
		{"POST /v1/sandboxes/" + s.ID + "/exec HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n", `{"cmd":"echo `},
		{"PUT /v1/sandboxes/" + s.ID + "/files?path=/workspace/slow HTTP/1.1\r\nContent-Length: 1000000\r\n", "first bytes, then nothing"},
	} {
		conn, err := net.Dial("tcp", u.Host)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "%sHost: x\r\nAuthorization: Bearer %s\r\n\r\n%s", c.head, agentTok, c.part)
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("%s: no answer to a stalled body: %v", c.head[:20], err)
		}
		b, _ := io.ReadAll(resp.Body)
		conn.Close()
		if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "request_timeout") {
			t.Fatalf("%s: %d %s", c.head[:20], resp.StatusCode, b)
		}
	}
	// The aborted upload created nothing, and the daemon serves on.
	e.wantError(404, "not_found", "GET", "/v1/sandboxes/"+s.ID+"/files?path=/workspace/slow", agentTok, nil)
	if r := e.execWait(s.ID, map[string]any{"cmd": "echo ok"}); r.Stdout != "ok\n" {
		t.Fatalf("after the stalls: %+v", r)
	}
}

// Labels an operator reads cannot carry terminal escapes or bidi
// controls, be many or large, or forge the daemon's own prefix.
func TestHostileLabelsAreRefused(t *testing.T) {
	e := newEnv(t, envOpts{})
	many := map[string]string{}
	for i := range maxLabels + 1 {
		many[fmt.Sprint("k", i)] = "v"
	}
	for _, labels := range []map[string]string{
		{"ironclaw.agent": "apr-forged"},
		{"IronClaw.agent": "apr-forged"},
		{"team": "ok\x1b[2K\rapproved"},
		{"team": "evil\u202emoc.doog"},
		{"te am": "x"},
		{"x": strings.Repeat("v", 256)},
		many,
	} {
		e.wantError(400, "invalid_argument", "POST", "/v1/sandboxes", agentTok, map[string]any{"labels": labels})
	}
	if e.m.Running() != 0 {
		t.Fatal("a refused create left a sandbox")
	}
	e.create(map[string]any{"labels": map[string]string{"mastra.sandbox-id": "ws-1", "team/a": "naïve café"}})
}

// A file that keeps growing past what the sandbox's writable areas hold
// (a host directory bound at /workspace) is not streamed forever.
func TestHostileDownloadIsBounded(t *testing.T) {
	e := newEnv(t, envOpts{})
	host := t.TempDir()
	if err := os.Chmod(host, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "big"), make([]byte, 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	info, err := e.m.Create(context.Background(), "agent", session.CreateRequest{Spec: sandbox.Spec{Workspace: host,
		Limits: sandbox.Limits{WorkspaceBytes: 1 << 20, TmpBytes: 1 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.send(context.Background(), "GET", "/v1/sandboxes/"+info.ID+"/files?path=/workspace/big", agentTok, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil || n > 1<<20 {
		t.Fatalf("downloaded %d bytes of a 3 MiB file from a 1 MiB area (err %v)", n, err)
	}
}
