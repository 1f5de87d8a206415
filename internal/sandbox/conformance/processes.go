package conformance

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// processes checks what the processes API builds on (ExecRequest.Background
// and Started): the pid Started reports leads its own process group and
// another exec can see and signal it; a Background exec has neither the
// Spec's wall time nor its output cap, but its own; ctx's end and Destroy
// kill its whole group.
func (s *suite) processes(t *testing.T) {
	b := s.create(t, sandbox.Spec{Limits: sandbox.Limits{Timeout: time.Second, OutputBytes: 1000}})
	t.Run("started pid leads its group", func(t *testing.T) { s.startedPid(t, b.With(t)) })
	t.Run("no spec timeout", func(t *testing.T) { s.backgroundTimeout(t, b.With(t)) })
	t.Run("no spec output cap", func(t *testing.T) { s.backgroundOutput(t, b.With(t)) })
	t.Run("cancel kills the group", func(t *testing.T) { s.backgroundCancel(t, b.With(t)) })
	t.Run("signal from another exec", func(t *testing.T) { s.backgroundSignal(t, b.With(t)) })
	t.Run("destroy ends it", s.backgroundDestroy)
}

// bgProc is one Background exec running in a goroutine.
type bgProc struct {
	pid    int
	cancel context.CancelFunc
	done   chan sandboxtest.Output

	mu          sync.Mutex
	out         strings.Builder
	startedLate bool // output came before Started
	started     bool
}

func (p *bgProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started {
		p.startedLate = true
	}
	p.out.Write(b)
	return len(b), nil
}

func (p *bgProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// startBG starts req as a Background exec and waits for Started.
func startBG(t *testing.T, b *sandboxtest.Box, req sandbox.ExecRequest) *bgProc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), sandboxtest.ExecTimeout)
	p := &bgProc{cancel: cancel, done: make(chan sandboxtest.Output, 1)}
	t.Cleanup(cancel)
	pids := make(chan int, 2)
	req.Background = true
	req.Stdout, req.Stderr = p, p
	req.Started = func(pid int) {
		p.mu.Lock()
		p.started = true
		p.mu.Unlock()
		pids <- pid
	}
	go func() { p.done <- b.ExecCtx(ctx, req) }()
	select {
	case p.pid = <-pids:
	case o := <-p.done:
		t.Fatalf("%q ended before Started: %+v %v (output %q)", req.Argv, o.Res, o.Err, p.output())
	case <-time.After(30 * time.Second):
		t.Fatalf("%q: no Started after 30 s", req.Argv)
	}
	if p.pid <= 1 {
		t.Fatalf("Started(%d)", p.pid)
	}
	return p
}

// wait waits for the exec to return.
func (p *bgProc) wait(t *testing.T, within time.Duration) sandboxtest.Output {
	t.Helper()
	select {
	case o := <-p.done:
		return o
	case <-time.After(within):
		t.Fatalf("the background exec (pid %d) did not return within %v", p.pid, within)
		return sandboxtest.Output{}
	}
}

// statFields returns a process's state, pgrp and session from
// /proc/PID/stat, read from inside by another exec ("" when it is gone).
func statFields(t *testing.T, b *sandboxtest.Box, pid int) (state string, pgrp, session int) {
	t.Helper()
	o := b.Sh(fmt.Sprintf(`s=$(cat /proc/%d/stat 2>/dev/null) || exit 0; s=${s##*) }; set -- $s; echo $1 $3 $4`, pid))
	f := strings.Fields(o.Stdout)
	if len(f) != 3 {
		return "", 0, 0
	}
	pgrp, _ = strconv.Atoi(f[1])
	session, _ = strconv.Atoi(f[2])
	return f[0], pgrp, session
}

// gone waits a few seconds for pid to be gone (a zombie counts as gone).
func gone(t *testing.T, b *sandboxtest.Box, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		state, _, _ := statFields(t, b, pid)
		if state == "" || state == "Z" || state == "X" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still runs (state %s)", what, pid, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *suite) startedPid(t *testing.T, b *sandboxtest.Box) {
	p := startBG(t, b, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo hello; exec sleep 60"}})
	if o := b.Sh(fmt.Sprintf("kill -0 %d && echo alive", p.pid)); o.Stdout != "alive\n" {
		t.Fatalf("kill -0 %d from another exec: %q %q", p.pid, o.Stdout, o.Stderr)
	}
	if state, pgrp, session := statFields(t, b, p.pid); pgrp != p.pid || session != p.pid {
		t.Fatalf("pid %d: state %q pgrp %d session %d, want its own group and session", p.pid, state, pgrp, session)
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.output() != "hello\n" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if p.output() != "hello\n" {
		t.Fatalf("output %q while it runs, want hello", p.output())
	}
	p.cancel()
	p.wait(t, 15*time.Second)
	p.mu.Lock()
	late := p.startedLate
	p.mu.Unlock()
	if late {
		t.Error("output was delivered before Started")
	}
	// A start failure reports no pid.
	var called bool
	o := b.Exec(sandbox.ExecRequest{Argv: []string{"/no/such/program"}, Background: true, Started: func(int) { called = true }})
	if !errors.Is(o.Err, sandbox.ErrCommandNotFound) || called {
		t.Fatalf("a command that cannot start: %v, Started called %v", o.Err, called)
	}
}

func (s *suite) backgroundTimeout(t *testing.T, b *sandboxtest.Box) {
	p := startBG(t, b, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 2; echo done"}})
	o := p.wait(t, 30*time.Second)
	if o.Err != nil || o.Res.TimedOut || o.Res.ExitCode != 0 || p.output() != "done\n" {
		t.Fatalf("a background exec over the spec's 1 s: %+v %v %q, want exit 0 and done", o.Res, o.Err, p.output())
	}
	// An ordinary exec still has the spec's wall time...
	if o := b.Exec(sandbox.ExecRequest{Argv: []string{"sleep", "2"}}); o.Err != nil || !o.Res.TimedOut {
		t.Fatalf("an ordinary exec over the spec's 1 s: %+v %v, want TimedOut", o.Res, o.Err)
	}
	// ...and a background one its own.
	p = startBG(t, b, sandbox.ExecRequest{Argv: []string{"sleep", "30"}, Timeout: 500 * time.Millisecond})
	if o := p.wait(t, 20*time.Second); o.Err != nil || !o.Res.TimedOut || o.Res.ExitCode != 137 {
		t.Fatalf("a background exec with its own 500 ms timeout: %+v %v, want TimedOut and 137", o.Res, o.Err)
	}
}

func (s *suite) backgroundOutput(t *testing.T, b *sandboxtest.Box) {
	const n = 300000 // well over the spec's 1000 bytes and a pipe's buffer
	p := startBG(t, b, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", fmt.Sprintf(`head -c %d /dev/zero | tr '\0' a; echo; head -c 5000 /dev/zero | tr '\0' b >&2`, n)}})
	o := p.wait(t, 60*time.Second)
	out := p.output()
	if o.Err != nil || o.Res.Truncated || o.Res.StdoutBytes != n+1 || o.Res.StderrBytes != 5000 || len(out) != n+1+5000 ||
		strings.Count(out, "a") != n || strings.Count(out, "b") != 5000 {
		t.Fatalf("a background exec's output: %+v %v, got %d bytes (%d a, %d b)", o.Res, o.Err, len(out), strings.Count(out, "a"), strings.Count(out, "b"))
	}
	// Its own cap applies.
	p = startBG(t, b, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "head -c 5000 /dev/zero"}, OutputBytes: 100})
	if o := p.wait(t, 30*time.Second); o.Err != nil || !o.Res.Truncated || len(p.output()) != 100 {
		t.Fatalf("a background exec with its own cap of 100: %+v %v, kept %d", o.Res, o.Err, len(p.output()))
	}
}

// childOf starts a background shell that forks a sleep and reports its
// pid, and returns both.
func childOf(t *testing.T, b *sandboxtest.Box) (*bgProc, int) {
	t.Helper()
	p := startBG(t, b, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "sleep 60 & echo $!; wait"}})
	deadline := time.Now().Add(10 * time.Second)
	for !strings.HasSuffix(p.output(), "\n") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	child, err := strconv.Atoi(strings.TrimSpace(p.output()))
	if err != nil || child <= 1 {
		t.Fatalf("the child's pid: %q", p.output())
	}
	if _, pgrp, _ := statFields(t, b, child); pgrp != p.pid {
		t.Fatalf("the child %d is in group %d, want %d", child, pgrp, p.pid)
	}
	return p, child
}

func (s *suite) backgroundCancel(t *testing.T, b *sandboxtest.Box) {
	p, child := childOf(t, b)
	p.cancel()
	o := p.wait(t, 15*time.Second)
	if !errors.Is(o.Err, context.Canceled) || o.Res.ExitCode != 137 {
		t.Fatalf("a cancelled background exec: %+v %v, want Canceled and 137", o.Res, o.Err)
	}
	gone(t, b, p.pid, "the cancelled process")
	gone(t, b, child, "its child")
}

func (s *suite) backgroundSignal(t *testing.T, b *sandboxtest.Box) {
	p, child := childOf(t, b)
	if o := b.Sh(fmt.Sprintf("kill -s TERM -- -%d", p.pid)); o.Res.ExitCode != 0 {
		t.Fatalf("kill -s TERM -- -%d: %+v %q", p.pid, o.Res, o.Stderr)
	}
	o := p.wait(t, 15*time.Second)
	if o.Err != nil || o.Res.ExitCode != 143 || o.Res.TimedOut {
		t.Fatalf("a background exec sent SIGTERM: %+v %v, want exit 143", o.Res, o.Err)
	}
	gone(t, b, child, "its child")
}

// Destroy ends a background exec: Exec returns, and promptly.
func (s *suite) backgroundDestroy(t *testing.T) {
	b := s.create(t, sandbox.Spec{})
	p := startBG(t, b, sandbox.ExecRequest{Argv: []string{"sleep", "60"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.SB.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if o := p.wait(t, 20*time.Second); o.Err == nil {
		t.Fatalf("a background exec in a destroyed sandbox: %+v, want an error", o.Res)
	}
}
