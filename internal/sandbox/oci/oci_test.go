package oci_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/oci"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

func TestNewRejects(t *testing.T) {
	ctx := context.Background()
	if _, err := oci.New(ctx, oci.Options{Runtime: "docker"}); !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("New(docker) = %v, want ErrInvalidSpec", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("the remaining checks need root")
	}
	_, err := oci.New(ctx, oci.Options{Runtime: oci.Runc, Binary: "/nonexistent/runc", StateDir: testStateDir()})
	if !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("New(missing binary) = %v, want ErrUnsupported", err)
	}
}

func TestSeal(t *testing.T) {
	eachRuntime(t, func(t *testing.T, r *oci.Runtime) {
		b := newBox(t, r, sandbox.Spec{})
		o := b.sh(`id -u; id -g; id -G; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb):' /proc/self/status | tr -s '\t' ' '`)
		got := lines(o.stdout)
		want := []string{"65532", "65532", "65532", "CapInh: 0000000000000000", "CapPrm: 0000000000000000",
			"CapEff: 0000000000000000", "CapBnd: 0000000000000000"}
		if r.Name() != oci.Runsc {
			want = append(want, "CapAmb: 0000000000000000") // gVisor's status has no CapAmb line
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		// no_new_privs and seccomp mode through prctl (gVisor's
		// /proc/self/status does not show them).
		o = b.exec(sandbox.ExecRequest{Argv: []string{wire.HelperPath, wire.ModeProbe}})
		if o.err != nil || !strings.Contains(o.stdout, "no_new_privs 1\nseccomp 2\n") || !strings.Contains(o.stdout, "cap_eff 0x0\n") {
			t.Fatalf("probe: %v %q %q", o.err, o.stdout, o.stderr)
		}
		if r.Name() != oci.Runsc {
			o = b.sh(`cat /proc/self/uid_map /proc/self/gid_map; grep NoNewPrivs /proc/self/status`)
			want := "0 100000 65536\n0 100000 65536\nNoNewPrivs: 1"
			if got := strings.Join(strings.Fields(o.stdout), " "); got != strings.Join(strings.Fields(want), " ") {
				t.Fatalf("id maps: %q, want %q", o.stdout, want)
			}
		}
		o = b.sh(`echo $HOME; pwd; hostname; env | sort | tr '\n' ' '`)
		if l := lines(o.stdout); len(l) < 3 || l[0] != "/workspace" || l[1] != "/workspace" || l[2] != "sandbox" {
			t.Fatalf("home, cwd, hostname: %q", o.stdout)
		}
		if strings.Contains(o.stdout, "IRONCLAW") || strings.Contains(o.stdout, "GOMAXPROCS") {
			t.Fatalf("environment leaks: %q", o.stdout)
		}
	})
}

func TestFilesystem(t *testing.T) {
	marker := filepath.Join("/var/tmp", fmt.Sprintf("ironclaw-oci-marker-%d", os.Getpid()))
	if err := os.WriteFile(marker, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(marker) })
	eachRuntime(t, func(t *testing.T, r *oci.Runtime) {
		b := newBox(t, r, sandbox.Spec{})
		o := b.sh(`for p in /x /usr/x /etc/x /bin/x /dev/x /.ironclaw/x /.ironclaw/sock/x; do touch $p 2>/dev/null && echo "wrote $p"; done; echo done`)
		if strings.TrimSpace(o.stdout) != "done" {
			t.Fatalf("wrote outside /workspace and /tmp: %q", o.stdout)
		}
		o = b.sh(`touch /workspace/a /tmp/b && echo ok`)
		if strings.TrimSpace(o.stdout) != "ok" {
			t.Fatalf("writable areas: %q %q", o.stdout, o.stderr)
		}
		// (runsc 2022 refuses coreutils 9's statx; the probe uses stat.)
		if got := strings.Join(lines(b.probe("stat", "/tmp", "/workspace").stdout), ","); got != "1777 0,755 65532" {
			t.Fatalf("/tmp and /workspace: %q", got)
		}
		o = b.sh(`ls -A / | tr '\n' ' '; echo; ls /etc | tr '\n' ' '; echo; cat /var/tmp/ironclaw-oci-marker-* 2>&1; test -e /sys/kernel && echo has-sys; echo end`)
		for _, name := range []string{"home", "root", "var", "run", "srv", "opt", "mnt", "boot"} {
			if strings.Contains(" "+lines(o.stdout)[0]+" ", " "+name+" ") {
				t.Errorf("/%s exists inside: %q", name, o.stdout)
			}
		}
		// /sys holds only the sandbox's cgroup view (the conformance suite
		// checks it in full), on runsc too.
		if strings.Contains(o.stdout, "host secret") || strings.Contains(o.stdout, "has-sys") || strings.Contains(o.stdout, "shadow") {
			t.Fatalf("host files visible: %q", o.stdout)
		}
		host, _ := os.ReadFile("/etc/passwd")
		if inner := b.sh(`cat /etc/passwd`).stdout; inner == string(host) || !strings.Contains(inner, "sandbox:x:65532") {
			t.Fatalf("/etc/passwd is not synthetic: %q", inner)
		}
		o = b.sh(`for f in kcore keys timer_list sched_debug kallsyms; do [ -e /proc/$f ] && echo "$f $(cat /proc/$f 2>/dev/null | wc -c)"; done; echo 1 > /proc/sys/kernel/domainname 2>/dev/null && echo wrote-sysctl; echo 1 > /proc/sysrq-trigger 2>/dev/null && echo wrote-sysrq; echo done`)
		if strings.Contains(o.stdout, "wrote-") {
			t.Fatalf("kernel files writable: %q", o.stdout)
		}
		for _, l := range lines(o.stdout) {
			if name, n, ok := strings.Cut(l, " "); ok && n != "0" {
				t.Errorf("/proc/%s shows %s bytes, want it masked", name, n)
			}
		}
	})
}

func TestNetwork(t *testing.T) {
	hostL, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostL.Close()
	var hostHits sync.WaitGroup
	hits := 0
	var hitsMu sync.Mutex
	hostHits.Add(1)
	go func() {
		defer hostHits.Done()
		for {
			c, err := hostL.Accept()
			if err != nil {
				return
			}
			hitsMu.Lock()
			hits++
			hitsMu.Unlock()
			c.Close()
		}
	}()
	eachRuntime(t, func(t *testing.T, r *oci.Runtime) {
		b := newBox(t, r, sandbox.Spec{Network: sandbox.Network{ExposedTCP: []uint16{4000}}})
		o := b.sh(`tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '`)
		if got := strings.Join(lines(o.stdout), ","); got != "lo" {
			t.Fatalf("interfaces = %q, want only lo", got)
		}
		if o := b.probe("connect", "tcp", hostL.Addr().String()); !strings.Contains(o.stdout, "error:") {
			t.Fatalf("sandbox reached the host's %s: %q", hostL.Addr(), o.stdout)
		}
		if o := b.probe("connect", "tcp", "10.255.255.1:80"); !strings.Contains(o.stdout, "error:") {
			t.Fatalf("connect to an outside address: %q", o.stdout)
		}
		if o := b.sh(`getent hosts example.com; echo "exit=$?"`); strings.Contains(o.stdout, "example.com") {
			t.Fatalf("DNS resolved: %q", o.stdout)
		}

		l, ok := b.sb.Listener(4000)
		if !ok {
			t.Fatal("no listener for the exposed port")
		}
		if _, ok := b.sb.Listener(4001); ok {
			t.Fatal("a listener for a port that is not exposed")
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "served by the daemon: %s", r.URL.Path)
		})}
		go srv.Serve(l)
		defer srv.Close()
		o = b.sh(`curl -sS --max-time 5 http://127.0.0.1:4000/hello; echo; curl -sS --max-time 2 http://127.0.0.1:4001/ 2>&1 || echo refused`)
		if !strings.Contains(o.stdout, "served by the daemon: /hello") || !strings.Contains(o.stdout, "refused") {
			t.Fatalf("inside: %q", o.stdout)
		}
		if o := b.probe("get", "http://127.0.0.1:4000/probe"); !strings.Contains(o.stdout, "200 served by the daemon: /probe") {
			t.Fatalf("probe GET: %q", o.stdout)
		}
		// Many connections at once through the agent.
		o = b.sh(`for i in 1 2 3 4 5 6 7 8; do curl -s --max-time 5 http://127.0.0.1:4000/$i & done; wait; echo`)
		if n := strings.Count(o.stdout, "served by the daemon"); n != 8 {
			t.Fatalf("%d of 8 concurrent requests served: %q", n, o.stdout)
		}
	})
	hitsMu.Lock()
	defer hitsMu.Unlock()
	if hits != 0 {
		t.Fatalf("the host's loopback listener was reached %d times", hits)
	}
}

func TestSeccomp(t *testing.T) {
	eachRuntime(t, func(t *testing.T, r *oci.Runtime) {
		b := newBox(t, r, sandbox.Spec{})
		o := b.probe("syscalls")
		want := map[string][]string{
			"unshare": {"EPERM"}, "mount": {"EPERM"}, "setns": {"EPERM"}, "clone3": {"ENOSYS"},
			"clone_newuser": {"EPERM"}, "keyctl": {"EPERM"}, "bpf": {"EPERM"}, "ptrace": {"EPERM"},
			"ioctl_tiocsti": {"EPERM"}, "socket_mptcp": {"EPROTONOSUPPORT"},
		}
		got := map[string]string{}
		for _, l := range lines(o.stdout) {
			if k, v, ok := strings.Cut(l, " "); ok {
				got[k] = v
			}
		}
		for k, ok := range want {
			if g := got[k]; !contains(ok, g) {
				t.Errorf("%s: %q, want %v", k, g, ok)
			}
		}
		if r.Name() == oci.Runsc {
			return // the sentry implements only the x86-64 ABI in any case
		}
		// libseccomp's bad-architecture action kills the calling thread
		// (the native filter kills the process): a Go probe then hangs
		// until the timeout. Either way the call never returns.
		o = b.exec(sandbox.ExecRequest{Argv: []string{wire.HelperPath}, Env: []string{"IRONCLAW_OCI_PROBE=int80"}, Timeout: 3 * time.Second})
		if strings.Contains(o.stdout, "survived") || (o.res.ExitCode != 128+31 && !o.res.TimedOut) {
			t.Fatalf("int $0x80 keyctl: %+v %q, want killed by SIGSYS", o.res, o.stdout)
		}
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestLimits(t *testing.T) {
	eachRuntime(t, func(t *testing.T, r *oci.Runtime) {
		t.Run("memory", func(t *testing.T) {
			b := newBox(t, r, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 96 << 20}})
			o := b.exec(sandbox.ExecRequest{Argv: []string{wire.HelperPath, "300"}, Env: []string{"IRONCLAW_OCI_PROBE=alloc"}})
			if strings.Contains(o.stdout, "allocated 300") {
				t.Fatalf("allocated 300MiB under a 96MiB limit: %+v", o.res)
			}
			// On runsc the daemon's memory watch has the agent kill the
			// largest process, with the same result.
			if o.err != nil || o.res.ExitCode != 137 || !o.res.OOMKilled || o.res.Signal != 9 {
				t.Fatalf("memory hog: %+v %v, want exit 137 and OOMKilled", o.res, o.err)
			}
			if o := b.sh(`echo alive`); !strings.Contains(o.stdout, "alive") {
				t.Fatalf("sandbox unusable after OOM: %q", o.stdout)
			}
			if st, err := b.sb.Stats(context.Background()); err != nil || st.OOMKills == 0 {
				t.Fatalf("Stats after OOM = %+v, %v", st, err)
			}
		})
		b := newBox(t, r, sandbox.Spec{Limits: sandbox.Limits{Pids: 40, Timeout: 2 * time.Second, OutputBytes: 1000}})
		t.Run("pids", func(t *testing.T) {
			o := b.exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", `for i in $(seq 100); do sleep 1 & done; echo started; wait`}})
			select {
			case <-b.sb.Done():
				t.Fatal("the sandbox died under the pids limit")
			default:
			}
			if !strings.Contains(o.stdout+o.stderr, "fork") && !strings.Contains(o.stdout+o.stderr, "Resource temporarily unavailable") {
				t.Fatalf("100 processes under a pids limit of 40: %q %q %v", o.stdout, o.stderr, o.err)
			}
			// The sleeps that did start hold the limit for a second more
			// (the exec returned when the shell gave up); until they end, a
			// new exec may itself fail to start. Wait for all of them, so
			// the next subtests start from an idle sandbox.
			deadline := time.Now().Add(10 * time.Second)
			for {
				o := b.exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", `ps -eo comm | grep -c '^sleep$' || true`}})
				if o.err == nil && o.res.ExitCode == 0 && strings.TrimSpace(o.stdout) == "0" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no exec works after the pids test: %v", o.err)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
		t.Run("timeout", func(t *testing.T) {
			start := time.Now()
			o := b.exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 60 & sleep 60"}})
			if o.err != nil || !o.res.TimedOut || o.res.ExitCode != 137 || o.res.Signal != 9 {
				t.Fatalf("timeout: %+v %v", o.res, o.err)
			}
			if d := time.Since(start); d > 8*time.Second {
				t.Fatalf("timeout took %v", d)
			}
			// The whole process group went, background job included.
			deadline := time.Now().Add(5 * time.Second)
			for {
				o = b.sh(`for p in /proc/[0-9]*; do cat $p/cmdline 2>/dev/null | tr '\0' ' '; echo; done | grep -c '^sleep 60' || true`)
				if strings.TrimSpace(o.stdout) == "0" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s sleep processes survived the timeout", strings.TrimSpace(o.stdout))
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
		t.Run("output cap", func(t *testing.T) {
			o := b.exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "head -c 100000 /dev/zero; head -c 5000 /dev/zero >&2"}})
			if o.err != nil || !o.res.Truncated || o.res.StdoutBytes != 100000 || o.res.StderrBytes != 5000 || len(o.stdout)+len(o.stderr) != 1000 {
				t.Fatalf("output cap: %+v %v, kept %d+%d", o.res, o.err, len(o.stdout), len(o.stderr))
			}
		})
		t.Run("stats", func(t *testing.T) {
			st, err := b.sb.Stats(context.Background())
			if err != nil || st.MemoryBytes <= 0 || st.Pids <= 0 {
				t.Fatalf("Stats = %+v, %v", st, err)
			}
		})
	})
}

func TestExitCodes(t *testing.T) {
	eachRuntime(t, func(t *testing.T, r *oci.Runtime) {
		b := newBox(t, r, sandbox.Spec{})
		b.sh(`printf 'echo hi\n' > /workspace/noexec; mkdir /workspace/dir`)
		cases := []struct {
			argv    []string
			cwd     string
			code    int
			wantErr error
		}{
			{[]string{"/bin/sh", "-c", "exit 7"}, "", 7, nil},
			{[]string{"/bin/sh", "-c", "exit 127"}, "", 127, nil},
			{[]string{"/bin/sh", "-c", "kill -TERM $$"}, "", 143, nil},
			{[]string{"nosuchcommand"}, "", 127, sandbox.ErrCommandNotFound},
			{[]string{"/nonexistent"}, "", 127, sandbox.ErrCommandNotFound},
			{[]string{"/workspace/noexec"}, "", 126, sandbox.ErrNotExecutable},
			{[]string{"/workspace/dir"}, "", 126, sandbox.ErrNotExecutable},
			{[]string{"true"}, "/nonexistent", 126, sandbox.ErrNotExecutable},
			{[]string{"pwd"}, "/tmp", 0, nil},
		}
		for _, c := range cases {
			o := b.exec(sandbox.ExecRequest{Argv: c.argv, Cwd: c.cwd})
			if o.res.ExitCode != c.code || !errors.Is(o.err, c.wantErr) || (c.wantErr == nil && o.err != nil) {
				t.Errorf("%q in %q: exit %d, err %v; want %d, %v", c.argv, c.cwd, o.res.ExitCode, o.err, c.code, c.wantErr)
			}
			if strings.Contains(o.stderr, "\x00") {
				t.Errorf("%q: the exec front's header leaked into stderr: %q", c.argv, o.stderr)
			}
		}
		o := b.exec(sandbox.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader("from stdin")})
		if o.err != nil || o.stdout != "from stdin" {
			t.Fatalf("stdin: %q %v", o.stdout, o.err)
		}
		o = b.exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo $FOO $HOME"}, Env: []string{"FOO=bar", "HOME=/tmp"}})
		if strings.TrimSpace(o.stdout) != "bar /tmp" {
			t.Fatalf("env: %q", o.stdout)
		}
		if _, err := b.sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"sh"}, TTY: true}); !errors.Is(err, sandbox.ErrUnsupported) {
			t.Fatalf("TTY: %v, want ErrUnsupported", err)
		}
	})
}

func TestFiles(t *testing.T) {
	marker := filepath.Join("/var/tmp", fmt.Sprintf("ironclaw-oci-files-%d", os.Getpid()))
	if err := os.WriteFile(marker, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(marker) })
	eachRuntime(t, func(t *testing.T, r *oci.Runtime) {
		b := newBox(t, r, sandbox.Spec{})
		ctx := context.Background()
		data := bytes.Repeat([]byte("0123456789"), 100000)
		if err := b.sb.WriteFile(ctx, "/workspace/a/b/c.txt", bytes.NewReader(data), 0o600); err != nil {
			t.Fatalf("WriteFile: %v", err)
		}
		var got bytes.Buffer
		if err := b.sb.ReadFile(ctx, "/workspace/a/b/c.txt", &got); err != nil || !bytes.Equal(got.Bytes(), data) {
			t.Fatalf("ReadFile: %v, %d bytes", err, got.Len())
		}
		if o := b.probe("stat", "/workspace/a/b/c.txt"); strings.TrimSpace(o.stdout) != "600 65532" {
			t.Fatalf("written file: %q", o.stdout)
		}
		list, err := b.sb.ListDir(ctx, "/workspace/a/b")
		if err != nil || len(list) != 1 || list[0].Name != "c.txt" || list[0].Type != "file" || list[0].Size != int64(len(data)) {
			t.Fatalf("ListDir = %+v, %v", list, err)
		}
		if err := b.sb.ReadFile(ctx, "/workspace/missing", &got); !errors.Is(err, sandbox.ErrNotFound) {
			t.Fatalf("ReadFile(missing) = %v, want ErrNotFound", err)
		}
		if err := b.sb.ReadFile(ctx, "/etc/passwd", &got); !errors.Is(err, sandbox.ErrInvalidRequest) {
			t.Fatalf("ReadFile(/etc/passwd) = %v, want ErrInvalidRequest", err)
		}

		// Symlinks planted inside must never lead a file operation out.
		b.sh(fmt.Sprintf(`ln -s %s /workspace/x; ln -s / /workspace/root; ln -s /etc /workspace/etc; ln -s /tmp /workspace/t`, marker))
		for _, p := range []string{"/workspace/x", "/workspace/root" + marker, "/workspace/etc/passwd", "/workspace/root/etc/passwd"} {
			var out bytes.Buffer
			err := b.sb.ReadFile(ctx, p, &out)
			if err == nil || strings.Contains(out.String(), "host secret") || strings.Contains(out.String(), "sandbox:x") {
				t.Errorf("ReadFile(%s) = %v, %q; want refused", p, err, out.String())
			}
		}
		for _, p := range []string{"/workspace/x", "/workspace/etc/evil", "/workspace/t/evil", "/workspace/root/tmp/evil"} {
			if err := b.sb.WriteFile(ctx, p, strings.NewReader("evil"), 0o644); err == nil {
				t.Errorf("WriteFile(%s) followed a symlink", p)
			}
		}
		if host, _ := os.ReadFile(marker); string(host) != "host secret" {
			t.Fatalf("host marker changed: %q", host)
		}
		if list, err := b.sb.ListDir(ctx, "/workspace/root"); err == nil {
			t.Fatalf("ListDir through a symlink to /: %+v", list)
		}
	})
}

func TestConcurrentExec(t *testing.T) {
	eachRuntime(t, func(t *testing.T, r *oci.Runtime) {
		b := newBox(t, r, sandbox.Spec{})
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var out bytes.Buffer
				res, err := b.sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", fmt.Sprintf("sleep 0.3; echo %d; exit %d", i, i)}, Stdout: &out})
				if err != nil || res.ExitCode != i || strings.TrimSpace(out.String()) != fmt.Sprint(i) {
					errs <- fmt.Errorf("exec %d: %+v %v %q", i, res, err, out.String())
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

func TestDestroyLeavesNothing(t *testing.T) {
	eachRuntime(t, func(t *testing.T, r *oci.Runtime) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		s, err := r.Create(ctx, sandbox.Spec{Network: sandbox.Network{ExposedTCP: []uint16{4000}}})
		if err != nil {
			t.Fatal(err)
		}
		sb := s.(*oci.Sandbox)
		if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 100 & sleep 100 & echo started"}, Timeout: time.Second}); err != nil {
			t.Fatal(err)
		}
		cgs, bundle := sb.CgroupDirs(), sb.Bundle()
		for _, d := range cgs[:2] { // memory and pids; the rest depends on the runtime
			if _, err := os.Stat(d); err != nil {
				t.Fatalf("cgroup %s before Destroy: %v", d, err)
			}
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Fatalf("second Destroy: %v", err)
		}
		select {
		case <-sb.Done():
		default:
			t.Fatal("Done not closed after Destroy")
		}
		if _, err := os.Stat(bundle); !os.IsNotExist(err) {
			t.Errorf("bundle %s left: %v", bundle, err)
		}
		for _, d := range cgs {
			if _, err := os.Stat(d); !os.IsNotExist(err) {
				t.Errorf("cgroup %s left: %v", d, err)
			}
		}
		mi, _ := os.ReadFile("/proc/self/mountinfo")
		if strings.Contains(string(mi), sb.ID()) {
			t.Errorf("a mount mentions %s", sb.ID())
		}
		// No process anywhere on the host still refers to the sandbox.
		deadline := time.Now().Add(5 * time.Second)
		for {
			left := processesMentioning(sb.ID())
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("processes left: %v", left)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrClosed) {
			t.Fatalf("Exec after Destroy = %v, want ErrClosed", err)
		}
		if c, err := net.DialTimeout("tcp", "127.0.0.1:4000", time.Second); err == nil {
			c.Close()
			t.Log("note: something on the host listens on 127.0.0.1:4000 (not the sandbox)")
		}
	})
}

// processesMentioning lists host processes whose command line or cgroup
// names id.
func processesMentioning(id string) []string {
	var out []string
	des, _ := os.ReadDir("/proc")
	for _, de := range des {
		if de.Name()[0] < '0' || de.Name()[0] > '9' {
			continue
		}
		for _, f := range []string{"cmdline", "cgroup"} {
			b, err := os.ReadFile(filepath.Join("/proc", de.Name(), f))
			if err == nil && bytes.Contains(b, []byte(id)) {
				out = append(out, de.Name()+": "+strings.ReplaceAll(string(b), "\x00", " "))
				break
			}
		}
	}
	return out
}
