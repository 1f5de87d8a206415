package native_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside/boot"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
)

// The test binary is three programs: the tests, the sandbox init (the
// runtime re-executes /proc/self/exe), and a probe that tests bind into a
// sandbox at /probe to try escapes with exact system calls.
func TestMain(m *testing.M) {
	if boot.IsInit() {
		boot.Main()
	}
	if name := os.Getenv("IRONCLAW_PROBE"); name != "" {
		os.Exit(runProbe(name, os.Args[1:]))
	}
	if os.Getenv("IRONCLAW_TEST_DAEMON") == "1" {
		os.Exit(crashDaemon())
	}
	if os.Getenv("IRONCLAW_TEST_EXHAUST") == "1" {
		os.Exit(exhaustDaemon())
	}
	os.Exit(m.Run())
}

// requireSandbox turns "this host cannot run sandboxes" from a skip into a
// failure; CI sets it so a broken runtime can never pass as skipped.
var requireSandbox = os.Getenv("IRONCLAW_REQUIRE_SANDBOX") == "1"

var (
	rtOnce sync.Once
	rt     *native.Runtime
	rtErr  error
)

// runtimeFor returns the shared Runtime, or skips (fails under CI) with
// the reason this host cannot run sandboxes.
func runtimeFor(t testing.TB) *native.Runtime {
	t.Helper()
	rtOnce.Do(func() {
		// IRONCLAW_TEST_INIT_EXE runs the sandboxes' init from another
		// binary, so this one may be built with -race (which needs cgo).
		rt, rtErr = native.New(context.Background(), native.Options{Exe: os.Getenv("IRONCLAW_TEST_INIT_EXE")})
	})
	if rtErr != nil {
		if requireSandbox || !errors.Is(rtErr, sandbox.ErrUnsupported) {
			t.Fatalf("native runtime: %v", rtErr)
		}
		t.Skipf("this host cannot run native sandboxes: %v (set IRONCLAW_REQUIRE_SANDBOX=1 to fail instead)", rtErr)
	}
	return rt
}

// box is a sandbox under test with the probe bound at /probe.
type box struct {
	t  testing.TB
	sb sandbox.Sandbox
}

func newBox(t testing.TB, spec sandbox.Spec) *box {
	t.Helper()
	r := runtimeFor(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	spec.Mounts = append(spec.Mounts, sandbox.Mount{Source: exe, Target: "/probe", ReadOnly: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sb, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return &box{t: t, sb: sb}
}

type execOut struct {
	stdout, stderr string
	res            sandbox.ExecResult
	err            error
}

func (b *box) exec(req sandbox.ExecRequest) execOut {
	b.t.Helper()
	var out, errb bytes.Buffer
	if req.Stdout == nil {
		req.Stdout = &out
	}
	if req.Stderr == nil {
		req.Stderr = &errb
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := b.sb.Exec(ctx, req)
	return execOut{stdout: out.String(), stderr: errb.String(), res: res, err: err}
}

// sh runs a shell script and fails the test if it could not start.
func (b *box) sh(script string) execOut {
	b.t.Helper()
	o := b.exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", script}})
	if o.err != nil {
		b.t.Fatalf("sh %q: %v", script, o.err)
	}
	return o
}

// probe runs the test binary's probe inside the sandbox.
func (b *box) probe(name string, args ...string) execOut {
	b.t.Helper()
	o := b.exec(sandbox.ExecRequest{Argv: append([]string{"/probe"}, args...), Env: []string{"IRONCLAW_PROBE=" + name}})
	if o.err != nil {
		b.t.Fatalf("probe %s: %v", name, o.err)
	}
	return o
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}
