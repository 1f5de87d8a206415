package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/session"
)

func TestSandboxLifecycle(t *testing.T) {
	e := newEnv(t, envOpts{})
	a := e.create(map[string]any{
		"env":    map[string]string{"GREETING": "hello"},
		"limits": map[string]any{"memory": "256M", "pids": 128, "cpus": 0.5, "timeout": "30s", "output": 1 << 20, "workspace": "64M", "tmp": "32M", "open_files": 512},
		"ttl":    "1h", "idle": "10m",
		"labels": map[string]string{"team": "a", "x": "y"},
	})
	if !strings.HasPrefix(a.ID, "sbx-") || a.State != "running" || a.Labels["team"] != "a" || a.IdleTimeout != "10m0s" || a.ExpiresAt == "" || a.EndedAt != "" || a.EndReason != "" {
		t.Fatalf("created sandbox = %+v", a)
	}
	created, err := time.Parse(time.RFC3339Nano, a.CreatedAt)
	if err != nil || time.Since(created) > time.Minute {
		t.Fatalf("created_at %q: %v", a.CreatedAt, err)
	}
	// Empty body: every default; no expires_at without a TTL.
	b := e.create("")
	if b.ExpiresAt != "" || b.IdleTimeout != "0s" || len(b.Labels) != 0 {
		t.Fatalf("default sandbox = %+v", b)
	}
	c := e.create(map[string]any{"labels": map[string]string{"team": "b"}})
	if r := e.execWait(a.ID, map[string]any{"cmd": "echo $GREETING"}); r.Stdout != "hello\n" {
		t.Fatalf("env from the create request: %+v", r)
	}

	var got sbx
	e.must(200, "GET", "/v1/sandboxes/"+a.ID, agentTok, nil, &got)
	if got.ID != a.ID || got.State != "running" {
		t.Fatalf("GET = %+v", got)
	}
	var list struct{ Sandboxes []sbx }
	e.must(200, "GET", "/v1/sandboxes?label=team=a&label=x=y", agentTok, nil, &list)
	if len(list.Sandboxes) != 1 || list.Sandboxes[0].ID != a.ID {
		t.Fatalf("list team=a,x=y = %+v", list)
	}
	e.must(200, "GET", "/v1/sandboxes", agentTok, nil, &list)
	if len(list.Sandboxes) != 3 {
		t.Fatalf("list all = %d sandboxes", len(list.Sandboxes))
	}
	body := e.must(200, "GET", "/v1/sandboxes?label=team=nobody", agentTok, nil, &list)
	if len(list.Sandboxes) != 0 || !strings.Contains(string(body), `"sandboxes":[]`) {
		t.Fatalf("empty list = %s", body)
	}
	e.wantError(400, "invalid_argument", "GET", "/v1/sandboxes?label=novalue", agentTok, nil)

	var del sbx
	e.must(200, "DELETE", "/v1/sandboxes/"+a.ID, agentTok, nil, &del)
	if del.State != "destroyed" || del.EndedAt == "" || del.EndReason == "" {
		t.Fatalf("DELETE = %+v", del)
	}
	e.must(200, "DELETE", "/v1/sandboxes/"+a.ID, agentTok, nil, &del) // ended already: still 200
	e.must(200, "GET", "/v1/sandboxes/"+a.ID, agentTok, nil, &got)
	if got.State != "destroyed" {
		t.Fatalf("GET after DELETE = %+v", got)
	}
	e.must(200, "GET", "/v1/sandboxes", agentTok, nil, &list)
	if len(list.Sandboxes) != 2 {
		t.Fatalf("list after delete = %d sandboxes", len(list.Sandboxes))
	}
	// Ended: exec and files are 409; unknown: 404.
	e.wantError(409, "conflict", "POST", "/v1/sandboxes/"+a.ID+"/exec", agentTok, map[string]any{"argv": []string{"true"}})
	e.wantError(409, "conflict", "POST", "/v1/sandboxes/"+a.ID+"/exec?wait=1", agentTok, map[string]any{"argv": []string{"true"}})
	e.wantError(409, "conflict", "PUT", "/v1/sandboxes/"+a.ID+"/files?path=/workspace/f", agentTok, "x")
	e.wantError(409, "conflict", "GET", "/v1/sandboxes/"+a.ID+"/files?path=/workspace/f", agentTok, nil)
	for _, p := range []struct{ m, path string }{
		{"GET", "/v1/sandboxes/sbx-nope"}, {"DELETE", "/v1/sandboxes/sbx-nope"},
		{"POST", "/v1/sandboxes/sbx-nope/exec"}, {"GET", "/v1/sandboxes/sbx-nope/files?path=/workspace/f"},
		{"PUT", "/v1/sandboxes/sbx-nope/files?path=/workspace/f"},
	} {
		e.wantError(404, "not_found", p.m, p.path, agentTok, `{"argv":["true"]}`)
	}
	e.must(200, "DELETE", "/v1/sandboxes/"+b.ID, operTok, nil, nil) // the operator may do what the agent may
	e.must(200, "DELETE", "/v1/sandboxes/"+c.ID, agentTok, nil, nil)
}

func TestCreateRejects(t *testing.T) {
	e := newEnv(t, envOpts{cfg: Config{MaxBodyBytes: 4096}})
	for _, body := range []string{
		`{"imag": "/x"}`,              // unknown field
		`{"limits": {"mem": "1G"}}`,   // unknown nested field
		`{"ttl": "1h"} {"ttl": "2h"}`, // two values
		`{"ttl": "1h"} x`,             // trailing garbage
		`{"ttl": 5}`,                  // a duration must be a string
		`{"ttl": "5 parsecs"}`,
		`{"ttl": "-1s"}`,
		`{"limits": {"memory": "lots"}}`,
		`{"limits": {"memory": -5}}`,
		`{"limits": {"memory": "1P"}}`,
		`{"limits": {"memory": "1M"}}`, // below the minimum
		`{"limits": {"pids": 1.5}}`,
		`{"limits": {"cpus": -1}}`,
		`{"env": {"1BAD": "x"}}`,
		`{"image": "relative/dir"}`,
		`{"labels": {"": "x"}}`,
		`{"egress": {"allow": ["example.com"]}}`,
		`{"ttl": "1h"`,
		`[]`,
		`nonsense`,
	} {
		msg := e.wantError(400, "invalid_argument", "POST", "/v1/sandboxes", agentTok, body)
		t.Logf("%s -> %s", body, msg)
	}
	e.wantError(413, "too_large", "POST", "/v1/sandboxes", agentTok, `{"labels":{"a":"`+strings.Repeat("x", 5000)+`"}}`)
	e.create(`{"egress": {"allow": []}}`) // an empty allow list is fine
	if n := e.m.Running(); n != 1 {
		t.Fatalf("%d sandboxes running after rejected creates, want 1", n)
	}
}

func TestCreateLimitExceeded(t *testing.T) {
	e := newEnv(t, envOpts{sess: session.Options{MaxSandboxes: 1}})
	e.create(nil)
	e.wantError(429, "limit_exceeded", "POST", "/v1/sandboxes", agentTok, nil)
	if !strings.Contains(e.metricsText(), `ironclaw_sandbox_creates_total{result="error"} 1`) {
		t.Fatal("the failed create is not counted")
	}
}

func TestExecStream(t *testing.T) {
	e := newEnv(t, envOpts{})
	s := e.create(nil)
	frames, out, errOut, last := e.execStream(s.ID, map[string]any{"cmd": "echo out; echo err >&2; sleep 0.1; echo more; exit 3"})
	if out != "out\nmore\n" || errOut != "err\n" || last.Exit != 3 || last.Error != "" || last.TimedOut {
		t.Fatalf("stream = %q %q %+v", out, errOut, last)
	}
	if len(frames) < 3 {
		t.Fatalf("%d frames, want output frames before the exit frame", len(frames))
	}
	_, out, _, last = e.execStream(s.ID, map[string]any{"argv": []string{"echo", "a b", "$HOME"}})
	if out != "a b $HOME\n" || last.Exit != 0 {
		t.Fatalf("argv: %q %+v", out, last)
	}
	_, out, _, _ = e.execStream(s.ID, map[string]any{"argv": []string{"cat"}, "stdin": "from stdin\n"})
	if out != "from stdin\n" {
		t.Fatalf("stdin: %q", out)
	}
	_, out, _, _ = e.execStream(s.ID, map[string]any{"cmd": "pwd; echo $K", "cwd": "/tmp", "env": map[string]string{"K": "V"}})
	if out != "/tmp\nV\n" {
		t.Fatalf("cwd/env: %q", out)
	}
	// A rune split across two writes arrives whole; an invalid byte
	// becomes U+FFFD.
	_, out, _, _ = e.execStream(s.ID, map[string]any{"cmd": `printf '\303'; sleep 0.2; printf '\251\n'; printf 'a\377b\n'`})
	if out != "é\na\uFFFDb\n" {
		t.Fatalf("utf-8: %q", out)
	}
	_, out, _, _ = e.execStream(s.ID, map[string]any{"cmd": `printf 'x\303'`})
	if out != "x\uFFFD" {
		t.Fatalf("a dangling partial rune: %q", out)
	}
}

func TestExecWait(t *testing.T) {
	e := newEnv(t, envOpts{})
	s := e.create(nil)
	r := e.execWait(s.ID, map[string]any{"cmd": "echo out; echo err >&2; exit 2"})
	if r.Stdout != "out\n" || r.Stderr != "err\n" || r.Exit != 2 || r.Error != "" {
		t.Fatalf("wait = %+v", r)
	}
	_, body := e.req("POST", "/v1/sandboxes/"+s.ID+"/exec?wait=1", agentTok, `{"argv":["true"]}`)
	for _, k := range []string{`"stdout":""`, `"stderr":""`, `"exit":0`, `"duration_ms":`, `"truncated":false`, `"timed_out":false`, `"oom_killed":false`} {
		if !strings.Contains(string(body), k) {
			t.Fatalf("wait body %s lacks %s", body, k)
		}
	}
	r = e.execWait(s.ID, map[string]any{"argv": []string{"cat"}, "stdin": "in"})
	if r.Stdout != "in" {
		t.Fatalf("stdin: %+v", r)
	}
	// Either side of the size up to which the answer is built in memory
	// (inlineWaitOutput), with text that needs escaping, split between
	// the two streams: the same object, the output exact.
	for _, n := range []int{inlineWaitOutput/2 - 1, inlineWaitOutput/2 + 1, 3 * inlineWaitOutput} {
		text := strings.Repeat("<\"\\\t&>\n", n/7+1)[:n]
		r = e.execWait(s.ID, map[string]any{"cmd": "tee /dev/stderr", "stdin": text})
		if r.Stdout != text || r.Stderr != text || r.Exit != 0 || r.Truncated {
			t.Fatalf("%d bytes on each stream: stdout %d bytes, stderr %d, exit %d, truncated %v (equal: %v %v)",
				n, len(r.Stdout), len(r.Stderr), r.Exit, r.Truncated, r.Stdout == text, r.Stderr == text)
		}
	}
	// ?wait=1 holds the output in the daemon until the end: it keeps the
	// first MiB and reports the rest as truncated, while a stream carries
	// everything up to the sandbox's own output limit.
	r = e.execWait(s.ID, map[string]any{"cmd": "head -c 3000000 /dev/zero | tr '\\0' x", "timeout": "20s"})
	if len(r.Stdout) != 1<<20 || !r.Truncated || strings.Trim(r.Stdout, "x") != "" {
		t.Fatalf("3 MB of output with ?wait=1: %d bytes, truncated %v", len(r.Stdout), r.Truncated)
	}
	_, body = e.req("POST", "/v1/sandboxes/"+s.ID+"/exec", agentTok, map[string]any{"cmd": "head -c 3000000 /dev/zero | tr '\\0' x", "timeout": "20s"})
	streamed := 0
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		var fr struct {
			Stdout    string `json:"stdout"`
			Truncated bool   `json:"truncated"`
		}
		if err := json.Unmarshal([]byte(line), &fr); err != nil || fr.Truncated || len(fr.Stdout) > maxFrameText {
			t.Fatalf("frame %.100s: %v (truncated %v, %d bytes)", line, err, fr.Truncated, len(fr.Stdout))
		}
		streamed += len(fr.Stdout)
	}
	if streamed != 3000000 {
		t.Fatalf("3 MB of output streamed: %d bytes", streamed)
	}
}

func TestExecTimeoutAndStartFailures(t *testing.T) {
	e := newEnv(t, envOpts{})
	s := e.create(nil)
	start := time.Now()
	r := e.execWait(s.ID, map[string]any{"cmd": "sleep 30", "timeout": "300ms"})
	if r.Exit != 137 || !r.TimedOut || time.Since(start) > 10*time.Second {
		t.Fatalf("timeout: %+v after %v", r, time.Since(start))
	}
	_, _, _, last := e.execStream(s.ID, map[string]any{"cmd": "sleep 30", "timeout": "300ms"})
	if last.Exit != 137 || !last.TimedOut {
		t.Fatalf("timeout (stream): %+v", last)
	}
	_, _, _, last = e.execStream(s.ID, map[string]any{"argv": []string{"no-such-command-here"}})
	if last.Exit != 127 || !strings.Contains(last.Error, "not found") {
		t.Fatalf("not found (stream): %+v", last)
	}
	r = e.execWait(s.ID, map[string]any{"argv": []string{"/workspace/none"}})
	if r.Exit != 127 || r.Error == "" {
		t.Fatalf("not found (wait): %+v", r)
	}
	e.execWait(s.ID, map[string]any{"cmd": "echo hi > /workspace/noexec; chmod 0644 /workspace/noexec"})
	_, _, _, last = e.execStream(s.ID, map[string]any{"argv": []string{"/workspace/noexec"}})
	if last.Exit != 126 || last.Error == "" {
		t.Fatalf("not executable (stream): %+v", last)
	}
	m := e.metricsText()
	for _, want := range []string{`ironclaw_exec_exits_total{code="137"} 2`, `ironclaw_exec_exits_total{code="127"} 2`, `ironclaw_exec_exits_total{code="126"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestExecRejects(t *testing.T) {
	e := newEnv(t, envOpts{cfg: Config{MaxBodyBytes: 1024}})
	s := e.create(nil)
	path := "/v1/sandboxes/" + s.ID + "/exec"
	for _, body := range []string{
		``, `{}`, `{"cmd": ""}`, `{"cmd": "  "}`, `{"argv": []}`, `{"argv": [""]}`,
		`{"cmd": "true", "argv": ["true"]}`,
		`{"cmd": "true", "bogus": 1}`,
		`{"cmd": "true"}garbage`,
		`{"cmd": "true", "timeout": "forever"}`,
		`{"cmd": "true", "timeout": "-1s"}`,
		`{"cmd": "true", "cwd": "relative"}`,
		`{"cmd": "true", "cwd": "/workspace/../etc"}`,
		`{"cmd": "true", "env": {"A=B": "c"}}`,
		`{"argv": ["a\u0000b"]}`,
	} {
		e.wantError(400, "invalid_argument", "POST", path, agentTok, body)
		e.wantError(400, "invalid_argument", "POST", path+"?wait=1", agentTok, body)
	}
	e.wantError(413, "too_large", "POST", path, agentTok, `{"cmd": "`+strings.Repeat("x", 2000)+`"}`)
	// A missing working directory is found only inside: the command cannot
	// start (126), like a missing executable.
	if _, _, _, last := e.execStream(s.ID, map[string]any{"argv": []string{"true"}, "cwd": "/nonexistent-dir"}); last.Exit != 126 || last.Error == "" {
		t.Fatalf("missing cwd: %+v", last)
	}
}

// TestExecClientGone: a client that disconnects cancels its command.
func TestExecClientGone(t *testing.T) {
	e := newEnv(t, envOpts{})
	s := e.create(nil)
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := e.send(ctx, "POST", "/v1/sandboxes/"+s.ID+"/exec", agentTok, map[string]any{"cmd": "echo started; sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil || line != `{"stdout":"started\n"}`+"\n" {
		t.Fatalf("first frame %q %v", line, err)
	}
	cancel()
	resp.Body.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		recs, err := e.log.Tail(context.Background(), 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Kind == "sandbox.exec" && r.Session == s.ID {
				var d struct {
					Exit int `json:"exit"`
				}
				_ = json.Unmarshal(r.Data, &d)
				if d.Exit != 137 {
					t.Fatalf("cancelled exec audited with exit %d: %s", d.Exit, r.Data)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the exec did not end within 15s of the client going away")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestFiles(t *testing.T) {
	e := newEnv(t, envOpts{cfg: Config{MaxUploadBytes: 1 << 20}})
	s := e.create(nil)
	base := "/v1/sandboxes/" + s.ID + "/files?path="
	resp, b := e.req("PUT", base+"/workspace/a/b.txt&mode=0600", agentTok, "hello")
	if resp.StatusCode != 204 || len(b) != 0 {
		t.Fatalf("PUT = %d %s", resp.StatusCode, b)
	}
	resp, b = e.req("GET", base+"/workspace/a/b.txt", agentTok, nil)
	if resp.StatusCode != 200 || string(b) != "hello" || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("GET = %d %q %q", resp.StatusCode, b, resp.Header.Get("Content-Type"))
	}
	if r := e.execWait(s.ID, map[string]any{"cmd": "stat -c '%a %U' /workspace/a/b.txt"}); r.Stdout != "600 sandbox\n" && !strings.HasPrefix(r.Stdout, "600 ") {
		t.Fatalf("uploaded file: %+v", r)
	}
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	e.must(204, "PUT", base+"/tmp/big", agentTok, big, nil)
	if _, b = e.req("GET", base+"/tmp/big", agentTok, nil); string(b) != big {
		t.Fatalf("1 MiB round trip: %d bytes back", len(b))
	}
	e.must(204, "PUT", base+"/workspace/empty", agentTok, "", nil)
	if resp, b = e.req("GET", base+"/workspace/empty", agentTok, nil); resp.StatusCode != 200 || len(b) != 0 {
		t.Fatalf("empty file: %d %q", resp.StatusCode, b)
	}

	var list struct {
		Entries []struct {
			Name, Type, Mode, MTime string
			Size                    int64
		}
	}
	e.execWait(s.ID, map[string]any{"cmd": "mkdir /workspace/a/sub && ln -s b.txt /workspace/a/link"})
	e.must(200, "GET", base+"/workspace/a&list=1", agentTok, nil, &list)
	kinds := map[string]string{}
	for _, en := range list.Entries {
		kinds[en.Name] = en.Type
		if en.Name == "b.txt" && (en.Size != 5 || en.Mode != "0600" || en.MTime == "") {
			t.Fatalf("entry %+v", en)
		}
	}
	if kinds["b.txt"] != "file" || kinds["sub"] != "dir" || kinds["link"] != "symlink" || len(kinds) != 3 {
		t.Fatalf("list = %+v", list)
	}

	e.wantError(404, "not_found", "GET", base+"/workspace/missing", agentTok, nil)
	e.wantError(404, "not_found", "GET", base+"/workspace/missing&list=1", agentTok, nil)
	for _, p := range []string{"/workspace/../etc/passwd", "/workspace/a/../b", "a.txt", "/etc/passwd", "/workspace//x", "/workspacex/y", "/proc/self/environ", ""} {
		e.wantError(400, "invalid_argument", "GET", base+p, agentTok, nil)
		e.wantError(400, "invalid_argument", "PUT", base+p, agentTok, "x")
	}
	e.wantError(400, "invalid_argument", "PUT", base+"/workspace/m&mode=999", agentTok, "x")
	e.wantError(400, "invalid_argument", "PUT", base+"/workspace/m&mode=01777", agentTok, "x")

	// A symlink pointing out of the sandbox's writable trees is refused
	// both ways, and the host file is untouched.
	e.execWait(s.ID, map[string]any{"cmd": "ln -s /etc/passwd /workspace/l && ln -s /etc /workspace/d"})
	resp, b = e.req("GET", base+"/workspace/l", agentTok, nil)
	if resp.StatusCode == 200 || strings.Contains(string(b), "root:") {
		t.Fatalf("GET through an outward symlink = %d %q", resp.StatusCode, b)
	}
	t.Logf("GET via symlink: %d %s", resp.StatusCode, b)
	for _, p := range []string{"/workspace/l", "/workspace/d/x"} {
		resp, b = e.req("PUT", base+p, agentTok, "pwned")
		if resp.StatusCode == 204 {
			t.Fatalf("PUT through an outward symlink %s succeeded", p)
		}
		t.Logf("PUT via %s: %d %s", p, resp.StatusCode, b)
	}
	if r := e.execWait(s.ID, map[string]any{"cmd": "grep -c pwned /etc/passwd; ls /etc/x 2>&1"}); strings.HasPrefix(r.Stdout, "1") || strings.Contains(r.Stdout, "pwned") {
		t.Fatalf("a write went through a symlink: %+v", r)
	}

	// Upload limit: declared length and streamed (chunked) body.
	e.wantError(413, "too_large", "PUT", base+"/workspace/toobig", agentTok, strings.Repeat("x", 1<<20+1))
	e.wantError(413, "too_large", "PUT", base+"/workspace/toobig2", agentTok, strings.NewReader(strings.Repeat("x", 1<<20+1)))
}

func TestAudit(t *testing.T) {
	e := newEnv(t, envOpts{})
	s := e.create(nil)
	e.execWait(s.ID, map[string]any{"argv": []string{"true"}})
	e.must(200, "DELETE", "/v1/sandboxes/"+s.ID, operTok, nil, nil)

	type rec struct {
		Seq      int64           `json:"seq"`
		Time     string          `json:"time"`
		Session  string          `json:"session"`
		Actor    string          `json:"actor"`
		Kind     string          `json:"kind"`
		Data     json.RawMessage `json:"data"`
		PrevHash string          `json:"prev_hash"`
		Hash     string          `json:"hash"`
	}
	var page struct{ Records []rec }
	e.must(200, "GET", "/v1/audit", operTok, nil, &page)
	var kinds []string
	for _, r := range page.Records {
		kinds = append(kinds, r.Kind+"/"+r.Actor)
		if len(r.Hash) != 64 || len(r.PrevHash) != 64 || r.Time == "" || r.Session != s.ID {
			t.Fatalf("record %+v", r)
		}
	}
	if got := strings.Join(kinds, " "); got != "sandbox.create/agent sandbox.exec.intent/agent sandbox.exec/agent sandbox.destroy/operator" {
		t.Fatalf("audit = %s", got)
	}
	e.must(200, "GET", "/v1/audit?after=1&limit=1", operTok, nil, &page)
	if len(page.Records) != 1 || page.Records[0].Seq != 2 {
		t.Fatalf("after=1&limit=1 = %+v", page)
	}
	if b := e.must(200, "GET", "/v1/audit?after=100", operTok, nil, &page); !strings.Contains(string(b), `"records":[]`) {
		t.Fatalf("empty page = %s", b)
	}
	e.must(200, "GET", "/v1/audit?limit=5000", operTok, nil, &page) // clamped
	e.wantError(400, "invalid_argument", "GET", "/v1/audit?after=-1", operTok, nil)
	e.wantError(400, "invalid_argument", "GET", "/v1/audit?limit=x", operTok, nil)

	var v struct {
		OK      bool  `json:"ok"`
		Checked int64 `json:"checked"`
		LastSeq int64 `json:"last_seq"`
	}
	e.must(200, "GET", "/v1/audit/verify", operTok, nil, &v)
	if !v.OK || v.Checked != 4 || v.LastSeq != 4 {
		t.Fatalf("verify = %+v", v)
	}
	resp, b := e.req("GET", "/v1/audit/export", operTok, nil)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" || len(lines) != 4 {
		t.Fatalf("export = %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	var r3 rec
	if err := json.Unmarshal([]byte(lines[2]), &r3); err != nil || r3.Seq != 3 || r3.Hash != page.Records[0].Hash && false {
		t.Fatalf("export line %q: %v", lines[2], err)
	}

	// follow=1 streams what is appended later.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fresp, err := e.send(ctx, "GET", "/v1/audit?after=4&follow=1", operTok, nil)
	if err != nil || fresp.StatusCode != 200 || fresp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("follow: %v %v", fresp, err)
	}
	defer fresp.Body.Close()
	got := make(chan rec, 10)
	go func() {
		sc := bufio.NewScanner(fresp.Body)
		for sc.Scan() {
			var r rec
			if json.Unmarshal(sc.Bytes(), &r) == nil {
				got <- r
			}
		}
		close(got)
	}()
	s2 := e.create(nil)
	select {
	case r := <-got:
		if r.Seq != 5 || r.Kind != "sandbox.create" || r.Session != s2.ID {
			t.Fatalf("followed record %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow delivered nothing within 10s")
	}
}

func TestAuthAndRoutes(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.must(200, "GET", "/healthz", "", nil, nil)
	e.wantError(401, "unauthorized", "GET", "/v1/sandboxes", "", nil)
	e.wantError(401, "unauthorized", "GET", "/v1/sandboxes", "wrong", nil)
	e.wantError(401, "unauthorized", "GET", "/v1/sandboxes", agentTok+"x", nil)
	e.wantError(401, "unauthorized", "GET", "/v1/audit", "", nil)
	e.wantError(401, "unauthorized", "POST", "/v1/sandboxes", "", nil)
	// Not "Bearer".
	r, _ := http.NewRequest("GET", e.ts.URL+"/v1/sandboxes", nil)
	r.Header.Set("Authorization", "Basic "+agentTok)
	resp, err := e.client.Do(r)
	if err != nil || resp.StatusCode != 401 {
		t.Fatalf("Basic auth: %v %v", resp, err)
	}
	resp.Body.Close()
	e.wantError(403, "forbidden", "GET", "/v1/audit", agentTok, nil)
	e.wantError(403, "forbidden", "GET", "/v1/audit/verify", agentTok, nil)
	e.wantError(403, "forbidden", "GET", "/v1/audit/export", agentTok, nil)
	e.must(200, "GET", "/v1/sandboxes", agentTok, nil, nil)
	e.must(200, "GET", "/v1/audit", operTok, nil, nil)
	s := func() sbx {
		var s sbx
		e.must(201, "POST", "/v1/sandboxes", operTok, nil, &s)
		return s
	}()
	e.wantError(404, "not_found", "GET", "/v1/nothing", agentTok, nil)
	e.wantError(404, "not_found", "GET", "/", "", nil)
	e.wantError(405, "method_not_allowed", "PATCH", "/v1/sandboxes", agentTok, nil)
	e.wantError(405, "method_not_allowed", "POST", "/v1/sandboxes/"+s.ID, agentTok, nil)
	// The audit records the role as the actor.
	recs, _ := e.log.Tail(context.Background(), 0, 10)
	if len(recs) != 1 || recs[0].Actor != "operator" {
		t.Fatalf("audit = %+v", recs)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	e := newEnv(t, envOpts{})
	for _, cfg := range []Config{{}, {AgentToken: "a"}, {OperatorToken: "o"}, {AgentToken: "same", OperatorToken: "same"}} {
		if _, err := New(cfg, e.m, e.log, nil); err == nil {
			t.Fatalf("New(%+v) accepted", cfg)
		}
	}
	if _, err := New(Config{AgentToken: "a", OperatorToken: "o"}, e.m, e.log, nil); err != nil {
		t.Fatal(err)
	}
}

func TestPanicRecovered(t *testing.T) {
	e := newEnv(t, envOpts{})
	e.srv.mux.Handle("GET /v1/panic", e.srv.authed(roleAgent, func(http.ResponseWriter, *http.Request, principal) error { panic("boom") }))
	e.wantError(500, "internal", "GET", "/v1/panic", agentTok, nil)
	e.must(200, "GET", "/healthz", "", nil, nil) // still serving
	if !strings.Contains(e.logs.String(), "panic") {
		t.Fatal("the panic was not logged")
	}
	e.srv.mux.Handle("GET /v1/err", e.srv.authed(roleAgent, func(http.ResponseWriter, *http.Request, principal) error {
		return fmt.Errorf("secret detail %s", "xyz")
	}))
	msg := e.wantError(500, "internal", "GET", "/v1/err", agentTok, nil)
	if strings.Contains(msg, "secret") {
		t.Fatalf("an internal error leaked: %q", msg)
	}
}

func TestMetrics(t *testing.T) {
	e := newEnv(t, envOpts{sess: session.Options{ReapEvery: 50 * time.Millisecond}})
	s := e.create(nil)
	e.create(map[string]any{"ttl": "300ms"})
	e.execWait(s.ID, map[string]any{"cmd": "exit 300"}) // 300 & 255 = 44
	e.execWait(s.ID, map[string]any{"argv": []string{"true"}})
	e.req("GET", "/v1/sandboxes/"+s.ID, agentTok, nil)
	e.req("GET", "/v1/sandboxes/sbx-nope", agentTok, nil)
	e.req("GET", "/nowhere", "", nil)
	deadline := time.Now().Add(10 * time.Second)
	for e.m.Running() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the ttl sandbox was not reaped")
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.must(200, "DELETE", "/v1/sandboxes/"+s.ID, agentTok, nil, nil)
	m := e.metricsText()
	for _, want := range []string{
		"ironclaw_sandboxes_active 0",
		`ironclaw_sandbox_creates_total{result="ok"} 2`,
		`ironclaw_sandbox_ends_total{reason="ttl",state="reaped"} 1`,
		`ironclaw_sandbox_ends_total{reason="destroy",state="destroyed"} 1`,
		"ironclaw_exec_duration_seconds_count 2",
		`ironclaw_exec_exits_total{code="0"} 1`,
		`ironclaw_exec_exits_total{code="44"} 1`,
		`ironclaw_api_requests_total{code="200",route="GET /v1/sandboxes/{id}"} 1`,
		`ironclaw_api_requests_total{code="404",route="GET /v1/sandboxes/{id}"} 1`,
		`ironclaw_api_requests_total{code="404",route="unmatched"} 1`,
		`ironclaw_api_requests_total{code="201",route="POST /v1/sandboxes"} 2`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Log(m)
	}
	if exitLabel(-1) != "other" || exitLabel(256) != "other" || exitLabel(255) != "255" {
		t.Fatal("exitLabel does not cap cardinality")
	}
	if endReason("lost", "its daemon run run-123 ended") != "daemon_restart" || endReason("destroyed", "weird "+s.ID) != "other" {
		t.Fatal("endReason does not cap cardinality")
	}
	// A crash is its own state (docs/operations.md says to alert on it),
	// its reason folded to why pid 1 died.
	if endReason("crashed", "its pid 1 died (the memory limit's OOM killer ran 2 time(s))") != "oom" ||
		endReason("crashed", "its pid 1 died") != "pid1_died" {
		t.Fatal("endReason does not fold a crash's reason")
	}
	e.srv.OnEnd("sbx-x", "crashed", "its pid 1 died")
	e.srv.OnEnd("sbx-y", "paused?", "whatever "+s.ID)
	m = e.metricsText()
	for _, want := range []string{
		`ironclaw_sandbox_ends_total{reason="pid1_died",state="crashed"} 1`,
		`ironclaw_sandbox_ends_total{reason="other",state="other"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestConcurrentExec: 200 execs at once over HTTP across 50 sandboxes,
// half streamed and half ?wait=1.
func TestConcurrentExec(t *testing.T) {
	e := newEnv(t, envOpts{})
	const boxes, execs = 50, 200
	ids := make([]string, boxes)
	var wg sync.WaitGroup
	errs := make(chan error, execs+boxes)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s sbx
			resp, b := e.req("POST", "/v1/sandboxes", agentTok, nil)
			if resp.StatusCode != 201 || json.Unmarshal(b, &s) != nil {
				errs <- fmt.Errorf("create %d: %d %s", i, resp.StatusCode, b)
				return
			}
			ids[i] = s.ID
		}()
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	start := time.Now()
	for n := 0; n < execs; n++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := map[string]any{"cmd": "echo $N", "env": map[string]string{"N": strconv.Itoa(n)}}
			id := ids[n%boxes]
			want := strconv.Itoa(n) + "\n"
			if n%2 == 0 {
				resp, b := e.req("POST", "/v1/sandboxes/"+id+"/exec?wait=1", agentTok, body)
				var r result
				if resp.StatusCode != 200 || json.Unmarshal(b, &r) != nil || r.Stdout != want || r.Exit != 0 || r.Error != "" {
					errs <- fmt.Errorf("exec %d (wait): %d %s", n, resp.StatusCode, b)
				}
				return
			}
			resp, b := e.req("POST", "/v1/sandboxes/"+id+"/exec", agentTok, body)
			want = `{"stdout":"` + strconv.Itoa(n) + `\n"}` + "\n"
			if resp.StatusCode != 200 || !strings.HasPrefix(string(b), want) || !strings.Contains(string(b), `{"exit":0,`) {
				errs <- fmt.Errorf("exec %d (stream): %d %s", n, resp.StatusCode, b)
			}
		}()
	}
	wg.Wait()
	t.Logf("%d concurrent execs over HTTP in %v", execs, time.Since(start))
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// Each exec's result record is queued behind its answer (its intent
	// was durable before it ran): wait for the last ones to be committed.
	res, err := e.log.Verify(context.Background())
	for deadline := time.Now().Add(10 * time.Second); err == nil && res.Checked < boxes+2*execs && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		res, err = e.log.Verify(context.Background())
	}
	if err != nil || !res.OK || res.Checked != boxes+2*execs {
		t.Fatalf("audit after the burst: %+v %v", res, err)
	}
}

// TestExecStreamEarlyHeaders: the stream's status line comes before any
// output, and a sandbox destroyed under a running command ends the stream
// with exit -1 and an error.
func TestExecStreamEarlyHeaders(t *testing.T) {
	e := newEnv(t, envOpts{})
	s := e.create(nil)
	start := time.Now()
	resp, err := e.send(context.Background(), "POST", "/v1/sandboxes/"+s.ID+"/exec", agentTok, map[string]any{"cmd": "sleep 60"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("headers took %v", d)
	}
	e.must(200, "DELETE", "/v1/sandboxes/"+s.ID, operTok, nil, nil)
	var last frame
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			t.Fatal(err)
		}
	}
	if last.Exit == nil || *last.Exit != -1 || last.Error == "" {
		t.Fatalf("last frame after the sandbox was destroyed: %+v", last)
	}
	t.Logf("exec ended by destroy: exit %d, %q, after %v", *last.Exit, last.Error, time.Since(start))
}
