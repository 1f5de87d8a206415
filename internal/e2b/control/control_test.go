package control_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
	"github.com/ironclaw/ironclaw/internal/e2b/e2btest"
	"github.com/ironclaw/ironclaw/internal/e2b/envd"
)

func TestMain(m *testing.M) { e2btest.Main(m) }

// policy writes a policy file for the daemon: a TTL ceiling of an hour,
// one allowed host, and unknown hosts asked of an operator.
func policy(t *testing.T, extra string) func(*e2btest.Config) {
	return func(c *e2btest.Config) {
		p := filepath.Join(t.TempDir(), "policy.yaml")
		body := "limits:\n  max: {ttl: 1h}\negress:\n  allow: [\"api.github.com\"]\n  unknown: ask\n" + extra
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		c.PolicyFile = p
	}
}

// e2bError is E2B's error body.
type e2bError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// wantError checks an answer is status with E2B's body (code = status)
// and returns its message.
func wantError(t *testing.T, status int, raw []byte, gotStatus int) string {
	t.Helper()
	var e e2bError
	if gotStatus != status || json.Unmarshal(raw, &e) != nil || e.Code != status || e.Message == "" {
		t.Fatalf("status %d body %s, want %d in E2B's error body", gotStatus, raw, status)
	}
	return e.Message
}

func native(t *testing.T, env *e2btest.Env, id string) client.Sandbox {
	t.Helper()
	sb, err := env.Agent.GetSandbox(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// A create answers 201 with the Sandbox the SDKs read: the envd version
// they gate on, the sandbox's own access and traffic tokens, no domain
// unless one is set; the native sandbox has the timeout as its TTL and
// the template in its labels.
func TestCreate(t *testing.T) {
	env := e2btest.Start(t, func(c *e2btest.Config) { c.E2BTemplates = map[string]string{"mine": ""} })
	var raw map[string]any
	st, body := env.Control(t, "POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 300, "secure": true,
		"allow_internet_access": true, "envVars": map[string]string{"A": "1"}}, &raw)
	if st != http.StatusCreated {
		t.Fatalf("create: %d %s", st, body)
	}
	id, _ := raw["sandboxID"].(string)
	t.Cleanup(func() { env.Control(t, "DELETE", "/sandboxes/"+id, nil, nil) })
	if raw["templateID"] != "base" || raw["clientID"] == "" || raw["envdVersion"] != envd.Version ||
		raw["envdAccessToken"] == "" || raw["trafficAccessToken"] == "" || raw["domain"] != nil {
		t.Fatalf("create answered %s", body)
	}
	if v, ok := raw["domain"]; !ok || v != nil {
		t.Fatalf("domain must be null: %s", body)
	}
	if raw["envdAccessToken"] == raw["trafficAccessToken"] {
		t.Fatal("the access and traffic tokens are the same")
	}
	sb := native(t, env, id)
	if sb.State != "running" || sb.Labels["e2b.template"] != "base" {
		t.Fatalf("native sandbox: %+v", sb)
	}
	if d := time.Until(sb.ExpiresAt); d < 290*time.Second || d > 301*time.Second {
		t.Fatalf("native TTL ends in %s, want ~300s", d)
	}
	// Another sandbox's token differs.
	other := env.Create(t, map[string]any{"templateID": "mine", "timeout": 60})
	if other.EnvdAccessToken == raw["envdAccessToken"] || other.TemplateID != "mine" {
		t.Fatalf("second create: %+v", other)
	}
	// The envd the tokens open answers.
	res, err := env.EnvdHTTP(other).Get(env.BaseURL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
}

// The domain, when set, is every sandbox's.
func TestCreateReportsTheDomain(t *testing.T) {
	env := e2btest.Start(t, func(c *e2btest.Config) { c.E2BDomain = "sandboxes.example.com" })
	sb := env.Create(t, nil)
	if sb.Domain == nil || *sb.Domain != "sandboxes.example.com" {
		t.Fatalf("domain %v", sb.Domain)
	}
}

// What the API cannot honour is refused with E2B's body: an unknown
// template (404, naming those served), mcp, iam, egress by address,
// bad timeouts, metadata that breaks the label rules or takes e2b.,
// a body that is too large.
func TestCreateRefusals(t *testing.T) {
	env := e2btest.Start(t, nil)
	for _, c := range []struct {
		body   map[string]any
		status int
		want   string
	}{
		{map[string]any{"templateID": "code-interpreter-v1", "timeout": 60}, 404, "base"},
		{map[string]any{"templateID": "base", "mcp": map[string]any{"github": map[string]any{}}}, 400, "MCP"},
		{map[string]any{"templateID": "base", "iam": map[string]any{"tokens": map[string]any{"x": map[string]any{}}}}, 400, "iam"},
		{map[string]any{"templateID": "base", "network": map[string]any{"allowOut": []string{"8.8.8.8"}}}, 400, "host name"},
		{map[string]any{"templateID": "base", "network": map[string]any{"allowOut": []string{"10.0.0.0/8"}}}, 400, "host name"},
		{map[string]any{"templateID": "base", "network": map[string]any{"rules": map[string]any{"a.com": []any{}}}}, 400, "rules"},
		{map[string]any{"templateID": "base", "timeout": -1}, 400, "timeout"},
		{map[string]any{"templateID": "base", "timeout": 0}, 400, "timeout"},
		{map[string]any{"templateID": "base", "metadata": map[string]string{"bad key": "x"}}, 400, "label key"},
		{map[string]any{"templateID": "base", "metadata": map[string]string{"e2b.template": "x"}}, 400, "e2b."},
		{map[string]any{"templateID": "base", "metadata": map[string]string{"ironclaw.ports": "80"}}, 400, "port"},
		{map[string]any{"templateID": "base", "envVars": map[string]string{"A=B": "x"}}, 400, "env"},
		{map[string]any{"timeout": 60}, 400, "templateID"},
		{map[string]any{"templateID": "base", "pad": strings.Repeat("x", 1<<20)}, 413, "larger"},
	} {
		st, raw := env.Control(t, "POST", "/sandboxes", c.body, nil)
		if msg := wantError(t, c.status, raw, st); !strings.Contains(msg, c.want) {
			t.Errorf("%v: %q does not mention %q", c.body["templateID"], msg, c.want)
		}
	}
	list, err := env.Agent.ListSandboxes(context.Background(), nil)
	if err != nil || len(list) != 0 {
		t.Fatalf("refused creates left sandboxes: %v %v", list, err)
	}
}

type listed struct {
	SandboxID  string            `json:"sandboxID"`
	TemplateID string            `json:"templateID"`
	State      string            `json:"state"`
	Metadata   map[string]string `json:"metadata"`
	StartedAt  time.Time         `json:"startedAt"`
	EndAt      time.Time         `json:"endAt"`
	CPUCount   int               `json:"cpuCount"`
	MemoryMB   int               `json:"memoryMB"`
	Envd       string            `json:"envdVersion"`
}

func list(t *testing.T, env *e2btest.Env, query string) ([]listed, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", env.BaseURL+"/v2/sandboxes"+query, nil)
	req.Header.Set("X-API-Key", env.APIKey)
	res, err := env.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var out []listed
	if res.StatusCode != 200 || json.NewDecoder(res.Body).Decode(&out) != nil {
		t.Fatalf("list %s: %d", query, res.StatusCode)
	}
	return out, res.Header.Get("X-Next-Token")
}

// metadataQuery is what the JS SDK sends as ?metadata= for pairs.
func metadataQuery(pairs map[string]string) string {
	v := url.Values{}
	for k, val := range pairs {
		v.Set(url.QueryEscape(k), url.QueryEscape(val))
	}
	return "metadata=" + url.QueryEscape(v.Encode())
}

// Listing filters by metadata (as the SDKs encode it, @mastra/e2b's
// reconnect) and by state, shows metadata without the e2b. labels, and
// the older list shows the running ones.
func TestListByMetadataAndState(t *testing.T) {
	env := e2btest.Start(t, nil)
	a := env.Create(t, map[string]any{"templateID": "base", "timeout": 300, "metadata": map[string]string{"mastra-sandbox-id": "a", "team": "x y"}})
	b := env.Create(t, map[string]any{"templateID": "base", "timeout": 300, "metadata": map[string]string{"mastra-sandbox-id": "b", "team": "x y"}})
	if st, raw := env.Control(t, "POST", "/sandboxes/"+b.SandboxID+"/pause", nil, nil); st != http.StatusNoContent {
		t.Fatalf("pause: %d %s", st, raw)
	}
	got, _ := list(t, env, "?"+metadataQuery(map[string]string{"mastra-sandbox-id": "a"}))
	if len(got) != 1 || got[0].SandboxID != a.SandboxID || got[0].State != "running" || got[0].TemplateID != "base" ||
		got[0].Envd != envd.Version || got[0].CPUCount < 1 || got[0].MemoryMB < 1 || got[0].EndAt.Before(got[0].StartedAt) {
		t.Fatalf("by metadata: %+v", got)
	}
	if len(got[0].Metadata) != 2 || got[0].Metadata["team"] != "x y" {
		t.Fatalf("metadata %v", got[0].Metadata)
	}
	got, _ = list(t, env, "?"+metadataQuery(map[string]string{"team": "x y"})+"&state=running,paused")
	if len(got) != 2 {
		t.Fatalf("both: %+v", got)
	}
	got, _ = list(t, env, "?"+metadataQuery(map[string]string{"team": "x y"})+"&state=running&state=paused")
	if len(got) != 2 {
		t.Fatalf("both, repeated: %+v", got)
	}
	got, _ = list(t, env, "?"+metadataQuery(map[string]string{"team": "x y"})+"&state=paused")
	if len(got) != 1 || got[0].SandboxID != b.SandboxID || got[0].State != "paused" {
		t.Fatalf("paused: %+v", got)
	}
	got, _ = list(t, env, "?"+metadataQuery(map[string]string{"mastra-sandbox-id": "c"}))
	if len(got) != 0 {
		t.Fatalf("no match: %+v", got)
	}
	var v1 []listed
	if st, raw := env.Control(t, "GET", "/sandboxes", nil, &v1); st != 200 || len(v1) != 1 || v1[0].SandboxID != a.SandboxID {
		t.Fatalf("v1 list: %d %s", st, raw)
	}
	st, raw := env.Control(t, "GET", "/v2/sandboxes?state=killed", nil, nil)
	wantError(t, 400, raw, st)
	st, raw = env.Control(t, "GET", "/v2/sandboxes?metadata="+url.QueryEscape("e2b.template=base"), nil, nil)
	wantError(t, 400, raw, st)
}

// Pages follow X-Next-Token; the limit is clamped to E2B's 100.
func TestListPaging(t *testing.T) {
	env := e2btest.Start(t, nil)
	want := map[string]bool{}
	for range 3 {
		want[env.Create(t, nil).SandboxID] = true
	}
	page, next := list(t, env, "?limit=2")
	if len(page) != 2 || next == "" {
		t.Fatalf("first page: %d, next %q", len(page), next)
	}
	rest, next2 := list(t, env, "?limit=2&nextToken="+url.QueryEscape(next))
	if len(rest) != 1 || next2 != "" {
		t.Fatalf("second page: %d, next %q", len(rest), next2)
	}
	for _, s := range append(page, rest...) {
		delete(want, s.SandboxID)
	}
	if len(want) != 0 {
		t.Fatalf("not listed: %v", want)
	}
	if all, _ := list(t, env, "?limit=100000"); len(all) != 3 {
		t.Fatalf("clamped limit: %d", len(all))
	}
	for _, q := range []string{"?limit=0", "?limit=x", "?nextToken=" + url.QueryEscape("../x")} {
		st, raw := env.Control(t, "GET", "/v2/sandboxes"+q, nil, nil)
		wantError(t, 400, raw, st)
	}
}

// GET describes the caller's running or paused sandbox; an unknown one,
// and a killed one, are 404 in E2B's body.
func TestGetAndKill(t *testing.T) {
	env := e2btest.Start(t, nil)
	sb := env.Create(t, map[string]any{"templateID": "base", "timeout": 120, "metadata": map[string]string{"k": "v"}})
	var d struct {
		listed
		EnvdAccessToken string `json:"envdAccessToken"`
		Lifecycle       struct {
			OnTimeout string `json:"onTimeout"`
		} `json:"lifecycle"`
	}
	if st, raw := env.Control(t, "GET", "/sandboxes/"+sb.SandboxID, nil, &d); st != 200 {
		t.Fatalf("get: %d %s", st, raw)
	}
	if d.SandboxID != sb.SandboxID || d.State != "running" || d.Metadata["k"] != "v" || d.EnvdAccessToken != sb.EnvdAccessToken ||
		d.Lifecycle.OnTimeout != "kill" || time.Until(d.EndAt) > 121*time.Second || time.Until(d.EndAt) < 100*time.Second {
		t.Fatalf("get: %+v", d)
	}
	st, raw := env.Control(t, "GET", "/sandboxes/sbx-0123456789abcdef", nil, nil)
	wantError(t, 404, raw, st)
	if st, raw := env.Control(t, "DELETE", "/sandboxes/"+sb.SandboxID, nil, nil); st != http.StatusNoContent {
		t.Fatalf("kill: %d %s", st, raw)
	}
	if s := native(t, env, sb.SandboxID); s.State != "destroyed" {
		t.Fatalf("after kill: %s", s.State)
	}
	st, raw = env.Control(t, "DELETE", "/sandboxes/"+sb.SandboxID, nil, nil)
	wantError(t, 404, raw, st)
	st, raw = env.Control(t, "GET", "/sandboxes/"+sb.SandboxID, nil, nil)
	wantError(t, 404, raw, st)
}

// setTimeout moves the native TTL to now + timeout; above the operator's
// ceiling it is 400 naming the ceiling; each change is audited, as are
// the create and the kill.
func TestTimeoutAndAudit(t *testing.T) {
	env := e2btest.Start(t, policy(t, ""))
	sb := env.Create(t, map[string]any{"templateID": "base", "timeout": 60})
	before := native(t, env, sb.SandboxID).ExpiresAt
	if st, raw := env.Control(t, "POST", "/sandboxes/"+sb.SandboxID+"/timeout", map[string]any{"timeout": 1800}, nil); st != http.StatusNoContent {
		t.Fatalf("timeout: %d %s", st, raw)
	}
	after := native(t, env, sb.SandboxID).ExpiresAt
	if d := time.Until(after); !after.After(before) || d < 1790*time.Second || d > 1801*time.Second {
		t.Fatalf("expires_at %s -> %s", before, after)
	}
	st, raw := env.Control(t, "POST", "/sandboxes/"+sb.SandboxID+"/timeout", map[string]any{"timeout": 7200}, nil)
	if msg := wantError(t, 400, raw, st); !strings.Contains(msg, "1h0m0s") {
		t.Fatalf("over the ceiling: %q", msg)
	}
	if got := native(t, env, sb.SandboxID).ExpiresAt; !got.Equal(after) {
		t.Fatalf("a refused timeout moved expires_at to %s", got)
	}
	for _, body := range []map[string]any{nil, {}, {"timeout": 0}} {
		st, raw := env.Control(t, "POST", "/sandboxes/"+sb.SandboxID+"/timeout", body, nil)
		wantError(t, 400, raw, st)
	}
	st, raw = env.Control(t, "POST", "/sandboxes/sbx-0123456789abcdef/timeout", map[string]any{"timeout": 60}, nil)
	wantError(t, 404, raw, st)
	if st, raw := env.Control(t, "DELETE", "/sandboxes/"+sb.SandboxID, nil, nil); st != http.StatusNoContent {
		t.Fatalf("kill: %d %s", st, raw)
	}
	kinds := map[string]int{}
	for _, r := range daemontest.VerifiedAudit(t, env.Oper) {
		if r.Session == sb.SandboxID {
			kinds[r.Kind]++
		}
	}
	if kinds["sandbox.create"] == 0 || kinds["sandbox.lifetime.intent"] != 1 || kinds["sandbox.destroy"] == 0 {
		t.Fatalf("audit kinds of %s: %v", sb.SandboxID, kinds)
	}
}

// Pause is 204, and 409 when paused already (the SDK's "already
// paused"); connect resumes a paused sandbox (201) and answers a running
// one (200), extending its timeout; resume (older SDKs) is 409 on a
// running one.
func TestPauseConnectResume(t *testing.T) {
	env := e2btest.Start(t, nil)
	sb := env.Create(t, map[string]any{"templateID": "base", "timeout": 60})
	p := "/sandboxes/" + sb.SandboxID
	if st, raw := env.Control(t, "POST", p+"/pause", map[string]any{"memory": true}, nil); st != http.StatusNoContent {
		t.Fatalf("pause: %d %s", st, raw)
	}
	st, raw := env.Control(t, "POST", p+"/pause", nil, nil)
	wantError(t, 409, raw, st)
	if s := native(t, env, sb.SandboxID); s.State != "paused" {
		t.Fatalf("after pause: %s", s.State)
	}
	var c e2btest.Sandbox
	if st, raw := env.Control(t, "POST", p+"/connect", map[string]any{"timeout": 600}, &c); st != http.StatusCreated {
		t.Fatalf("connect to a paused sandbox: %d %s", st, raw)
	}
	if c.SandboxID != sb.SandboxID || c.EnvdAccessToken != sb.EnvdAccessToken || c.EnvdVersion != envd.Version {
		t.Fatalf("connect: %+v", c)
	}
	s := native(t, env, sb.SandboxID)
	if s.State != "running" || time.Until(s.ExpiresAt) < 590*time.Second {
		t.Fatalf("after connect: %s, ends in %s", s.State, time.Until(s.ExpiresAt))
	}
	// Connect only extends.
	if st, raw := env.Control(t, "POST", p+"/connect", map[string]any{"timeout": 30}, &c); st != http.StatusOK {
		t.Fatalf("connect to a running sandbox: %d %s", st, raw)
	}
	if got := native(t, env, sb.SandboxID).ExpiresAt; !got.Equal(s.ExpiresAt) {
		t.Fatalf("a shorter connect moved expires_at %s -> %s", s.ExpiresAt, got)
	}
	st, raw = env.Control(t, "POST", p+"/resume", map[string]any{"timeout": 60}, nil)
	wantError(t, 409, raw, st)
	env.Control(t, "POST", p+"/pause", nil, nil)
	if st, raw := env.Control(t, "POST", p+"/resume", map[string]any{"timeout": 60}, &c); st != http.StatusCreated || c.SandboxID != sb.SandboxID {
		t.Fatalf("resume: %d %s", st, raw)
	}
	st, raw = env.Control(t, "POST", "/sandboxes/sbx-0123456789abcdef/connect", map[string]any{"timeout": 60}, nil)
	wantError(t, 404, raw, st)
}

// autoPause (@mastra/e2b sends lifecycle onTimeout: pause) makes the
// timeout the native idle timeout, whose action is pause whatever the
// policy's (here destroy); its timeout changes move the idle timeout. A
// sandbox without it keeps the policy's.
func TestAutoPause(t *testing.T) {
	env := e2btest.Start(t, policy(t, ""))
	sb := env.Create(t, map[string]any{"templateID": "base", "timeout": 120, "autoPause": true, "autoResume": map[string]any{"enabled": true}})
	s := native(t, env, sb.SandboxID)
	if s.IdleTimeout != "2m0s" || s.IdleAction != "pause" || s.Labels["e2b.on_timeout"] != "pause" {
		t.Fatalf("native: %+v", s)
	}
	if plain := native(t, env, env.Create(t, nil).SandboxID); plain.IdleAction != "destroy" {
		t.Fatalf("a sandbox without autoPause: idle action %q", plain.IdleAction)
	}
	var d struct {
		Lifecycle struct {
			OnTimeout  string `json:"onTimeout"`
			AutoResume bool   `json:"autoResume"`
		} `json:"lifecycle"`
	}
	env.Control(t, "GET", "/sandboxes/"+sb.SandboxID, nil, &d)
	if d.Lifecycle.OnTimeout != "pause" || !d.Lifecycle.AutoResume {
		t.Fatalf("lifecycle %+v", d.Lifecycle)
	}
	if st, raw := env.Control(t, "POST", "/sandboxes/"+sb.SandboxID+"/timeout", map[string]any{"timeout": 600}, nil); st != http.StatusNoContent {
		t.Fatalf("timeout: %d %s", st, raw)
	}
	if s := native(t, env, sb.SandboxID); s.IdleTimeout != "10m0s" {
		t.Fatalf("idle after timeout: %s", s.IdleTimeout)
	}
}

// A host beyond the policy is filed as an approval (the sandbox starts
// without it), named in the answer and its header; a host the policy
// covers files nothing.
func TestEgressBeyondPolicyFilesAnApproval(t *testing.T) {
	env := e2btest.Start(t, policy(t, ""))
	var out struct {
		SandboxID string   `json:"sandboxID"`
		Approvals []string `json:"approvals"`
	}
	st, raw := env.Control(t, "POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 60,
		"network": map[string]any{"allowOut": []string{"api.github.com", "example.org"}, "denyOut": []string{"0.0.0.0/0"}}}, &out)
	if st != http.StatusCreated || len(out.Approvals) != 1 {
		t.Fatalf("create: %d %s", st, raw)
	}
	t.Cleanup(func() { env.Control(t, "DELETE", "/sandboxes/"+out.SandboxID, nil, nil) })
	as, err := env.Agent.ListApprovals(context.Background(), client.ApprovalFilter{Session: out.SandboxID})
	if err != nil || len(as) != 1 || as[0].ID != out.Approvals[0] || as[0].Kind != "sandbox.widen" || as[0].State != "pending" {
		t.Fatalf("approvals: %+v %v", as, err)
	}
	if !strings.Contains(string(raw), "example.org") && !strings.Contains(as[0].Summary+string(mustJSON(as[0].Fields)), "example.org") {
		t.Fatalf("the approval does not name example.org: %+v", as[0])
	}
	covered := env.Create(t, map[string]any{"templateID": "base", "timeout": 60, "network": map[string]any{"allowOut": []string{"api.github.com"}}})
	as, _ = env.Agent.ListApprovals(context.Background(), client.ApprovalFilter{Session: covered.SandboxID})
	if len(as) != 0 {
		t.Fatalf("a covered host filed %+v", as)
	}
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// Another agent's sandbox is 404 to every route, exactly like one that
// never existed.
func TestAnotherAgentsSandboxIsNotFound(t *testing.T) {
	env := e2btest.Start(t, func(c *e2btest.Config) {
		e2btest.AddAgent(t, c, "other")
	})
	sb := env.Create(t, nil)
	other := *env
	other.APIKey = env.AgentKey(t, "other")
	p := "/sandboxes/" + sb.SandboxID
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"GET", p, nil}, {"DELETE", p, nil}, {"POST", p + "/timeout", map[string]any{"timeout": 60}},
		{"POST", p + "/connect", map[string]any{"timeout": 60}}, {"POST", p + "/pause", nil},
		{"POST", p + "/resume", map[string]any{"timeout": 60}}, {"GET", p + "/metrics", nil},
	} {
		st, raw := other.Control(t, c.method, c.path, c.body, nil)
		wantError(t, 404, raw, st)
	}
	if got, _ := list(t, &other, ""); len(got) != 0 {
		t.Fatalf("the other agent lists %+v", got)
	}
	var mm struct {
		Sandboxes map[string]any `json:"sandboxes"`
	}
	if st, raw := other.Control(t, "GET", "/sandboxes/metrics?sandbox_ids="+sb.SandboxID, nil, &mm); st != 200 || len(mm.Sandboxes) != 0 {
		t.Fatalf("metrics of another's: %d %s", st, raw)
	}
	if s := native(t, env, sb.SandboxID); s.State != "running" {
		t.Fatalf("the other agent changed it: %s", s.State)
	}
}

// Metrics have E2B's shape, from the native stats.
func TestMetrics(t *testing.T) {
	env := e2btest.Start(t, nil)
	sb := env.Create(t, nil)
	var ms []map[string]any
	if st, raw := env.Control(t, "GET", "/sandboxes/"+sb.SandboxID+"/metrics", nil, &ms); st != 200 || len(ms) != 1 {
		t.Fatalf("metrics: %d %s", st, raw)
	}
	m := ms[0]
	for _, k := range []string{"timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed", "memTotal", "memCache", "diskUsed", "diskTotal"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("metric lacks %s: %v", k, m)
		}
	}
	if m["cpuCount"].(float64) < 1 || m["memTotal"].(float64) <= 0 || m["diskTotal"].(float64) <= 0 {
		t.Fatalf("metric %v", m)
	}
	var many struct {
		Sandboxes map[string]map[string]any `json:"sandboxes"`
	}
	if st, raw := env.Control(t, "GET", "/sandboxes/metrics?sandbox_ids="+sb.SandboxID+",sbx-0123456789abcdef", nil, &many); st != 200 || len(many.Sandboxes) != 1 || many.Sandboxes[sb.SandboxID] == nil {
		t.Fatalf("metrics of many: %d %s", st, raw)
	}
	st, raw := env.Control(t, "GET", "/sandboxes/metrics?sandbox_ids="+strings.Repeat("a,", 101), nil, nil)
	wantError(t, 400, raw, st)
}

// Templates: the mapped aliases and base exist, others are 404; builds
// are refused clearly; unknown routes are 404 in E2B's body; the code
// interpreter's port is not served.
func TestTemplatesAndUnknownRoutes(t *testing.T) {
	env := e2btest.Start(t, func(c *e2btest.Config) { c.E2BTemplates = map[string]string{"mastra-0123456789abcdef": ""} })
	for _, a := range []string{"base", "mastra-0123456789abcdef"} {
		var out struct {
			TemplateID string `json:"templateID"`
		}
		if st, raw := env.Control(t, "GET", "/templates/aliases/"+a, nil, &out); st != 200 || out.TemplateID != a {
			t.Fatalf("alias %s: %d %s", a, st, raw)
		}
	}
	st, raw := env.Control(t, "GET", "/templates/aliases/mastra-ffff", nil, nil)
	wantError(t, 404, raw, st)
	var ts []struct {
		TemplateID string `json:"templateID"`
	}
	if st, raw := env.Control(t, "GET", "/templates", nil, &ts); st != 200 || len(ts) != 2 {
		t.Fatalf("templates: %d %s", st, raw)
	}
	st, raw = env.Control(t, "POST", "/v3/templates", map[string]any{"name": "x"}, nil)
	if msg := wantError(t, 501, raw, st); !strings.Contains(msg, "--e2b-template") {
		t.Fatalf("build: %q", msg)
	}
	st, raw = env.Control(t, "GET", "/no/such/route", nil, nil)
	wantError(t, 404, raw, st)
	st, raw = env.Control(t, "POST", "/sandboxes/x/fork", map[string]any{}, nil)
	wantError(t, 501, raw, st)

	sb := env.Create(t, nil)
	req, _ := http.NewRequest("POST", env.BaseURL+"/execute", strings.NewReader(`{"code":"1"}`))
	req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
	req.Header.Set("E2b-Sandbox-Port", "49999")
	req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var e e2bError
	_ = json.NewDecoder(res.Body).Decode(&e)
	res.Body.Close()
	if res.StatusCode != http.StatusNotImplemented || !strings.Contains(e.Message, "Jupyter") {
		t.Fatalf("port 49999: %d %+v", res.StatusCode, e)
	}
}

// echoServer answers with its request line and the Authorization header it
// saw (perl is in every Debian base system).
const echoServer = `perl -MIO::Socket::INET -e '
$s = IO::Socket::INET->new(LocalAddr => "127.0.0.1:3001", Listen => 16, ReuseAddr => 1) or die "listen: $!";
while ($c = $s->accept) {
	$l = <$c>; $l =~ s/\r?\n$//; $a = "";
	while (defined($h = <$c>) && $h =~ /\S/) { $a = $1 if $h =~ /^X-Access-Token:\s*(.*?)\r?$/i }
	print $c "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nline=[$l] token=[$a]\n"; close $c;
}' >/dev/null 2>&1 </dev/null &`

// A preview works end to end when the policy allows inbound ports: the
// sandbox declares the daemon's --e2b-port list and its metadata's
// ironclaw.ports, and a request with the sandbox's traffic token, routed
// by header or by Host, reaches its server without the E2B credentials.
func TestPreview(t *testing.T) {
	env := e2btest.Start(t, func(c *e2btest.Config) {
		policy(t, "ports:\n  inbound: true\n")(c)
		c.PortsListen, c.E2BPorts, c.E2BDomain = "127.0.0.1:0", []uint16{3000}, "sandboxes.example.com"
	})
	var sb struct {
		SandboxID          string `json:"sandboxID"`
		EnvdAccessToken    string `json:"envdAccessToken"`
		TrafficAccessToken string `json:"trafficAccessToken"`
	}
	st, raw := env.Control(t, "POST", "/sandboxes", map[string]any{"templateID": "base", "timeout": 120,
		"metadata": map[string]string{"ironclaw.ports": "3001", "app": "web"}}, &sb)
	if st != http.StatusCreated {
		t.Fatalf("create: %d %s", st, raw)
	}
	t.Cleanup(func() { env.Control(t, "DELETE", "/sandboxes/"+sb.SandboxID, nil, nil) })
	if s := native(t, env, sb.SandboxID); s.Labels["ironclaw.ports"] != "" || s.Labels["app"] != "web" {
		t.Fatalf("labels %v", s.Labels)
	}
	if _, err := env.Agent.Exec(context.Background(), sb.SandboxID, client.ExecRequest{Cmd: echoServer}); err != nil {
		t.Fatal(err)
	}
	get := func(port, token string, byHost bool) (int, string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			req, _ := http.NewRequest("GET", env.BaseURL+"/some/path?q=1", nil)
			if byHost {
				req, _ = http.NewRequest("GET", "http://"+env.Addr+"/some/path?q=1", nil)
				req.Host = port + "-" + sb.SandboxID + ".sandboxes.example.com"
			} else {
				req.Header.Set("E2b-Sandbox-Id", sb.SandboxID)
				req.Header.Set("E2b-Sandbox-Port", port)
			}
			if token != "" {
				req.Header.Set("E2B-Traffic-Access-Token", token)
			}
			req.Header.Set("X-Access-Token", sb.EnvdAccessToken)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			_, _ = io.Copy(&b, res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusBadGateway || time.Now().After(deadline) {
				return res.StatusCode, b.String()
			}
		}
	}
	want := "line=[GET /some/path?q=1 HTTP/1.1] token=[]\n"
	if code, body := get("3001", sb.TrafficAccessToken, false); code != 200 || body != want {
		t.Fatalf("by header: %d %q", code, body)
	}
	if code, body := get("3001", sb.TrafficAccessToken, true); code != 200 || body != want {
		t.Fatalf("by host: %d %q", code, body)
	}
	// A port the sandbox did not declare is refused by the native API.
	if code, body := get("4000", sb.TrafficAccessToken, false); code < 400 || code == http.StatusBadGateway {
		t.Fatalf("undeclared port: %d %q", code, body)
	}
}

// A snapshot (the native copy of /workspace) is a template a create may
// name: the new sandbox starts with the snapshot's files. The SDKs delete
// it as a template.
func TestSnapshots(t *testing.T) {
	env := e2btest.Start(t, nil)
	ctx := context.Background()
	src := env.Create(t, nil)
	if err := env.Agent.PutFile(ctx, src.SandboxID, "/workspace/f", strings.NewReader("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	var sn struct {
		SnapshotID string   `json:"snapshotID"`
		Names      []string `json:"names"`
	}
	if st, raw := env.Control(t, "POST", "/sandboxes/"+src.SandboxID+"/snapshots", map[string]any{}, &sn); st != http.StatusCreated || !strings.HasPrefix(sn.SnapshotID, "snap-") || len(sn.Names) != 1 {
		t.Fatalf("snapshot: %d %s", st, raw)
	}
	var all []map[string]any
	if st, raw := env.Control(t, "GET", "/snapshots?sandboxID="+src.SandboxID, nil, &all); st != 200 || len(all) != 1 || all[0]["snapshotID"] != sn.SnapshotID {
		t.Fatalf("list: %d %s", st, raw)
	}
	fork := env.Create(t, map[string]any{"templateID": sn.SnapshotID, "timeout": 60})
	var b strings.Builder
	if err := env.Agent.GetFile(ctx, fork.SandboxID, "/workspace/f", &b); err != nil || b.String() != "kept" {
		t.Fatalf("the fork's file: %q %v", b.String(), err)
	}
	if fork.TemplateID != "base" {
		t.Fatalf("the fork's template: %q", fork.TemplateID)
	}
	if st, raw := env.Control(t, "DELETE", "/templates/"+sn.SnapshotID, nil, nil); st != http.StatusNoContent {
		t.Fatalf("delete: %d %s", st, raw)
	}
	st, raw := env.Control(t, "DELETE", "/templates/"+sn.SnapshotID, nil, nil)
	wantError(t, 404, raw, st)
	st, raw = env.Control(t, "POST", "/sandboxes", map[string]any{"templateID": sn.SnapshotID, "timeout": 60}, nil)
	wantError(t, 404, raw, st)
	st, raw = env.Control(t, "DELETE", "/templates/base", nil, nil)
	wantError(t, 501, raw, st)
}

// E2B's volumes are native volumes: made, listed, mounted by a create's
// volumeMounts (their files outlive the sandbox), deleted; another
// agent's is not found.
func TestVolumes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("volumes need root (loop devices)")
	}
	env := e2btest.Start(t, func(c *e2btest.Config) { e2btest.AddAgent(t, c, "other") })
	ctx := context.Background()
	var v struct{ VolumeID, Name string }
	if st, raw := env.Control(t, "POST", "/volumes", map[string]any{"name": "notes"}, &v); st != http.StatusCreated || v.VolumeID != "notes" || v.Name != "notes" {
		t.Fatalf("create: %d %s", st, raw)
	}
	var list []struct{ VolumeID, Name string }
	if st, raw := env.Control(t, "GET", "/volumes", nil, &list); st != http.StatusOK || len(list) != 1 || list[0].Name != "notes" {
		t.Fatalf("list: %d %s", st, raw)
	}
	if n, err := env.Agent.GetVolume(ctx, "notes"); err != nil || n.SizeBytes != 1<<30 {
		t.Fatalf("native: %+v %v", n, err)
	}
	mount := map[string]any{"templateID": "base", "timeout": 60, "volumeMounts": []map[string]string{{"name": "notes", "path": "/workspace/notes"}}}
	first := env.Create(t, mount)
	if err := env.Agent.PutFile(ctx, first.SandboxID, "/workspace/notes/a", strings.NewReader("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st, raw := env.Control(t, "DELETE", "/sandboxes/"+first.SandboxID, nil, nil); st != http.StatusNoContent {
		t.Fatalf("kill: %d %s", st, raw)
	}
	second := env.Create(t, mount)
	var got strings.Builder
	if err := env.Agent.GetFile(ctx, second.SandboxID, "/workspace/notes/a", &got); err != nil || got.String() != "kept" {
		t.Fatalf("the second sandbox reads %q, %v", got.String(), err)
	}
	other := *env
	other.APIKey = env.AgentKey(t, "other")
	if st, raw := other.Control(t, "GET", "/volumes/notes", nil, nil); st != http.StatusNotFound {
		t.Fatalf("another agent's volume: %d %s", st, raw)
	}
	// Mounted in a running sandbox, it cannot go; free, it can.
	if st, _ := env.Control(t, "DELETE", "/volumes/notes", nil, nil); st != http.StatusConflict {
		t.Fatalf("delete while mounted: %d, want 409", st)
	}
	env.Control(t, "DELETE", "/sandboxes/"+second.SandboxID, nil, nil)
	if st, raw := env.Control(t, "DELETE", "/volumes/notes", nil, nil); st != http.StatusNoContent {
		t.Fatalf("delete: %d %s", st, raw)
	}
	if st, _ := env.Control(t, "GET", "/volumes/notes", nil, nil); st != http.StatusNotFound {
		t.Fatalf("after delete: %d", st)
	}
}
