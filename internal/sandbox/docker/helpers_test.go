package docker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/docker"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside/agent"
)

// The test binary is also the in-sandbox helper: every sandbox binds it at
// wire.HelperPath, as the daemon binds itself.
func TestMain(m *testing.M) {
	if agent.IsHelper() {
		agent.Main()
	}
	code := m.Run()
	closeRuntime()
	os.Exit(code)
}

// IRONCLAW_DOCKER_RUNTIME names the Docker runtime the suite runs on
// (e.g. runsc, registered in /etc/docker/daemon.json); unset is dockerd's
// default.

// runsc reports whether the suite runs on gVisor.
func runsc() bool { return os.Getenv("IRONCLAW_DOCKER_RUNTIME") == "runsc" }

// required reports whether an unreachable Docker fails the tests instead
// of skipping them (IRONCLAW_REQUIRE_DOCKER=1, for CI hosts that run
// dockerd).
func required() bool { return os.Getenv("IRONCLAW_REQUIRE_DOCKER") == "1" }

var (
	rtOnce   sync.Once
	rt       *docker.Runtime
	rtErr    error
	stateDir string
)

func closeRuntime() {
	if rt != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
	}
	if stateDir != "" {
		os.RemoveAll(stateDir)
	}
}

func logf(f string, a ...any) {
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "docker: "+f+"\n", a...)
	}
}

// runtimeFor returns the shared Runtime, or skips (fails when
// IRONCLAW_REQUIRE_DOCKER=1) with the reason it cannot run here.
func runtimeFor(t testing.TB) *docker.Runtime {
	t.Helper()
	rtOnce.Do(func() {
		if os.Geteuid() != 0 {
			rtErr = fmt.Errorf("%w: the docker tests run as root (the state directory holds the daemon's sockets)", sandbox.ErrUnsupported)
			return
		}
		stateDir = filepath.Join(os.TempDir(), fmt.Sprintf("ironclaw-docker-test-%d", os.Getpid()))
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		rt, rtErr = docker.New(ctx, docker.Options{StateDir: stateDir, Runtime: os.Getenv("IRONCLAW_DOCKER_RUNTIME"), Logf: logf})
	})
	if rtErr != nil {
		if required() || !errors.Is(rtErr, sandbox.ErrUnsupported) {
			t.Fatalf("docker runtime: %v", rtErr)
		}
		t.Skipf("docker cannot run here: %v (set IRONCLAW_REQUIRE_DOCKER=1 to fail instead)", rtErr)
	}
	return rt
}

type box struct {
	t  testing.TB
	sb *docker.Sandbox
}

func newBox(t testing.TB, spec sandbox.Spec) *box {
	t.Helper()
	r := runtimeFor(t)
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
	return &box{t: t, sb: sb.(*docker.Sandbox)}
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
