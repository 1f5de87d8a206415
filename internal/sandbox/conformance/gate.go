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
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
	"github.com/ironclaw/ironclaw/internal/sandbox/seal"
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
		Env:    []string{"PATH=/tools/bin:" + seal.DefaultPATH},
		Mounts: []sandbox.Mount{{Source: tools, Target: "/tools", ReadOnly: true}},
		Gate:   []string{"gecho", "gsleep", "gsh", "curl"},
	}
}

// RunGate tries every way to run a gated program without an approval and
// checks that an approved exec runs exactly its argv, once, as the real
// program, and that nothing else of the sandbox can copy the program
// while it runs. Backends call it from TestHostileExecGate.
func RunGate(t *testing.T, rt sandbox.Runtime) {
	b := sandboxtest.New(t, rt, GateSpec(gateTools(t)))
	have := func(p string) bool { return b.Sh("[ -x "+p+" ] && echo yes").Stdout == "yes\n" }

	t.Run("unapproved spellings", func(t *testing.T) {
		b := b.With(t)
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
			o := b.Exec(sandbox.ExecRequest{Argv: []string{"/bin/bash", "-c", c.script}})
			if o.Err != nil {
				t.Errorf("%s: %v", c.name, o.Err)
				continue
			}
			if strings.Contains(o.Stdout, mark) || o.Res.ExitCode == 0 {
				t.Errorf("%s: the gated program ran: exit %d, stdout %q, stderr %q", c.name, o.Res.ExitCode, o.Stdout, o.Stderr)
			}
			if c.stub && (o.Res.ExitCode != gate.StubExit || !strings.Contains(o.Stderr, gate.Message("gecho"))) {
				t.Errorf("%s: exit %d, stderr %q; want %d and the stub's message", c.name, o.Res.ExitCode, o.Stderr, gate.StubExit)
			}
		}
		// Run directly, not through a shell: the stub, exit 126.
		for _, argv0 := range []string{"gecho", "/tools/bin/gecho", "/tools/bin/gecho-hl"} {
			o := b.Exec(sandbox.ExecRequest{Argv: []string{argv0, mark}})
			if o.Err != nil || o.Res.ExitCode != gate.StubExit || strings.Contains(o.Stdout, mark) || !strings.Contains(o.Stderr, "gecho needs approval") {
				t.Errorf("exec %s: %v, exit %d, stdout %q, stderr %q", argv0, o.Err, o.Res.ExitCode, o.Stdout, o.Stderr)
			}
		}
		if have("/usr/bin/curl") {
			for _, argv := range [][]string{{"curl", "--version"}, {"/usr/bin/curl", "--version"}, {"/bin/bash", "-c", "c''url --version; env curl --version; /bin/curl --version"}} {
				o := b.Exec(sandbox.ExecRequest{Argv: argv})
				if o.Err != nil || o.Res.ExitCode != gate.StubExit || strings.Contains(o.Stdout, "libcurl") || !strings.Contains(o.Stderr, "curl needs approval") {
					t.Errorf("%q: %v, exit %d, stdout %q, stderr %q", argv, o.Err, o.Res.ExitCode, o.Stdout, o.Stderr)
				}
			}
		}
	})

	t.Run("programs not gated are unaffected", func(t *testing.T) {
		o := b.Sh("echo " + mark + "; /bin/echo ok; sleep 0; printf x | cat")
		if o.Stdout != mark+"\nok\nx" || o.Res.ExitCode != 0 {
			t.Fatalf("ungated programs: exit %d, %q %q", o.Res.ExitCode, o.Stdout, o.Stderr)
		}
	})

	t.Run("approved exec runs exactly its argv", func(t *testing.T) {
		bt := b.With(t)
		for _, argv := range [][]string{{"gecho", mark, "two words", "-n"}, {"/tools/bin/gecho", mark}, {"/tools/bin/gecho-hl", mark}} {
			o := bt.Exec(sandbox.ExecRequest{Argv: argv, Gate: "gecho", Env: []string{"LD_PRELOAD=/workspace/none.so"}})
			want := strings.Join(argv[1:], " ") + "\n"
			if o.Err != nil || o.Res.ExitCode != 0 || o.Stdout != want || o.Stderr != "" {
				t.Errorf("approved %q: %v, exit %d, stdout %q (want %q), stderr %q", argv, o.Err, o.Res.ExitCode, o.Stdout, want, o.Stderr)
			}
		}
		// The approval names one program: it lifts no other.
		o := bt.Exec(sandbox.ExecRequest{Argv: []string{"gecho", mark}, Gate: "gsleep"})
		if o.Err == nil || !errors.Is(o.Err, sandbox.ErrNotExecutable) || o.Res.ExitCode != 126 || strings.Contains(o.Stdout, mark) {
			t.Errorf("gecho with an approval for gsleep: %v, exit %d, stdout %q", o.Err, o.Res.ExitCode, o.Stdout)
		}
		// Only the top-level program is lifted: what it starts meets the stubs.
		o = bt.Exec(sandbox.ExecRequest{Argv: []string{"gsh", "-c", "gecho " + mark + "; echo rc=$?; /tools/bin/gsh -c 'echo inner'; echo rc=$?"}, Gate: "gsh"})
		if o.Err != nil || strings.Contains(o.Stdout, mark) || strings.Contains(o.Stdout, "inner") || o.Stdout != "rc=126\nrc=126\n" ||
			!strings.Contains(o.Stderr, gate.Message("gecho")) || !strings.Contains(o.Stderr, gate.Message("gsh")) {
			t.Errorf("an approved gsh starting gated programs: %v, stdout %q, stderr %q", o.Err, o.Stdout, o.Stderr)
		}
		// An approval for a program not gated here changes nothing.
		if o := bt.Exec(sandbox.ExecRequest{Argv: []string{"echo", "plain"}, Gate: "gecho"}); o.Err != nil || o.Stdout != "plain\n" {
			t.Errorf("an ungated program with an approval: %v %q", o.Err, o.Stdout)
		}
	})

	t.Run("an approved run obeys the timeout", func(t *testing.T) {
		bt := b.With(t)
		o := bt.Exec(sandbox.ExecRequest{Argv: []string{"gsleep", "60"}, Gate: "gsleep", Timeout: time.Second})
		if o.Err != nil || !o.Res.TimedOut || o.Res.ExitCode != 137 || o.Res.Duration > 30*time.Second {
			t.Errorf("an approved gsleep 60 with a 1s timeout: %v %+v", o.Err, o.Res)
		}
	})

	t.Run("a running approved program cannot be copied", func(t *testing.T) {
		bt := b.With(t)
		var wg sync.WaitGroup
		wg.Add(1)
		var run sandboxtest.Output
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			defer wg.Done()
			run = bt.ExecCtx(ctx, sandbox.ExecRequest{Argv: []string{"gsleep", "30"}, Gate: "gsleep"})
		}()
		o := bt.Sh(`for i in $(seq 200); do
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
		if !strings.Contains(o.Stdout, "found") || strings.Contains(o.Stdout, "LEAK") {
			t.Errorf("while an approved gsleep ran: %q (stderr %q)", o.Stdout, o.Stderr)
		}
		if !strings.Contains(o.Stdout, "killed") || run.Res.TimedOut {
			t.Errorf("the approved run was not ended from inside: %q; %+v %v", o.Stdout, run.Res, run.Err)
		}
	})
}
