// Package e2btest runs a daemon with its E2B-compatible API inside a test
// and gives the clients E2B tests use: the control API with the daemon's
// E2B key, Connect clients of envd (JSON codec, as the official SDKs)
// routed by E2b-Sandbox-Id, and the native clients to check what the
// E2B calls did (the audit log, approvals). Only tests import it.
//
// A test package that uses it must make its test binary the sandbox init
// too: its TestMain calls e2btest.Main(m).
package e2btest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemon"
	"github.com/ironclaw/ironclaw/internal/daemontest"
	"github.com/ironclaw/ironclaw/internal/e2b"
	"github.com/ironclaw/ironclaw/internal/e2b/auth"
	"github.com/ironclaw/ironclaw/internal/e2b/envd"
	"github.com/ironclaw/ironclaw/internal/e2b/envdpb/filesystem/filesystemconnect"
	"github.com/ironclaw/ironclaw/internal/e2b/envdpb/process/processconnect"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside"
	"github.com/ironclaw/ironclaw/internal/testutil/leakcheck"
)

// Main is the TestMain of a package using Start: the test binary is also
// every in-sandbox program, then the tests run under the leak check.
func Main(m *testing.M) {
	if inside.Entered() {
		inside.Main()
	}
	leakcheck.Main(m)
}

// Env is a running daemon and its E2B credentials.
type Env struct {
	Addr    string // host:port of the daemon's listener
	Dir     string // its data directory
	BaseURL string // http://Addr/e2b: E2B_API_URL and E2B_SANDBOX_URL
	APIKey  string // the contents of e2b.key
	Agent   *client.Client
	Oper    *client.Client
	HTTP    *http.Client
}

// Start runs a daemon for t; mod, if set, adjusts its Config (policy
// file, templates, domain).
func Start(t testing.TB, mod func(*daemon.Config)) *Env {
	t.Helper()
	daemontest.NeedSandbox(t)
	dir := filepath.Join(t.TempDir(), "data")
	key, cps := daemontest.Custody(dir)
	cfg := daemon.Config{
		Listen:              daemontest.Listen,
		DataDir:             dir,
		AuditKeyFile:        key,
		AuditCheckpointFile: cps,
		PoolSize:            -1,
		InitExe:             daemontest.InitExe(),
	}
	if mod != nil {
		mod(&cfg)
	}
	d := daemontest.Start(t, func(ctx context.Context, ready func(string)) error {
		cfg.Ready = ready
		return daemon.Run(ctx, cfg)
	})
	b, err := os.ReadFile(filepath.Join(dir, daemon.E2BKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	return &Env{
		Addr:    d.Addr,
		Dir:     dir,
		BaseURL: "http://" + d.Addr + e2b.Prefix,
		APIKey:  strings.TrimSpace(string(b)),
		Agent:   daemontest.Client(t, d.Addr, dir, false),
		Oper:    daemontest.Client(t, d.Addr, dir, true),
		HTTP:    &http.Client{},
	}
}

// Control sends a control API request with the E2B key and decodes a JSON
// answer into out (nil: none); it returns the status and the raw body.
func (e *Env) Control(t testing.TB, method, path string, body, out any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.BaseURL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-Key", e.APIKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := e.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 16<<20)) // an answer of ours; more is a bug
	if out != nil && res.StatusCode < 300 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
	}
	return res.StatusCode, raw
}

// Sandbox is what create and connect answer (the fields tests need).
type Sandbox struct {
	SandboxID       string  `json:"sandboxID"`
	TemplateID      string  `json:"templateID"`
	ClientID        string  `json:"clientID"`
	EnvdVersion     string  `json:"envdVersion"`
	EnvdAccessToken string  `json:"envdAccessToken"`
	Domain          *string `json:"domain"`
}

// Create creates a sandbox through the control API with body (nil: the
// base template) and fails the test unless it answers 201.
func (e *Env) Create(t testing.TB, body map[string]any) Sandbox {
	t.Helper()
	if body == nil {
		body = map[string]any{"templateID": "base", "timeout": 300}
	}
	var sb Sandbox
	if st, raw := e.Control(t, "POST", "/sandboxes", body, &sb); st != http.StatusCreated {
		t.Fatalf("create: %d %s", st, raw)
	}
	t.Cleanup(func() { e.Control(t, "DELETE", "/sandboxes/"+sb.SandboxID, nil, nil) })
	return sb
}

// CreateNative creates a sandbox through the native API as the agent
// whose token is in the data directory's file tokenFile ("agent.token", or
// "agents/NAME.token"), with req, and gives its envd access token as that
// agent's E2B principal would get it. The sandbox is destroyed when the
// test ends.
func (e *Env) CreateNative(t testing.TB, tokenFile string, req client.CreateRequest) Sandbox {
	t.Helper()
	tok := daemontest.Token(t, e.Dir, tokenFile)
	cl := &client.Client{Addr: e.Addr, DataDir: e.Dir, Token: tok}
	sb, err := cl.CreateSandbox(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = cl.DeleteSandbox(context.Background(), sb.ID) })
	return Sandbox{SandboxID: sb.ID, EnvdVersion: envd.Version, EnvdAccessToken: auth.AccessTokenFor(tok, sb.ID)}
}

// envdHeaders adds what the SDKs send to envd: the routing headers and the
// access token.
type envdHeaders struct {
	base  http.RoundTripper
	id    string
	token string
}

func (h envdHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("E2b-Sandbox-Id", h.id)
	r.Header.Set("E2b-Sandbox-Port", "49983")
	if h.token != "" {
		r.Header.Set("X-Access-Token", h.token)
	}
	return h.base.RoundTrip(r)
}

// EnvdHTTP is an HTTP client that talks to sb's envd as the SDKs do.
func (e *Env) EnvdHTTP(sb Sandbox) *http.Client {
	return &http.Client{Transport: envdHeaders{base: http.DefaultTransport, id: sb.SandboxID, token: sb.EnvdAccessToken}}
}

// Process is a Connect client of sb's process service, JSON codec.
func (e *Env) Process(sb Sandbox) processconnect.ProcessClient {
	return processconnect.NewProcessClient(e.EnvdHTTP(sb), e.BaseURL, connect.WithProtoJSON())
}

// Filesystem is a Connect client of sb's filesystem service, JSON codec.
func (e *Env) Filesystem(sb Sandbox) filesystemconnect.FilesystemClient {
	return filesystemconnect.NewFilesystemClient(e.EnvdHTTP(sb), e.BaseURL, connect.WithProtoJSON())
}

// Config is the daemon's configuration, which Start's mod adjusts (its
// tests need not import the daemon themselves).
type Config = daemon.Config

// KeyFile is the data directory's file with the default agent's E2B key.
const KeyFile = daemon.E2BKeyFile

// AddAgent adds a named agent token to c's data directory before the
// daemon starts (in Start's mod); its E2B key is then AgentKey(t, name).
func AddAgent(t testing.TB, c *Config, name string) {
	t.Helper()
	if _, err := daemon.AddAgent(c.DataDir, name); err != nil {
		t.Fatal(err)
	}
}

// AgentKey is the E2B key of the named agent (agents/NAME.e2b.key).
func (e *Env) AgentKey(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.Dir, daemon.AgentsDir, name+".e2b.key"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
