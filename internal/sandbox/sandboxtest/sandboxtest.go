// Package sandboxtest is the kit every test that runs sandboxes shares:
//
//   - Main, the TestMain of such a package: the test binary is also every
//     in-sandbox program (the native init, the container helper), and may
//     be the package's own probes;
//   - the backends' runtimes, opened once per test binary and closed when
//     it ends (Native, OCI, Docker), or one of the test's own
//     (NewNative). A host that cannot run a backend skips the test with
//     the reason, unless CI requires that backend, where the test fails:
//     IRONCLAW_REQUIRE_SANDBOX=1 (native), IRONCLAW_REQUIRE_OCI=runc,runsc
//     (the OCI runtimes listed), IRONCLAW_REQUIRE_DOCKER=1. EachOCI runs
//     a test once per OCI runtime;
//   - Box, one sandbox under test, destroyed when the test ends, and its
//     exec helpers;
//   - KillInit, which kills a sandbox's pid 1 from the host (the
//     conformance suite's Options.KillInit for every backend).
//
// Behaviour and containment checks belong in package conformance, which
// runs them once per backend; a backend's own tests keep only what is
// particular to it. Only tests import this package.
package sandboxtest

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
	"syscall"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/docker"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/oci"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// Hook is a TestMain alternative: when ok, the test binary exits with code
// instead of running the tests (a probe inside a sandbox, a daemon for a
// crash test).
type Hook func() (code int, ok bool)

// Main is the TestMain of every package whose tests run sandboxes: the
// in-sandbox programs first (inside.Main: the native init, the helper in
// one of its modes), then the hooks, then the tests, then the shared
// runtimes are closed and their state removed.
func Main(m *testing.M, hooks ...Hook) {
	if inside.Entered() && (len(os.Args) < 2 || os.Args[0] != wire.HelperPath || wire.IsHelperMode(os.Args[1])) {
		inside.Main()
	}
	for _, h := range hooks {
		if code, ok := h(); ok {
			os.Exit(code)
		}
	}
	if inside.Entered() {
		inside.Main() // the helper with a bad mode: it refuses
	}
	code := m.Run()
	closeShared()
	os.Exit(code)
}

// Probe is a Hook that runs probe(name, args) when the environment
// variable env names a probe (a test binary bound into a sandbox, or
// started there by the helper's path, to try one thing with exact system
// calls). The in-sandbox programs always win (see Main), so that a
// probe's variable cannot turn the exec front into the probe.
func Probe(env string, probe func(name string, args []string) int) Hook {
	return func() (int, bool) {
		name := os.Getenv(env)
		if name == "" {
			return 0, false
		}
		return probe(name, os.Args[1:]), true
	}
}

// Env is a Hook that runs f when the environment variable env is "1"
// (the test binary started by a test as another program: a daemon to
// crash, say).
func Env(env string, f func() int) Hook {
	return func() (int, bool) {
		if os.Getenv(env) != "1" {
			return 0, false
		}
		return f(), true
	}
}

// Required reports whether CI requires backend (native, an OCI runtime's
// name, docker) to run here, so that its absence fails the tests.
func Required(backend string) bool {
	switch backend {
	case "native":
		return os.Getenv("IRONCLAW_REQUIRE_SANDBOX") == "1"
	case "docker":
		return os.Getenv("IRONCLAW_REQUIRE_DOCKER") == "1"
	}
	return slices.Contains(strings.Split(os.Getenv("IRONCLAW_REQUIRE_OCI"), ","), backend)
}

// unavailable skips t (or fails it, when backend is Required or err is
// not sandbox.ErrUnsupported) for a backend that cannot run here.
func unavailable(t testing.TB, backend string, err error) {
	t.Helper()
	if Required(backend) || !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("%s runtime: %v", backend, err)
	}
	t.Skipf("%s cannot run here: %v (require it to fail instead: see package sandboxtest)", backend, err)
}

var shared struct {
	mu       sync.Mutex // held while a runtime opens
	runtimes map[string]*opened
	dirsMu   sync.Mutex // apart: a runtime's state directory is made while it opens
	dirs     []string
}

type opened struct {
	rt  sandbox.Runtime
	err error
}

// open returns the shared runtime called key, opening it once.
func open(t testing.TB, key, backend string, f func() (sandbox.Runtime, error)) sandbox.Runtime {
	t.Helper()
	shared.mu.Lock()
	if shared.runtimes == nil {
		shared.runtimes = map[string]*opened{}
	}
	o, ok := shared.runtimes[key]
	if !ok {
		rt, err := f()
		if err != nil {
			rt = nil // a typed nil in the interface would be closed at the end
		}
		o = &opened{rt, err}
		shared.runtimes[key] = o
	}
	shared.mu.Unlock()
	if o.err != nil {
		unavailable(t, backend, o.err)
	}
	return o.rt
}

func closeShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, o := range shared.runtimes {
		if o.rt != nil {
			_ = o.rt.Close(ctx)
		}
	}
	shared.dirsMu.Lock()
	defer shared.dirsMu.Unlock()
	for _, d := range shared.dirs {
		os.RemoveAll(d)
	}
}

// stateDir is a state directory for a shared container runtime, removed
// when the test binary ends.
func stateDir(backend string) string {
	d := filepath.Join(os.TempDir(), fmt.Sprintf("ironclaw-%s-test-%d", backend, os.Getpid()))
	shared.dirsMu.Lock()
	shared.dirs = append(shared.dirs, d)
	shared.dirsMu.Unlock()
	return d
}

// Logf is the runtimes' log: on stderr with go test -v, nowhere else.
func Logf(backend string) func(string, ...any) {
	return func(f string, a ...any) {
		if testing.Verbose() {
			fmt.Fprintf(os.Stderr, backend+": "+f+"\n", a...)
		}
	}
}

// NativeOptions are the options every test's native runtime starts from:
// IRONCLAW_TEST_INIT_EXE names a cgo-free init binary for -race builds
// (which need cgo, which the init refuses); the steward is Steward's,
// and pid 1 becomes it as soon as a sandbox is ready, so that the tests'
// commands are the steward's, unless IRONCLAW_TEST_STEWARD_AFTER names a
// delay (bench/run.sh gives the runtime's default, 250ms). Sandboxes
// start with the steward as their init, as the runtime's do by default, unless
// IRONCLAW_TEST_C_INIT=off.
func NativeOptions() native.Options {
	path, _ := Steward()
	after := time.Nanosecond
	if d, err := time.ParseDuration(os.Getenv("IRONCLAW_TEST_STEWARD_AFTER")); err == nil {
		after = d
	}
	return native.Options{Exe: os.Getenv("IRONCLAW_TEST_INIT_EXE"), Steward: path, StewardAfter: after, GoInit: os.Getenv("IRONCLAW_TEST_C_INIT") == "off"}
}

// Native is the test binary's shared native runtime.
func Native(t testing.TB) *native.Runtime {
	t.Helper()
	return open(t, "native", "native", func() (sandbox.Runtime, error) {
		return native.New(context.Background(), NativeOptions())
	}).(*native.Runtime)
}

// NewNative is a native runtime of the test's own with opts (Exe from
// NativeOptions when unset), closed when the test ends.
func NewNative(t testing.TB, opts native.Options) *native.Runtime {
	t.Helper()
	if opts.Exe == "" {
		opts.Exe = NativeOptions().Exe
	}
	if opts.Steward == "" {
		n := NativeOptions()
		opts.Steward, opts.StewardAfter = n.Steward, n.StewardAfter
		opts.GoInit = opts.GoInit || n.GoInit
	}
	rt, err := native.New(context.Background(), opts)
	if err != nil {
		unavailable(t, "native", err)
	}
	t.Cleanup(func() { rt.Close(context.Background()) })
	return rt
}

// OCIRuntimes are the OCI runtimes the tests try.
var OCIRuntimes = []string{oci.Runc, oci.Crun, oci.Runsc}

// OCIStateDir is the shared OCI runtimes' state directory.
var OCIStateDir = sync.OnceValue(func() string { return stateDir("oci") })

// OCI is the test binary's shared runtime for the OCI runtime name. The
// OCI backends need root.
func OCI(t testing.TB, name string) *oci.Runtime {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, name, fmt.Errorf("%w: the oci backend needs root", sandbox.ErrUnsupported))
	}
	return open(t, "oci-"+name, name, func() (sandbox.Runtime, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		return oci.New(ctx, oci.Options{Runtime: name, StateDir: OCIStateDir(), Logf: Logf("oci")})
	}).(*oci.Runtime)
}

// DockerRuntime is the Docker runtime the docker tests run on
// (IRONCLAW_DOCKER_RUNTIME, e.g. runsc registered in
// /etc/docker/daemon.json); "" is dockerd's default.
func DockerRuntime() string { return os.Getenv("IRONCLAW_DOCKER_RUNTIME") }

// DockerStateDir is the shared Docker runtime's state directory.
var DockerStateDir = sync.OnceValue(func() string { return stateDir("docker") })

// Docker is the test binary's shared Docker runtime. The tests run it as
// root (the state directory holds the daemon's sockets).
func Docker(t testing.TB) *docker.Runtime {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "docker", fmt.Errorf("%w: the docker tests run as root (the state directory holds the daemon's sockets)", sandbox.ErrUnsupported))
	}
	return open(t, "docker", "docker", func() (sandbox.Runtime, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		return docker.New(ctx, docker.Options{StateDir: DockerStateDir(), Runtime: DockerRuntime(), Logf: Logf("docker")})
	}).(*docker.Runtime)
}

// EachOCI runs f as a subtest per OCI runtime name.
func EachOCI(t *testing.T, f func(t *testing.T, r *oci.Runtime)) {
	for _, name := range OCIRuntimes {
		t.Run(name, func(t *testing.T) { f(t, OCI(t, name)) })
	}
}

// CreateTimeout bounds one Create in the tests (runsc and Docker are
// slower than native).
const CreateTimeout = 90 * time.Second

// ExecTimeout bounds one exec in the tests.
const ExecTimeout = 2 * time.Minute

// KillInit kills the pid 1 of sb from the host (SIGKILL), as a crash or
// the host's OOM killer would. Every backend's sandbox reports its pid 1
// (InitPid).
func KillInit(sb sandbox.Sandbox) error {
	s, ok := sb.(interface{ InitPid() int })
	if !ok {
		return fmt.Errorf("a %T does not report its pid 1", sb)
	}
	pid := s.InitPid()
	if pid <= 0 {
		return errors.New("the sandbox's pid 1 is unknown")
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

// Box is one sandbox under test.
type Box struct {
	T  testing.TB
	SB sandbox.Sandbox
}

// New creates a sandbox of spec on rt, destroyed when the test ends
// (a failed Destroy fails the test).
func New(t testing.TB, rt sandbox.Runtime, spec sandbox.Spec) *Box {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), CreateTimeout)
	defer cancel()
	sb, err := rt.Create(ctx, spec)
	if err != nil {
		t.Fatalf("%s: Create: %v", rt.Name(), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return &Box{T: t, SB: sb}
}

// With is the same sandbox under another (sub)test.
func (b *Box) With(t testing.TB) *Box { return &Box{T: t, SB: b.SB} }

// Output is what one exec left.
type Output struct {
	Stdout, Stderr string
	Res            sandbox.ExecResult
	Err            error
}

// Exec runs req (its output collected unless it sets its own writers).
func (b *Box) Exec(req sandbox.ExecRequest) Output {
	b.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ExecTimeout)
	defer cancel()
	return b.ExecCtx(ctx, req)
}

// ExecCtx is Exec under ctx.
func (b *Box) ExecCtx(ctx context.Context, req sandbox.ExecRequest) Output {
	var out, errb LockedBuffer
	if req.Stdout == nil {
		req.Stdout = &out
	}
	if req.Stderr == nil {
		req.Stderr = &errb
	}
	res, err := b.SB.Exec(ctx, req)
	return Output{Stdout: out.String(), Stderr: errb.String(), Res: res, Err: err}
}

// Sh runs a shell script and fails the test if it could not start.
func (b *Box) Sh(script string) Output {
	b.T.Helper()
	o := b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", script}})
	if o.Err != nil {
		b.T.Fatalf("sh %q: %v (stderr %q)", script, o.Err, o.Stderr)
	}
	return o
}

// Run runs argv with env on top of the sandbox's and fails the test if it
// could not start (a probe: the test binary bound or staged inside).
func (b *Box) Run(env []string, argv ...string) Output {
	b.T.Helper()
	o := b.Exec(sandbox.ExecRequest{Argv: argv, Env: env})
	if o.Err != nil {
		b.T.Fatalf("%q: %v (stderr %q)", argv, o.Err, o.Stderr)
	}
	return o
}

// Lines splits s into its non-empty lines.
func Lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// LockedBuffer is a bytes.Buffer safe for the concurrent writes of an
// exec's streams and a reader.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
