package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fake is a stand-in daemon recording what it was asked.
type fake struct {
	t      *testing.T
	auth   []string
	bodies []string
	paths  []string
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.bodies = append(f.bodies, string(b))
	f.paths = append(f.paths, r.Method+" "+r.URL.RequestURI())
	switch {
	case r.URL.Path == "/v1/sandboxes" && r.Method == "POST":
		w.WriteHeader(201)
		w.Write([]byte(`{"id":"sbx-1","state":"running","labels":{"a":"b"},"created_at":"2026-01-02T03:04:05Z","idle_timeout":"10m0s","last_used_at":"2026-01-02T03:04:05Z"}`))
	case r.URL.Path == "/v1/sandboxes/sbx-1/exec":
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Write([]byte("{\"stdout\":\"hi\\n\"}\n{\"stderr\":\"oops\"}\n{\"exit\":3,\"duration_ms\":7,\"truncated\":true}\n"))
	case r.URL.Path == "/v1/sandboxes/sbx-2/exec":
		w.Write([]byte("{\"stdout\":\"partial\"}\n")) // the stream breaks
	case r.URL.Path == "/v1/sandboxes/sbx-1/files" && r.Method == "GET" && r.URL.Query().Get("list") == "1":
		w.Write([]byte(`{"entries":[{"name":"f","type":"file","size":5,"mode":"0644","mtime":"2026-01-02T03:04:05Z"}]}`))
	case r.URL.Path == "/v1/sandboxes/sbx-1/files" && r.Method == "GET":
		w.Write([]byte("content"))
	case r.URL.Path == "/v1/sandboxes/sbx-1/files" && r.Method == "PUT":
		w.WriteHeader(204)
	case r.URL.Path == "/v1/audit" && r.URL.Query().Get("follow") == "1":
		w.Write([]byte(`{"seq":3,"time":"t","session":"","actor":"daemon","kind":"k","data":{},"prev_hash":"p","hash":"h"}` + "\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	case r.URL.Path == "/v1/sandboxes/missing":
		w.WriteHeader(404)
		w.Write([]byte(`{"error":{"code":"not_found","message":"sandbox not found: missing"}}`))
	default:
		w.WriteHeader(502)
		w.Write([]byte("bad gateway\n"))
	}
}

func TestClientAgainstFake(t *testing.T) {
	f := &fake{t: t}
	srv := httptest.NewServer(f)
	defer srv.Close()
	ctx := context.Background()
	c := &Client{Addr: strings.TrimPrefix(srv.URL, "http://"), Token: "tok"} // host:port works
	sb, err := c.CreateSandbox(ctx, CreateRequest{Labels: map[string]string{"a": "b"}, TTL: time.Hour, Limits: Limits{Memory: "256M"}})
	if err != nil || sb.ID != "sbx-1" || sb.Labels["a"] != "b" || sb.CreatedAt.IsZero() {
		t.Fatalf("create: %+v %v", sb, err)
	}
	var body map[string]any
	json.Unmarshal([]byte(f.bodies[0]), &body)
	// Sizes go as numbers of bytes (the API's wire.Bytes), durations as Go
	// durations.
	if body["ttl"] != "1h0m0s" || body["limits"].(map[string]any)["memory"] != float64(256<<20) || body["idle"] != nil || f.auth[0] != "Bearer tok" {
		t.Errorf("create sent %s with %q", f.bodies[0], f.auth[0])
	}
	// A size or duration the daemon would refuse is refused before
	// anything is sent, with the daemon's code.
	n := len(f.bodies)
	for _, l := range []Limits{{Memory: "lots"}, {Tmp: "-1M"}, {Timeout: "soon"}, {Timeout: "-1s"}} {
		if _, err := c.CreateSandbox(ctx, CreateRequest{Limits: l}); !IsCode(err, "invalid_argument") {
			t.Errorf("create with limits %+v: %v, want invalid_argument", l, err)
		}
	}
	if len(f.bodies) != n {
		t.Errorf("a refused create was sent: %q", f.bodies[n:])
	}

	var out, errb bytes.Buffer
	res, err := c.Exec(ctx, "sbx-1", ExecRequest{Argv: []string{"x"}, Stdout: &out, Stderr: &errb})
	if err != nil || res.Exit != 3 || res.DurationMS != 7 || !res.Truncated || out.String() != "hi\n" || errb.String() != "oops" {
		t.Fatalf("exec: %+v %v %q %q", res, err, out.String(), errb.String())
	}
	if _, err := c.Exec(ctx, "sbx-2", ExecRequest{Cmd: "x"}); err == nil || !strings.Contains(err.Error(), "without an exit status") {
		t.Errorf("broken exec stream: %v", err)
	}

	if err := c.PutFile(ctx, "sbx-1", "/workspace/a b", strings.NewReader("data"), 0o640); err != nil {
		t.Fatal(err)
	}
	if last := f.paths[len(f.paths)-1]; last != "PUT /v1/sandboxes/sbx-1/files?mode=0640&path=%2Fworkspace%2Fa+b" || f.bodies[len(f.bodies)-1] != "data" {
		t.Errorf("put: %s %q", last, f.bodies[len(f.bodies)-1])
	}
	var got bytes.Buffer
	if err := c.GetFile(ctx, "sbx-1", "/workspace/f", &got); err != nil || got.String() != "content" {
		t.Errorf("get: %q %v", got.String(), err)
	}
	ents, err := c.ListFiles(ctx, "sbx-1", "/workspace")
	if err != nil || len(ents) != 1 || ents[0].Name != "f" || ents[0].Size != 5 {
		t.Errorf("list: %+v %v", ents, err)
	}

	_, err = c.GetSandbox(ctx, "missing")
	var e *Error
	if !errors.As(err, &e) || e.Status != 404 || e.Code != "not_found" || !IsCode(err, "not_found") {
		t.Errorf("missing: %#v", err)
	}
	_, err = c.ListSandboxes(ctx, map[string]string{"k": "v"})
	if !errors.As(err, &e) || e.Status != 502 || e.Code != "http_502" || e.Message != "bad gateway" {
		t.Errorf("non-JSON error: %#v", err)
	}
	if last := f.paths[len(f.paths)-1]; last != "GET /v1/sandboxes?label=k%3Dv" {
		t.Errorf("list sent %s", last)
	}

	fctx, cancel := context.WithCancel(ctx)
	var seqs []int64
	err = c.AuditFollow(fctx, 2, func(r AuditRecord) error {
		seqs = append(seqs, r.Seq)
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) || len(seqs) != 1 || seqs[0] != 3 {
		t.Errorf("follow: %v %v", seqs, err)
	}
}

func TestTokenAndAddrResolution(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvDataDir, dir)
	t.Setenv(EnvAgentToken, "")
	t.Setenv(EnvOperatorToken, "")
	t.Setenv(EnvAddr, "")
	c := &Client{}
	if c.baseURL() != DefaultAddr || c.token(agent) != "" {
		t.Errorf("empty: %q %q", c.baseURL(), c.token(agent))
	}
	os.WriteFile(filepath.Join(dir, OperatorTokenFile), []byte("op-file\n"), 0o600)
	if c.token(agent) != "op-file" || c.token(operator) != "op-file" {
		t.Errorf("operator file only: %q %q", c.token(agent), c.token(operator))
	}
	os.WriteFile(filepath.Join(dir, AgentTokenFile), []byte("agent-file\n"), 0o600)
	if c.token(agent) != "agent-file" || c.token(operator) != "op-file" {
		t.Errorf("files: %q %q", c.token(agent), c.token(operator))
	}
	t.Setenv(EnvAgentToken, "agent-env")
	t.Setenv(EnvOperatorToken, "op-env")
	t.Setenv(EnvAddr, "example.test:1/")
	if c.token(agent) != "agent-env" || c.token(operator) != "op-env" || c.baseURL() != "http://example.test:1" {
		t.Errorf("env: %q %q %q", c.token(agent), c.token(operator), c.baseURL())
	}
	c.Token = "explicit"
	if c.token(operator) != "explicit" {
		t.Error("Token field not used")
	}
	t.Setenv(EnvDataDir, "")
	t.Setenv("XDG_DATA_HOME", "/xdg")
	if DefaultDataDir() != "/xdg/ironclaw" {
		t.Errorf("DefaultDataDir = %q", DefaultDataDir())
	}
}
