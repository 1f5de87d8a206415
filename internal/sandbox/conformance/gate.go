package conformance

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/gate"
)

// mark is what a gated test program prints when it really runs.
const mark = "GATE-REAL-7f3a"

// gateTools makes a host directory, bound read-only at /tools in the test
// sandboxes, holding the test's gated programs: gecho (a copy of echo) and
// its hard link gecho-hl, gsleep (a copy of sleep) and gsh (a copy of sh).
// The copies are the test's own files, so their hard links and removal
// touch nothing of the host's.
func gateTools(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ironclaw-gate-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// The container backends' roots (host uid 100000) must pass through.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, src := range map[string]string{"gecho": "echo", "gsleep": "sleep", "gsh": "sh"} {
		p, err := exec.LookPath(src)
		if err != nil {
			t.Skipf("the host has no %s to copy: %v", src, err)
		}
		if p, err = filepath.EvalSymlinks(p); err != nil {
			t.Fatal(err)
		}
		if err := copyFile(p, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(bin, "gecho"), filepath.Join(bin, "gecho-hl")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// GateSpec is the spec of RunGate's sandboxes: gecho, gsleep and gsh of
// gateTools (found through the Spec's PATH), and curl, which the host view
// may have.
func GateSpec(tools string) sandbox.Spec {
	return sandbox.Spec{
		Env:    []string{"PATH=/tools/bin:" + gate.DefaultPATH},
		Mounts: []sandbox.Mount{{Source: tools, Target: "/tools", ReadOnly: true}},
		Gate:   []string{"gecho", "gsleep", "gsh", "curl"},
	}
}

// RunGate tries every way to run a gated program without an approval and
// checks that an approved exec runs exactly its argv, once, as the real
// program, and that nothing else of the sandbox can copy the program
// while it runs. Backends call it from TestHostileExecGate.
func RunGate(t *testing.T, rt sandbox.Runtime, opts Options) {
	if opts.CreateTimeout == 0 {
		opts.CreateTimeout = 60 * time.Second
	}
	s := &suite{rt: rt, opts: opts}
	b := s.create(t, GateSpec(gateTools(t)))
	have := func(p string) bool { return b.sh("[ -x "+p+" ] && echo yes").stdout == "yes\n" }

	t.Run("unapproved spellings", func(t *testing.T) {
		b := &box{t: t, sb: b.sb}
		type try struct {
			name, script string
			stub         bool // the stub runs: exit 126 and its message
		}
		tries := []try{
			{"absolute path", "/tools/bin/gecho " + mark, true},
			{"PATH", "gecho " + mark, true},
			{"quotes", "g''ec\"\"ho " + mark, true},
			{"env", "env gecho " + mark, true},
			{"variable", "x=gec; ${x}ho " + mark, true},
			{"dot dot", "/tools/bin/../bin/gecho " + mark, true},
			{"sh -c", "sh -c 'gecho " + mark + "'", true},
			{"exec -a", "exec -a other gecho " + mark, true},
			{"hard link", "/tools/bin/gecho-hl " + mark, true},
			{"symlink in workspace", "ln -s /tools/bin/gecho /workspace/ge && /workspace/ge " + mark, true},
			{"copy in tmp", "cp /tools/bin/gecho /tmp/c && chmod +x /tmp/c && /tmp/c " + mark, true},
			{"new hard link", "ln /tools/bin/gecho /tmp/h 2>/dev/null || ln /tools/bin/gecho /workspace/h 2>/dev/null; /tmp/h " + mark + " || /workspace/h " + mark, false},
			{"read the bytes", "cat /tools/bin/gecho > /tmp/r; chmod +x /tmp/r; /tmp/r " + mark, true},
		}
		for _, ld := range []string{"/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1", "/lib/ld-musl-x86_64.so.1"} {
			if have(ld) {
				tries = append(tries, try{"ELF loader " + ld, ld + " /tools/bin/gecho " + mark, false})
			}
		}
		if have("/usr/bin/python3") {
			tries = append(tries, try{"python", `python3 -c 'import os; os.execv("/tools/bin/gecho", ["gecho", "` + mark + `"])'`, true})
		}
		if have("/usr/bin/perl") {
			tries = append(tries, try{"perl", `perl -e 'exec "/tools/bin/gecho", "` + mark + `"'`, true})
		}
		for _, c := range tries {
			o := b.exec(sandbox.ExecRequest{Argv: []string{"/bin/bash", "-c", c.script}})
			if o.err != nil {
				t.Errorf("%s: %v", c.name, o.err)
				continue
			}
			if strings.Contains(o.stdout, mark) || o.res.ExitCode == 0 {
				t.Errorf("%s: the gated program ran: exit %d, stdout %q, stderr %q", c.name, o.res.ExitCode, o.stdout, o.stderr)
			}
			if c.stub && (o.res.ExitCode != gate.StubExit || !strings.Contains(o.stderr, gate.Message("gecho"))) {
				t.Errorf("%s: exit %d, stderr %q; want %d and the stub's message", c.name, o.res.ExitCode, o.stderr, gate.StubExit)
			}
		}
		// Run directly, not through a shell: the stub, exit 126.
		for _, argv0 := range []string{"gecho", "/tools/bin/gecho", "/tools/bin/gecho-hl"} {
			o := b.exec(sandbox.ExecRequest{Argv: []string{argv0, mark}})
			if o.err != nil || o.res.ExitCode != gate.StubExit || strings.Contains(o.stdout, mark) || !strings.Contains(o.stderr, "gecho needs approval") {
				t.Errorf("exec %s: %v, exit %d, stdout %q, stderr %q", argv0, o.err, o.res.ExitCode, o.stdout, o.stderr)
			}
		}
		if have("/usr/bin/curl") {
			for _, argv := range [][]string{{"curl", "--version"}, {"/usr/bin/curl", "--version"}, {"/bin/bash", "-c", "c''url --version; env curl --version; /bin/curl --version"}} {
				o := b.exec(sandbox.ExecRequest{Argv: argv})
				if o.err != nil || o.res.ExitCode != gate.StubExit || strings.Contains(o.stdout, "libcurl") || !strings.Contains(o.stderr, "curl needs approval") {
					t.Errorf("%q: %v, exit %d, stdout %q, stderr %q", argv, o.err, o.res.ExitCode, o.stdout, o.stderr)
				}
			}
		}
	})

	t.Run("programs not gated are unaffected", func(t *testing.T) {
		o := b.sh("echo " + mark + "; /bin/echo ok; sleep 0; printf x | cat")
		if o.stdout != mark+"\nok\nx" || o.res.ExitCode != 0 {
			t.Fatalf("ungated programs: exit %d, %q %q", o.res.ExitCode, o.stdout, o.stderr)
		}
	})

	t.Run("approved exec runs exactly its argv", func(t *testing.T) {
		bt := &box{t: t, sb: b.sb}
		for _, argv := range [][]string{{"gecho", mark, "two words", "-n"}, {"/tools/bin/gecho", mark}, {"/tools/bin/gecho-hl", mark}} {
			o := bt.exec(sandbox.ExecRequest{Argv: argv, Gate: "gecho", Env: []string{"LD_PRELOAD=/workspace/none.so"}})
			want := strings.Join(argv[1:], " ") + "\n"
			if o.err != nil || o.res.ExitCode != 0 || o.stdout != want || o.stderr != "" {
				t.Errorf("approved %q: %v, exit %d, stdout %q (want %q), stderr %q", argv, o.err, o.res.ExitCode, o.stdout, want, o.stderr)
			}
		}
		// The approval names one program: it lifts no other.
		o := bt.exec(sandbox.ExecRequest{Argv: []string{"gecho", mark}, Gate: "gsleep"})
		if o.err == nil || !errors.Is(o.err, sandbox.ErrNotExecutable) || o.res.ExitCode != 126 || strings.Contains(o.stdout, mark) {
			t.Errorf("gecho with an approval for gsleep: %v, exit %d, stdout %q", o.err, o.res.ExitCode, o.stdout)
		}
		// Only the top-level program is lifted: what it starts meets the stubs.
		o = bt.exec(sandbox.ExecRequest{Argv: []string{"gsh", "-c", "gecho " + mark + "; echo rc=$?; /tools/bin/gsh -c 'echo inner'; echo rc=$?"}, Gate: "gsh"})
		if o.err != nil || strings.Contains(o.stdout, mark) || strings.Contains(o.stdout, "inner") || o.stdout != "rc=126\nrc=126\n" ||
			!strings.Contains(o.stderr, gate.Message("gecho")) || !strings.Contains(o.stderr, gate.Message("gsh")) {
			t.Errorf("an approved gsh starting gated programs: %v, stdout %q, stderr %q", o.err, o.stdout, o.stderr)
		}
		// An approval for a program not gated here changes nothing.
		if o := bt.exec(sandbox.ExecRequest{Argv: []string{"echo", "plain"}, Gate: "gecho"}); o.err != nil || o.stdout != "plain\n" {
			t.Errorf("an ungated program with an approval: %v %q", o.err, o.stdout)
		}
	})

	t.Run("an approved run obeys the timeout", func(t *testing.T) {
		bt := &box{t: t, sb: b.sb}
		o := bt.exec(sandbox.ExecRequest{Argv: []string{"gsleep", "60"}, Gate: "gsleep", Timeout: time.Second})
		if o.err != nil || !o.res.TimedOut || o.res.ExitCode != 137 || o.res.Duration > 30*time.Second {
			t.Errorf("an approved gsleep 60 with a 1s timeout: %v %+v", o.err, o.res)
		}
	})

	t.Run("a running approved program cannot be copied", func(t *testing.T) {
		bt := &box{t: t, sb: b.sb}
		var wg sync.WaitGroup
		wg.Add(1)
		var run output
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			defer wg.Done()
			run = bt.execCtx(ctx, sandbox.ExecRequest{Argv: []string{"gsleep", "30"}, Gate: "gsleep"})
		}()
		o := bt.sh(`for i in $(seq 200); do
  for p in /proc/[0-9]*; do [ "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" = "gsleep 30 " ] && pid=${p#/proc/} && break 2; done
  sleep 0.05
done
[ -n "$pid" ] || { echo "not found"; exit 0; }
echo "found"
cat /proc/$pid/exe > /tmp/exe 2>/dev/null && [ -s /tmp/exe ] && echo "LEAK exe"
cp /proc/$pid/exe /tmp/exe2 2>/dev/null && echo "LEAK cp exe"
readlink /proc/$pid/exe 2>/dev/null | grep -q . && echo "LEAK readlink $(readlink /proc/$pid/exe)"
addr=$(head -n 1 /proc/$pid/maps 2>/dev/null | cut -d- -f1)
dd if=/proc/$pid/mem of=/tmp/mem bs=4096 count=1 skip=$((0x${addr:-555555554000} / 4096)) 2>/dev/null && [ -s /tmp/mem ] && echo "LEAK mem"
ls /proc/$pid/map_files/ 2>/dev/null | grep -q . && echo "LEAK map_files"
for f in /proc/$pid/fd/*; do [ -f "$f" ] && head -c 4 "$f" 2>/dev/null | grep -q ELF && echo "LEAK fd $f"; done
kill $pid && echo killed`)
		cancel()
		wg.Wait()
		if !strings.Contains(o.stdout, "found") || strings.Contains(o.stdout, "LEAK") {
			t.Errorf("while an approved gsleep ran: %q (stderr %q)", o.stdout, o.stderr)
		}
		if !strings.Contains(o.stdout, "killed") || run.res.TimedOut {
			t.Errorf("the approved run was not ended from inside: %q; %+v %v", o.stdout, run.res, run.err)
		}
	})
}

// execCtx is exec under ctx.
func (b *box) execCtx(ctx context.Context, req sandbox.ExecRequest) output {
	var out, errb strings.Builder
	req.Stdout, req.Stderr = &lockedBuilder{b: &out}, &lockedBuilder{b: &errb}
	res, err := b.sb.Exec(ctx, req)
	return output{out.String(), errb.String(), res, err}
}

type lockedBuilder struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
