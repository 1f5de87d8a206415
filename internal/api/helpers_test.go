package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ironclaw/ironclaw/internal/api/openapi"
	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/gateway"
	"github.com/ironclaw/ironclaw/internal/metrics"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/secrets"
	"github.com/ironclaw/ironclaw/internal/session"
	"github.com/ironclaw/ironclaw/internal/testutil/leakcheck"
	"github.com/ironclaw/ironclaw/internal/testutil/stack"
)

func TestMain(m *testing.M) {
	if inside.Entered() {
		inside.Main()
	}
	leakcheck.Main(m)
}

const (
	agentTok = "agent-secret-token-0123456789"
	operTok  = "operator-secret-token-9876543210"
)

// env is a real stack: native runtime, SQLite store, audit log, session
// manager, and the API over loopback HTTP.
type env struct {
	t      testing.TB
	rt     *native.Runtime
	m      *session.Manager
	log    *audit.Log
	srv    *Server
	ts     *httptest.Server
	client *http.Client
	reg    *metrics.Registry
	logs   *logSink
	// secrets is the store with envOpts.secrets.
	secrets *secrets.Store
}

type logSink struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *logSink) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf.WriteString(strings.TrimSpace(fmt.Sprintf(format, args...)) + "\n")
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

type envOpts struct {
	cfg      Config
	sess     session.Options
	poolSize int
	// spareCgroups and spareInits are the native runtime's SpareCgroups
	// and SpareInits.
	spareCgroups, spareInits int
	// gateway gives the server a real approval gateway on the same store.
	gateway bool
	// secrets gives the server and the sessions a real secrets store and
	// grants (no approvals: grant ask is refused).
	secrets bool
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	st := stack.New(t, native.Options{PoolSize: o.poolSize, SpareCgroups: o.spareCgroups, SpareInits: o.spareInits})
	rt, db, log := st.Runtime, st.Store, st.Log
	var secretStore *secrets.Store
	if o.secrets {
		secretStore, o.sess.Secrets = newSecrets(t, log)
		o.cfg.Secrets = secretStore
	}
	var srvp atomic.Pointer[Server]
	o.sess.OnEnd = func(id, state, reason string) {
		if s := srvp.Load(); s != nil {
			s.OnEnd(id, state, reason)
		}
	}
	m, err := session.New(context.Background(), rt, db, log, o.sess)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	e := &env{t: t, rt: rt, m: m, log: log, reg: metrics.NewRegistry(), logs: &logSink{}, secrets: secretStore}
	cfg := o.cfg
	cfg.AgentToken, cfg.OperatorToken = agentTok, operTok
	if cfg.RatePerSecond == 0 {
		cfg.RatePerSecond, cfg.RateBurst = 1e6, 1e6
	}
	if cfg.SandboxRatePerSecond == 0 {
		cfg.SandboxRatePerSecond, cfg.SandboxRateBurst = 1e6, 1e6
	}
	cfg.Logf = e.logs.logf
	if o.gateway {
		gw, err := gateway.New(context.Background(), gateway.Options{Store: db, Audit: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { gw.Close() })
		cfg.Gateway = gw
	}
	e.srv, err = New(cfg, m, log, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	srvp.Store(e.srv)
	e.ts = httptest.NewServer(e.srv.Handler())
	t.Cleanup(e.ts.Close)
	e.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	t.Cleanup(e.client.CloseIdleConnections)
	t.Cleanup(func() {
		if strings.Contains(e.logs.String(), "panic") && !strings.Contains(t.Name(), "Panic") {
			t.Errorf("server log has a panic:\n%s", e.logs)
		}
		for _, tok := range []string{agentTok, operTok} {
			if strings.Contains(e.logs.String(), tok) {
				t.Errorf("server log contains a token")
			}
		}
	})
	return e
}

// req sends a request; body is JSON-encoded unless it is a string or
// []byte (sent as is).
func (e *env) req(method, path, token string, body any) (*http.Response, []byte) {
	e.t.Helper()
	resp, err := e.send(context.Background(), method, path, token, body)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	if err := checkAnswer(method, path, resp, b); err != nil {
		e.t.Errorf("the answer disagrees with %s: %v", openapi.Path, err)
	}
	return resp, b
}

var apiDoc = sync.OnceValues(func() (*openapi.Document, error) { return openapi.LoadRepo(".") })

// checkAnswer holds every answer the tests read to the API's description:
// its status, content type and body (strictly: no member the document
// does not name). An answer to a route the document does not have must be
// the error shape.
func checkAnswer(method, path string, resp *http.Response, body []byte) error {
	doc, err := apiDoc()
	if err != nil {
		return err
	}
	p, _, _ := strings.Cut(path, "?")
	if _, ok := doc.Find(method, p); ok {
		return doc.CheckResponse(method, p, resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	if resp.StatusCode < 400 {
		return fmt.Errorf("%s %s: %d from a route the document does not have", method, p, resp.StatusCode)
	}
	v, err := decodeNumbers(body)
	if err != nil {
		return fmt.Errorf("%s %s: %d: %v", method, p, resp.StatusCode, err)
	}
	return doc.Validate(&openapi.Schema{Ref: "#/components/schemas/ErrorResponse"}, v, true)
}

func decodeNumbers(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	return v, dec.Decode(&v)
}

func (e *env) send(ctx context.Context, method, path, token string, body any) (*http.Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader:
		rd = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(j)
	}
	r, err := http.NewRequestWithContext(ctx, method, e.ts.URL+path, rd)
	if err != nil {
		return nil, err
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return e.client.Do(r)
}

// must sends a request and checks its status, decoding a JSON reply into
// out when out is non-nil.
func (e *env) must(status int, method, path, token string, body, out any) []byte {
	e.t.Helper()
	resp, b := e.req(method, path, token, body)
	if resp.StatusCode != status {
		e.t.Fatalf("%s %s = %d %s, want %d", method, path, resp.StatusCode, b, status)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			e.t.Fatalf("%s %s: decoding %s: %v", method, path, b, err)
		}
	}
	return b
}

// wantError checks a status and the contract's error shape.
func (e *env) wantError(status int, code, method, path, token string, body any) string {
	e.t.Helper()
	resp, b := e.req(method, path, token, body)
	if resp.StatusCode != status {
		e.t.Fatalf("%s %s = %d %s, want %d %s", method, path, resp.StatusCode, b, status, code)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		e.t.Fatalf("%s %s: content type %q", method, path, ct)
	}
	var eb wire.ErrorResponse
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
		e.t.Fatalf("%s %s: error body %s does not have the contract's shape (%v)", method, path, b, err)
	}
	if eb.Error.Code != code {
		e.t.Fatalf("%s %s: code %q (%s), want %q", method, path, eb.Error.Code, eb.Error.Message, code)
	}
	return eb.Error.Message
}

// sbx is a sandbox object with its times as sent (absent ones are ""), so
// tests can check the encoding itself; the type is wire.Sandbox.
type sbx struct {
	ID          string            `json:"id"`
	State       string            `json:"state"`
	Labels      map[string]string `json:"labels"`
	CreatedAt   string            `json:"created_at"`
	ExpiresAt   string            `json:"expires_at"`
	IdleTimeout string            `json:"idle_timeout"`
	LastUsedAt  string            `json:"last_used_at"`
	EndedAt     string            `json:"ended_at"`
	EndReason   string            `json:"end_reason"`
}

func (e *env) create(body any) sbx {
	e.t.Helper()
	var s sbx
	e.must(http.StatusCreated, "POST", "/v1/sandboxes", agentTok, body, &s)
	return s
}

// result is an exec's outcome: the ?wait=1 answer, or a stream's output
// and exit frame.
type result = wire.ExecWaitResult

// frame is one NDJSON frame of an exec stream.
type frame struct {
	Stdout *string `json:"stdout"`
	Stderr *string `json:"stderr"`
	Exit   *int    `json:"exit"`
	result
}

// execStream runs a streaming exec and returns its frames; it checks the
// stream's shape (content type, exit only in the last frame).
func (e *env) execStream(id string, body any) (frames []frame, stdout, stderr string, last result) {
	e.t.Helper()
	resp, b := e.req("POST", "/v1/sandboxes/"+id+"/exec", agentTok, body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		e.t.Fatalf("exec stream: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 16<<20)
	var out, errOut strings.Builder
	for sc.Scan() {
		var f frame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			e.t.Fatalf("frame %q: %v", sc.Bytes(), err)
		}
		if len(frames) > 0 && frames[len(frames)-1].Exit != nil {
			e.t.Fatalf("frame after the exit frame: %q", sc.Bytes())
		}
		if f.Stdout != nil {
			out.WriteString(*f.Stdout)
		}
		if f.Stderr != nil {
			errOut.WriteString(*f.Stderr)
		}
		frames = append(frames, f)
	}
	if len(frames) == 0 || frames[len(frames)-1].Exit == nil {
		e.t.Fatalf("exec stream does not end with an exit frame: %s", b)
	}
	last = frames[len(frames)-1].result
	last.Exit = *frames[len(frames)-1].Exit
	return frames, out.String(), errOut.String(), last
}

func (e *env) execWait(id string, body any) result {
	e.t.Helper()
	var r result
	e.must(200, "POST", "/v1/sandboxes/"+id+"/exec?wait=1", agentTok, body, &r)
	return r
}

func (e *env) metricsText() string {
	e.t.Helper()
	return string(e.must(200, "GET", "/metrics", "", nil, nil))
}
