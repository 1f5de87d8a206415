package api

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/secrets"
	"github.com/ironclaw/ironclaw/internal/session"
)

// newSecrets is a real secrets store (key in the test's temp tree) and
// grants over log.
func newSecrets(t testing.TB, log *audit.Log) (*secrets.Store, session.SecretsAccess) {
	t.Helper()
	dir := t.TempDir()
	key, _, err := secrets.EnsureKey(filepath.Join(dir, "custody", "secrets.key"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := secrets.Open(filepath.Join(dir, secrets.FileName), key, secrets.Options{Audit: log})
	if err != nil {
		t.Fatal(err)
	}
	g, err := secrets.NewGrants(secrets.GrantsOptions{Store: st, Audit: log})
	if err != nil {
		t.Fatal(err)
	}
	return st, g
}

const apiSecretValue = "sk_live_VALUE_NEVER_SHOWN_4242"

func TestSecretsRoutes(t *testing.T) {
	e := newEnv(t, envOpts{secrets: true})
	put := wire.SetSecretRequest{Hosts: []string{"api.github.com"}, Env: "GITHUB_TOKEN", Grant: "all", Value: apiSecretValue}
	// Operator only: an agent's token is refused and changes nothing.
	e.wantError(403, "forbidden", "PUT", "/v1/secrets/github", agentTok, put)
	e.wantError(403, "forbidden", "GET", "/v1/secrets", agentTok, nil)
	e.wantError(403, "forbidden", "DELETE", "/v1/secrets/github", agentTok, nil)

	var got wire.Secret
	b := e.must(201, "PUT", "/v1/secrets/github", operTok, put, &got)
	if got.Name != "github" || got.Version != 1 || got.Source != "api" || got.Header != "Authorization" || got.Format != "Bearer {value}" {
		t.Fatalf("PUT = %s", b)
	}
	put.Value = apiSecretValue + "-rotated"
	e.must(200, "PUT", "/v1/secrets/github", operTok, put, &got)
	if got.Version != 2 {
		t.Fatalf("rotation: version %d", got.Version)
	}
	var list wire.SecretList
	lb := e.must(200, "GET", "/v1/secrets", operTok, nil, &list)
	if len(list.Secrets) != 1 || list.Secrets[0].Env != "GITHUB_TOKEN" {
		t.Fatalf("GET = %s", lb)
	}
	for _, c := range []struct {
		path string
		body any
	}{
		{"/v1/secrets/Bad%20Name", put},
		{"/v1/secrets/x", wire.SetSecretRequest{Value: "v"}},
		{"/v1/secrets/x", wire.SetSecretRequest{Hosts: []string{"a.com"}}},
		{"/v1/secrets/x", wire.SetSecretRequest{Hosts: []string{"a.com"}, Value: "a\r\nX-Evil: 1"}},
		{"/v1/secrets/x", wire.SetSecretRequest{Hosts: []string{"a.com"}, Value: strings.Repeat("v", secrets.MaxValueBytes+1)}},
		{"/v1/secrets/x", wire.SetSecretRequest{Hosts: []string{"a.com"}, Grant: "sometimes", Value: "v"}},
		{"/v1/secrets/x", `{"hosts":["a.com"],"value":"v","extra":1}`},
		{"/v1/secrets/x", ``},
	} {
		msg := e.wantError(400, "invalid_argument", "PUT", c.path, operTok, c.body)
		if strings.Contains(msg, apiSecretValue) {
			t.Fatalf("an error holds the value: %s", msg)
		}
	}
	e.must(200, "GET", "/v1/secrets", operTok, nil, &list)
	if len(list.Secrets) != 1 {
		t.Fatalf("a refused PUT changed the list: %+v", list)
	}
	e.wantError(404, "not_found", "DELETE", "/v1/secrets/missing", operTok, nil)
	if err := e.secrets.AddPolicy(secrets.Meta{Name: "frompolicy", Hosts: []string{"a.com"}}, []byte("policy-value")); err != nil {
		t.Fatal(err)
	}
	e.wantError(409, "conflict", "PUT", "/v1/secrets/frompolicy", operTok, put)
	e.wantError(409, "conflict", "DELETE", "/v1/secrets/frompolicy", operTok, nil)
	e.must(204, "DELETE", "/v1/secrets/github", operTok, nil, nil)
	e.must(200, "GET", "/v1/secrets", operTok, nil, &list)
	if len(list.Secrets) != 1 || list.Secrets[0].Name != "frompolicy" || list.Secrets[0].Source != "policy" {
		t.Fatalf("after delete: %+v", list)
	}
	checkNoValue(t, e, apiSecretValue)
}

// checkNoValue greps everything the daemon shows or keeps for v: the
// audit log (the raw rows), the server's log, the metrics.
func checkNoValue(t *testing.T, e *env, v string) {
	t.Helper()
	recs, err := e.log.Tail(context.Background(), 0, 100000)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		raw, _ := json.Marshal(r)
		if bytes.Contains(raw, []byte(v)) {
			t.Errorf("audit record %d (%s) holds the value", r.Seq, r.Kind)
		}
	}
	if strings.Contains(e.logs.String(), v) {
		t.Error("the server's log holds the value")
	}
	if strings.Contains(e.metricsText(), v) {
		t.Error("the metrics hold the value")
	}
}

// A sandbox granted a secret sees its placeholder, never the value:
// in every exec's environment and in /proc/self/environ.
func TestHostileSecretsSandboxSeesPlaceholder(t *testing.T) {
	e := newEnv(t, envOpts{secrets: true})
	put := wire.SetSecretRequest{Hosts: []string{"api.github.com"}, Env: "GITHUB_TOKEN", Grant: "all", Value: apiSecretValue}
	e.must(201, "PUT", "/v1/secrets/github", operTok, put, nil)
	// Bad asks create nothing.
	running := func() int {
		l, _, err := e.m.List(context.Background(), session.ListPage{})
		if err != nil {
			t.Fatal(err)
		}
		return len(l)
	}
	before := running()
	e.wantError(400, "invalid_argument", "POST", "/v1/sandboxes", agentTok, map[string]any{"secrets": []string{"missing"}})
	e.wantError(400, "invalid_argument", "POST", "/v1/sandboxes", agentTok, map[string]any{"secrets": []string{"github", "github"}})
	if n := running(); n != before {
		t.Fatalf("a refused create left %d sandboxes", n-before)
	}
	sb := e.create(map[string]any{"secrets": []string{"github"}, "env": map[string]string{"GITHUB_TOKEN": "caller-set"}})
	r := e.execWait(sb.ID, map[string]any{"argv": []string{"sh", "-c", `echo "$GITHUB_TOKEN"; tr '\0' '\n' </proc/self/environ; env`}})
	out := r.Stdout
	first, _, _ := strings.Cut(out, "\n")
	if !strings.HasPrefix(first, secrets.PlaceholderPrefix+"github-") {
		t.Fatalf("GITHUB_TOKEN = %q, want the placeholder (the daemon's value wins over the caller's)", first)
	}
	if strings.Contains(out, apiSecretValue) {
		t.Fatal("the value reached the sandbox")
	}
	// A second sandbox gets another placeholder.
	sb2 := e.create(map[string]any{"secrets": []string{"github"}})
	r2 := e.execWait(sb2.ID, map[string]any{"argv": []string{"sh", "-c", `echo "$GITHUB_TOKEN"`}})
	if strings.TrimSpace(r2.Stdout) == first || !strings.HasPrefix(r2.Stdout, secrets.PlaceholderPrefix) {
		t.Fatalf("placeholders: %q and %q", first, r2.Stdout)
	}
	// The files of the sandbox's view hold no value either (the command
	// spells it in halves, so that its own record does not hold it).
	r3 := e.execWait(sb.ID, map[string]any{"argv": []string{"sh", "-c", "a='" + apiSecretValue[:8] + "'; b='" + apiSecretValue[8:] + "'; grep -rl -- \"$a$b\" /etc /tmp /workspace 2>/dev/null; true"}})
	if strings.TrimSpace(r3.Stdout) != "" {
		t.Fatalf("files hold the value: %s", r3.Stdout)
	}
	checkNoValue(t, e, apiSecretValue)
	if b, err := os.ReadFile("/proc/self/environ"); err == nil && bytes.Contains(b, []byte(apiSecretValue)) {
		t.Fatal("test bug: the value is in the test's own environment")
	}
}
