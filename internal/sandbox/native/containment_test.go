package native_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
	"github.com/ironclaw/ironclaw/internal/testutil/int80"
)

// Every test here tries one way out of the sandbox and expects to fail.

func TestEscapeNetwork(t *testing.T) {
	b := probeBox(t, sandbox.Spec{})

	t.Run("only loopback", func(t *testing.T) {
		o := b.Sh(`tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '`)
		if got := strings.Join(sandboxtest.Lines(o.Stdout), ","); got != "lo" {
			t.Fatalf("interfaces = %q, want only lo", got)
		}
	})
	t.Run("no DNS", func(t *testing.T) {
		o := b.Sh(`getent hosts example.com; echo "exit=$?"`)
		if !strings.Contains(o.Stdout, "exit=2") || strings.Contains(o.Stdout, "example.com") {
			t.Fatalf("getent resolved something: %q", o.Stdout)
		}
	})
	t.Run("no host loopback service", func(t *testing.T) {
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
		o := probe(b, "connect", "tcp", l.Addr().String())
		if !strings.Contains(o.Stdout, "error:") {
			t.Fatalf("sandbox reached the host's %s: %q", l.Addr(), o.Stdout)
		}
		select {
		case <-accepted:
			t.Fatal("host listener accepted a connection from the sandbox")
		default:
		}
	})
	t.Run("no outside address", func(t *testing.T) {
		// Only loopback exists, so any other address is unroutable.
		o := probe(b, "connect", "tcp", "10.255.255.1:80")
		if !strings.Contains(o.Stdout, "error:") {
			t.Fatalf("connect to an outside address: %q", o.Stdout)
		}
	})
	t.Run("no host abstract unix socket", func(t *testing.T) {
		name := fmt.Sprintf("@ironclaw-test-%d", os.Getpid())
		l, err := net.Listen("unix", name)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		o := probe(b, "connect", "unix", name)
		if !strings.Contains(o.Stdout, "error:") {
			t.Fatalf("sandbox reached the host's abstract socket: %q", o.Stdout)
		}
	})
	t.Run("loopback TCP ports closed unless listed", func(t *testing.T) {
		o := probe(b, "listen", "tcp4", "127.0.0.1:8080")
		if !strings.Contains(o.Stdout, "error:") {
			t.Fatalf("bind to an unlisted port: %q", o.Stdout)
		}
		o = probe(b, "mptcp")
		if !strings.Contains(o.Stdout, "EPROTONOSUPPORT") {
			t.Fatalf("MPTCP socket (would bypass landlock's TCP rules): %q", o.Stdout)
		}
	})
	t.Run("exposed port reaches the daemon and nothing else", func(t *testing.T) {
		eb := probeBox(t, sandbox.Spec{Network: sandbox.Network{ExposedTCP: []uint16{4000}}})
		l, ok := eb.SB.(*native.Sandbox).Listener(4000)
		if !ok {
			t.Fatal("no listener for the exposed port")
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, "served by the daemon")
		})}
		go srv.Serve(l)
		defer srv.Close()
		o := eb.Sh(`wget -qO- http://127.0.0.1:4000/; echo; wget -qO- -t 1 -T 2 http://127.0.0.1:4001/ 2>&1 || echo refused`)
		if !strings.Contains(o.Stdout, "served by the daemon") || !strings.Contains(o.Stdout, "refused") {
			t.Fatalf("inside: %q", o.Stdout)
		}
		// The port lives on the sandbox's loopback, not the host's.
		if c, err := net.DialTimeout("tcp", "127.0.0.1:4000", time.Second); err == nil {
			c.Close()
			t.Fatal("the sandbox's exposed port is reachable on the host's loopback")
		}
	})
	t.Run("listed loopback port works", func(t *testing.T) {
		lb := probeBox(t, sandbox.Spec{Network: sandbox.Network{LoopbackTCP: []uint16{8080}}})
		o := probe(lb, "listen", "tcp4", "127.0.0.1:8080")
		if !strings.Contains(o.Stdout, "listening") {
			t.Fatalf("bind to a listed port failed: %q %v", o.Stdout+o.Stderr, o.Err)
		}
	})
}

func TestEscapeHostFiles(t *testing.T) {
	marker := filepath.Join(os.TempDir(), fmt.Sprintf("ironclaw-marker-%d", os.Getpid()))
	if err := os.WriteFile(marker, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(marker) })
	b := probeBox(t, sandbox.Spec{})

	t.Run("host marker invisible", func(t *testing.T) {
		o := b.Sh(fmt.Sprintf(`cat %s 2>/dev/null; find / -path /proc -prune -o -name 'ironclaw-marker-*' -print 2>/dev/null`, marker))
		if strings.Contains(o.Stdout, "host secret") || strings.Contains(o.Stdout, "marker") {
			t.Fatalf("host marker visible: %q", o.Stdout)
		}
	})
	t.Run("top level is the sandbox's own", func(t *testing.T) {
		o := b.Sh(`ls -A /`)
		got := strings.Join(sandboxtest.Lines(o.Stdout), " ")
		for _, name := range []string{"home", "root", "var", "run", "srv", "opt", "mnt", "media", "boot"} {
			if strings.Contains(" "+got+" ", " "+name+" ") {
				t.Errorf("/%s exists inside: ls / = %q", name, got)
			}
		}
		// /sys holds the sandbox's own cgroup view and nothing else.
		if o := b.Sh(`find /sys -maxdepth 2 | sort | tr '\n' ' '`); o.Stdout != "/sys /sys/fs /sys/fs/cgroup " {
			t.Errorf("/sys inside: %q", o.Stdout)
		}
	})
	t.Run("no docker socket or sockets at all", func(t *testing.T) {
		o := b.Sh(`for p in /var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock; do test -e $p && echo "found $p"; done; find / -xdev -type s 2>/dev/null; echo done`)
		if strings.TrimSpace(o.Stdout) != "done" {
			t.Fatalf("sockets visible: %q", o.Stdout)
		}
	})
	t.Run("synthetic etc", func(t *testing.T) {
		o := b.Sh(`ls /etc | tr '\n' ' '; grep -c . /etc/passwd`)
		if strings.Contains(o.Stdout, "shadow") || strings.Contains(o.Stdout, "ssh") || !strings.Contains(o.Stdout, "passwd") {
			t.Fatalf("/etc is not synthetic: %q", o.Stdout)
		}
		host, _ := os.ReadFile("/etc/passwd")
		inner := b.Sh(`cat /etc/passwd`).Stdout
		if string(host) == inner {
			t.Fatal("/etc/passwd is the host's")
		}
	})
	t.Run("root is read-only", func(t *testing.T) {
		o := b.Sh(`for p in /x /usr/x /etc/x /bin/x /dev/x; do touch $p 2>/dev/null && echo "wrote $p"; done; echo done`)
		if strings.TrimSpace(o.Stdout) != "done" {
			t.Fatalf("wrote outside /workspace and /tmp: %q", o.Stdout)
		}
	})
	t.Run("kernel files masked", func(t *testing.T) {
		o := b.Sh(`for f in kcore keys timer_list sched_debug kallsyms kmsg config.gz slabinfo; do [ -e /proc/$f ] && echo "$f $(cat /proc/$f 2>/dev/null | wc -c)"; done; echo 1 > /proc/sys/kernel/domainname 2>/dev/null && echo wrote-sysctl; echo 1 > /proc/sysrq-trigger 2>/dev/null && echo wrote-sysrq; echo done`)
		if strings.Contains(o.Stdout, "wrote-") || !strings.Contains(o.Stdout, "done") {
			t.Fatalf("kernel files writable: %q", o.Stdout)
		}
		checked := 0
		for _, l := range sandboxtest.Lines(o.Stdout) {
			if name, n, ok := strings.Cut(l, " "); ok {
				checked++
				if n != "0" {
					t.Errorf("/proc/%s shows %s bytes, want it masked", name, n)
				}
			}
		}
		if checked < 3 {
			t.Fatalf("only %d masked files checked: %q", checked, o.Stdout)
		}
	})
}

func TestEscapePrivilege(t *testing.T) {
	b := probeBox(t, sandbox.Spec{})

	t.Run("identity and capabilities", func(t *testing.T) {
		o := b.Sh(`id -u; id -g; id -G; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\t' ' '`)
		want := "65532\n65532\n65532\nCapInh: 0000000000000000\nCapPrm: 0000000000000000\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\nCapAmb: 0000000000000000\nNoNewPrivs: 1\nSeccomp: 2"
		if strings.TrimSpace(o.Stdout) != want {
			t.Fatalf("got\n%s\nwant\n%s", o.Stdout, want)
		}
	})
	t.Run("host uid is unprivileged", func(t *testing.T) {
		o := b.Sh(`cat /proc/self/uid_map /proc/self/gid_map`)
		for _, l := range sandboxtest.Lines(o.Stdout) {
			f := strings.Fields(l)
			if len(f) == 3 && f[1] == "0" {
				t.Fatalf("sandbox maps to host root: %q", o.Stdout)
			}
		}
	})
	t.Run("setuid binaries are useless", func(t *testing.T) {
		o := b.Sh(`ls -l /usr/bin/su; su root -c 'id -u' </dev/null; echo "su=$?"; grep ' /usr ' /proc/self/mountinfo`)
		if strings.Contains(o.Stdout, "\n0\n") || !strings.Contains(o.Stdout, "nosuid") {
			t.Fatalf("setuid: %q", o.Stdout+o.Stderr)
		}
	})
	t.Run("no new user namespaces", func(t *testing.T) {
		o := probe(b, "userns")
		if strings.TrimSpace(o.Stdout) != "unshare EPERM\nclone EPERM" {
			t.Fatalf("userns: %q", o.Stdout)
		}
		o = b.Sh(`unshare -Ur id 2>&1; echo "exit=$?"`)
		if strings.Contains(o.Stdout, "uid=0") {
			t.Fatalf("unshare -Ur became root: %q", o.Stdout)
		}
	})
	t.Run("init survives signals from inside", func(t *testing.T) {
		probe(b, "signal-init")
		o := b.Sh(`echo alive`)
		if strings.TrimSpace(o.Stdout) != "alive" {
			t.Fatalf("sandbox died after signalling pid 1: %q %v", o.Stdout, o.Err)
		}
	})
	t.Run("init's environment and memory unreadable", func(t *testing.T) {
		o := b.Sh(`cat /proc/1/environ 2>&1; ls /proc/1/fd 2>&1; head -c1 /proc/1/mem 2>&1; echo done`)
		if !strings.Contains(o.Stdout, "Permission denied") || strings.Contains(o.Stdout, "GOMAXPROCS") {
			t.Fatalf("pid 1 is readable: %q", o.Stdout)
		}
	})
}

func TestEscapeSyscalls(t *testing.T) {
	b := probeBox(t, sandbox.Spec{})
	o := probe(b, "syscalls")
	for _, l := range sandboxtest.Lines(o.Stdout) {
		name, errno, _ := strings.Cut(l, " ")
		want := "EPERM"
		if name == "clone3" {
			want = "ENOSYS"
		}
		if errno != want {
			t.Errorf("%s: %s, want %s", name, errno, want)
		}
	}
	if n := len(sandboxtest.Lines(o.Stdout)); n < 40 {
		t.Fatalf("only %d syscalls probed: %q", n, o.Stdout)
	}
	t.Run("int 0x80 is killed", func(t *testing.T) {
		if why := int80.Refused(); why != "" {
			t.Skip(why)
		}
		o := probe(b, "int80")
		if o.Res.Signal != int(syscall.SIGSYS) || strings.Contains(o.Stdout, "survived") {
			t.Fatalf("i386 keyctl: signal %d, out %q", o.Res.Signal, o.Stdout)
		}
	})
	t.Run("x32 is killed", func(t *testing.T) {
		o := probe(b, "x32")
		if o.Res.Signal != int(syscall.SIGSYS) {
			t.Fatalf("x32 getpid: signal %d, out %q", o.Res.Signal, o.Stdout)
		}
	})
}

func TestEscapeResources(t *testing.T) {
	t.Run("fork bomb capped", func(t *testing.T) {
		b := probeBox(t, sandbox.Spec{Limits: sandbox.Limits{Pids: 32}})
		o := b.Sh(`i=0; while [ $i -lt 200 ]; do sleep 2 & i=$((i+1)); done 2>&1 | head -1; wait; echo finished`)
		if !strings.Contains(o.Stdout+o.Stderr, "fork") && !strings.Contains(o.Stdout+o.Stderr, "Resource temporarily unavailable") {
			t.Fatalf("200 processes started under pids=32: %q", o.Stdout+o.Stderr)
		}
		st, err := b.SB.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		// pid 1's own threads may use the tasks reserved for it.
		if st.Pids > 32+sandbox.InitPidsReserve {
			t.Fatalf("pids %d > 32 + %d", st.Pids, sandbox.InitPidsReserve)
		}
		if o := b.Sh(`echo alive`); strings.TrimSpace(o.Stdout) != "alive" {
			t.Fatal("sandbox unusable after the fork bomb")
		}
	})
	t.Run("memory hog killed", func(t *testing.T) {
		b := probeBox(t, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 64 << 20}})
		o := probe(b, "alloc", "512")
		if o.Res.ExitCode != 137 || !o.Res.OOMKilled || strings.Contains(o.Stdout, "allocated") {
			t.Fatalf("512MiB under a 64MiB limit: %+v %q", o.Res, o.Stdout)
		}
		if o := b.Sh(`echo alive`); strings.TrimSpace(o.Stdout) != "alive" {
			t.Fatal("sandbox unusable after the OOM kill")
		}
	})
	t.Run("cpu throttled", func(t *testing.T) {
		b := probeBox(t, sandbox.Spec{Limits: sandbox.Limits{CPUs: 0.2}})
		before, _ := b.SB.Stats(context.Background())
		b.Sh(`timeout 2 sh -c 'while :; do :; done'; true`)
		after, _ := b.SB.Stats(context.Background())
		used := after.CPUUsage - before.CPUUsage
		if used > 1100*time.Millisecond || used <= 0 {
			t.Fatalf("busy loop for 2s under cpus=0.2 used %v of CPU", used)
		}
		t.Logf("2s busy loop under cpus=0.2 used %v of CPU", used)
	})
	t.Run("output flood truncated", func(t *testing.T) {
		b := probeBox(t, sandbox.Spec{Limits: sandbox.Limits{OutputBytes: 64 << 10}})
		o := b.Sh(`head -c 10000000 /dev/zero; echo tail >&2`)
		if !o.Res.Truncated || len(o.Stdout)+len(o.Stderr) != 64<<10 || o.Res.StdoutBytes != 10000000 || o.Res.ExitCode != 0 {
			t.Fatalf("truncated=%v kept=%d produced=%d exit=%d", o.Res.Truncated, len(o.Stdout)+len(o.Stderr), o.Res.StdoutBytes, o.Res.ExitCode)
		}
	})
	t.Run("disk fill bounded", func(t *testing.T) {
		b := probeBox(t, sandbox.Spec{Limits: sandbox.Limits{WorkspaceBytes: 8 << 20, TmpBytes: 8 << 20}})
		o := b.Sh(`dd if=/dev/zero of=/workspace/f bs=1M count=64 2>&1 | grep -c 'No space'; dd if=/dev/zero of=/tmp/f bs=1M count=64 2>&1 | grep -c 'No space'; du -sk /workspace/f /tmp/f`)
		l := sandboxtest.Lines(o.Stdout)
		if len(l) < 2 || l[0] != "1" || l[1] != "1" {
			t.Fatalf("disk fill: %q", o.Stdout)
		}
	})
	t.Run("wall time enforced", func(t *testing.T) {
		b := probeBox(t, sandbox.Spec{Limits: sandbox.Limits{Timeout: 500 * time.Millisecond}})
		start := time.Now()
		o := b.Sh(`sleep 30`)
		if !o.Res.TimedOut || o.Res.ExitCode != 137 || time.Since(start) > 5*time.Second {
			t.Fatalf("sleep 30 under a 500ms limit: %+v after %v", o.Res, time.Since(start))
		}
	})
	t.Run("open files", func(t *testing.T) {
		b := probeBox(t, sandbox.Spec{Limits: sandbox.Limits{OpenFiles: 64}})
		o := b.Sh(`ulimit -n; ulimit -Hn`)
		if strings.Join(sandboxtest.Lines(o.Stdout), " ") != "64 64" {
			t.Fatalf("ulimit -n: %q", o.Stdout)
		}
	})
}

func TestEscapeSecrets(t *testing.T) {
	const secret = "sk-ironclaw-test-SECRET-4c8f2a"
	t.Setenv("OPENAI_API_KEY", secret)
	t.Setenv("IRONCLAW_OPERATOR_TOKEN", secret)
	b := probeBox(t, sandbox.Spec{})
	o := b.Sh(`env; cat /proc/*/environ 2>/dev/null; grep -rl ` + secret + ` / --exclude-dir=proc 2>/dev/null; echo done`)
	if strings.Contains(o.Stdout, secret) || strings.Contains(o.Stdout, "OPENAI_API_KEY") {
		t.Fatalf("secret visible inside: %q", o.Stdout)
	}
	if !strings.Contains(o.Stdout, "HOME=/workspace") {
		t.Fatalf("unexpected environment: %q", o.Stdout)
	}
}

func TestEscapeFDs(t *testing.T) {
	// A descriptor the "daemon" holds without close-on-exec must not leak.
	f, err := os.Open("/etc/hostname")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := syscall.Dup(int(f.Fd())); err != nil { // a plain dup has no close-on-exec
		t.Fatal(err)
	}
	b := probeBox(t, sandbox.Spec{})
	o := probe(b, "fds")
	var fds []string
	for _, l := range sandboxtest.Lines(o.Stdout) {
		f := strings.Fields(l)
		if len(f) > 1 && strings.HasPrefix(f[1], "/sys/fs/cgroup/cpu") {
			continue // the Go runtime of the probe itself reads its CPU limit there
		}
		fds = append(fds, f[0])
	}
	if strings.Join(fds, ",") != "0,1,2" {
		t.Fatalf("command holds descriptors %q", o.Stdout)
	}
}

func TestEscapeTerminal(t *testing.T) {
	b := probeBox(t, sandbox.Spec{})
	t.Run("no terminal without tty", func(t *testing.T) {
		o := b.Sh(`test -t 0 || echo not-a-tty; test -t 1 || echo not-a-tty`)
		if strings.Count(o.Stdout, "not-a-tty") != 2 {
			t.Fatalf("stdio is a terminal: %q", o.Stdout)
		}
	})
	t.Run("TIOCSTI denied on its own terminal", func(t *testing.T) {
		o := b.Exec(sandbox.ExecRequest{Argv: []string{"/probe"}, Env: []string{"IRONCLAW_PROBE=tiocsti"}, TTY: true})
		if o.Err != nil || !strings.Contains(o.Stdout, "TIOCSTI EPERM") {
			t.Fatalf("TIOCSTI: %q %v", o.Stdout, o.Err)
		}
	})
}

func TestEscapeOtherSandboxes(t *testing.T) {
	a := probeBox(t, sandbox.Spec{})
	b := probeBox(t, sandbox.Spec{})
	a.Sh(`echo a-secret > /workspace/a.txt; echo a-secret > /tmp/a.txt`)
	done := make(chan sandboxtest.Output, 1)
	go func() { done <- a.Exec(sandbox.ExecRequest{Argv: []string{"sleep", "3"}}) }()
	time.Sleep(200 * time.Millisecond)
	o := b.Sh(`ls -A /workspace /tmp; cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\0' ' '; echo; ls /proc | grep -cE '^[0-9]+$'`)
	if strings.Contains(o.Stdout, "a.txt") || strings.Contains(o.Stdout, "sleep") {
		t.Fatalf("sandbox b sees a: %q", o.Stdout)
	}
	<-done
}
