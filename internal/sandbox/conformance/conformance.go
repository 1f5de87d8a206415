// Package conformance is the behaviour and containment suite every sandbox
// backend must pass: one contract (docs/security.md, "The sandbox walls"),
// the same checks against native, runc, crun, runsc and Docker. Backends
// call Run from their own tests with a Runtime; the checks use only the
// sandbox.Runtime interface and the shell tools of the host-toolchain view
// (sh, coreutils, getent, bash, curl or wget), so they test what a sandbox
// does, not how a backend builds it. Every behaviour or containment check
// belongs here, once; a backend's own tests keep only what is particular
// to it (landlock's port rules, exact seccomp errnos, int 0x80, what it
// leaves on the host).
//
// RunHostile's cases (hostile.go) try what a hostile workload would, or a
// fault: a writable or revealing /sys, device nodes beyond the listed
// ones, mknod, a setuid-root binary, reading and changing its own limits,
// a fork bomb and an OOM beside full tmpfs areas aimed at pid 1, pid 1
// killed from the host, cut-short uploads, FIFOs in place of files, tmpfs
// sizes that do not fit the memory limit. RunGate (gate.go) tries every
// way around the exec gate. Each backend runs them from its
// TestHostile... tests, so `go test -run Hostile ./...` runs them with the
// rest of the project's battery.
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
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/rootfs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// Options adjust the suite for one backend.
type Options struct {
	// UnreportedStatus lists /proc/self/status fields the backend's kernel
	// does not report (gVisor has no CapAmb or NoNewPrivs line). Each must
	// come with a behavioural check elsewhere in the suite: no_new_privs is
	// also proven by a setuid binary granting nothing, and by SealProbe.
	UnreportedStatus []string
	// SealProbe, when set, is a command inside that prints the seal it
	// runs under through prctl and capget, one "key value" a line (the
	// container helper's probe mode: wire.ProbeFields).
	SealProbe []string
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
	// OOMEndsSandbox: a command over the memory limit may end the whole
	// sandbox (Docker on gVisor: the sentry's memory is charged to the
	// container's cgroup, which the host's OOM killer ends as a whole).
	OOMEndsSandbox bool
	// RootCgroupMounts: the runtime leaves the mounts of the cgroup view
	// writable by root (runc's tmpfs beneath the v1 hierarchies, gVisor's
	// cgroupfs); the suite checks the sandbox user cannot write there.
	RootCgroupMounts bool
	// TTY: the backend allocates terminals (ExecRequest.TTY); without it
	// a TTY exec must fail with sandbox.ErrUnsupported.
	TTY bool
}

// Run runs the suite against rt. It sets an environment variable holding a
// random canary in this process first: a sandbox must not see it, whatever
// the backend passes along.
func Run(t *testing.T, rt sandbox.Runtime, opts Options) {
	s := &suite{rt: rt, opts: opts}
	canary := "sk-conformance-canary-" + randomHex(12)
	t.Setenv("OPENAI_API_KEY", canary)
	s.canary = canary
	t.Run("identity", s.identity)
	t.Run("no privileges", s.privileges)
	t.Run("rlimits", s.rlimits)
	t.Run("read-only root", s.readOnlyRoot)
	t.Run("network is loopback only", s.network)
	t.Run("no host files or sockets", s.hostFiles)
	t.Run("host alternatives", s.alternatives)
	t.Run("kernel files masked", s.kernelFiles)
	t.Run("no daemon secrets", s.secrets)
	t.Run("memory limit", s.memory)
	t.Run("pids limit", s.pids)
	t.Run("timeout", s.timeout)
	t.Run("cancel", s.cancel)
	t.Run("background process does not hold an exec", s.background)
	t.Run("processes", s.processes)
	t.Run("pause", s.pause)
	t.Run("output cap", s.outputCap)
	t.Run("stats", s.stats)
	t.Run("exit codes", s.exitCodes)
	t.Run("stdin env cwd", s.stdinEnvCwd)
	t.Run("terminal", s.terminal)
	t.Run("files", s.files)
	t.Run("workspace directory", s.workspaceDir)
	t.Run("trust files", s.trust)
	t.Run("bad specs", s.badSpecs)
	t.Run("exposed port", s.exposedPort)
	t.Run("concurrent exec", s.concurrent)
	t.Run("sandboxes are isolated", s.isolated)
	t.Run("destroy", s.destroy)
}

// RunHostile runs the hostile cases (see the package documentation)
// against rt. Backends call it from a test named TestHostile..., so that
// `go test -run Hostile` selects them.
func RunHostile(t *testing.T, rt sandbox.Runtime, opts Options) {
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

func (s *suite) create(t *testing.T, spec sandbox.Spec) *sandboxtest.Box {
	t.Helper()
	return sandboxtest.New(t, s.rt, spec)
}

// searchableDir is a host directory the container runtimes can bind: they
// open bind sources as the container's root (host uid 100000 on runc),
// so it and every directory above it must be searchable.
func searchableDir(t *testing.T, mode os.FileMode) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ironclaw-conformance-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	return dir
}

func (s *suite) identity(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	o := b.Sh(`id -u; id -g; id -G; pwd; echo "$HOME"; echo "$USER"; hostname`)
	if got := o.Stdout; got != "65532\n65532\n65532\n/workspace\n/workspace\nsandbox\nsandbox\n" {
		t.Fatalf("uid, gid, groups, cwd, HOME, USER, hostname = %q", got)
	}
}

func (s *suite) privileges(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	o := b.Sh(`grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status`)
	fields := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(o.Stdout), "\n") {
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
		t.Log("NoNewPrivs: not reported by this backend's /proc; the setuid check below and SealProbe cover it")
	} else if fields["NoNewPrivs"] != "1" {
		t.Errorf("NoNewPrivs = %q", fields["NoNewPrivs"])
	}
	if fields["Seccomp"] != "2" {
		t.Errorf("Seccomp = %q, want 2 (filter)", fields["Seccomp"])
	}
	if p := s.opts.SealProbe; p != nil {
		o := b.Exec(sandbox.ExecRequest{Argv: p})
		if o.Err != nil || !strings.Contains(o.Stdout, "no_new_privs 1\nseccomp 2\n") || !strings.Contains(o.Stdout, "cap_eff 0x0\n") ||
			!strings.Contains(o.Stdout, "uid 65532\ngid 65532\n") {
			t.Errorf("seal probe %q: %v %q %q", p, o.Err, o.Stdout, o.Stderr)
		}
	}
	// A setuid binary grants nothing.
	o = b.Sh(`for s in /usr/bin/su /bin/su /usr/bin/passwd; do [ -u "$s" ] && { "$s" -c id root </dev/null 2>&1 | head -n 2; echo "ran $s"; break; }; done; id -u`)
	if strings.Contains(o.Stdout, "uid=0") || !strings.HasSuffix(o.Stdout, "65532\n") {
		t.Fatalf("setuid binary: %q", o.Stdout)
	}
	// No new namespaces (the seccomp deny list).
	o = b.Sh(`unshare -U true 2>&1; echo "exit=$?"; unshare -n true 2>&1; echo "exit=$?"; unshare -Ur id 2>&1`)
	if strings.Count(o.Stdout, "exit=0") != 0 || strings.Contains(o.Stdout, "uid=0") {
		t.Fatalf("unshare: %q", o.Stdout)
	}
}

// The seal's rlimits hold on every backend: the open-files limit (the
// spec's, else the default), no core dumps, no POSIX message queues.
func (s *suite) rlimits(t *testing.T) {
	for _, files := range []int64{64, 0} {
		b := s.create(t, sandbox.Spec{Limits: sandbox.Limits{OpenFiles: files}})
		if files == 0 {
			files = sandbox.DefaultLimits.OpenFiles
		}
		// bash's ulimit asks getrlimit itself, so this holds where /proc
		// has no limits file (gVisor's sentry).
		o := b.Exec(sandbox.ExecRequest{Argv: []string{"bash", "-c", `for r in n c q; do echo "$r $(ulimit -S$r) $(ulimit -H$r)"; done`}})
		want := fmt.Sprintf("n %[1]d %[1]d,c 0 0,q 0 0", files)
		if got := strings.Join(sandboxtest.Lines(o.Stdout), ","); o.Err != nil || got != want {
			t.Fatalf("open files, core size, message queue bytes (soft hard): %q %q %v, want %q", got, o.Stderr, o.Err, want)
		}
	}
}

// readOnlyRoot: nothing is writable but /workspace and /tmp (/dev/shm, on
// a backend that has it, leads to /tmp).
func (s *suite) readOnlyRoot(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	o := b.Sh(`for p in /x /etc/x /usr/x /usr/bin/x /bin/x /dev/x /sys/x /.ironclaw/x /.ironclaw/sock/x /dev/mqueue/x /proc/sys/kernel/domainname; do
	(: > "$p") 2>/dev/null && echo "wrote $p"
done
echo 1 > /proc/sysrq-trigger 2>/dev/null && echo "wrote sysrq-trigger"
(: > /dev/shm/shm-x) 2>/dev/null && { [ -e /tmp/shm-x ] || echo "wrote /dev/shm/shm-x, not in /tmp"; rm -f /tmp/shm-x; }
echo ok > /workspace/w && echo ok > /tmp/t && cat /workspace/w /tmp/t`)
	if strings.Contains(o.Stdout, "wrote") || o.Stdout != "ok\nok\n" {
		t.Fatalf("writes: %q (stderr %q)", o.Stdout, o.Stderr)
	}
	// The writable areas: /tmp sticky and root's, /workspace the sandbox
	// user's, new files theirs, and programs there run.
	o = b.Sh(`touch /workspace/a && printf '#!/bin/sh\necho ran\n' > /tmp/s && chmod +x /tmp/s && /tmp/s && find /tmp /workspace /workspace/a -maxdepth 0 -printf '%m %U\n'`)
	if got := strings.Join(sandboxtest.Lines(o.Stdout), ","); got != "ran,1777 0,755 65532,644 65532" {
		t.Fatalf("writable areas: %q %q", o.Stdout, o.Stderr)
	}
}

func (s *suite) network(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	o := b.Sh(`ls /sys/class/net 2>/dev/null | tr '\n' ' '; echo; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' '`)
	for _, f := range strings.Fields(o.Stdout) {
		if f != "lo" {
			t.Fatalf("network interfaces besides lo: %q", o.Stdout)
		}
	}
	if o = b.Sh(`getent hosts example.com; echo "exit=$?"`); strings.Contains(o.Stdout, "example.com") {
		t.Fatalf("DNS resolved: %q", o.Stdout)
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
	o = b.Sh(fmt.Sprintf(`timeout 5 bash -c 'exec 3<>/dev/tcp/127.0.0.1/%[1]s' 2>/dev/null && echo "reached host loopback"
timeout 5 bash -c 'exec 3<>/dev/tcp/10.255.255.1/80' 2>/dev/null && echo "reached outside"
timeout 5 bash -c 'exec 3<>/dev/tcp/1.1.1.1/53' 2>/dev/null && echo "reached internet"
echo done`, port))
	if strings.Contains(o.Stdout, "reached") || !strings.Contains(o.Stdout, "done") {
		t.Fatalf("connections out: %q", o.Stdout)
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
	o := b.Sh(fmt.Sprintf(`cat %s 2>/dev/null
for p in /var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock /root /home /var/lib; do [ -e "$p" ] && echo "exists $p"; done
find / -xdev -type s 2>/dev/null | head -n 5
grep -h %s /etc/* 2>/dev/null; echo done`, marker, secret))
	if strings.Contains(o.Stdout, secret) || strings.Contains(o.Stdout, "exists") || !strings.HasSuffix(o.Stdout, "done\n") {
		t.Fatalf("host files inside: %q", o.Stdout)
	}
	for _, l := range strings.Split(strings.TrimSuffix(o.Stdout, "done\n"), "\n") {
		if l != "" && !strings.HasPrefix(l, "/.ironclaw/") {
			t.Fatalf("a socket inside the sandbox: %q", l)
		}
	}
	// The top level is the sandbox's own: none of the host's directories
	// but those of the host-toolchain view.
	top := " " + strings.Join(sandboxtest.Lines(b.Sh(`ls -A /`).Stdout), " ") + " "
	hidden := []string{"home", "root", "var", "run", "srv", "opt", "mnt", "media", "boot"}
	des, err := os.ReadDir("/")
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if de.IsDir() && !viewTop[de.Name()] {
			hidden = append(hidden, de.Name())
		}
	}
	for _, name := range hidden {
		if strings.Contains(top, " "+name+" ") {
			t.Errorf("/%s exists inside: ls / = %q", name, top)
		}
	}
	// /etc is synthetic: its own passwd, no shadow, and the files a
	// container engine would fill from the host (resolv.conf with the
	// host's name servers) are the sandbox's own.
	// Nothing else is there but the alternatives links the view's
	// programs go through (rootfs.Alternative), exactly the plan's.
	host, _ := os.ReadFile("/etc/passwd")
	// (The shell's globs list them: gVisor's statx fails ls here.)
	o = b.Sh(`ents() { for f in "$1"/* "$1"/.*; do case "$f" in */.|*/..) continue;; esac; [ -L "$f" ] || [ -e "$f" ] && echo "$f"; done; }
cat /etc/passwd; echo ---; ents /etc | sed 's|^/etc/||' | tr '\n' ' '; echo
[ -d /etc/alternatives ] && ents /etc/alternatives | while read -r f; do
	if [ -L "$f" ]; then echo "${f#/etc/alternatives/}=$(readlink "$f")"; else echo "${f#/etc/alternatives/}: not a link"; fi
done`)
	passwd, rest, _ := strings.Cut(o.Stdout, "---\n")
	if passwd == string(host) || !strings.Contains(passwd, "sandbox:x:65532") {
		t.Errorf("/etc/passwd is not synthetic: %q", passwd)
	}
	etcLine, altLines, _ := strings.Cut(rest, "\n")
	plan, err := rootfs.HostView("/", sandbox.Spec{}.WithDefaults().Hostname)
	if err != nil {
		t.Fatal(err)
	}
	var wantEtc, wantAlt []string
	for _, e := range plan {
		if name, ok := rootfs.Alternative(e); ok {
			wantAlt = append(wantAlt, name+"="+e.Target)
		} else if filepath.Dir(e.Path) == "/etc" {
			wantEtc = append(wantEtc, filepath.Base(e.Path))
		}
	}
	slices.Sort(wantEtc)
	gotEtc := strings.Fields(etcLine)
	slices.Sort(gotEtc)
	if !slices.Equal(gotEtc, wantEtc) {
		t.Errorf("/etc holds %q, want exactly the sandbox's own %q (%q)", gotEtc, wantEtc, o.Stdout+o.Stderr)
	}
	if gotAlt := sandboxtest.Lines(altLines); !slices.Equal(gotAlt, wantAlt) {
		t.Errorf("/etc/alternatives holds %q, want exactly the plan's %q", gotAlt, wantAlt)
	}
	for _, e := range rootfs.Etc(sandbox.Spec{}.WithDefaults().Hostname) {
		switch e.Path {
		case "/etc/resolv.conf", "/etc/hosts", "/etc/hostname":
			if got := b.Sh(`cat ` + e.Path).Stdout; got != e.Content {
				t.Errorf("%s = %q, want the sandbox's own %q", e.Path, got, e.Content)
			}
		}
	}
}

// alternatives: Debian's alternatives (/usr/bin/awk ->
// /etc/alternatives/awk -> /usr/bin/mawk) work in the host-toolchain view:
// each name of /usr/bin and /usr/sbin that leads through the host's
// /etc/alternatives into the view resolves inside as on the host.
func (s *suite) alternatives(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	if _, err := exec.LookPath("awk"); err == nil {
		o := b.Sh(`awk 'BEGIN{print 1+1}'; readlink -f "$(command -v awk)"`)
		lines := sandboxtest.Lines(o.Stdout)
		if o.Res.ExitCode != 0 || len(lines) != 2 || lines[0] != "2" || !strings.HasPrefix(lines[1], "/usr/") {
			t.Errorf("awk: exit %d, stdout %q, stderr %q", o.Res.ExitCode, o.Stdout, o.Stderr)
		}
	}
	var names, want []string
	for _, dir := range []string{"/usr/bin", "/usr/sbin"} {
		des, _ := os.ReadDir(dir)
		for _, de := range des {
			p := filepath.Join(dir, de.Name())
			if tg, err := os.Readlink(p); err != nil || !strings.HasPrefix(tg, rootfs.AlternativesDir+"/") {
				continue
			}
			real, err := filepath.EvalSymlinks(p)
			if err != nil || !inView(real) {
				continue
			}
			names = append(names, p)
			want = append(want, p+" "+real)
		}
	}
	if len(names) == 0 {
		t.Skip("the host has no alternatives into /usr")
	}
	o := b.Sh(`for p in ` + strings.Join(names, " ") + `; do echo "$p $(readlink -f "$p")"; done`)
	if got := sandboxtest.Lines(o.Stdout); !slices.Equal(got, want) {
		t.Errorf("alternatives inside:\n%s\nwant (as on the host):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// inView: host path p (symlink-free) lies in what the host-toolchain view
// binds.
func inView(p string) bool {
	top, rest, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	return rest != "" && viewTop[top] && top != "etc" && !provided(top)
}

func provided(top string) bool {
	switch top {
	case "proc", "dev", "sys", "tmp", "workspace":
		return true
	}
	return false
}

// viewTop are the top-level directories of the host-toolchain view: the
// host's it binds (see package rootfs) and the sandbox's own.
var viewTop = map[string]bool{"usr": true, "bin": true, "sbin": true, "lib": true, "lib32": true, "lib64": true, "libx32": true,
	"etc": true, "proc": true, "dev": true, "sys": true, "tmp": true, "workspace": true}

// kernelFiles: the seal's masked paths show nothing, its read-only ones
// take no write.
func (s *suite) kernelFiles(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	o := b.Sh(`for f in kcore keys timer_list sched_debug kallsyms kmsg config.gz slabinfo vmallocinfo pagetypeinfo; do [ -e /proc/$f ] && echo "$f $(cat /proc/$f 2>/dev/null | wc -c)"; done; echo done`)
	checked := 0
	for _, l := range sandboxtest.Lines(o.Stdout) {
		if name, n, ok := strings.Cut(l, " "); ok {
			checked++
			if n != "0" {
				t.Errorf("/proc/%s shows %s bytes, want it masked", name, n)
			}
		}
	}
	if !strings.HasSuffix(o.Stdout, "done\n") {
		t.Fatalf("masked files: %q %q", o.Stdout, o.Stderr)
	}
	if checked == 0 {
		t.Log("this backend's /proc has none of the masked files") // gVisor's
	}
}

func (s *suite) secrets(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	o := b.Sh(`env; cat /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\0' '\n'; echo done`)
	if strings.Contains(o.Stdout, s.canary) || !strings.HasSuffix(o.Stdout, "done\n") {
		t.Fatal("the daemon's environment (a provider key) is visible inside the sandbox")
	}
	env := b.Sh(`env`).Stdout
	for _, leak := range []string{"OPENAI_API_KEY", "IRONCLAW", "GOMAXPROCS", "DOCKER"} {
		if strings.Contains(env, leak) {
			t.Errorf("a command's environment names %s: %q", leak, env)
		}
	}
	if !strings.Contains(env, "HOME=/workspace") {
		t.Errorf("unexpected environment: %q", env)
	}
}

func (s *suite) memory(t *testing.T) {
	b := s.create(t, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 64 << 20}})
	// tail holds a line that never ends: it grows until the limit stops
	// it, in large reads (a shell growing a variable was as sure but so
	// slow under gVisor's ptrace platform on a paravirtualised host that
	// it met the exec timeout first).
	o := b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "exec tail /dev/zero"}})
	if o.Err == nil && o.Res.ExitCode == 0 {
		t.Fatalf("tail of /dev/zero ended well under a 64 MiB limit: %+v", o.Res)
	}
	if s.opts.OOMEndsSandbox {
		t.Logf("over the memory limit: %+v, %v", o.Res, o.Err)
		return
	}
	if o.Err != nil || o.Res.ExitCode != 137 || !o.Res.OOMKilled || o.Res.Signal != 9 {
		t.Fatalf("memory hog: %+v %v %q, want exit 137, SIGKILL and OOMKilled", o.Res, o.Err, o.Stderr)
	}
	// The sandbox survives for the next command.
	if o := b.Sh(`echo alive`); o.Stdout != "alive\n" {
		t.Fatalf("after the OOM: %q", o.Stdout)
	}
	if st, err := b.SB.Stats(context.Background()); err != nil || st.OOMKills == 0 {
		t.Fatalf("Stats after the OOM = %+v, %v", st, err)
	}
}

func (s *suite) pids(t *testing.T) {
	b := s.create(t, sandbox.Spec{Limits: sandbox.Limits{Pids: 40}})
	// The shell gives up when a fork fails, so "all started" means no limit.
	o := b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", `for i in $(seq 100); do sleep 2 & done; echo all started`}})
	if strings.Contains(o.Stdout, "all started") {
		t.Fatalf("started 100 processes under a limit of 40: %+v", o.Res)
	}
	if !strings.Contains(o.Stdout+o.Stderr, "fork") && !strings.Contains(o.Stdout+o.Stderr, "Resource temporarily unavailable") {
		t.Errorf("100 processes under a pids limit of 40: %q %q %v", o.Stdout, o.Stderr, o.Err)
	}
	select {
	case <-b.SB.Done():
		t.Fatal("the sandbox died under its pids limit")
	default:
	}
	// Once those end, the sandbox works again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		o := b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo alive"}})
		if o.Err == nil && o.Stdout == "alive\n" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox did not recover from its pids limit: %q %v", o.Stdout, o.Err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// noneLeft waits a few seconds for every live process named comm to go:
// a SIGKILL lands asynchronously and pid 1 reaps a moment later, so
// zombies do not count.
func noneLeft(t *testing.T, b *sandboxtest.Box, comm string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		o := b.Sh(`ps -eo stat=,comm= 2>/dev/null | grep -v '^Z' | grep -c ' ` + comm + `$' || true`)
		if strings.TrimSpace(o.Stdout) == "0" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the killed command survive: %q", o.Stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *suite) timeout(t *testing.T) {
	b := s.create(t, sandbox.Spec{Limits: sandbox.Limits{Timeout: time.Second}})
	start := time.Now()
	o := b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 30 & sleep 30"}})
	if o.Err != nil {
		t.Fatal(o.Err)
	}
	if !o.Res.TimedOut || o.Res.ExitCode != 137 || o.Res.Signal != 9 {
		t.Fatalf("result %+v, want TimedOut, exit 137 and SIGKILL", o.Res)
	}
	if el := time.Since(start); el > 15*time.Second {
		t.Fatalf("a 1 s timeout took %v", el)
	}
	// The background sleep dies with its process group.
	noneLeft(t, b, "sleep")
}

func (s *suite) cancel(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	res, err := b.SB.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sleep", "60"}, Timeout: time.Minute})
	if !errors.Is(err, context.DeadlineExceeded) || res.ExitCode != 137 {
		t.Fatalf("cancelled exec: %+v %v, want DeadlineExceeded and exit 137", res, err)
	}
	noneLeft(t, b, "sleep")
	if o := b.Sh("echo alive"); o.Stdout != "alive\n" {
		t.Fatal("sandbox unusable after a cancelled exec")
	}
}

// A command that leaves a process running in the background returns when
// the command itself exits, not when the background process closes the
// output it inherited.
func (s *suite) background(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	start := time.Now()
	o := b.Sh(`echo started; sleep 60 & echo left`)
	if o.Res.ExitCode != 0 || o.Res.TimedOut || o.Stdout != "started\nleft\n" {
		t.Fatalf("result %+v, output %q", o.Res, o.Stdout)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("the exec took %v: it waited for the background process", el)
	}
}

func (s *suite) outputCap(t *testing.T) {
	b := s.create(t, sandbox.Spec{Limits: sandbox.Limits{OutputBytes: 1000}})
	o := b.Sh(`head -c 100000 /dev/zero | tr '\0' a; head -c 5000 /dev/zero >&2`)
	if !o.Res.Truncated || o.Res.StdoutBytes != 100000 || o.Res.StderrBytes != 5000 || len(o.Stdout)+len(o.Stderr) != 1000 || o.Res.ExitCode != 0 {
		t.Fatalf("output cap: %+v, kept %d+%d", o.Res, len(o.Stdout), len(o.Stderr))
	}
	// A request may ask for less, never for more.
	o = b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "head -c 5000 /dev/zero"}, OutputBytes: 100})
	if o.Err != nil || !o.Res.Truncated || len(o.Stdout) != 100 {
		t.Fatalf("a request's smaller cap: %+v, kept %d", o.Res, len(o.Stdout))
	}
}

func (s *suite) stats(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	b.Sh(`i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done`)
	st, err := b.SB.Stats(context.Background())
	if err != nil || st.MemoryBytes <= 0 || st.Pids <= 0 || st.CPUUsage <= 0 {
		t.Fatalf("Stats = %+v, %v, want memory, pids and the CPU the loop used", st, err)
	}
}

func (s *suite) exitCodes(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	b.Sh(`printf 'echo hi\n' > /workspace/noexec; mkdir /workspace/dir`)
	cases := []struct {
		argv    []string
		cwd     string
		env     []string
		code    int
		wantErr error
	}{
		{[]string{"/bin/sh", "-c", "exit 7"}, "", nil, 7, nil},
		{[]string{"/bin/sh", "-c", "exit 127"}, "", nil, 127, nil},
		{[]string{"/bin/sh", "-c", "kill -TERM $$"}, "", nil, 143, nil},
		{[]string{"no-such-command-xyz"}, "", nil, 127, sandbox.ErrCommandNotFound},
		{[]string{"/nonexistent"}, "", nil, 127, sandbox.ErrCommandNotFound},
		{[]string{"/workspace/noexec"}, "", nil, 126, sandbox.ErrNotExecutable},
		{[]string{"/workspace/dir"}, "", nil, 126, sandbox.ErrNotExecutable},
		{[]string{"/usr"}, "", nil, 126, sandbox.ErrNotExecutable},
		{[]string{"/etc/passwd"}, "", nil, 126, sandbox.ErrNotExecutable},
		{[]string{"true"}, "/nonexistent", nil, 126, sandbox.ErrNotExecutable},
		{[]string{"pwd"}, "/tmp", nil, 0, nil},
		{nil, "", nil, 0, sandbox.ErrInvalidRequest},
		{[]string{"true"}, "", []string{"1BAD=x"}, 0, sandbox.ErrInvalidRequest},
		{[]string{"true", "a\x00b"}, "", nil, 0, sandbox.ErrInvalidRequest},
	}
	for _, c := range cases {
		o := b.Exec(sandbox.ExecRequest{Argv: c.argv, Cwd: c.cwd, Env: c.env})
		if o.Res.ExitCode != c.code || !errors.Is(o.Err, c.wantErr) || (c.wantErr == nil && o.Err != nil) {
			t.Errorf("%q in %q: exit %d, err %v; want %d, %v", c.argv, c.cwd, o.Res.ExitCode, o.Err, c.code, c.wantErr)
		}
		if strings.Contains(o.Stderr, "\x00") {
			t.Errorf("%q: a backend's header leaked into stderr: %q", c.argv, o.Stderr)
		}
	}
	o := b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo out; echo err >&2"}})
	if o.Stdout != "out\n" || o.Stderr != "err\n" {
		t.Fatalf("streams: %q %q", o.Stdout, o.Stderr)
	}
}

func (s *suite) stdinEnvCwd(t *testing.T) {
	b := s.create(t, sandbox.Spec{Env: []string{"FROM_SPEC=spec"}})
	o := b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", `cat; echo "$FROM_SPEC $FROM_REQ $HOME"; pwd`},
		Stdin: strings.NewReader("piped\n"), Env: []string{"FROM_REQ=req", "HOME=/tmp"}, Cwd: "/tmp"})
	if o.Err != nil || o.Stdout != "piped\nspec req /tmp\n/tmp\n" {
		t.Fatalf("stdin, env, cwd: %q %v", o.Stdout, o.Err)
	}
	// The command's own streams reopen by path, as /dev/stdout.
	if o := b.Sh(`echo via-dev >/dev/stdout; echo err-via-dev >/dev/stderr`); o.Stdout != "via-dev\n" || o.Stderr != "err-via-dev\n" {
		t.Fatalf("/dev/stdout, /dev/stderr: %q %q", o.Stdout, o.Stderr)
	}
	// No terminal without one.
	if o := b.Sh(`test -t 0 || echo no-tty; test -t 1 || echo no-tty`); o.Stdout != "no-tty\nno-tty\n" {
		t.Fatalf("stdio is a terminal: %q", o.Stdout)
	}
}

func (s *suite) terminal(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	o := b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "tty; stty size"}, TTY: true, WindowSize: sandbox.WindowSize{Rows: 40, Cols: 120}})
	if !s.opts.TTY {
		if !errors.Is(o.Err, sandbox.ErrUnsupported) {
			t.Fatalf("TTY exec: %v, want ErrUnsupported", o.Err)
		}
		return
	}
	if o.Err != nil || !strings.HasPrefix(o.Stdout, "/dev/pts/") || !strings.Contains(o.Stdout, "40 120") {
		t.Fatalf("tty: %q %v", o.Stdout, o.Err)
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
	if err := b.SB.WriteFile(ctx, "/workspace/a/b.txt", strings.NewReader("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := b.SB.ReadFile(ctx, "/workspace/a/b.txt", &got); err != nil || got.String() != "hello" {
		t.Fatalf("read back: %q %v", got.String(), err)
	}
	if o := b.Sh(`find /workspace/a/b.txt -printf '%U %m\n'; cat /workspace/a/b.txt`); o.Stdout != "65532 600\nhello" {
		t.Fatalf("inside: %q", o.Stdout)
	}
	list, err := b.SB.ListDir(ctx, "/workspace/a")
	if err != nil || len(list) != 1 || list[0].Name != "b.txt" || list[0].Type != "file" || list[0].Size != 5 || list[0].Mode.Perm() != 0o600 {
		t.Fatalf("list: %+v %v", list, err)
	}
	big := bytes.Repeat([]byte("0123456789"), 400_000)
	if err := b.SB.WriteFile(ctx, "/tmp/big", bytes.NewReader(big), 0o644); err != nil {
		t.Fatal(err)
	}
	got.Reset()
	if err := b.SB.ReadFile(ctx, "/tmp/big", &got); err != nil || !bytes.Equal(got.Bytes(), big) {
		t.Fatalf("a 4 MB round trip: %d bytes, %v", got.Len(), err)
	}
	// Symlinks made inside never lead a file operation out, nor to
	// another of the sandbox's own files outside the two areas.
	b.Sh(fmt.Sprintf(`ln -s %s /workspace/m; ln -s /etc/passwd /workspace/link; ln -s / /workspace/root; ln -s /etc /tmp/etc; mkdir -p /workspace/d; ln -s ../../tmp /workspace/d/up`, marker))
	bad := []struct {
		path  string
		errIs error
	}{
		{"/etc/passwd", sandbox.ErrInvalidRequest},
		{"/workspace/../etc/passwd", sandbox.ErrInvalidRequest},
		{"relative.txt", sandbox.ErrInvalidRequest},
		{"/workspace", sandbox.ErrInvalidRequest},
		{"/proc/self/environ", sandbox.ErrInvalidRequest},
		{"/workspace/m", sandbox.ErrPermission},
		{"/workspace/link", sandbox.ErrPermission},
		{"/workspace/root" + marker, sandbox.ErrPermission},
		{"/workspace/root/etc/hostname", sandbox.ErrPermission},
		{"/tmp/etc/passwd", sandbox.ErrPermission},
		{"/workspace/d/up/big", sandbox.ErrPermission},
		{"/workspace/missing", sandbox.ErrNotFound},
	}
	for _, c := range bad {
		got.Reset()
		if err := b.SB.ReadFile(ctx, c.path, &got); !errors.Is(err, c.errIs) || got.Len() != 0 {
			t.Errorf("ReadFile(%s) = %v (%d bytes), want %v", c.path, err, got.Len(), c.errIs)
		}
		err := b.SB.WriteFile(ctx, c.path, strings.NewReader("x"), 0o644)
		if c.errIs == sandbox.ErrNotFound {
			if err != nil {
				t.Errorf("WriteFile(%s) = %v, want it created", c.path, err)
			}
			continue
		}
		if !errors.Is(err, c.errIs) {
			t.Errorf("WriteFile(%s) = %v, want %v", c.path, err, c.errIs)
		}
	}
	entries, err := b.SB.ListDir(ctx, "/workspace")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name+":"+e.Type)
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "d:dir") || !strings.Contains(got, "link:symlink") || !strings.Contains(got, "missing:file") {
		t.Fatalf("ListDir(/workspace) = %q", got)
	}
	for p, want := range map[string]error{"/etc": sandbox.ErrInvalidRequest, "/workspace/root": sandbox.ErrPermission,
		"/workspace/d/up": sandbox.ErrPermission, "/workspace/nope": sandbox.ErrNotFound} {
		if _, err := b.SB.ListDir(ctx, p); !errors.Is(err, want) {
			t.Errorf("ListDir(%s) = %v, want %v", p, err, want)
		}
	}
	if data, err := os.ReadFile(marker); err != nil || string(data) != "host file" {
		t.Fatalf("the host marker changed: %q %v", data, err)
	}
	if _, err := b.SB.ListDir(ctx, "/tmp"); err != nil {
		t.Fatalf("ListDir(/tmp): %v", err)
	}
	if err := b.SB.ReadFile(ctx, "/tmp/big", io.Discard); err != nil {
		t.Fatalf("ReadFile into io.Discard: %v", err)
	}
}

// A host directory as /workspace (Spec.Workspace): shared both ways.
func (s *suite) workspaceDir(t *testing.T) {
	ws := searchableDir(t, 0o777)
	if err := os.WriteFile(filepath.Join(ws, "in.txt"), []byte("from host"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := s.create(t, sandbox.Spec{Workspace: ws})
	o := b.Sh(`cat /workspace/in.txt; echo out > /workspace/out.txt; echo done`)
	if !strings.Contains(o.Stdout, "from host") {
		t.Fatalf("the host's file inside: %q %q", o.Stdout, o.Stderr)
	}
	if got, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(got) != "out\n" {
		t.Fatalf("a file written inside: %q, %v", got, err)
	}
	if err := b.SB.WriteFile(context.Background(), "/workspace/api.txt", strings.NewReader("result"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(ws, "api.txt")); err != nil || string(got) != "result" {
		t.Fatalf("WriteFile into the workspace directory: %q %v", got, err)
	}
}

// trust: Spec.Trust's files are at sandbox.TrustDir, read-only, whatever
// the source directory's mode, and the host view's system bundle path
// leads to the bundle.
func (s *suite) trust(t *testing.T) {
	// Public files in a public directory beneath a private one (0700),
	// where the container backends' host uid 100000 cannot reach.
	dir := filepath.Join(t.TempDir(), "trust")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{path.Base(sandbox.TrustBundle): "BUNDLE-" + s.canary[len(s.canary)-8:] + "\n",
		path.Base(sandbox.TrustCA): "CA-ONLY\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b := s.create(t, sandbox.Spec{Trust: dir})
	o := b.Sh(fmt.Sprintf(`cat %s %s %s; touch %s/new 2>/dev/null || echo read-only; echo x >> %s 2>/dev/null || echo unwritable`,
		sandbox.TrustBundle, sandbox.TrustCA, sandbox.SystemBundle, sandbox.TrustDir, sandbox.TrustBundle))
	want := "BUNDLE-" + s.canary[len(s.canary)-8:] + "\nCA-ONLY\nBUNDLE-" + s.canary[len(s.canary)-8:] + "\nread-only\nunwritable\n"
	if o.Stdout != want {
		t.Fatalf("trust files inside: %q (stderr %q), want %q", o.Stdout, o.Stderr, want)
	}
}

// Specs no backend may create: ErrInvalidSpec, and nothing left.
func (s *suite) badSpecs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), sandboxtest.CreateTimeout)
	defer cancel()
	for i, spec := range []sandbox.Spec{
		{Limits: sandbox.Limits{MemoryBytes: 1024}},
		{Limits: sandbox.Limits{CPUs: -1}},
		{Root: sandbox.Root{Kind: sandbox.RootDirectory, Path: "/no/such/dir"}},
		{Root: sandbox.Root{Kind: sandbox.RootDirectory, Path: "relative"}},
		{Workspace: "/no/such/dir"},
		{Mounts: []sandbox.Mount{{Source: "/etc", Target: "/proc/x"}}},
		{Mounts: []sandbox.Mount{{Source: "/nonexistent/source", Target: "/data"}}},
		{Env: []string{"NOEQUALS"}},
	} {
		sb, err := s.rt.Create(ctx, spec)
		if err == nil {
			sb.Destroy(ctx)
		}
		if !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("spec %d (%+v): %v, want ErrInvalidSpec", i, spec, err)
		}
	}
}

func (s *suite) exposedPort(t *testing.T) {
	b := s.create(t, sandbox.Spec{Network: sandbox.Network{ExposedTCP: []uint16{4000}}})
	l, ok := b.SB.Listener(4000)
	if !ok {
		t.Fatal("no listener for the exposed port")
	}
	if _, ok := b.SB.Listener(4001); ok {
		t.Fatal("a listener for a port that is not exposed")
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "served by the daemon: %s", r.URL.Path)
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(l)
	defer srv.Close()
	o := b.Sh(`(curl -s -m 5 http://127.0.0.1:4000/hello || wget -qO- -T 5 http://127.0.0.1:4000/hello) 2>/dev/null; echo
(curl -s -m 3 http://127.0.0.1:4001/ || wget -qO- -T 3 -t 1 http://127.0.0.1:4001/) >/dev/null 2>&1 || echo refused`)
	if !strings.Contains(o.Stdout, "served by the daemon: /hello") || !strings.Contains(o.Stdout, "refused") {
		t.Fatalf("inside: %q", o.Stdout)
	}
	// Many connections at once.
	o = b.Sh(`for i in 1 2 3 4 5 6 7 8; do (curl -s -m 5 http://127.0.0.1:4000/$i || wget -qO- -T 5 http://127.0.0.1:4000/$i) 2>/dev/null & done; wait; echo`)
	if n := strings.Count(o.Stdout, "served by the daemon"); n != 8 {
		t.Fatalf("%d of 8 concurrent requests served: %q", n, o.Stdout)
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
			res, err := b.SB.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", fmt.Sprintf("sleep 0.2; echo %d; exit %d", i, i%8)}, Stdout: &out})
			if err != nil || res.ExitCode != i%8 || out.String() != strconv.Itoa(i)+"\n" {
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
	a.Sh(`echo mine > /workspace/a-only; echo mine > /tmp/a-only; sleep 60 >/dev/null 2>&1 &`)
	o := b.Sh(`cat /workspace/a-only /tmp/a-only 2>/dev/null; ps -eo args 2>/dev/null | grep -c '^sleep 60' || true`)
	if strings.Contains(o.Stdout, "mine") || strings.TrimSpace(o.Stdout) != "0" {
		t.Fatalf("sandbox B sees A's files or processes: %q", o.Stdout)
	}
}

func (s *suite) destroy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), sandboxtest.CreateTimeout)
	defer cancel()
	sb, err := s.rt.Create(ctx, sandbox.Spec{Network: sandbox.Network{ExposedTCP: []uint16{4000}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 100 & sleep 100 & echo started"}, Timeout: time.Second}); err != nil {
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
	if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("Exec after Destroy = %v, want ErrClosed", err)
	}
	if err := sb.WriteFile(ctx, "/workspace/x", strings.NewReader("x"), 0o644); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("WriteFile after Destroy = %v, want ErrClosed", err)
	}
	if _, err := sb.Stats(ctx); err == nil {
		t.Fatal("Stats after Destroy succeeded")
	}
}
