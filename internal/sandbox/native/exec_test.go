package native_test

import (
	"bytes"
	"cmp"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside/boot"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"github.com/ironclaw/ironclaw/internal/testutil/selfcopy"
)

func TestExecBehaviour(t *testing.T) {
	b := probeBox(t, sandbox.Spec{Env: []string{"FROM_SPEC=1"}})
	tests := []struct {
		name     string
		req      sandbox.ExecRequest
		stdout   string
		exit     int
		errIs    error
		contains bool
	}{
		{name: "exit code", req: sandbox.ExecRequest{Argv: []string{"sh", "-c", "exit 3"}}, exit: 3},
		{name: "not found", req: sandbox.ExecRequest{Argv: []string{"no-such-command"}}, exit: 127, errIs: sandbox.ErrCommandNotFound},
		{name: "not executable", req: sandbox.ExecRequest{Argv: []string{"/etc/passwd"}}, exit: 126, errIs: sandbox.ErrNotExecutable},
		{name: "directory", req: sandbox.ExecRequest{Argv: []string{"/usr"}}, exit: 126, errIs: sandbox.ErrNotExecutable},
		{name: "bad cwd", req: sandbox.ExecRequest{Argv: []string{"true"}, Cwd: "/nope"}, exit: 126, errIs: sandbox.ErrNotExecutable},
		{name: "stdin", req: sandbox.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader("from stdin")}, stdout: "from stdin"},
		{name: "env layers", req: sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo $FROM_SPEC $FROM_REQ $HOME $USER"}, Env: []string{"FROM_REQ=2"}}, stdout: "1 2 /workspace sandbox\n"},
		{name: "cwd default", req: sandbox.ExecRequest{Argv: []string{"pwd"}}, stdout: "/workspace\n"},
		{name: "cwd", req: sandbox.ExecRequest{Argv: []string{"pwd"}, Cwd: "/tmp"}, stdout: "/tmp\n"},
		{name: "signal exit", req: sandbox.ExecRequest{Argv: []string{"sh", "-c", "kill -TERM $$"}}, exit: 143},
		{name: "default signal dispositions", req: sandbox.ExecRequest{Argv: []string{"sh", "-c", "yes | head -c 2; grep -E '^Sig(Ign|Blk):' /proc/self/status | tr -s '\t' ' '"}},
			stdout: "y\nSigBlk: 0000000000000000\nSigIgn: 0000000000000000\n"},
		{name: "hostname", req: sandbox.ExecRequest{Argv: []string{"hostname"}}, stdout: "sandbox\n"},
		{name: "stdout reopen", req: sandbox.ExecRequest{Argv: []string{"sh", "-c", "echo via-dev >/dev/stdout"}}, stdout: "via-dev\n"},
		{name: "empty argv", req: sandbox.ExecRequest{}, errIs: sandbox.ErrInvalidRequest},
		{name: "bad env", req: sandbox.ExecRequest{Argv: []string{"true"}, Env: []string{"1BAD=x"}}, errIs: sandbox.ErrInvalidRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := b.Exec(tc.req)
			if tc.errIs != nil {
				if !errors.Is(o.Err, tc.errIs) {
					t.Fatalf("err = %v, want %v", o.Err, tc.errIs)
				}
			} else if o.Err != nil {
				t.Fatalf("err = %v", o.Err)
			}
			if o.Res.ExitCode != tc.exit {
				t.Errorf("exit = %d, want %d (stderr %q)", o.Res.ExitCode, tc.exit, o.Stderr)
			}
			if tc.stdout != "" && o.Stdout != tc.stdout {
				t.Errorf("stdout = %q, want %q", o.Stdout, tc.stdout)
			}
		})
	}
}

func TestExecConcurrent(t *testing.T) {
	b := probeBox(t, sandbox.Spec{})
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			o := b.Exec(sandbox.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("echo %d; sleep 0.2", i)}})
			if o.Err != nil || strings.TrimSpace(o.Stdout) != strconv.Itoa(i) {
				errs <- fmt.Errorf("exec %d: %q %v", i, o.Stdout, o.Err)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// More commands at once than pid 1 watches through pidfds (64): the rest
// are reported by SIGCHLD's reaper, and every exit code still reaches the
// exec it belongs to.
func TestExecExitsBeyondTheWatchedOnes(t *testing.T) {
	b := probeBox(t, sandbox.Spec{Limits: sandbox.Limits{Pids: 512}})
	const n = 90
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			o := b.Exec(sandbox.ExecRequest{Argv: []string{"sh", "-c", fmt.Sprintf("sleep 0.5; exit %d", i%50)}})
			if o.Err != nil || o.Res.ExitCode != i%50 {
				errs <- fmt.Errorf("exec %d: exit %d, %v (stderr %q)", i, o.Res.ExitCode, o.Err, o.Stderr)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A command's standard streams are blocking pipes, as programs expect:
// only the daemon's ends are non-blocking.
func TestExecStdioBlocking(t *testing.T) {
	b := probeBox(t, sandbox.Spec{})
	o := b.Exec(sandbox.ExecRequest{Argv: []string{"sh", "-c", "for fd in 0 1 2; do sed -n 's/^flags:[[:space:]]*//p' /proc/self/fdinfo/$fd; done"}})
	if o.Err != nil {
		t.Fatal(o.Err)
	}
	lines := strings.Fields(o.Stdout)
	if len(lines) != 3 {
		t.Fatalf("fdinfo flags of 0, 1, 2: %q (stderr %q)", o.Stdout, o.Stderr)
	}
	for fd, l := range lines {
		flags, err := strconv.ParseUint(l, 8, 64)
		if err != nil {
			t.Fatal(err)
		}
		if flags&syscall.O_NONBLOCK != 0 {
			t.Errorf("fd %d has O_NONBLOCK (flags %s)", fd, l)
		}
	}
}

func TestExecContextCancel(t *testing.T) {
	b := probeBox(t, sandbox.Spec{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := b.SB.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sleep", "30"}})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Fatalf("err = %v after %v", err, time.Since(start))
	}
	if o := b.Sh("echo alive"); strings.TrimSpace(o.Stdout) != "alive" {
		t.Fatal("sandbox unusable after a cancelled exec")
	}
}

func TestDirectoryRootAndWorkspace(t *testing.T) {
	// A tiny image: the host's busybox-free toolchain is not in it, so use
	// the probe (a static binary) as its only program.
	img := t.TempDir()
	exe, _ := os.Executable()
	if f, err := elf.Open(exe); err == nil {
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				f.Close()
				t.Skip("the probe must be a static binary to run in a bare image root; this test binary was built with cgo")
			}
		}
		f.Close()
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(img, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(img, "bin", "probe"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(img, "image-marker"), []byte("from image"), 0o644); err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o777); err != nil {
		t.Fatal(err)
	}
	// The trust files show under an image root too (a new top-level
	// directory; the image's own /etc is left alone).
	trust := filepath.Join(t.TempDir(), "trust")
	if err := os.Mkdir(trust, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(trust, "ca-certificates.crt"), []byte("0123456789abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := probeBox(t, sandbox.Spec{Root: sandbox.Root{Kind: sandbox.RootDirectory, Path: img}, Workspace: ws, Trust: trust})
	if o := b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/probe", sandbox.TrustBundle}, Env: []string{"IRONCLAW_PROBE=read"}}); o.Err != nil || !strings.Contains(o.Stdout, "read 13 bytes") {
		t.Fatalf("trust bundle under an image root: %q %v", o.Stdout, o.Err)
	}
	o := b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/probe", "/image-marker"}, Env: []string{"IRONCLAW_PROBE=read"}})
	if o.Err != nil || !strings.Contains(o.Stdout, "read 10 bytes") {
		t.Fatalf("image root: %q %v", o.Stdout, o.Err)
	}
	o = b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/probe", "/usr/bin/sh"}, Env: []string{"IRONCLAW_PROBE=read"}})
	if !strings.Contains(o.Stdout, "error:") {
		t.Fatalf("host /usr visible under an image root: %q", o.Stdout)
	}
	if err := b.SB.WriteFile(context.Background(), "/workspace/out.txt", strings.NewReader("result"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(got) != "result" {
		t.Fatalf("workspace dir: %q %v", got, err)
	}
}

func TestCreateRejectsBadSpecs(t *testing.T) {
	r := sandboxtest.Native(t)
	bad := []sandbox.Spec{
		{Limits: sandbox.Limits{MemoryBytes: 1024}},
		{Limits: sandbox.Limits{CPUs: -1}},
		{Root: sandbox.Root{Kind: sandbox.RootDirectory, Path: "/no/such/dir"}},
		{Root: sandbox.Root{Kind: sandbox.RootDirectory, Path: "relative"}},
		{Workspace: "/no/such/dir"},
		{Mounts: []sandbox.Mount{{Source: "/etc", Target: "/proc/x"}}},
		{Mounts: []sandbox.Mount{{Source: "/nope", Target: "/data"}}},
		{Env: []string{"NOEQUALS"}},
	}
	before := cgroupCount(t)
	for i, s := range bad {
		if _, err := r.Create(context.Background(), s); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("spec %d: err = %v, want ErrInvalidSpec", i, err)
		}
	}
	if after := cgroupCount(t); after != before {
		t.Fatalf("bad specs left cgroups behind: %d -> %d", before, after)
	}
}

// cgroupCount counts the cgroup directories of this process's sandboxes in
// every hierarchy (other processes, a benchmark say, may run their own).
func cgroupCount(t testing.TB) int {
	t.Helper()
	n := 0
	prefix := fmt.Sprintf("ic-%d.", os.Getpid())
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), prefix) {
			n++
			return filepath.SkipDir
		}
		return nil
	})
	return n
}

func TestDestroyLeavesNothing(t *testing.T) {
	r := sandboxtest.Native(t)
	before := cgroupCount(t)
	mountsBefore := hostMounts()
	sb, err := r.Create(context.Background(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	pid := sb.(*native.Sandbox).InitPid()
	// Leave work running: a background process and a session leader.
	if _, err := sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"sh", "-c", "sleep 100 & setsid sleep 100 & echo started"}}); err != nil {
		t.Fatal(err)
	}
	if cgroupCount(t) <= before {
		t.Fatalf("no cgroup for the sandbox")
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("init pid %d still exists: %v", pid, err)
	}
	if after := cgroupCount(t); after != before {
		t.Fatalf("cgroups: %d before, %d after destroy", before, after)
	}
	// Every mount was made inside the sandbox's own mount namespace.
	if after := hostMounts(); !bytes.Equal(after, mountsBefore) {
		t.Fatalf("the host's mount table changed:\n%s", after)
	}
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatalf("second Destroy: %v", err)
	}
	if _, err := sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("Exec after Destroy: %v", err)
	}
}

// TestInitRefusesOutsideFreshNamespaces runs the sandbox init entry where it
// must not run: as an ordinary child (as root and as nobody), and as pid 1 of
// namespaces whose uid 0 is host root. Each time it must exit 125 before
// touching anything.
func TestInitRefusesOutsideFreshNamespaces(t *testing.T) {
	exe := selfcopy.Path(t, "init") // the build directory is private to root
	mountsBefore := hostMounts()
	cases := []struct {
		name string
		sys  *syscall.SysProcAttr
		root bool
	}{
		{name: "unprivileged child", sys: &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}, root: true},
		{name: "plain child", sys: &syscall.SysProcAttr{}},
		{name: "pid 1 of a pid namespace, host root", sys: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}, root: true},
		{name: "userns mapping host root", sys: &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}}, GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}}}, root: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && os.Geteuid() != 0 {
				t.Skip("needs root to set up")
			}
			cmd := exec.Command(exe)
			cmd.Args = []string{boot.Arg0}
			cmd.Env = []string{}
			cmd.SysProcAttr = tc.sys
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != boot.ExitRefused || !strings.Contains(stderr.String(), "refused") {
				t.Fatalf("init ran: err %v, stderr %q", err, stderr.String())
			}
		})
	}
	if after := hostMounts(); !bytes.Equal(after, mountsBefore) {
		t.Fatal("the host's mounts changed")
	}
}

// TestInitRefusesHostRootMappedLate: the daemon writes an init's id maps
// once the init has started (idmap.go), so both inits check them again
// once their plan or Config has come. Started as the daemon starts them,
// with fresh namespaces and the control socket but maps that give it host
// root, written after the start, each must refuse before any step of its
// plan, and the host's mounts stay as they were. The refusal arrives as
// the daemon reads it: written to the control socket, which is also the
// init's standard error.
func TestInitRefusesHostRootMappedLate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to map host root")
	}
	type entry struct {
		name, exe string
		argv      []string
		send      func(*wire.Conn) error
	}
	inits := []entry{{name: "go", exe: selfcopy.Path(t, "init"), argv: []string{boot.Arg0},
		send: func(c *wire.Conn) error { return c.Send(&wire.Config{}) }}}
	if path, _ := sandboxtest.Steward(); path != "" {
		inits = append(inits, entry{name: "c", exe: path, argv: []string{"ironclaw-steward-init"},
			send: func(c *wire.Conn) error { return c.SendBytes([]byte("IRONCLAW-PLAN")) }})
	}
	mountsBefore := hostMounts()
	for _, in := range inits {
		t.Run(in.name, func(t *testing.T) {
			conn, childEnd, err := wire.Pair()
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var stderr bytes.Buffer
			conn.Stderr = func(b []byte) { stderr.Write(b) }
			cmd := exec.Command(in.exe)
			cmd.Args = in.argv
			cmd.Env = []string{}
			cmd.ExtraFiles = []*os.File{childEnd}
			cmd.Stderr = childEnd
			cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			childEnd.Close()
			for _, f := range [][2]string{{"setgroups", "allow"}, {"gid_map", "0 0 1"}, {"uid_map", "0 0 1"}} {
				if err := os.WriteFile(fmt.Sprintf("/proc/%d/%s", cmd.Process.Pid, f[0]), []byte(f[1]), 0); err != nil {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatal(err)
				}
			}
			if err := in.send(conn); err != nil {
				t.Logf("send: %v (the init may have gone already)", err)
			}
			err = cmd.Wait()
			var rep wire.Reply
			if _, rerr := conn.Recv(&rep); rerr == nil {
				t.Errorf("the init replied %+v", rep)
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 || !strings.Contains(stderr.String(), "maps host root") {
				t.Fatalf("init ran: err %v, stderr %q", err, stderr.String())
			}
		})
	}
	if after := hostMounts(); !bytes.Equal(after, mountsBefore) {
		t.Fatal("the host's mounts changed")
	}
}

// crashDaemon is the test binary as a daemon that gets SIGKILLed: it makes
// a sandbox with work running, reports it, and waits to die.
func crashDaemon() int {
	r, err := native.New(context.Background(), sandboxtest.NativeOptions())
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	sb, err := r.Create(context.Background(), sandbox.Spec{})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	go sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"sh", "-c", "sleep 1000 & sleep 1000"}})
	time.Sleep(200 * time.Millisecond)
	fmt.Println(sb.(*native.Sandbox).InitPid(), sb.ID())
	select {}
}

func TestDaemonCrashLeavesNothing(t *testing.T) {
	sandboxtest.Native(t)
	exe, _ := os.Executable()
	cmd := exec.Command(exe)
	steward, _ := sandboxtest.Steward() // "": the daemon's sandboxes get the Go init
	cmd.Env = []string{"IRONCLAW_TEST_DAEMON=1", "IRONCLAW_TEST_INIT_EXE=" + os.Getenv("IRONCLAW_TEST_INIT_EXE"), "IRONCLAW_TEST_STEWARD=" + cmp.Or(steward, "off"),
		"IRONCLAW_TEST_C_INIT=" + os.Getenv("IRONCLAW_TEST_C_INIT")}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	var id string
	if _, err := fmt.Fscan(out, &pid, &id); err != nil {
		cmd.Process.Kill()
		t.Fatalf("daemon said nothing useful: %v", err)
	}
	leftover := func() int {
		n := 0
		_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && strings.HasSuffix(d.Name(), id) {
				n++
			}
			return nil
		})
		return n
	}
	if leftover() == 0 {
		t.Fatal("sandbox cgroup not found before the crash")
	}
	cmd.Process.Kill() // SIGKILL: no cleanup code runs
	cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("sandbox init %d outlived its daemon", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The next runtime to start collects what the dead one left.
	r, err := native.New(context.Background(), native.Options{Exe: os.Getenv("IRONCLAW_TEST_INIT_EXE")})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	if n := leftover(); n != 0 {
		t.Fatalf("%d cgroup directories of the crashed daemon's sandbox remain", n)
	}
}

// hostMounts is the host's mount table without the mounts other container
// engines make and remove on their own: CI runs the Docker and OCI
// backends' tests beside these, and dockerd, runc and runsc mount under
// their own directories. A native sandbox never mounts anything in the
// host's namespace, so a leak would show anywhere else.
func hostMounts() []byte {
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	var out []byte
	for _, l := range bytes.SplitAfter(mi, []byte("\n")) {
		f := bytes.Fields(l)
		if len(f) > 4 && engineMount(string(f[4])) {
			continue
		}
		out = append(out, l...)
	}
	return out
}

func engineMount(mountPoint string) bool {
	for _, p := range []string{"/var/lib/docker", "/run/docker", "/var/run/docker", "/run/containerd", "/run/netns", "/run/runc", "/run/runsc", "/run/ironclaw"} {
		if mountPoint == p || strings.HasPrefix(mountPoint, p+"/") {
			return true
		}
	}
	return strings.Contains(mountPoint, "/ironclaw-oci-") || strings.Contains(mountPoint, "/ironclaw-docker-")
}

// terminal runs argv on a terminal in b (24x80) with stdin and resizes
// from the returned writer and channel; done gets the result.
func terminal(t *testing.T, b *sandboxtest.Box, argv ...string) (in *io.PipeWriter, resize chan sandbox.WindowSize, out *sandboxtest.LockedBuffer, done chan sandbox.ExecResult) {
	inR, in := io.Pipe()
	resize = make(chan sandbox.WindowSize, 1)
	out = &sandboxtest.LockedBuffer{}
	done = make(chan sandbox.ExecResult, 1)
	go func() {
		res, err := b.SB.Exec(context.Background(), sandbox.ExecRequest{Argv: argv, TTY: true, Stdin: inR, Stdout: out,
			WindowSize: sandbox.WindowSize{Rows: 24, Cols: 80}, Resize: resize})
		if err != nil {
			t.Errorf("exec: %v", err)
		}
		done <- res
	}()
	return in, resize, out, done
}

// A resize sent before some input takes effect before that input reaches
// the terminal: a shell asked its size right after each resize answers
// the new one. (Resize and input once ran in two goroutines, and under
// load the input could overtake the resize.)
func TestTerminalResizeBeforeInput(t *testing.T) {
	inW, resize, out, done := terminal(t, probeBox(t, sandbox.Spec{}), "sh")
	for i := 0; i < 20; i++ {
		rows := 30 + i
		resize <- sandbox.WindowSize{Rows: uint16(rows), Cols: 100}
		marker := fmt.Sprintf("size%d", i)
		if _, err := fmt.Fprintf(inW, "echo %s $(stty size)\n", marker); err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("%s %d 100", marker, rows)
		if got := waitLine(t, out, marker+" "); got != want {
			t.Fatalf("after resize %d: the shell saw %q, want %q", i, got, want)
		}
	}
	if _, err := io.WriteString(inW, "exit\n"); err != nil {
		t.Fatal(err)
	}
	<-done
}

// A resize passes while input waits for a program that reads none: the
// terminal's input queue is full and the write is held back.
func TestTerminalResizeBehindHeldInput(t *testing.T) {
	inW, resize, out, done := terminal(t, probeBox(t, sandbox.Spec{}),
		"sh", "-c", `trap 'echo winch $(stty size); exit 0' WINCH; stty raw -echo; echo ready; while :; do sleep 0.05; done`)
	waitLine(t, out, "ready")
	held := make(chan struct{})
	go func() { // more than a terminal queues: the write is held back
		_, _ = inW.Write(bytes.Repeat([]byte("x"), 1<<20))
		close(held)
	}()
	time.Sleep(100 * time.Millisecond)
	select {
	case <-held:
		t.Fatal("1 MiB of input went into a terminal nobody reads: the test holds nothing back")
	default:
	}
	resize <- sandbox.WindowSize{Rows: 50, Cols: 132}
	if got := waitLine(t, out, "winch "); got != "winch 50 132" {
		t.Fatalf("resize behind held input: %q", got)
	}
	inW.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not end after its trap")
	}
}

// waitLine returns the first whole line (ended by a newline) of out that
// holds prefix after the shell's prompt, without the prompt and the line
// end; the terminal's echo of a command line ("$ echo ...") is not one.
func waitLine(t *testing.T, out *sandboxtest.LockedBuffer, prefix string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		lines := strings.Split(out.String(), "\n")
		for _, l := range lines[:len(lines)-1] {
			if l = strings.TrimPrefix(strings.TrimRight(l, "\r"), "$ "); strings.HasPrefix(l, prefix) {
				return l
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no line starting %q in %q", prefix, out.String())
	return ""
}
