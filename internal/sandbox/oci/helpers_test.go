package oci_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside/agent"
	"github.com/ironclaw/ironclaw/internal/sandbox/oci"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// The test binary is also the in-sandbox helper: every sandbox binds it at
// wire.HelperPath, as the daemon binds itself. With IRONCLAW_OCI_PROBE set it
// is a probe instead, trying one escape with exact system calls.
func TestMain(m *testing.M) {
	if name := os.Getenv("IRONCLAW_OCI_PROBE"); name != "" && !(len(os.Args) > 1 && (os.Args[1] == wire.ModeExec || os.Args[1] == wire.ModeLimit)) {
		os.Exit(runProbe(name, os.Args[1:]))
	}
	if agent.IsHelper() {
		agent.Main()
	}
	code := m.Run()
	closeRuntimes()
	os.Exit(code)
}

var runtimeNames = []string{oci.Runc, oci.Crun, oci.Runsc}

// requireOCI lists the runtimes whose absence or ErrUnsupported fails the
// tests instead of skipping them, e.g. IRONCLAW_REQUIRE_OCI=runc,runsc.
func required(name string) bool {
	return slices.Contains(strings.Split(os.Getenv("IRONCLAW_REQUIRE_OCI"), ","), name)
}

var (
	rtMu     sync.Mutex
	runtimes = map[string]*rtResult{}
	stateDir string
)

type rtResult struct {
	r   *oci.Runtime
	err error
}

func testStateDir() string {
	if stateDir == "" {
		stateDir = filepath.Join(os.TempDir(), fmt.Sprintf("ironclaw-oci-test-%d", os.Getpid()))
	}
	return stateDir
}

func closeRuntimes() {
	rtMu.Lock()
	defer rtMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, res := range runtimes {
		if res.r != nil {
			_ = res.r.Close(ctx)
		}
	}
	if stateDir != "" {
		os.RemoveAll(stateDir)
	}
}

// runtimeFor returns the shared Runtime for name, or skips (fails when
// IRONCLAW_REQUIRE_OCI names it) with the reason it cannot run here.
func runtimeFor(t testing.TB, name string) *oci.Runtime {
	t.Helper()
	if os.Geteuid() != 0 {
		if required(name) {
			t.Fatalf("%s: the oci backend needs root", name)
		}
		t.Skipf("%s: the oci backend needs root", name)
	}
	rtMu.Lock()
	res, ok := runtimes[name]
	if !ok {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		r, err := oci.New(ctx, oci.Options{Runtime: name, StateDir: testStateDir(), Logf: func(f string, a ...any) {
			if testing.Verbose() {
				fmt.Fprintf(os.Stderr, "oci: "+f+"\n", a...)
			}
		}})
		cancel()
		res = &rtResult{r, err}
		runtimes[name] = res
	}
	rtMu.Unlock()
	if res.err != nil {
		if required(name) || !errors.Is(res.err, sandbox.ErrUnsupported) {
			t.Fatalf("%s runtime: %v", name, res.err)
		}
		t.Skipf("%s cannot run here: %v (list it in IRONCLAW_REQUIRE_OCI to fail instead)", name, res.err)
	}
	return res.r
}

// eachRuntime runs f as a subtest per runtime.
func eachRuntime(t *testing.T, f func(t *testing.T, r *oci.Runtime)) {
	for _, name := range runtimeNames {
		t.Run(name, func(t *testing.T) {
			f(t, runtimeFor(t, name))
		})
	}
}

type box struct {
	t  testing.TB
	sb *oci.Sandbox
}

func newBox(t testing.TB, r *oci.Runtime, spec sandbox.Spec) *box {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return &box{t: t, sb: sb.(*oci.Sandbox)}
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
		b.t.Fatalf("sh %q: %v (stderr %q)", script, o.err, o.stderr)
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

// probe runs the test binary's probe inside the sandbox.
func (b *box) probe(name string, args ...string) execOut {
	b.t.Helper()
	o := b.exec(sandbox.ExecRequest{Argv: append([]string{wire.HelperPath}, args...), Env: []string{"IRONCLAW_OCI_PROBE=" + name}})
	if o.err != nil {
		b.t.Fatalf("probe %s: %v", name, o.err)
	}
	return o
}
