// Package conformance is the behaviour and containment suite every sandbox
// backend must pass: one contract (docs/security.md, "The sandbox walls"), the
// same checks against native, runc, crun, runsc and Docker. Backends call
// Run from their own tests with a Runtime; the checks use only the
// sandbox.Runtime interface and the shell tools of the host-toolchain view
// (sh, coreutils, getent, bash, curl or wget), so they test what a sandbox
// does, not how a backend builds it. Backend-specific mechanisms (landlock
// port rules, exact seccomp errnos, int 0x80) stay in each backend's tests.
//
// RunHostile's cases (hostile.go) try what a hostile workload would, or a
// fault: a writable or revealing /sys, device
// nodes beyond the listed ones, mknod, a setuid-root binary, reading and
// changing its own limits, a fork bomb and an OOM beside full tmpfs areas
// aimed at pid 1, pid 1 killed from the host, cut-short uploads, FIFOs in
// place of files, tmpfs sizes that do not fit the memory limit. Each
// backend runs them from its TestHostileConformance, so `go test -run
// Hostile ./...` runs them with the rest of the project's battery.
package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// Options adjust the suite for one backend.
type Options struct {
	// CreateTimeout bounds one Create (default 60 s: runsc and Docker are
	// slower than native).
	CreateTimeout time.Duration
	// UnreportedStatus lists /proc/self/status fields the backend's kernel
	// does not report (gVisor has no CapAmb or NoNewPrivs line). Each must
	// come with a behavioural check elsewhere in the suite: no_new_privs is
	// also proven by a setuid binary granting nothing.
	UnreportedStatus []string
	// KillInit kills the sandbox's pid 1 from the host (SIGKILL), as a
	// crash or the host's OOM killer would. Required.
	KillInit func(sandbox.Sandbox) error
	// InitMayDie: on this backend pid 1 has no PIDs of its own, so a fork
	// bomb may end the sandbox (Done must then close) instead of only the
	// bomb's exec.
	InitMayDie bool
	// NoOOMScore: the kernel's OOM killer never chooses among the
	// sandbox's processes (gVisor: the daemon kills the largest one, never
	// pid 1), so their oom_score_adj is not checked.
	NoOOMScore bool
	// RootCgroupMounts: the runtime leaves the mounts of the cgroup view
	// writable by root (runc's tmpfs beneath the v1 hierarchies, gVisor's
	// cgroupfs); the suite checks the sandbox user cannot write there.
	RootCgroupMounts bool
}

// Run runs the suite against rt. It sets an environment variable holding a
// random canary in this process first: a sandbox must not see it, whatever
// the backend passes along.
func Run(t *testing.T, rt sandbox.Runtime, opts Options) {
	if opts.CreateTimeout == 0 {
		opts.CreateTimeout = 60 * time.Second
	}
	s := &suite{rt: rt, opts: opts}
	canary := "sk-conformance-canary-" + randomHex(12)
	t.Setenv("OPENAI_API_KEY", canary)
	s.canary = canary
	t.Run("identity", s.identity)
	t.Run("no privileges", s.privileges)
	t.Run("read-only root", s.readOnlyRoot)
	t.Run("network is loopback only", s.network)
	t.Run("no host files or sockets", s.hostFiles)
	t.Run("no daemon secrets", s.secrets)
	t.Run("memory limit", s.memory)
	t.Run("pids limit", s.pids)
	t.Run("timeout", s.timeout)
	t.Run("background process does not hold an exec", s.background)
	t.Run("output cap", s.outputCap)
	t.Run("exit codes", s.exitCodes)
	t.Run("stdin env cwd", s.stdinEnvCwd)
	t.Run("files", s.files)
	t.Run("exposed port", s.exposedPort)
	t.Run("concurrent exec", s.concurrent)
	t.Run("sandboxes are isolated", s.isolated)
	t.Run("destroy", s.destroy)
}

// RunHostile runs the hostile cases (see the package documentation)
// against rt. Backends call it from a test named TestHostile..., so that
// `go test -run Hostile` selects them.
func RunHostile(t *testing.T, rt sandbox.Runtime, opts Options) {
	if opts.CreateTimeout == 0 {
		opts.CreateTimeout = 60 * time.Second
	}
	s := &suite{rt: rt, opts: opts}
	s.hostile(t)
}

type suite struct {
	rt     sandbox.Runtime
	opts   Options
	canary string
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// box is one sandbox of the suite, destroyed when the test ends.
type box struct {
	t  *testing.T
	sb sandbox.Sandbox
}

func (s *suite) create(t *testing.T, spec sandbox.Spec) *box {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.CreateTimeout)
	defer cancel()
	sb, err := s.rt.Create(ctx, spec)
	if err != nil {
		t.Fatalf("%s: Create: %v", s.rt.Name(), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("Destroy: %v", err)
		}
	})
	return &box{t: t, sb: sb}
}

type output struct {
	stdout, stderr string
	res            sandbox.ExecResult
	err            error
}

func (b *box) exec(req sandbox.ExecRequest) output {
	b.t.Helper()
	var out, errb bytes.Buffer
	req.Stdout, req.Stderr = &out, &errb
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := b.sb.Exec(ctx, req)
	return output{out.String(), errb.String(), res, err}
}

// sh runs a shell line and fails the test if it could not run at all.
func (b *box) sh(script string) output {
	b.t.Helper()
	o := b.exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", script}})
	if o.err != nil {
		b.t.Fatalf("exec %q: %v (stderr %q)", script, o.err, o.stderr)
	}
	return o
}

func (s *suite) identity(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	o := b.sh(`id -u; id -g; id -G; pwd; echo "$HOME"`)
	if got := o.stdout; got != "65532\n65532\n65532\n/workspace\n/workspace\n" {
		t.Fatalf("uid, gid, groups, cwd, HOME = %q", got)
	}
}

func (s *suite) privileges(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	o := b.sh(`grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status`)
	fields := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(o.stdout), "\n") {
		k, v, _ := strings.Cut(l, ":")
		fields[k] = strings.TrimSpace(v)
	}
	unreported := func(k string) bool {
		_, present := fields[k]
		return !present && slices.Contains(s.opts.UnreportedStatus, k)
	}
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		if unreported(k) {
			t.Logf("%s: not reported by this backend's /proc", k)
			continue
		}
		if fields[k] != "0000000000000000" {
			t.Errorf("%s = %q, want no capabilities", k, fields[k])
		}
	}
	if unreported("NoNewPrivs") {
		t.Log("NoNewPrivs: not reported by this backend's /proc; the setuid check below covers it")
	} else if fields["NoNewPrivs"] != "1" {
		t.Errorf("NoNewPrivs = %q", fields["NoNewPrivs"])
	}
	if fields["Seccomp"] != "2" {
		t.Errorf("Seccomp = %q, want 2 (filter)", fields["Seccomp"])
	}
	// A setuid binary grants nothing.
	o = b.sh(`for s in /usr/bin/su /bin/su /usr/bin/passwd; do [ -u "$s" ] && { "$s" -c id root </dev/null 2>&1 | head -n 2; echo "ran $s"; break; }; done; id -u`)
	if strings.Contains(o.stdout, "uid=0") || !strings.HasSuffix(o.stdout, "65532\n") {
		t.Fatalf("setuid binary: %q", o.stdout)
	}
}

func (s *suite) readOnlyRoot(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	o := b.sh(`for p in /x /etc/x /usr/x /usr/bin/x /bin/x; do touch "$p" 2>/dev/null && echo "wrote $p"; done
echo ok > /workspace/w && echo ok > /tmp/t && cat /workspace/w /tmp/t`)
	if strings.Contains(o.stdout, "wrote") || o.stdout != "ok\nok\n" {
		t.Fatalf("writes: %q (stderr %q)", o.stdout, o.stderr)
	}
}

func (s *suite) network(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	o := b.sh(`ls /sys/class/net 2>/dev/null | tr '\n' ' '; echo; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' '`)
	for _, f := range strings.Fields(o.stdout) {
		if f != "lo" {
			t.Fatalf("network interfaces besides lo: %q", o.stdout)
		}
	}
	if o = b.sh(`getent hosts example.com; echo "exit=$?"`); strings.Contains(o.stdout, "example.com") {
		t.Fatalf("DNS resolved: %q", o.stdout)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	o = b.sh(fmt.Sprintf(`timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/%[1]s' 2>/dev/null && echo "reached host loopback"
timeout 5 bash -c 'exec 3<>/dev/tcp/10.255.255.1/80' 2>/dev/null && echo "reached outside"
timeout 5 bash -c 'exec 3<>/dev/tcp/1.1.1.1/53' 2>/dev/null && echo "reached internet"
echo done`, port))
	if strings.Contains(o.stdout, "reached") || !strings.Contains(o.stdout, "done") {
		t.Fatalf("connections out: %q", o.stdout)
	}
	select {
	case <-accepted:
		t.Fatal("the host's loopback listener accepted a connection from the sandbox")
	default:
	}
}

func (s *suite) hostFiles(t *testing.T) {
	marker := filepath.Join(os.TempDir(), "ironclaw-conformance-"+randomHex(6))
	secret := "host-secret-" + randomHex(8)
	if err := os.WriteFile(marker, []byte(secret), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(marker)
	b := s.create(t, sandbox.Spec{})
	o := b.sh(fmt.Sprintf(`cat %s 2>/dev/null
for p in /var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock /root /home /var/lib; do [ -e "$p" ] && echo "exists $p"; done
find / -xdev -type s 2>/dev/null | head -n 5
grep -h %s /etc/* 2>/dev/null; echo done`, marker, secret))
	if strings.Contains(o.stdout, secret) || strings.Contains(o.stdout, "exists") || !strings.HasSuffix(o.stdout, "done\n") {
		t.Fatalf("host files inside: %q", o.stdout)
	}
	for _, l := range strings.Split(strings.TrimSuffix(o.stdout, "done\n"), "\n") {
		if l != "" && !strings.HasPrefix(l, "/.ironclaw/") {
			t.Fatalf("a socket inside the sandbox: %q", l)
		}
	}
}

func (s *suite) secrets(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	o := b.sh(`env; cat /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\0' '\n'; echo done`)
	if strings.Contains(o.stdout, s.canary) || !strings.HasSuffix(o.stdout, "done\n") {
		t.Fatal("the daemon's environment (a provider key) is visible inside the sandbox")
	}
}

func (s *suite) memory(t *testing.T) {
	b := s.create(t, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 64 << 20}})
	// The shell holds 200 MB in one variable: past the limit.
	o := b.exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo "${#x}"`}})
	if strings.Contains(o.stdout, "200000000") {
		t.Fatalf("allocated 200 MB under a 64 MiB limit: %+v", o.res)
	}
	if o.err != nil && !errors.Is(o.err, context.DeadlineExceeded) {
		t.Logf("exec error (acceptable after an OOM kill): %v", o.err)
	}
	// The sandbox survives for the next command.
	if o := b.sh(`echo alive`); o.stdout != "alive\n" {
		t.Fatalf("after the OOM: %q", o.stdout)
	}
}

func (s *suite) pids(t *testing.T) {
	b := s.create(t, sandbox.Spec{Limits: sandbox.Limits{Pids: 32}})
	// The shell gives up when a fork fails, so "all started" means no limit.
	o := b.exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", `for i in $(seq 100); do sleep 2 & done; echo all started`}})
	if strings.Contains(o.stdout, "all started") {
		t.Fatalf("started 100 processes under a limit of 32: %+v", o.res)
	}
	// Once those end, the sandbox works again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		o := b.exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo alive"}})
		if o.err == nil && o.stdout == "alive\n" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox did not recover from its pids limit: %q %v", o.stdout, o.err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (s *suite) timeout(t *testing.T) {
	b := s.create(t, sandbox.Spec{Limits: sandbox.Limits{Timeout: time.Second}})
	start := time.Now()
	o := b.exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 30 & sleep 30"}})
	if o.err != nil {
		t.Fatal(o.err)
	}
	if !o.res.TimedOut || o.res.ExitCode != 137 {
		t.Fatalf("result %+v, want TimedOut and exit 137", o.res)
	}
	if el := time.Since(start); el > 15*time.Second {
		t.Fatalf("a 1 s timeout took %v", el)
	}
	// The background sleep dies with its process group. A SIGKILL lands
	// asynchronously and pid 1 reaps a moment later, so allow a few
	// seconds and count only live (not zombie) processes.
	deadline := time.Now().Add(5 * time.Second)
	for {
		o := b.sh(`ps -eo stat=,comm= 2>/dev/null | grep -v '^Z' | grep -c ' sleep$' || true`)
		if strings.TrimSpace(o.stdout) == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the timed-out command survive: %q", o.stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A command that leaves a process running in the background returns when
// the command itself exits, not when the background process closes the
// output it inherited.
func (s *suite) background(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	start := time.Now()
	o := b.sh(`echo started; sleep 60 & echo left`)
	if o.res.ExitCode != 0 || o.res.TimedOut || o.stdout != "started\nleft\n" {
		t.Fatalf("result %+v, output %q", o.res, o.stdout)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("the exec took %v: it waited for the background process", el)
	}
}

func (s *suite) outputCap(t *testing.T) {
	b := s.create(t, sandbox.Spec{Limits: sandbox.Limits{OutputBytes: 1000}})
	o := b.sh(`head -c 100000 /dev/zero | tr '\0' a`)
	if !o.res.Truncated || len(o.stdout) > 1000 || len(o.stdout) == 0 {
		t.Fatalf("kept %d bytes, truncated=%v", len(o.stdout), o.res.Truncated)
	}
}

func (s *suite) exitCodes(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	if o := b.sh(`exit 3`); o.res.ExitCode != 3 {
		t.Fatalf("exit 3 -> %d", o.res.ExitCode)
	}
	o := b.exec(sandbox.ExecRequest{Argv: []string{"no-such-command-xyz"}})
	if !errors.Is(o.err, sandbox.ErrCommandNotFound) || o.res.ExitCode != 127 {
		t.Fatalf("missing command: %v, exit %d", o.err, o.res.ExitCode)
	}
	b.sh(`printf 'data' > /workspace/notexec`)
	o = b.exec(sandbox.ExecRequest{Argv: []string{"/workspace/notexec"}})
	if !errors.Is(o.err, sandbox.ErrNotExecutable) || o.res.ExitCode != 126 {
		t.Fatalf("non-executable file: %v, exit %d", o.err, o.res.ExitCode)
	}
}

func (s *suite) stdinEnvCwd(t *testing.T) {
	b := s.create(t, sandbox.Spec{Env: []string{"FROM_SPEC=spec"}})
	o := b.exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", `cat; echo "$FROM_SPEC $FROM_REQ"; pwd`},
		Stdin: strings.NewReader("piped\n"), Env: []string{"FROM_REQ=req"}, Cwd: "/tmp"})
	if o.err != nil || o.stdout != "piped\nspec req\n/tmp\n" {
		t.Fatalf("stdin, env, cwd: %q %v", o.stdout, o.err)
	}
}

func (s *suite) files(t *testing.T) {
	marker := filepath.Join(os.TempDir(), "ironclaw-conformance-file-"+randomHex(6))
	if err := os.WriteFile(marker, []byte("host file"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(marker)
	b := s.create(t, sandbox.Spec{})
	ctx := context.Background()
	if err := b.sb.WriteFile(ctx, "/workspace/a/b.txt", strings.NewReader("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := b.sb.ReadFile(ctx, "/workspace/a/b.txt", &got); err != nil || got.String() != "hello" {
		t.Fatalf("read back: %q %v", got.String(), err)
	}
	if o := b.sh(`find /workspace/a/b.txt -printf '%U %m\n'; cat /workspace/a/b.txt`); o.stdout != "65532 600\nhello" {
		t.Fatalf("inside: %q", o.stdout)
	}
	list, err := b.sb.ListDir(ctx, "/workspace/a")
	if err != nil || len(list) != 1 || list[0].Name != "b.txt" || list[0].Size != 5 {
		t.Fatalf("list: %+v %v", list, err)
	}
	// Symlinks made inside never lead a file operation to the host.
	b.sh(fmt.Sprintf(`ln -s %s /workspace/m; ln -s / /workspace/root; ln -s /etc /tmp/etc`, marker))
	for _, p := range []string{"/workspace/m", "/workspace/root" + marker, "/workspace/root/etc/hostname"} {
		got.Reset()
		if err := b.sb.ReadFile(ctx, p, &got); err == nil || strings.Contains(got.String(), "host file") {
			t.Fatalf("ReadFile(%s) followed a symlink out: %q %v", p, got.String(), err)
		}
	}
	if err := b.sb.WriteFile(ctx, "/workspace/root/tmp/x", strings.NewReader("x"), 0o644); err == nil {
		t.Fatal("WriteFile through a symlink to / succeeded")
	}
	for _, p := range []string{"/etc/passwd", "/workspace/../etc/passwd", "relative", "/proc/self/environ"} {
		if err := b.sb.ReadFile(ctx, p, io.Discard); err == nil {
			t.Fatalf("ReadFile(%s) outside /workspace and /tmp succeeded", p)
		}
	}
	if b, err := os.ReadFile(marker); err != nil || string(b) != "host file" {
		t.Fatalf("the host marker changed: %q %v", b, err)
	}
}

func (s *suite) exposedPort(t *testing.T) {
	b := s.create(t, sandbox.Spec{Network: sandbox.Network{ExposedTCP: []uint16{4000}}})
	l, ok := b.sb.Listener(4000)
	if !ok {
		t.Fatal("no listener for the exposed port")
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "served by the daemon")
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(l)
	defer srv.Close()
	o := b.sh(`(curl -s -m 5 http://127.0.0.1:4000/ || wget -qO- -T 5 http://127.0.0.1:4000/) 2>/dev/null; echo
(curl -s -m 3 http://127.0.0.1:4001/ || wget -qO- -T 3 -t 1 http://127.0.0.1:4001/) >/dev/null 2>&1 || echo refused`)
	if !strings.Contains(o.stdout, "served by the daemon") || !strings.Contains(o.stdout, "refused") {
		t.Fatalf("inside: %q", o.stdout)
	}
	if c, err := net.DialTimeout("tcp", "127.0.0.1:4000", time.Second); err == nil {
		c.Close()
		t.Fatal("the exposed port is reachable on the host's loopback")
	}
}

func (s *suite) concurrent(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out bytes.Buffer
			res, err := b.sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", fmt.Sprintf("echo %d", i)}, Stdout: &out})
			if err != nil || res.ExitCode != 0 || out.String() != fmt.Sprintf("%d\n", i) {
				errs <- fmt.Errorf("exec %d: %q %+v %v", i, out.String(), res, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func (s *suite) isolated(t *testing.T) {
	a, b := s.create(t, sandbox.Spec{}), s.create(t, sandbox.Spec{})
	a.sh(`echo mine > /workspace/a-only; echo mine > /tmp/a-only; sleep 60 >/dev/null 2>&1 &`)
	o := b.sh(`cat /workspace/a-only /tmp/a-only 2>/dev/null; ps -eo args 2>/dev/null | grep -c '^sleep 60' || true`)
	if strings.Contains(o.stdout, "mine") || strings.TrimSpace(o.stdout) != "0" {
		t.Fatalf("sandbox B sees A's files or processes: %q", o.stdout)
	}
}

func (s *suite) destroy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.CreateTimeout)
	defer cancel()
	sb, err := s.rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 60 &"}}); err != nil {
		t.Fatal(err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sb.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after Destroy")
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatalf("second Destroy: %v", err)
	}
	if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); err == nil {
		t.Fatal("Exec after Destroy succeeded")
	}
}
