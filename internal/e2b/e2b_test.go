package e2b_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/e2b/auth"
	"github.com/ironclaw/ironclaw/internal/e2b/e2btest"
)

func TestMain(m *testing.M) { e2btest.Main(m) }

// The key file holds a key the official SDKs accept, readable by its
// owner alone; a request without it, or with another, is 401 in E2B's
// error body.
func TestKeyFileAndAuthentication(t *testing.T) {
	env := e2btest.Start(t, nil)
	if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(env.APIKey) {
		t.Fatalf("key %q is not of the form e2b_<hex>", env.APIKey)
	}
	st, err := os.Stat(filepath.Join(env.Dir, e2btest.KeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("e2b.key: %v %v", st.Mode(), err)
	}
	for _, key := range []string{"", "e2b_0000000000000000000000000000000000000000", env.APIKey + "0"} {
		req, _ := http.NewRequest("GET", env.BaseURL+"/v2/sandboxes", nil)
		if key != "" {
			req.Header.Set("X-API-Key", key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusUnauthorized {
			t.Fatalf("key %q: status %d, want 401", key, res.StatusCode)
		}
	}
	res, err := http.Get(env.BaseURL + "/health")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		t.Fatalf("health: %d", res.StatusCode)
	}
	// The native API is still where it was.
	res, err = http.Get("http://" + env.Addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("native healthz: %d", res.StatusCode)
	}
}

// An envd request without the sandbox's access token is refused before
// anything is looked up.
func TestEnvdNeedsTheAccessToken(t *testing.T) {
	env := e2btest.Start(t, nil)
	req, _ := http.NewRequest("POST", env.BaseURL+"/process.Process/List", nil)
	req.Header.Set("E2b-Sandbox-Id", "sbx-0123456789abcdef")
	req.Header.Set("X-Access-Token", "nope")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Fatalf("status %d, want 401", res.StatusCode)
	}
}

// envd's /health is what the SDKs' isRunning asks: 204 while the sandbox
// runs, 502 once it is gone; without the sandbox's token, 401.
func TestEnvdHealth(t *testing.T) {
	env := e2btest.Start(t, nil)
	sb := env.Create(t, nil)
	health := func(c *http.Client) int {
		t.Helper()
		res, err := c.Get(env.BaseURL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if st := health(env.EnvdHTTP(sb)); st != http.StatusNoContent {
		t.Fatalf("running: %d", st)
	}
	anon := sb
	anon.EnvdAccessToken = ""
	if st := health(env.EnvdHTTP(anon)); st != http.StatusUnauthorized {
		t.Fatalf("no token: %d", st)
	}
	if st, raw := env.Control(t, "DELETE", "/sandboxes/"+sb.SandboxID, nil, nil); st != http.StatusNoContent {
		t.Fatalf("kill: %d %s", st, raw)
	}
	if st := health(env.EnvdHTTP(sb)); st != http.StatusBadGateway {
		t.Fatalf("killed: %d, want 502", st)
	}
}

// The SDKs since 2.4x create and connect under /v2.
func TestV2CreateAndConnect(t *testing.T) {
	env := e2btest.Start(t, nil)
	var sb e2btest.Sandbox
	if st, raw := env.Control(t, "POST", "/v2/sandboxes", map[string]any{"templateID": "base", "timeout": 60}, &sb); st != http.StatusCreated || sb.SandboxID == "" {
		t.Fatalf("create: %d %s", st, raw)
	}
	t.Cleanup(func() { env.Control(t, "DELETE", "/sandboxes/"+sb.SandboxID, nil, nil) })
	var again e2btest.Sandbox
	if st, raw := env.Control(t, "POST", "/v2/sandboxes/"+sb.SandboxID+"/connect", map[string]any{"timeout": 60}, &again); st != http.StatusOK || again.EnvdAccessToken != sb.EnvdAccessToken {
		t.Fatalf("connect: %d %s", st, raw)
	}
}

// A signed file URL as the SDKs build it under E2B_SANDBOX_URL (at the
// listener's root, no sandbox named) gets an answer that says why.
func TestSignedURLWithoutSandboxIsExplained(t *testing.T) {
	env := e2btest.Start(t, nil)
	res, err := http.Get("http://" + env.Addr + "/files?path=/workspace/a&signature=v1_x")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "--e2b-domain") {
		t.Fatalf("%d %s", res.StatusCode, b)
	}
}

// With --e2b-domain, envd is also reached at the sandbox's own host
// (49983-<id>.<domain>), as the SDKs do without E2B_SANDBOX_URL: the
// routing headers are not needed, and the signed file URLs the SDKs
// build work there, with no token.
func TestEnvdByHost(t *testing.T) {
	const domain = "sandboxes.example.com"
	env := e2btest.Start(t, func(c *e2btest.Config) { c.E2BDomain = domain })
	sb := env.Create(t, nil)
	if err := env.Agent.PutFile(context.Background(), sb.SandboxID, "/workspace/a.txt", strings.NewReader("by host"), 0o644); err != nil {
		t.Fatal(err)
	}
	host := "49983-" + sb.SandboxID + "." + domain
	get := func(url, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", url, nil)
		req.Host = host
		if token != "" {
			req.Header.Set("X-Access-Token", token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	base := "http://" + env.Addr
	if st, body := get(base+"/health", sb.EnvdAccessToken); st != http.StatusNoContent {
		t.Fatalf("health by host: %d %s", st, body)
	}
	sig := auth.Signature("/workspace/a.txt", "read", "user", sb.EnvdAccessToken, 0)
	if st, body := get(base+"/files?path=/workspace/a.txt&username=user&signature="+url.QueryEscape(sig), ""); st != http.StatusOK || body != "by host" {
		t.Fatalf("signed download by host: %d %q", st, body)
	}
	if st, _ := get(base+"/files?path=/workspace/a.txt&username=user&signature="+url.QueryEscape(sig+"x"), ""); st != http.StatusUnauthorized {
		t.Fatalf("a bad signature by host: %d", st)
	}
	// Another domain's host is the native API's, not a sandbox's.
	req, _ := http.NewRequest("GET", base+"/healthz", nil)
	req.Host = "49983-" + sb.SandboxID + ".elsewhere.example.com"
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("another domain: %d", res.StatusCode)
	}
}
