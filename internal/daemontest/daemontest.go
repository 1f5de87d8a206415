// Package daemontest runs an ironclaw daemon inside a test: on a free
// loopback port, with its audit key and checkpoints in the test's temp
// tree, stopped (and its error reported) when the test ends. It gives
// clients holding the tokens the daemon wrote, and the calls such tests
// repeat: create a sandbox, read the audit log once it verifies, send a
// raw request with a token. Only tests import it.
//
// It does not import package daemon, so that package's own tests can use
// it too: the caller hands Start the daemon's Run with a Config built from
// the pieces here (a loopback listen address, Custody, InitExe) and the
// ready function Start passes in.
package daemontest

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
)

// Listen is the address a test daemon listens on: a free loopback port.
const Listen = "127.0.0.1:0"

// startWithin and stopWithin bound a daemon's start and stop, so that a
// broken one fails the test instead of hanging it.
const (
	startWithin = 60 * time.Second
	stopWithin  = 60 * time.Second
)

// NeedSandbox skips the test when this host cannot run sandboxes (not
// root and no user namespaces), unless IRONCLAW_REQUIRE_SANDBOX=1 (CI),
// where the test goes on and fails.
func NeedSandbox(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 && os.Getenv("IRONCLAW_REQUIRE_SANDBOX") != "1" {
		if err := native.CheckUserNamespaces(); err != nil {
			t.Skipf("no sandboxes here: %v", err)
		}
	}
}

// InitExe is the sandbox init binary a test daemon should use:
// $IRONCLAW_TEST_INIT_EXE (a cgo-free build, for -race runs), else ""
// (the test binary itself).
func InitExe() string { return os.Getenv("IRONCLAW_TEST_INIT_EXE") }

// Custody is where a test daemon on dir keeps its audit key and
// checkpoints: beside the data dir (outside it, as the daemon insists),
// the same for every start on dir, and inside the test's temp tree, so no
// test writes the host's /etc/ironclaw or /var/log/ironclaw.
func Custody(dir string) (key, checkpoints string) {
	c := filepath.Clean(dir) + ".custody"
	return filepath.Join(c, "audit.key"), filepath.Join(c, "checkpoints.jsonl")
}

// Daemon is a daemon started by Start.
type Daemon struct {
	Addr string // host:port it listens on

	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// Start runs run in a goroutine with a context that Stop cancels and a
// ready function that run must call with the address it listens on (the
// daemon's Config.Ready). It returns once ready is called, and fails the
// test if run returns first or a minute passes. The daemon is stopped
// when the test ends.
func Start(t testing.TB, run func(ctx context.Context, ready func(addr string)) error) *Daemon {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	d := &Daemon{cancel: cancel, done: make(chan error, 1)}
	go func() { d.done <- run(ctx, func(addr string) { ready <- addr }) }()
	select {
	case d.Addr = <-ready:
	case err := <-d.done:
		cancel()
		t.Fatalf("daemon did not start: %v", err)
	case <-time.After(startWithin):
		cancel()
		t.Fatalf("daemon did not start within %v", startWithin)
	}
	t.Cleanup(func() { d.Stop(t) })
	return d
}

// Stop cancels the daemon's context and waits for it to return; an error
// it returns, or a daemon still running after a minute, fails the test.
// Later calls do nothing.
func (d *Daemon) Stop(t testing.TB) {
	t.Helper()
	d.once.Do(func() {
		d.cancel()
		select {
		case err := <-d.done:
			if err != nil {
				t.Errorf("daemon: %v", err)
			}
		case <-time.After(stopWithin):
			t.Errorf("daemon did not stop within %v", stopWithin)
		}
	})
}

// Token returns the token in the file name (agent.token, operator.token,
// ...) of the data directory dir.
func Token(t testing.TB, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// Client is a client of the daemon at addr with the agent's token, or the
// operator's, from the data directory dir.
func Client(t testing.TB, addr, dir string, operator bool) *client.Client {
	t.Helper()
	name := client.AgentTokenFile
	if operator {
		name = client.OperatorTokenFile
	}
	return &client.Client{Addr: addr, DataDir: dir, Token: Token(t, dir, name)}
}

// CreateSandbox creates a sandbox with the daemon's defaults through cl,
// failing the test if it cannot.
func CreateSandbox(t testing.TB, cl *client.Client) client.Sandbox {
	t.Helper()
	sb, err := cl.CreateSandbox(context.Background(), client.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// VerifiedAudit checks through op (an operator's client) that the
// daemon's audit log verifies, then returns its first 1000 records.
func VerifiedAudit(t testing.TB, op *client.Client) []client.AuditRecord {
	t.Helper()
	ctx := context.Background()
	v, err := op.AuditVerify(ctx)
	if err != nil || !v.OK {
		t.Fatalf("verify: %+v %v", v, err)
	}
	recs, err := op.AuditTail(ctx, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// Do sends a request with the bearer token and body ("" for none) to url
// and returns the status and the answer's body. A request that cannot be
// sent fails the test.
func Do(t testing.TB, method, url, token, body string) (status int, answer []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	answer, _ = io.ReadAll(resp.Body)
	return resp.StatusCode, answer
}
