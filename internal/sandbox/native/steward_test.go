package native_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside/boot"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside/steward"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// stewardRuntime is the shared native runtime, which must have the
// steward where the sandbox is required (IRONCLAW_REQUIRE_SANDBOX, as in
// CI, whose .ci/run installs a C compiler).
func stewardRuntime(t *testing.T) *native.Runtime {
	t.Helper()
	r := sandboxtest.Native(t)
	if !r.HasSteward() {
		_, why := sandboxtest.Steward()
		if os.Getenv("IRONCLAW_REQUIRE_SANDBOX") != "" {
			t.Fatalf("no steward, and IRONCLAW_REQUIRE_SANDBOX is set: %v", why)
		}
		t.Skipf("no steward: %v", why)
	}
	return r
}

// pid1 is what pid 1 of b is: its argv[0] and how many threads it holds.
func pid1(b *sandboxtest.Box) (string, int) {
	b.T.Helper()
	o := b.Sh(`tr '\0' '\n' </proc/1/cmdline | head -n 1; sed -n 's/^Threads:[[:space:]]*//p' /proc/1/status`)
	f := strings.Fields(o.Stdout)
	if len(f) != 2 {
		b.T.Fatalf("pid 1: %q", o.Stdout)
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		b.T.Fatal(err)
	}
	return f[0], n
}

// awaitPid1 waits until pid 1 of b is argv0, for up to the agent's idle
// time and a margin.
// stewardName is the steward's argv[0] once the Go agent hands pid 1 to
// it; started as the init, it keeps the init's (native's stewardInitArgv).
const stewardName = "ironclaw-steward"

func isSteward(name string) bool { return name == stewardName || name == "ironclaw-steward-init" }

func awaitPid1(b *sandboxtest.Box, argv0 string) {
	b.T.Helper()
	deadline := time.Now().Add(steward.IdleBeforeSteward + 5*time.Second)
	for {
		got, _ := pid1(b)
		if got == argv0 || argv0 == stewardName && isSteward(got) {
			return
		}
		if time.Now().After(deadline) {
			b.T.Fatalf("pid 1 is %s, want %s", got, argv0)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCInitBuildsTheSandbox: by default (no Options.GoInit) a fresh sandbox's pid 1
// is the steward from the start (no Go runtime ever ran in it), one
// thread, sealed, uid 65532; a file operation still works (the Go agent
// takes pid 1 for it).
func TestCInitBuildsTheSandbox(t *testing.T) {
	rt := stewardRuntime(t)
	if sandboxtest.NativeOptions().GoInit {
		t.Skip("IRONCLAW_TEST_C_INIT=off")
	}
	b := sandboxtest.New(t, rt, sandbox.Spec{})
	if name, threads := pid1(b); name != "ironclaw-steward-init" || threads != 1 {
		t.Fatalf("a fresh pid 1 is %s with %d threads, want the C init with 1", name, threads)
	}
	o := b.Sh(`grep -E '^(NoNewPrivs|Seccomp|CapBnd|CapEff|CapPrm|CapInh|CapAmb|Uid):' /proc/1/status`).Stdout
	for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2", "CapBnd:\t0000000000000000", "CapEff:\t0000000000000000", "CapInh:\t0000000000000000", "CapAmb:\t0000000000000000", "Uid:\t65532"} {
		if !strings.Contains(o, want) {
			t.Errorf("pid 1's status lacks %q:\n%s", want, o)
		}
	}
	if err := b.SB.WriteFile(context.Background(), "/workspace/x", strings.NewReader("hi"), 0o644); err != nil {
		t.Fatalf("a file operation after the C init: %v", err)
	}
	if got := b.Sh(`cat /workspace/x`).Stdout; got != "hi" {
		t.Fatalf("read back %q", got)
	}
}

// TestGoInitWhenAsked: Options.GoInit puts every sandbox back on the Go
// init, which stays pid 1 until its StewardAfter.
func TestGoInitWhenAsked(t *testing.T) {
	stewardRuntime(t)
	path, _ := sandboxtest.Steward()
	rt := sandboxtest.NewNative(t, native.Options{Steward: path, StewardAfter: time.Hour, GoInit: true})
	b := sandboxtest.New(t, rt, sandbox.Spec{})
	if name, threads := pid1(b); name != boot.Arg0 || threads < 2 {
		t.Fatalf("pid 1 is %s with %d threads, want the Go init", name, threads)
	}
}

// TestStewardIsTheIdlePid1: soon after a sandbox is ready
// (steward.FirstHandover) its pid 1 is the steward: one thread, still
// sealed as the Go init left it.
func TestStewardIsTheIdlePid1(t *testing.T) {
	b := sandboxtest.New(t, stewardRuntime(t), sandbox.Spec{})
	awaitPid1(b, stewardName)
	name, threads := pid1(b)
	if !isSteward(name) || threads != 1 {
		t.Fatalf("pid 1 is %s with %d threads, want the steward with 1", name, threads)
	}
	o := b.Sh(`grep -E '^(NoNewPrivs|Seccomp|CapBnd|CapEff|Uid):' /proc/1/status`)
	for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2", "CapBnd:\t0000000000000000", "CapEff:\t0000000000000000", "Uid:\t65532\t65532\t65532\t65532"} {
		if !strings.Contains(o.Stdout, want) {
			t.Errorf("pid 1's status lacks %q:\n%s", want, o.Stdout)
		}
	}
	// Not dumpable again after its execve: its descriptors (the control
	// socket, the programs) are out of the commands' reach.
	if o := b.Sh(`ls /proc/1/fd 2>&1; readlink /proc/1/exe 2>&1; echo end`); strings.Contains(o.Stdout, "socket:") || strings.Contains(o.Stdout, "ironclaw") {
		t.Fatalf("a command reaches pid 1's descriptors:\n%s", o.Stdout)
	}
}

// TestStewardHandsOverRunningCommands: pid 1 goes from the steward to the
// Go agent for a file operation and back once idle, and the commands
// started by either are still signalled and reaped by the other.
func TestStewardHandsOverRunningCommands(t *testing.T) {
	b := sandboxtest.New(t, stewardRuntime(t), sandbox.Spec{})
	awaitPid1(b, stewardName)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Started by the steward, killed by the steward after two handovers.
	long := make(chan sandboxtest.Output, 1)
	go func() { long <- b.ExecCtx(ctx, sandbox.ExecRequest{Argv: []string{"sleep", "600"}}) }()
	// Started by the steward, exits while the Go agent is pid 1.
	short := make(chan sandboxtest.Output, 1)
	go func() { short <- b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 1; exit 3"}}) }()
	waitFor(t, func() bool {
		return strings.Count(b.Sh(`cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' ' '`).Stdout, "sleep ") >= 2
	})

	if err := b.SB.WriteFile(context.Background(), "/workspace/handover", strings.NewReader("across"), 0o644); err != nil {
		t.Fatal(err)
	}
	if name, _ := pid1(b); name != steward.ResumeArg0 {
		t.Fatalf("pid 1 is %s after a file operation, want the Go agent", name)
	}
	// Started by the Go agent, exits once the steward is back.
	late := make(chan sandboxtest.Output, 1)
	go func() {
		late <- b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep " + strconv.Itoa(int(steward.IdleBeforeSteward/time.Second)+2) + "; exit 5"}})
	}()
	if o := <-short; o.Err != nil || o.Res.ExitCode != 3 {
		t.Fatalf("the command that exited under the Go agent: %+v", o)
	}
	awaitPid1(b, stewardName)
	if o := <-late; o.Err != nil || o.Res.ExitCode != 5 {
		t.Fatalf("the command that exited under the steward: %+v", o)
	}
	cancel()
	if o := <-long; o.Res.Signal != int(syscall.SIGKILL) {
		t.Fatalf("the command started before both handovers was not killed: %+v", o)
	}
	var got bytes.Buffer
	if err := b.SB.ReadFile(context.Background(), "/workspace/handover", &got); err != nil || got.String() != "across" {
		t.Fatalf("read back %q, %v", got.String(), err)
	}
}

// TestStewardAnswersLikeTheGoAgent: what can go wrong in a start reads the
// same from the steward as from the Go agent.
func TestStewardAnswersLikeTheGoAgent(t *testing.T) {
	b := sandboxtest.New(t, stewardRuntime(t), sandbox.Spec{})
	awaitPid1(b, stewardName)
	cases := []struct {
		req  sandbox.ExecRequest
		want error
		code int
		text string
	}{
		{sandbox.ExecRequest{Argv: []string{"no-such-command"}}, sandbox.ErrCommandNotFound, 127, "no-such-command: no such file or directory"},
		{sandbox.ExecRequest{Argv: []string{"/workspace"}}, sandbox.ErrNotExecutable, 126, "/workspace: is a directory"},
		{sandbox.ExecRequest{Argv: []string{"/etc/passwd"}}, sandbox.ErrNotExecutable, 126, "/etc/passwd: permission denied"},
		{sandbox.ExecRequest{Argv: []string{"true"}, Cwd: "/workspace/none"}, sandbox.ErrNotExecutable, 126, "working directory /workspace/none does not exist"},
	}
	for _, tc := range cases {
		o := b.Exec(tc.req)
		if !errors.Is(o.Err, tc.want) || o.Res.ExitCode != tc.code || !strings.Contains(o.Err.Error(), tc.text) {
			t.Errorf("%q: exit %d, %v; want %d, %v with %q", tc.req.Argv, o.Res.ExitCode, o.Err, tc.code, tc.want, tc.text)
		}
	}
	if name, _ := pid1(b); !isSteward(name) {
		t.Fatalf("pid 1 is %s, want the steward to have answered", name)
	}
	// Arguments and environment cross as the daemon encodes them: quotes,
	// escapes, non-ASCII, and JSON's own escapes of <, > and &.
	arg := "a \"quoted\" \\ <b>&\t\u00e9\u2028\U0001F600"
	o := b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", `printf '%s|%s' "$1" "$X"`, "sh", arg}, Env: []string{"X=" + arg}})
	if o.Err != nil || o.Stdout != arg+"|"+arg {
		t.Fatalf("got %q, %v; want %q", o.Stdout, o.Err, arg+"|"+arg)
	}
}

// TestStewardKeepsAGatedSandboxOnTheGoAgent: the steward has no gate
// table, so a sandbox with gated programs keeps the Go agent as pid 1.
func TestStewardKeepsAGatedSandboxOnTheGoAgent(t *testing.T) {
	b := sandboxtest.New(t, stewardRuntime(t), sandbox.Spec{Gate: []string{"tac"}})
	if name, _ := pid1(b); name != boot.Arg0 {
		t.Fatalf("pid 1 of a gated sandbox is %s, want the Go init", name)
	}
}

// TestStewardRefusesOutsideASealedSandbox runs both new pid 1 entries on
// the host: the Go agent's resume and the steward itself must refuse
// before doing anything.
func TestStewardRefusesOutsideASealedSandbox(t *testing.T) {
	path, why := sandboxtest.Steward()
	if path == "" {
		t.Skip(why)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		exe  string
		argv []string
	}{
		{self, []string{steward.ResumeArg0, "ctl=0", "steward=0", "agent=0"}},
		{path, []string{"ironclaw-steward", "ctl=0", "steward=0", "agent=0"}},
		{path, []string{"ironclaw-steward", "ctl=0", "steward=0", "agent=0", "run=1:1"}},
		// the C init: as root in a new pid namespace of the host's user
		// namespace, its mounts would land on the host's directories
		{path, []string{"ironclaw-steward-init"}},
	} {
		for _, sys := range []*syscall.SysProcAttr{{}, {Cloneflags: syscall.CLONE_NEWPID}} {
			if sys.Cloneflags != 0 && os.Geteuid() != 0 {
				continue
			}
			cmd := exec.Command(tc.exe)
			cmd.Args = tc.argv
			cmd.Env = []string{}
			cmd.SysProcAttr = sys
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 || !strings.Contains(stderr.String(), "refused") {
				t.Fatalf("%s ran (new pid ns %v): %v, stderr %q", tc.argv[0], sys.Cloneflags != 0, err, stderr.String())
			}
		}
	}
}

// waitFor polls cond for up to ten seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}

// TestReplacedInitIsRefused: an init binary replaced on disk since the
// Runtime started (an upgrade: perhaps another wire protocol) is neither
// executed by a create (the Go init) nor handed to the C init as its Go
// agent; a create says why instead.
func TestReplacedInitIsRefused(t *testing.T) {
	stewardRuntime(t)
	src := os.Getenv("IRONCLAW_TEST_INIT_EXE")
	if src == "" {
		var err error
		if src, err = os.Executable(); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, goInit := range []bool{false, true} {
		dir := t.TempDir()
		exe := dir + "/init"
		if err := os.WriteFile(exe, data, 0o755); err != nil {
			t.Fatal(err)
		}
		path, _ := sandboxtest.Steward()
		rt := sandboxtest.NewNative(t, native.Options{Exe: exe, Steward: path, StewardAfter: time.Hour, GoInit: goInit})
		ctx := context.Background()
		sb, err := rt.Create(ctx, sandbox.Spec{})
		if err != nil {
			t.Fatalf("GoInit %v: create before the replacement: %v", goInit, err)
		}
		sb.Destroy(ctx)
		if err := os.WriteFile(dir+"/new", data, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(dir+"/new", exe); err != nil {
			t.Fatal(err)
		}
		sb, err = rt.Create(ctx, sandbox.Spec{})
		if err == nil {
			sb.Destroy(ctx)
			t.Fatalf("GoInit %v: a create with the init replaced underneath succeeded", goInit)
		}
		if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "changed since this runtime started") {
			t.Fatalf("GoInit %v: %v", goInit, err)
		}
	}
}
