package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
)

// signalHelper is the test binary as a command that does not stop when
// its root context ends (IRONCLAW_CLI_TEST_SIGNALS=1): it reports the
// cancellation and keeps running, so only the second signal can end it.
func signalHelper() {
	ctx, stop := withSignals(context.Background(), stopSignals...)
	defer stop()
	fmt.Println("ready")
	<-ctx.Done()
	fmt.Println("cancelled:", context.Cause(ctx))
	time.Sleep(time.Hour)
	os.Exit(3)
}

// proc is a child process of the test whose stdout is read line by line.
type proc struct {
	t     *testing.T
	cmd   *exec.Cmd
	lines chan string
	errb  strings.Builder
}

func startProc(t *testing.T, env []string, name string, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, cmd: exec.Command(name, args...), lines: make(chan string, 1024)}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = &p.errb
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	return p
}

// next returns the next line of stdout; the bound is only there so that
// a broken child fails the test instead of hanging it.
func (p *proc) next() string {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("stdout ended; stderr %q", p.errb.String())
		}
		return l
	case <-time.After(60 * time.Second):
		p.t.Fatalf("no line from the child; stderr %q", p.errb.String())
	}
	return ""
}

func (p *proc) signal(s os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		p.t.Fatal(err)
	}
}

// wait returns the exit status (an error for a signal). A child still
// running after a minute is killed and fails the test.
func (p *proc) wait() (int, error) {
	p.t.Helper()
	hung := time.AfterFunc(60*time.Second, func() { p.cmd.Process.Kill() })
	for range p.lines { // drain, so the child never blocks writing
	}
	err := p.cmd.Wait()
	if !hung.Stop() {
		p.t.Fatalf("the child did not exit; stderr %q", p.errb.String())
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws := ee.Sys().(syscall.WaitStatus); ws.Signaled() {
			return -1, fmt.Errorf("killed by %v", ws.Signal())
		}
		return ee.ExitCode(), nil
	}
	return 0, err
}

func selfExe(t *testing.T) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// The first signal cancels the root context, with the signal as its
// cause; the second ends the process whatever it is doing.
func TestSecondSignalExits(t *testing.T) {
	for _, first := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(first.String(), func(t *testing.T) {
			if signal.Ignored(first) {
				t.Skipf("the tests run with %v ignored, and so would the child", first)
			}
			p := startProc(t, []string{"IRONCLAW_CLI_TEST_SIGNALS=1"}, selfExe(t))
			if l := p.next(); l != "ready" {
				t.Fatalf("child says %q", l)
			}
			p.signal(first)
			if l := p.next(); l != "cancelled: interrupted by "+first.String() {
				t.Fatalf("after %v the child says %q", first, l)
			}
			p.signal(syscall.SIGINT)
			if code, err := p.wait(); err == nil || err.Error() != "killed by interrupt" {
				t.Fatalf("after the second signal: exit %d, %v", code, err)
			}
		})
	}
}

// A SIGHUP the process was started with ignored (nohup) stays ignored:
// it cancels nothing, and a SIGTERM still does.
func TestIgnoredHangupStaysIgnored(t *testing.T) {
	p := startProc(t, []string{"IRONCLAW_CLI_TEST_SIGNALS=1"}, "/bin/sh", "-c", `trap "" HUP; exec "$0"`, selfExe(t))
	if l := p.next(); l != "ready" {
		t.Fatalf("child says %q", l)
	}
	p.signal(syscall.SIGHUP)
	p.signal(syscall.SIGTERM) // signals are delivered in order: HUP was seen first
	if l := p.next(); l != "cancelled: interrupted by terminated" {
		t.Fatalf("the child says %q", l)
	}
}

// Commands use the root context: Ctrl-C ends 'audit tail -f' and
// 'approvals ls --watch' (exit 0: it is the way to stop following) and
// 'sandbox exec' (exit 130, its command killed in the sandbox); none sets
// up signals of its own.
func TestInterruptEndsCommands(t *testing.T) {
	startDaemon(t)
	cliEnv := []string{"IRONCLAW_CLI_TEST_MAIN=1"}
	cl := &client.Client{}
	ctx := context.Background()
	sb := daemontest.CreateSandbox(t, cl)

	// audit tail -f --json: the records so far, then those appended.
	tail := startProc(t, cliEnv, selfExe(t), "audit", "tail", "-f", "--json")
	var last client.AuditRecord
	for last.Kind != "sandbox.create" || last.Session != sb.ID {
		if err := json.Unmarshal([]byte(tail.next()), &last); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"true"}, Stdout: io.Discard, Stderr: io.Discard}); err != nil {
		t.Fatal(err)
	}
	for last.Kind != "sandbox.exec" {
		var r client.AuditRecord
		if err := json.Unmarshal([]byte(tail.next()), &r); err != nil || r.Seq != last.Seq+1 {
			t.Fatalf("followed record %+v after %d: %v", r, last.Seq, err)
		}
		last = r
	}
	tail.signal(syscall.SIGINT)
	if code, err := tail.wait(); code != 0 || err != nil {
		t.Fatalf("audit tail -f after Ctrl-C: exit %d, %v, stderr %q", code, err, tail.errb.String())
	}

	// approvals ls --watch --json: the same NDJSON as ls --json, until
	// Ctrl-C.
	watch := startProc(t, cliEnv, selfExe(t), "approvals", "ls", "--watch", "--json")
	a, err := cl.FileApproval(ctx, "tool.call", "", "", map[string]any{"tool": "deploy"})
	if err != nil {
		t.Fatal(err)
	}
	for seen := (client.Approval{}); seen.ID != a.ID; {
		if err := json.Unmarshal([]byte(watch.next()), &seen); err != nil {
			t.Fatal(err)
		}
	}
	watch.signal(syscall.SIGINT)
	if code, err := watch.wait(); code != 0 || err != nil {
		t.Fatalf("approvals ls --watch after Ctrl-C: exit %d, %v, stderr %q", code, err, watch.errb.String())
	}

	// sandbox exec: the request in flight is abandoned and its command
	// killed.
	ex := startProc(t, cliEnv, selfExe(t), "sandbox", "exec", sb.ID, "--", "sh", "-c", "echo started; exec sleep 600")
	if l := ex.next(); l != "started" {
		t.Fatalf("exec says %q", l)
	}
	ex.signal(syscall.SIGINT)
	code, err := ex.wait()
	if code != ExitInterrupted || err != nil || ex.errb.String() != "ironclaw: interrupted\n" {
		t.Fatalf("sandbox exec after Ctrl-C: exit %d, %v, stderr %q", code, err, ex.errb.String())
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		var out strings.Builder
		// A process that exits between the glob and cat's open (the
		// killed sleep itself, as it is reaped) makes cat fail on that
		// one file; what counts is whether sleep is still listed.
		res, err := cl.Exec(ctx, sb.ID, client.ExecRequest{Argv: []string{"sh", "-c", "cat /proc/[0-9]*/comm 2>/dev/null; exit 0"}, Stdout: &out, Stderr: io.Discard})
		if err != nil || res.Exit != 0 {
			t.Fatalf("listing processes: %v %+v", err, res)
		}
		if !strings.Contains(out.String(), "sh\n") {
			// The listing's own shell is always there: without it the
			// listing read nothing, and a missing sleep would prove
			// nothing.
			t.Fatalf("the process listing is empty: %q", out.String())
		}
		if !strings.Contains(out.String(), "sleep") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the interrupted command still runs:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// No command sets up stop signals of its own: they all end through the
// root context of withSignals. (Window size changes, SIGWINCH, are no
// stop signal.)
func TestOneSignalHandler(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "signals.go" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "signal.Notify") && !strings.Contains(line, "syscall.SIGWINCH") {
				t.Errorf("%s:%d handles signals itself: %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// Ctrl-C during 'run' tears the sandbox down (no cgroup of it is left)
// and exits 130: run's signals are the root context's.
func TestInterruptRun(t *testing.T) {
	daemontest.NeedSandbox(t)
	p := startProc(t, []string{"IRONCLAW_CLI_TEST_MAIN=1"}, selfExe(t), "run", "--", "sh", "-c", "echo started; exec sleep 600")
	if l := p.next(); l != "started" {
		t.Fatalf("run says %q", l)
	}
	pid := p.cmd.Process.Pid
	p.signal(syscall.SIGINT)
	code, err := p.wait()
	if code != ExitInterrupted || err != nil || !strings.Contains(p.errb.String(), "interrupted; sandbox torn down") {
		t.Fatalf("run after Ctrl-C: exit %d, %v, stderr %q", code, err, p.errb.String())
	}
	prefix := fmt.Sprintf("ic-%d.", pid)
	_ = filepath.WalkDir("/sys/fs/cgroup", func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), prefix) {
			t.Errorf("the interrupted run left %s", path)
			return filepath.SkipDir
		}
		return nil
	})
}
