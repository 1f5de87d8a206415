package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
)

// jsonLines decodes out as NDJSON into one T per line; every line must be
// one JSON object.
func jsonLines[T any](t *testing.T, name, out string) []T {
	t.Helper()
	var list []T
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: line %q is not one JSON object: %v", name, sc.Text(), err)
		}
		list = append(list, v)
	}
	return list
}

// Every listing prints the API's objects with --json, one per line, and
// the table without it; agent-written text stays escaped in both.
func TestHostileListingsJSON(t *testing.T) {
	startDaemon(t)
	ctx := context.Background()
	cl := &client.Client{}
	code, out, stderr := run(t, "", "sandbox", "create", "--label", "team=a", "--idle", "10m")
	if code != 0 {
		t.Fatalf("create: %d %q", code, stderr)
	}
	id := strings.TrimSpace(out)

	// sandbox ls --json: client.Sandbox objects.
	code, out, _ = run(t, "", "sandbox", "ls", "--json")
	sbs := jsonLines[client.Sandbox](t, "sandbox ls --json", out)
	if code != 0 || len(sbs) != 1 || sbs[0].ID != id || sbs[0].State != "running" || sbs[0].Labels["team"] != "a" || sbs[0].IdleTimeout == "" {
		t.Fatalf("sandbox ls --json: %d %+v\n%s", code, sbs, out)
	}
	if _, out, _ := run(t, "", "sandbox", "ls", "--json", "--label", "team=b"); out != "" {
		t.Errorf("sandbox ls --json of nothing: %q, want no line", out)
	}

	// tools ls: a tool with hostile text, registered through an approval.
	desc := "lints \u202eevil\x1b[2J code"
	a, err := cl.RegisterTool(ctx, map[string]any{"name": "lint", "description": desc, "command": "eslint ."})
	if err != nil && !client.IsCode(err, "invalid_argument") {
		t.Fatal(err)
	}
	hostileTool := err == nil
	t.Logf("a description with control and bidi characters: accepted=%v (%v)", hostileTool, err)
	if !hostileTool { // refused at the door: register a plain one
		desc = "lints code"
		if a, err = cl.RegisterTool(ctx, map[string]any{"name": "lint", "description": desc, "command": "eslint ."}); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, stderr := run(t, "", "approvals", "approve", a.ID); code != 0 {
		t.Fatalf("approve tool: %d %q", code, stderr)
	}
	code, out, _ = run(t, "", "tools", "ls", "--json")
	tools := jsonLines[client.Tool](t, "tools ls --json", out)
	if code != 0 || len(tools) != 1 || tools[0].Name != "lint" || tools[0].Description != desc || tools[0].Approval != a.ID {
		t.Fatalf("tools ls --json: %d %+v\n%s", code, tools, out)
	}
	if c := rawUnsafe(out); c != "" {
		t.Errorf("tools ls --json prints %U raw", []rune(c)[0])
	}
	code, out, _ = run(t, "", "tools", "ls")
	if code != 0 || !strings.HasPrefix(out, "NAME") || !strings.Contains(out, "eslint .") || rawUnsafe(out) != "" {
		t.Errorf("tools ls: %d\n%s", code, out)
	}
	if hostileTool && !strings.Contains(out, `\u202eevil\x1b[2J`) {
		t.Errorf("tools ls does not show the escapes:\n%s", out)
	}

	// audit tail --json: the records, in order, exactly as the API has them.
	code, out, _ = run(t, "", "audit", "tail", "--json")
	recs := jsonLines[client.AuditRecord](t, "audit tail --json", out)
	if code != 0 || len(recs) < 3 {
		t.Fatalf("audit tail --json: %d %d records", code, len(recs))
	}
	var kinds []string
	for i, r := range recs {
		if r.Seq != int64(i+1) || r.Hash == "" || (i > 0 && r.PrevHash != recs[i-1].Hash) {
			t.Fatalf("record %d: %+v", i, r)
		}
		if r.Session == id {
			kinds = append(kinds, r.Kind)
		}
	}
	if len(kinds) == 0 || kinds[0] != "sandbox.create" {
		t.Errorf("kinds of %s: %v", id, kinds)
	}
	if _, out, _ := run(t, "", "audit", "tail", "--json", "--after", "2"); len(jsonLines[client.AuditRecord](t, "tail --after", out)) != len(recs)-2 {
		t.Errorf("audit tail --json --after 2:\n%s", out)
	}
	if code, _, stderr := run(t, "", "audit", "tail", "--after", "-1"); code != ExitIronClaw || !strings.Contains(stderr, "must not be negative") {
		t.Errorf("--after -1: %d %q", code, stderr)
	}
}

// --image of 'sandbox create' passes registry references as they are and
// makes local paths absolute; --timeout, --ttl and --idle are durations.
// (Served by a stand-in that records the request: a real daemon would
// try to pull.)
func TestSandboxCreateImageAndDurations(t *testing.T) {
	var (
		mu     sync.Mutex
		bodies []map[string]any
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		json.Unmarshal(b, &body)
		mu.Lock()
		bodies = append(bodies, body)
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"id":"sbx-0123456789abcdef","state":"running"}`))
	}))
	defer srv.Close()
	t.Setenv(client.EnvAddr, srv.URL)
	t.Setenv(client.EnvAgentToken, "x")
	dir := t.TempDir()
	t.Chdir(dir)
	os.Mkdir("rootfs", 0o755)
	for _, tc := range []struct {
		args  []string
		image string
	}{
		{[]string{"--image", "ghcr.io/org/app:1", "--timeout", "1m30s", "--ttl", "2h", "--idle", "90s"}, "ghcr.io/org/app:1"},
		{[]string{"--image", "localhost:5000/app@sha256:" + strings.Repeat("a", 64)}, "localhost:5000/app@sha256:" + strings.Repeat("a", 64)},
		{[]string{"--image", "alpine"}, "alpine"},
		{[]string{"--image", "./rootfs"}, filepath.Join(dir, "rootfs")},
		{[]string{"--image", "rootfs"}, filepath.Join(dir, "rootfs")},
		{[]string{"--image", "/srv/img"}, "/srv/img"},
	} {
		mu.Lock()
		bodies = nil
		mu.Unlock()
		code, out, stderr := run(t, "", append([]string{"sandbox", "create"}, tc.args...)...)
		if code != 0 || out != "sbx-0123456789abcdef\n" {
			t.Fatalf("%v: %d %q %q", tc.args, code, out, stderr)
		}
		mu.Lock()
		b := bodies[0]
		mu.Unlock()
		if b["image"] != tc.image {
			t.Errorf("%v: image %v, want %q", tc.args, b["image"], tc.image)
		}
		if tc.image == "ghcr.io/org/app:1" {
			lim, _ := b["limits"].(map[string]any)
			for k, want := range map[string]time.Duration{"ttl": 2 * time.Hour, "idle": 90 * time.Second} {
				if d, err := time.ParseDuration(b[k].(string)); err != nil || d != want {
					t.Errorf("%s %v, want %v", k, b[k], want)
				}
			}
			if d, err := time.ParseDuration(lim["timeout"].(string)); err != nil || d != 90*time.Second {
				t.Errorf("limits.timeout %v", lim["timeout"])
			}
		}
	}
	// The same duration type as everywhere: a bare number is refused,
	// before any request.
	mu.Lock()
	bodies = nil
	mu.Unlock()
	for _, args := range [][]string{{"--timeout", "30"}, {"--ttl", "-1h"}, {"--idle", "off"}} {
		if code, _, stderr := run(t, "", append([]string{"sandbox", "create"}, args...)...); code != ExitIronClaw || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: %d %q", args, code, stderr)
		}
	}
	if len(bodies) != 0 {
		t.Errorf("refused flags sent %d requests", len(bodies))
	}
}
