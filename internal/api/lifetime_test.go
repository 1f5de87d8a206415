package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// A lifetime change moves expires_at to now + ttl (not creation + ttl),
// keeps an agent within the operator's ceiling (refused, naming it), is
// another agent's sandbox's 404 and an ended one's 409, and is audited.
func TestLifetimeRoute(t *testing.T) {
	const aTok, bTok = "agent-a-token-0123456789", "agent-b-token-0123456789"
	e := newEnv(t, envOpts{cfg: Config{
		Agents:  []Agent{{Name: "a", Token: aTok}, {Name: "b", Token: bTok}},
		Ceiling: &Ceiling{Limits: sandbox.DefaultLimits, TTL: time.Hour, Idle: 30 * time.Minute},
	}})
	var a, got sbx
	e.must(201, "POST", "/v1/sandboxes", aTok, map[string]any{"ttl": "10m"}, &a)
	path := "/v1/sandboxes/" + a.ID + "/lifetime"
	e.wantError(404, "not_found", "POST", path, bTok, map[string]any{"ttl": "5m"})
	e.wantError(404, "not_found", "POST", "/v1/sandboxes/sbx-nope/lifetime", aTok, map[string]any{"ttl": "5m"})
	e.wantError(400, "invalid_argument", "POST", path, aTok, nil)
	e.wantError(400, "invalid_argument", "POST", path, aTok, map[string]any{})
	e.wantError(400, "invalid_argument", "POST", path, aTok, map[string]any{"ttl": "5m", "extra": 1})
	if msg := e.wantError(400, "invalid_argument", "POST", path, aTok, map[string]any{"ttl": "2h"}); !strings.Contains(msg, "1h0m0s") {
		t.Errorf("over the ceiling: %q does not name it", msg)
	}
	if msg := e.wantError(400, "invalid_argument", "POST", path, aTok, map[string]any{"idle": "1h"}); !strings.Contains(msg, "30m0s") {
		t.Errorf("idle over the ceiling: %q does not name it", msg)
	}
	before := time.Now()
	e.must(200, "POST", path, aTok, map[string]any{"ttl": "50m", "idle": "20m"}, &got)
	exp, err := time.Parse(time.RFC3339Nano, got.ExpiresAt)
	if err != nil {
		t.Fatalf("expires_at %q: %v", got.ExpiresAt, err)
	}
	if exp.Before(before.Add(50*time.Minute-time.Second)) || exp.After(time.Now().Add(50*time.Minute+time.Second)) {
		t.Fatalf("expires_at %s, want now+50m", exp)
	}
	if got.IdleTimeout != "20m0s" {
		t.Fatalf("idle_timeout %q", got.IdleTimeout)
	}
	// The operator is not held to the ceiling.
	e.must(200, "POST", path, operTok, map[string]any{"ttl": "3h"}, &got)
	// Shorter works too, and an idle-only change leaves the TTL.
	e.must(200, "POST", path, aTok, map[string]any{"ttl": "1m"}, &got)
	e.must(200, "POST", path, aTok, map[string]any{"idle": "10m"}, &got)
	if exp2, _ := time.Parse(time.RFC3339Nano, got.ExpiresAt); exp2.After(time.Now().Add(time.Minute + time.Second)) {
		t.Fatalf("an idle change moved the TTL: %s", got.ExpiresAt)
	}
	recs, err := e.log.Tail(context.Background(), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if r.Kind == KindSandboxLifetime+audit.IntentSuffix && r.Session == a.ID {
			n++
		}
	}
	if n != 4 {
		t.Fatalf("%d sandbox.lifetime intents, want 4 (one per accepted change)", n)
	}
	e.must(200, "DELETE", "/v1/sandboxes/"+a.ID, aTok, nil, nil)
	e.wantError(409, "conflict", "POST", path, aTok, map[string]any{"ttl": "5m"})
}

// Stats answer the sandbox's use and limits; another agent's sandbox is
// 404, an ended one 409.
func TestStatsRoute(t *testing.T) {
	const aTok, bTok = "agent-a-token-0123456789", "agent-b-token-0123456789"
	e := newEnv(t, envOpts{cfg: Config{Agents: []Agent{{Name: "a", Token: aTok}, {Name: "b", Token: bTok}}}})
	var a sbx
	e.must(201, "POST", "/v1/sandboxes", aTok, map[string]any{"limits": map[string]any{"memory": "256M", "cpus": 1}}, &a)
	path := "/v1/sandboxes/" + a.ID + "/stats"
	var st struct {
		ID               string  `json:"id"`
		State            string  `json:"state"`
		MemoryBytes      int64   `json:"memory_bytes"`
		MemoryLimitBytes int64   `json:"memory_limit_bytes"`
		CPUs             float64 `json:"cpus"`
		Pids             int64   `json:"pids"`
		WorkspaceBytes   int64   `json:"workspace_bytes"`
	}
	e.must(200, "GET", path, aTok, nil, &st)
	if st.ID != a.ID || st.State != "running" || st.MemoryLimitBytes != 256<<20 || st.CPUs != 1 || st.Pids < 1 || st.WorkspaceBytes <= 0 {
		t.Fatalf("stats: %+v", st)
	}
	e.wantError(404, "not_found", "GET", path, bTok, nil)
	e.must(200, "DELETE", "/v1/sandboxes/"+a.ID, aTok, nil, nil)
	e.wantError(409, "conflict", "GET", path, aTok, nil)
}
