package docker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/docker"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"github.com/moby/moby/client"
)

func TestNewUnreachable(t *testing.T) {
	ctx := context.Background()
	for _, host := range []string{"unix:///nonexistent/docker.sock", "tcp://127.0.0.1:2375"} {
		_, err := docker.New(ctx, docker.Options{Host: host, StateDir: t.TempDir()})
		if !errors.Is(err, sandbox.ErrUnsupported) {
			t.Errorf("New(%s) = %v, want ErrUnsupported", host, err)
		}
	}
	_, err := docker.New(ctx, docker.Options{Host: "unix:///nonexistent/docker.sock", StateDir: "relative"})
	if !errors.Is(err, sandbox.ErrInvalidSpec) {
		t.Errorf("New(relative state dir) = %v, want ErrInvalidSpec", err)
	}
}

func TestUnknownRuntime(t *testing.T) {
	runtimeFor(t)
	_, err := docker.New(context.Background(), docker.Options{Runtime: "no-such-runtime", StateDir: stateDir})
	if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "no-such-runtime") {
		t.Fatalf("New(unknown runtime) = %v, want ErrUnsupported naming it", err)
	}
}

func TestSeal(t *testing.T) {
	b := newBox(t, sandbox.Spec{})
	wantName := "docker"
	if r := os.Getenv("IRONCLAW_DOCKER_RUNTIME"); r != "" {
		wantName += "-" + r
	}
	if got := runtimeFor(t).Name(); got != wantName {
		t.Errorf("Name() = %q, want %s", got, wantName)
	}
	o := b.sh(`id -u; id -g; id -G; grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\t' ' '`)
	want := []string{"65532", "65532", "65532", "CapInh: 0000000000000000", "CapPrm: 0000000000000000",
		"CapEff: 0000000000000000", "CapBnd: 0000000000000000", "CapAmb: 0000000000000000", "NoNewPrivs: 1", "Seccomp: 2"}
	if runsc() {
		// gVisor's /proc/self/status has no CapAmb and NoNewPrivs lines;
		// the probe below reads no_new_privs through prctl.
		want = slices.DeleteFunc(want, func(s string) bool { return strings.HasPrefix(s, "CapAmb") || strings.HasPrefix(s, "NoNewPrivs") })
	}
	if got := lines(o.stdout); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	o = b.exec(sandbox.ExecRequest{Argv: []string{wire.HelperPath, wire.ModeProbe}})
	if o.err != nil || !strings.Contains(o.stdout, "no_new_privs 1\nseccomp 2\n") || !strings.Contains(o.stdout, "cap_eff 0x0\n") {
		t.Fatalf("probe: %v %q %q", o.err, o.stdout, o.stderr)
	}
	o = b.sh(`echo $HOME; pwd; hostname; ulimit -n; env | sort | tr '\n' ' '`)
	if l := lines(o.stdout); len(l) < 4 || l[0] != "/workspace" || l[1] != "/workspace" || l[2] != "sandbox" || l[3] != "1024" {
		t.Fatalf("home, cwd, hostname, open files: %q", o.stdout)
	}
	if strings.Contains(o.stdout, "IRONCLAW") || strings.Contains(o.stdout, "GOMAXPROCS") || strings.Contains(o.stdout, "DOCKER") {
		t.Fatalf("environment leaks: %q", o.stdout)
	}
	// The refused calls of the shared deny list.
	o = b.sh(`unshare -U true 2>&1; unshare -n true 2>&1; echo end`)
	if strings.Count(o.stdout, "Operation not permitted") != 2 {
		t.Fatalf("unshare: %q", o.stdout)
	}
}

func TestFilesystem(t *testing.T) {
	marker := filepath.Join("/var/tmp", fmt.Sprintf("ironclaw-docker-marker-%d", os.Getpid()))
	if err := os.WriteFile(marker, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(marker) })
	b := newBox(t, sandbox.Spec{})
	o := b.sh(`for p in /x /usr/x /etc/x /bin/x /dev/x /sys/x /.ironclaw/x /.ironclaw/sock/x /dev/shm/x /dev/mqueue/x /proc/sys/kernel/domainname; do touch $p 2>/dev/null && echo "wrote $p"; done; echo done`)
	if strings.TrimSpace(o.stdout) != "done" {
		t.Fatalf("wrote outside /workspace and /tmp: %q", o.stdout)
	}
	o = b.sh(`touch /workspace/a /tmp/b && printf '#!/bin/sh\necho ran\n' > /tmp/s && chmod +x /tmp/s && /tmp/s && find /tmp /workspace /workspace/a -maxdepth 0 -printf '%m %U\n'`)
	if got := strings.Join(lines(o.stdout), ","); got != "ran,1777 0,755 65532,644 65532" {
		t.Fatalf("writable areas: %q %q", o.stdout, o.stderr)
	}
	o = b.sh(`ls -A / | tr '\n' ' '; echo; cat /var/tmp/ironclaw-docker-marker-* 2>&1; echo end`)
	for _, name := range []string{"home", "root", "var", "run", "srv", "opt", "mnt", "boot", "work"} {
		if strings.Contains(" "+lines(o.stdout)[0]+" ", " "+name+" ") {
			t.Errorf("/%s exists inside: %q", name, o.stdout)
		}
	}
	if strings.Contains(o.stdout, "host secret") {
		t.Fatalf("host file visible: %q", o.stdout)
	}
	host, _ := os.ReadFile("/etc/passwd")
	if inner := b.sh(`cat /etc/passwd`).stdout; inner == string(host) || !strings.Contains(inner, "sandbox:x:65532") {
		t.Fatalf("/etc/passwd is not synthetic: %q", inner)
	}
	// dockerd's own /etc files (resolv.conf with the host's name servers)
	// must not replace ours.
	o = b.sh(`cat /etc/resolv.conf /etc/hosts /etc/hostname`)
	if strings.Contains(o.stdout, "nameserver") || !strings.Contains(o.stdout, "no DNS inside an IronClaw sandbox") || !strings.Contains(o.stdout, "localhost sandbox") {
		t.Fatalf("/etc/resolv.conf, hosts, hostname: %q", o.stdout)
	}
	o = b.sh(`for f in kcore keys timer_list sched_debug; do [ -e /proc/$f ] && echo "$f $(cat /proc/$f 2>/dev/null | wc -c)"; done; echo 1 > /proc/sysrq-trigger 2>/dev/null && echo wrote-sysrq; echo done`)
	if strings.Contains(o.stdout, "wrote-") {
		t.Fatalf("kernel files writable: %q", o.stdout)
	}
	for _, l := range lines(o.stdout) {
		if name, n, ok := strings.Cut(l, " "); ok && n != "0" {
			t.Errorf("/proc/%s shows %s bytes, want it masked", name, n)
		}
	}
}

func TestWorkspaceBind(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "in.txt"), []byte("from host"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := newBox(t, sandbox.Spec{Workspace: dir})
	o := b.sh(`cat /workspace/in.txt; echo out > /workspace/out.txt; echo done`)
	if !strings.Contains(o.stdout, "from host") {
		t.Fatalf("workspace bind: %q %q", o.stdout, o.stderr)
	}
	if got, err := os.ReadFile(filepath.Join(dir, "out.txt")); err != nil || string(got) != "out\n" {
		t.Fatalf("file written inside: %q, %v", got, err)
	}
}

func TestNetwork(t *testing.T) {
	hostL, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hostL.Close()
	var hitsMu sync.Mutex
	hits := 0
	go func() {
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
	b := newBox(t, sandbox.Spec{Network: sandbox.Network{ExposedTCP: []uint16{4000}}})
	o := b.sh(`tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '`)
	if got := strings.Join(lines(o.stdout), ","); got != "lo" {
		t.Fatalf("interfaces = %q, want only lo", got)
	}
	// /sys shows the sandbox's cgroups only: the host's interfaces, among
	// the rest of its sysfs, are masked.
	if o := b.sh(`ls -A /sys/class/net 2>/dev/null`); o.stdout != "" {
		t.Fatalf("/sys/class/net = %q, want nothing", o.stdout)
	}
	o = b.sh(fmt.Sprintf(`curl -sS --max-time 2 http://%s/ 2>&1; echo "exit=$?"; curl -sS --max-time 2 http://10.255.255.1/ 2>&1; echo "exit=$?"`, hostL.Addr()))
	if strings.Count(o.stdout, "exit=0") != 0 {
		t.Fatalf("reached an address outside: %q", o.stdout)
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
	o = b.sh(`for i in 1 2 3 4 5 6 7 8; do curl -s --max-time 5 http://127.0.0.1:4000/$i & done; wait; echo`)
	if n := strings.Count(o.stdout, "served by the daemon"); n != 8 {
		t.Fatalf("%d of 8 concurrent requests served: %q", n, o.stdout)
	}
	// The port exists nowhere on the host.
	if c, err := net.DialTimeout("tcp", "127.0.0.1:4000", time.Second); err == nil {
		c.Close()
		t.Log("note: something on the host listens on 127.0.0.1:4000 (not the sandbox: it has no host port)")
	}
	hitsMu.Lock()
	defer hitsMu.Unlock()
	if hits != 0 {
		t.Fatalf("the host's loopback listener was reached %d times", hits)
	}
}

func TestLimits(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		b := newBox(t, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 64 << 20}})
		o := b.exec(sandbox.ExecRequest{Argv: []string{"python3", "-c", "b = bytearray(200 << 20); print('allocated')"}})
		if o.err != nil && errors.Is(o.err, sandbox.ErrCommandNotFound) {
			t.Skip("no python3 on this host")
		}
		if strings.Contains(o.stdout, "allocated") {
			t.Fatalf("allocated 200MiB under a 64MiB limit: %+v", o.res)
		}
		if runsc() {
			// The sentry's memory is charged to the cgroup: the host's OOM
			// killer ends the whole sandbox (as on the oci backend).
			t.Logf("runsc over the memory limit: %+v, %v", o.res, o.err)
			return
		}
		if o.err != nil || o.res.ExitCode != 137 || !o.res.OOMKilled || o.res.Signal != 9 {
			t.Fatalf("memory hog: %+v %v %q, want exit 137 and OOMKilled", o.res, o.err, o.stderr)
		}
		if o := b.sh(`echo alive`); !strings.Contains(o.stdout, "alive") {
			t.Fatalf("sandbox unusable after OOM: %q", o.stdout)
		}
		if st, err := b.sb.Stats(context.Background()); err != nil || st.OOMKills == 0 {
			t.Fatalf("Stats after OOM = %+v, %v", st, err)
		}
	})
	b := newBox(t, sandbox.Spec{Limits: sandbox.Limits{Pids: 40, Timeout: 2 * time.Second, OutputBytes: 1000}})
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
		// The sleeps that did start hold the limit for a second more;
		// until they end, a new exec may itself fail to start.
		deadline := time.Now().Add(10 * time.Second)
		for {
			o := b.exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", `for p in /proc/[0-9]*; do cat $p/cmdline 2>/dev/null | tr '\0' ' '; echo; done | grep -c '^sleep' || true`}})
			if n, err := strconv.Atoi(strings.TrimSpace(o.stdout)); o.err == nil && err == nil && n == 0 {
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
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		res, err := b.sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sleep", "60"}, Timeout: time.Minute})
		if !errors.Is(err, context.DeadlineExceeded) || res.ExitCode != 137 {
			t.Fatalf("cancelled exec: %+v %v", res, err)
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
		if err != nil || st.MemoryBytes <= 0 || st.Pids <= 0 || st.CPUUsage <= 0 {
			t.Fatalf("Stats = %+v, %v", st, err)
		}
	})
}

func TestExitCodes(t *testing.T) {
	b := newBox(t, sandbox.Spec{})
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
	o := b.exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo out; echo err >&2"}})
	if o.stdout != "out\n" || o.stderr != "err\n" {
		t.Fatalf("streams: %q %q", o.stdout, o.stderr)
	}
	start := time.Now()
	o = b.exec(sandbox.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader("from stdin")})
	if o.err != nil || o.stdout != "from stdin" {
		t.Fatalf("stdin: %q %v", o.stdout, o.err)
	}
	t.Logf("exec with stdin took %v", time.Since(start))
	o = b.exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo $FOO $HOME"}, Env: []string{"FOO=bar", "HOME=/tmp"}})
	if strings.TrimSpace(o.stdout) != "bar /tmp" {
		t.Fatalf("env: %q", o.stdout)
	}
	if _, err := b.sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"sh"}, TTY: true}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("TTY: %v, want ErrUnsupported", err)
	}
}

func TestFiles(t *testing.T) {
	marker := filepath.Join("/var/tmp", fmt.Sprintf("ironclaw-docker-files-%d", os.Getpid()))
	if err := os.WriteFile(marker, []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(marker) })
	b := newBox(t, sandbox.Spec{})
	ctx := context.Background()
	data := bytes.Repeat([]byte("0123456789"), 100000)
	start := time.Now()
	if err := b.sb.WriteFile(ctx, "/workspace/a/b/c.txt", bytes.NewReader(data), 0o600); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	t.Logf("WriteFile of 1MB took %v", time.Since(start))
	var got bytes.Buffer
	if err := b.sb.ReadFile(ctx, "/workspace/a/b/c.txt", &got); err != nil || !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("ReadFile: %v, %d bytes", err, got.Len())
	}
	if o := b.sh(`find /workspace/a/b/c.txt -printf '%m %U'`); strings.TrimSpace(o.stdout) != "600 65532" {
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
}

func TestConcurrentExec(t *testing.T) {
	b := newBox(t, sandbox.Spec{})
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
}

func TestDestroyLeavesNothing(t *testing.T) {
	r := runtimeFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := r.Create(ctx, sandbox.Spec{Network: sandbox.Network{ExposedTCP: []uint16{4000}}})
	if err != nil {
		t.Fatal(err)
	}
	sb := s.(*docker.Sandbox)
	if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 100 & sleep 100 & echo started"}, Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	cid, dir := sb.ContainerID(), sb.StateDir()
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
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("state directory %s left: %v", dir, err)
	}
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", "ironclaw.sandbox="+sb.ID())})
	if err != nil || len(list.Items) != 0 {
		t.Fatalf("containers left: %+v, %v", list.Items, err)
	}
	if _, err := cli.ContainerInspect(ctx, cid, client.ContainerInspectOptions{}); err == nil {
		t.Fatalf("container %s still exists", cid)
	}
	if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("Exec after Destroy = %v, want ErrClosed", err)
	}
	if err := sb.WriteFile(ctx, "/workspace/x", strings.NewReader("x"), 0o644); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("WriteFile after Destroy = %v, want ErrClosed", err)
	}
}

func TestDone(t *testing.T) {
	r := runtimeFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := r.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy(ctx)
	sb := s.(*docker.Sandbox)
	// The container dying under us (an operator's `docker kill`) ends the
	// sandbox.
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.ContainerKill(ctx, sb.ContainerID(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sb.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed after the container was killed")
	}
	if _, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, sandbox.ErrClosed) {
		t.Fatalf("Exec after death = %v, want ErrClosed", err)
	}
}

func TestCreateRejects(t *testing.T) {
	r := runtimeFor(t)
	ctx := context.Background()
	for _, spec := range []sandbox.Spec{
		{Mounts: []sandbox.Mount{{Source: "/usr", Target: wire.HelperDir}}},
		{Mounts: []sandbox.Mount{{Source: "/nonexistent/source", Target: "/data"}}},
		{Limits: sandbox.Limits{MemoryBytes: 1}},
	} {
		if _, err := r.Create(ctx, spec); !errors.Is(err, sandbox.ErrInvalidSpec) {
			t.Errorf("Create(%+v) = %v, want ErrInvalidSpec", spec, err)
		}
	}
	des, _ := os.ReadDir(filepath.Join(stateDir, "b"))
	for _, de := range des {
		t.Errorf("state left after failed creates: %s", de.Name())
	}
}

// TestBackgroundOutput: a command that leaves a background process holding
// its output returns once dockerd gives up on the stream (about 2s after
// the command exited), not when the background process ends.
func TestBackgroundOutput(t *testing.T) {
	b := newBox(t, sandbox.Spec{})
	start := time.Now()
	o := b.exec(sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 30 & echo hi"}})
	d := time.Since(start)
	if o.err != nil || o.res.ExitCode != 0 || o.stdout != "hi\n" {
		t.Fatalf("exec: %+v %v %q", o.res, o.err, o.stdout)
	}
	if d > 10*time.Second {
		t.Fatalf("exec returned after %v: it waited for the background process", d)
	}
	t.Logf("returned after %v", d)
}
