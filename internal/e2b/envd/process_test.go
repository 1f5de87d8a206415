package envd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/daemontest"
	"github.com/ironclaw/ironclaw/internal/e2b/auth"
	"github.com/ironclaw/ironclaw/internal/e2b/e2btest"
	rpc "github.com/ironclaw/ironclaw/internal/e2b/envdpb/process"
	"github.com/ironclaw/ironclaw/internal/e2b/envdpb/process/processconnect"
)

// events is what a process stream said so far.
type events struct {
	pid                 uint32
	stdout, stderr, pty bytes.Buffer
	end                 *rpc.ProcessEvent_EndEvent
	keepalives          int
	kinds               []string
}

// reader reads a Start or Connect stream.
type reader struct {
	t    *testing.T
	recv func() (*rpc.ProcessEvent, bool)
	err  func() error
	ev   events
}

func startReader(t *testing.T, s *connect.ServerStreamForClient[rpc.StartResponse]) *reader {
	t.Cleanup(func() { _ = s.Close() })
	return &reader{t: t, err: s.Err, recv: func() (*rpc.ProcessEvent, bool) {
		if !s.Receive() {
			return nil, false
		}
		return s.Msg().GetEvent(), true
	}}
}

func connectReader(t *testing.T, s *connect.ServerStreamForClient[rpc.ConnectResponse]) *reader {
	t.Cleanup(func() { _ = s.Close() })
	return &reader{t: t, err: s.Err, recv: func() (*rpc.ProcessEvent, bool) {
		if !s.Receive() {
			return nil, false
		}
		return s.Msg().GetEvent(), true
	}}
}

// until reads events until cond holds; the stream ending first fails.
func (r *reader) until(what string, cond func(*events) bool) {
	r.t.Helper()
	for !cond(&r.ev) {
		ev, ok := r.recv()
		if !ok {
			r.t.Fatalf("the stream ended (%v) before %s; so far kinds %v stdout %q stderr %q pty %q",
				r.err(), what, r.ev.kinds, r.ev.stdout.String(), r.ev.stderr.String(), r.ev.pty.String())
		}
		switch e := ev.GetEvent().(type) {
		case *rpc.ProcessEvent_Start:
			r.ev.kinds = append(r.ev.kinds, "start")
			r.ev.pid = e.Start.GetPid()
		case *rpc.ProcessEvent_Data:
			r.ev.kinds = append(r.ev.kinds, "data")
			r.ev.stdout.Write(e.Data.GetStdout())
			r.ev.stderr.Write(e.Data.GetStderr())
			r.ev.pty.Write(e.Data.GetPty())
		case *rpc.ProcessEvent_End:
			r.ev.kinds = append(r.ev.kinds, "end")
			r.ev.end = e.End
		case *rpc.ProcessEvent_Keepalive:
			r.ev.kinds = append(r.ev.kinds, "keepalive")
			r.ev.keepalives++
		default:
			r.t.Fatalf("an event of no kind: %v", ev)
		}
	}
}

// started reads the start event, which must come first.
func (r *reader) started() uint32 {
	r.t.Helper()
	r.until("the start event", func(e *events) bool { return len(e.kinds) > 0 })
	if r.ev.kinds[0] != "start" || r.ev.pid == 0 {
		r.t.Fatalf("the first event is %s (pid %d), not start", r.ev.kinds[0], r.ev.pid)
	}
	return r.ev.pid
}

// ended reads to the end event and checks that the stream closes then
// without an error.
func (r *reader) ended() *rpc.ProcessEvent_EndEvent {
	r.t.Helper()
	r.until("the end event", func(e *events) bool { return e.end != nil })
	if _, more := r.recv(); more {
		r.t.Errorf("an event after the end event")
	}
	if err := r.err(); err != nil {
		r.t.Errorf("the stream ended with %v", err)
	}
	return r.ev.end
}

// failed reads to the stream's end and returns its error code.
func (r *reader) failed() connect.Code {
	r.t.Helper()
	for {
		if _, ok := r.recv(); !ok {
			break
		}
	}
	err := r.err()
	if err == nil {
		r.t.Fatalf("the stream ended without an error")
	}
	return connect.CodeOf(err)
}

// fixture is a daemon with an agent "bob" besides the default one, and a
// sandbox of the default agent.
type fixture struct {
	env *e2btest.Env
	sb  e2btest.Sandbox
	pc  processconnect.ProcessClient
	ctx context.Context
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	env := e2btest.Start(t, func(c *e2btest.Config) {
		e2btest.AddAgent(t, c, "bob")
	})
	sb := env.CreateNative(t, client.AgentTokenFile, client.CreateRequest{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &fixture{env: env, sb: sb, pc: env.Process(sb), ctx: ctx}
}

func (f *fixture) start(t *testing.T, m *rpc.StartRequest, header map[string]string) *reader {
	t.Helper()
	req := connect.NewRequest(m)
	for k, v := range header {
		req.Header().Set(k, v)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	t.Cleanup(cancel)
	s, err := f.pc.Start(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return startReader(t, s)
}

func (f *fixture) connect(t *testing.T, sel *rpc.ProcessSelector) *reader {
	t.Helper()
	ctx, cancel := context.WithCancel(f.ctx)
	t.Cleanup(cancel)
	s, err := f.pc.Connect(ctx, connect.NewRequest(&rpc.ConnectRequest{Process: sel}))
	if err != nil {
		t.Fatal(err)
	}
	return connectReader(t, s)
}

// handle is the native handle of the process whose pid in the sandbox is
// pid.
func (f *fixture) handle(t *testing.T, pid uint32) int {
	t.Helper()
	ps, err := f.env.Agent.Processes(f.ctx, f.sb.SandboxID, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.OSPID == int(pid) {
			return p.PID
		}
	}
	t.Fatalf("no process has pid %d: %+v", pid, ps)
	return 0
}

func cmd(name string, args ...string) *rpc.ProcessConfig {
	return &rpc.ProcessConfig{Cmd: name, Args: args}
}

func pid(n uint32) *rpc.ProcessSelector {
	return &rpc.ProcessSelector{Selector: &rpc.ProcessSelector_Pid{Pid: n}}
}

func tag(s string) *rpc.ProcessSelector {
	return &rpc.ProcessSelector{Selector: &rpc.ProcessSelector_Tag{Tag: s}}
}

func stdin(b string) *rpc.ProcessInput {
	return &rpc.ProcessInput{Input: &rpc.ProcessInput_Stdin{Stdin: []byte(b)}}
}

func ptyIn(b string) *rpc.ProcessInput {
	return &rpc.ProcessInput{Input: &rpc.ProcessInput_Pty{Pty: []byte(b)}}
}

func yes() *bool { v := true; return &v }
func no() *bool  { v := false; return &v }

func TestStartForeground(t *testing.T) {
	f := newFixture(t)
	t.Run("as commands.run sends it", func(t *testing.T) {
		r := f.start(t, &rpc.StartRequest{Process: &rpc.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", `echo "out $K $PWD"; echo err >&2`},
			Envs: map[string]string{"K": "v"}}, Stdin: no()}, map[string]string{"Keepalive-Ping-Interval": "50"})
		r.started()
		end := r.ended()
		if got := r.ev.stdout.String(); got != "out v /workspace\n" {
			t.Errorf("stdout %q", got)
		}
		if got := r.ev.stderr.String(); got != "err\n" {
			t.Errorf("stderr %q", got)
		}
		if end.GetExitCode() != 0 || !end.GetExited() || end.GetStatus() != "exit status 0" || end.Error != nil {
			t.Errorf("end %v", end)
		}
	})
	t.Run("the pid is the process's in the sandbox", func(t *testing.T) {
		r := f.start(t, &rpc.StartRequest{Process: cmd("/bin/sh", "-c", "echo $$")}, nil)
		p := r.started()
		r.ended()
		if got := strings.TrimSpace(r.ev.stdout.String()); got != strconv.Itoa(int(p)) {
			t.Errorf("the start event says pid %d, the process says %s", p, got)
		}
	})
	t.Run("a non-zero exit", func(t *testing.T) {
		r := f.start(t, &rpc.StartRequest{Process: cmd("/bin/sh", "-c", "exit 3")}, nil)
		r.started()
		end := r.ended()
		if end.GetExitCode() != 3 || !end.GetExited() || end.GetStatus() != "exit status 3" || end.GetError() != "exit status 3" {
			t.Errorf("end %v", end)
		}
	})
	t.Run("cwd resolves against /workspace", func(t *testing.T) {
		mk := f.start(t, &rpc.StartRequest{Process: cmd("mkdir", "-p", "/workspace/sub/dir")}, nil)
		mk.started()
		mk.ended()
		for cwd, want := range map[string]string{"": "/workspace", "sub": "/workspace/sub", "sub/../sub/dir": "/workspace/sub/dir",
			"~": "/workspace", "~/sub": "/workspace/sub", "/tmp": "/tmp", "/workspace/sub/": "/workspace/sub"} {
			r := f.start(t, &rpc.StartRequest{Process: &rpc.ProcessConfig{Cmd: "pwd", Cwd: &cwd}}, nil)
			r.started()
			if end := r.ended(); end.GetExitCode() != 0 {
				t.Errorf("cwd %q: end %v", cwd, end)
			}
			if got := strings.TrimSpace(r.ev.stdout.String()); got != want {
				t.Errorf("cwd %q: pwd %q, want %q", cwd, got, want)
			}
		}
	})
	t.Run("the deadline kills the process", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(f.ctx, 1500*time.Millisecond)
		defer cancel()
		s, err := f.pc.Start(ctx, connect.NewRequest(&rpc.StartRequest{Process: cmd("sleep", "60"), Tag: ptr("deadline")}))
		if err != nil {
			t.Fatal(err)
		}
		r := startReader(t, s)
		p := r.started()
		if code := r.failed(); code != connect.CodeDeadlineExceeded {
			t.Errorf("the stream ended with %v", code)
		}
		w, err := f.env.Agent.WaitProcess(f.ctx, f.sb.SandboxID, f.handle(t, p))
		if err != nil || w.Exit == nil || *w.Exit != 137 {
			t.Errorf("after the deadline: %+v %v", w, err)
		}
	})
}

func ptr[T any](v T) *T { return &v }

func TestBackgroundInput(t *testing.T) {
	f := newFixture(t)
	r := f.start(t, &rpc.StartRequest{Process: cmd("cat"), Stdin: yes()}, nil)
	p := r.started()
	if _, err := f.pc.SendInput(f.ctx, connect.NewRequest(&rpc.SendInputRequest{Process: pid(p), Input: stdin("hello\n")})); err != nil {
		t.Fatal(err)
	}
	r.until("the echo", func(e *events) bool { return strings.Contains(e.stdout.String(), "hello") })

	// StreamInput: the first event selects the process, the data follow
	// in order.
	in := f.pc.StreamInput(f.ctx)
	msgs := []*rpc.StreamInputRequest{
		{Event: &rpc.StreamInputRequest_Start{Start: &rpc.StreamInputRequest_StartEvent{Process: pid(p)}}},
		{Event: &rpc.StreamInputRequest_Keepalive{Keepalive: &rpc.StreamInputRequest_KeepAlive{}}},
	}
	for i := range 20 {
		msgs = append(msgs, &rpc.StreamInputRequest{Event: &rpc.StreamInputRequest_Data{Data: &rpc.StreamInputRequest_DataEvent{Input: stdin(string(rune('a' + i)))}}})
	}
	for _, m := range msgs {
		if err := in.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := in.CloseAndReceive(); err != nil {
		t.Fatal(err)
	}
	r.until("the stream's input", func(e *events) bool { return strings.Contains(e.stdout.String(), "abcdefghijklmnopqrst") })

	if _, err := f.pc.CloseStdin(f.ctx, connect.NewRequest(&rpc.CloseStdinRequest{Process: pid(p)})); err != nil {
		t.Fatal(err)
	}
	if end := r.ended(); end.GetExitCode() != 0 || !end.GetExited() {
		t.Errorf("cat after its stdin closed: %v", end)
	}
	if got := r.ev.stdout.String(); got != "hello\nabcdefghijklmnopqrst" {
		t.Errorf("stdout %q", got)
	}

	t.Run("stdin absent is open, false is closed", func(t *testing.T) {
		r := f.start(t, &rpc.StartRequest{Process: cmd("cat")}, nil)
		p := r.started()
		got, err := f.env.Agent.GetProcess(f.ctx, f.sb.SandboxID, f.handle(t, p))
		if err != nil || !got.Stdin || got.State != "running" {
			t.Errorf("cat with stdin absent: %+v %v", got, err)
		}
		if _, err := f.pc.CloseStdin(f.ctx, connect.NewRequest(&rpc.CloseStdinRequest{Process: pid(p)})); err != nil {
			t.Fatal(err)
		}
		r.ended()
		r = f.start(t, &rpc.StartRequest{Process: cmd("cat"), Stdin: no()}, nil)
		p = r.started()
		if end := r.ended(); end.GetExitCode() != 0 {
			t.Errorf("cat without stdin: %v", end)
		}
		_, err = f.pc.SendInput(f.ctx, connect.NewRequest(&rpc.SendInputRequest{Process: pid(p), Input: stdin("x")}))
		wantCode(t, "input to an exited process", err, connect.CodeNotFound)
	})
	t.Run("a stream without its start", func(t *testing.T) {
		in := f.pc.StreamInput(f.ctx)
		_ = in.Send(&rpc.StreamInputRequest{Event: &rpc.StreamInputRequest_Data{Data: &rpc.StreamInputRequest_DataEvent{Input: stdin("x")}}})
		_, err := in.CloseAndReceive()
		wantCode(t, "data before start", err, connect.CodeInvalidArgument)
	})
}

func TestConnectAndList(t *testing.T) {
	f := newFixture(t)
	r := f.start(t, &rpc.StartRequest{Process: cmd("/bin/sh", "-c", "echo before; read x; echo after $x"), Tag: ptr("web"), Stdin: yes()}, nil)
	p := r.started()
	r.until("before", func(e *events) bool { return strings.Contains(e.stdout.String(), "before") })
	other := f.start(t, &rpc.StartRequest{Process: cmd("sleep", "60")}, nil)
	q := other.started()
	done := f.start(t, &rpc.StartRequest{Process: cmd("true"), Tag: ptr("gone")}, nil)
	gone := done.started()
	done.ended()

	// The client of the Start stream goes away: its process runs on.
	r.ev = events{}
	ctx, cancel := context.WithCancel(f.ctx)
	s, err := f.pc.Start(ctx, connect.NewRequest(&rpc.StartRequest{Process: cmd("sleep", "60"), Tag: ptr("orphan")}))
	if err != nil {
		t.Fatal(err)
	}
	orphanR := startReader(t, s)
	orphan := orphanR.started()
	cancel()

	list, err := f.pc.List(f.ctx, connect.NewRequest(&rpc.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	byPID := map[uint32]*rpc.ProcessInfo{}
	for _, pi := range list.Msg.GetProcesses() {
		byPID[pi.GetPid()] = pi
	}
	if len(byPID) != 3 || byPID[p] == nil || byPID[q] == nil || byPID[orphan] == nil || byPID[gone] != nil {
		t.Fatalf("list %v: want %d, %d and %d running, not %d", list.Msg.GetProcesses(), p, q, orphan, gone)
	}
	if c := byPID[p].GetConfig(); c.GetCmd() != "/bin/sh" || strings.Join(c.GetArgs(), "|") != "-c|echo before; read x; echo after $x" || byPID[p].GetTag() != "web" {
		t.Errorf("listed %v", byPID[p])
	}
	if byPID[q].Tag != nil {
		t.Errorf("an untagged process has tag %q", byPID[q].GetTag())
	}

	// Connect by pid: from now on, no replay.
	c := f.connect(t, pid(p))
	if got := c.started(); got != p {
		t.Errorf("connect's start names %d, want %d", got, p)
	}
	if _, err := f.pc.SendInput(f.ctx, connect.NewRequest(&rpc.SendInputRequest{Process: pid(p), Input: stdin("1\n")})); err != nil {
		t.Fatal(err)
	}
	if end := c.ended(); end.GetExitCode() != 0 {
		t.Errorf("end %v", end)
	}
	if got := c.ev.stdout.String(); got != "after 1\n" {
		t.Errorf("connect's stdout %q (a replay?)", got)
	}
	// The Start stream sees the same end.
	if end := r.ended(); end.GetExitCode() != 0 || !strings.Contains(r.ev.stdout.String(), "after 1") {
		t.Errorf("start stream: %v %q", end, r.ev.stdout.String())
	}

	t.Run("by tag", func(t *testing.T) {
		c := f.connect(t, tag("orphan"))
		if got := c.started(); got != orphan {
			t.Errorf("tag orphan is %d, want %d", got, orphan)
		}
		if _, err := f.pc.SendSignal(f.ctx, connect.NewRequest(&rpc.SendSignalRequest{Process: tag("orphan"), Signal: rpc.Signal_SIGNAL_SIGKILL})); err != nil {
			t.Fatal(err)
		}
		if end := c.ended(); end.GetStatus() != "signal: killed" {
			t.Errorf("end %v", end)
		}
	})
	t.Run("an exited process answers start and end", func(t *testing.T) {
		for _, sel := range []*rpc.ProcessSelector{pid(gone), tag("gone")} {
			c := f.connect(t, sel)
			if got := c.started(); got != gone {
				t.Errorf("start names %d, want %d", got, gone)
			}
			if end := c.ended(); end.GetExitCode() != 0 || !end.GetExited() || len(c.ev.kinds) != 2 {
				t.Errorf("end %v, events %v", end, c.ev.kinds)
			}
		}
	})
	t.Run("unknown", func(t *testing.T) {
		for _, sel := range []*rpc.ProcessSelector{pid(999), tag("nope"), {}} {
			code := f.connect(t, sel).failed()
			want := connect.CodeNotFound
			if sel.GetSelector() == nil {
				want = connect.CodeInvalidArgument
			}
			if code != want {
				t.Errorf("connect %v: %v, want %v", sel, code, want)
			}
		}
	})
}

func TestSignals(t *testing.T) {
	f := newFixture(t)
	for _, c := range []struct {
		sig    rpc.Signal
		status string
	}{
		{rpc.Signal_SIGNAL_SIGTERM, "signal: terminated"},
		{rpc.Signal_SIGNAL_SIGKILL, "signal: killed"},
	} {
		r := f.start(t, &rpc.StartRequest{Process: cmd("sleep", "60")}, nil)
		p := r.started()
		if _, err := f.pc.SendSignal(f.ctx, connect.NewRequest(&rpc.SendSignalRequest{Process: pid(p), Signal: c.sig})); err != nil {
			t.Fatal(err)
		}
		end := r.ended()
		if end.GetExitCode() != -1 || end.GetExited() || end.GetStatus() != c.status || end.GetError() != c.status {
			t.Errorf("after %v: %v", c.sig, end)
		}
		// Gone now, as envd says: the SDK's kill answers false.
		_, err := f.pc.SendSignal(f.ctx, connect.NewRequest(&rpc.SendSignalRequest{Process: pid(p), Signal: c.sig}))
		wantCode(t, "a signal to an exited process", err, connect.CodeNotFound)
	}
	r := f.start(t, &rpc.StartRequest{Process: cmd("sleep", "60")}, nil)
	p := r.started()
	_, err := f.pc.SendSignal(f.ctx, connect.NewRequest(&rpc.SendSignalRequest{Process: pid(p)}))
	wantCode(t, "an unspecified signal", err, connect.CodeInvalidArgument)
	if _, err := f.pc.SendSignal(f.ctx, connect.NewRequest(&rpc.SendSignalRequest{Process: pid(p), Signal: rpc.Signal_SIGNAL_SIGKILL})); err != nil {
		t.Fatal(err)
	}
	r.ended()

	// The audit log has the spawns and signals, as the native API records them.
	var spawns, signals int
	for _, rec := range daemontest.VerifiedAudit(t, f.env.Oper) {
		if rec.Session != f.sb.SandboxID || rec.Actor != "agent" {
			continue
		}
		switch rec.Kind {
		case "sandbox.process.spawn.intent":
			var d struct{ Argv []string }
			if err := json.Unmarshal(rec.Data, &d); err != nil || strings.Join(d.Argv, " ") != "sleep 60" {
				t.Errorf("spawn intent %s", rec.Data)
			}
			spawns++
		case "sandbox.process.signal.intent":
			signals++
		}
	}
	if spawns != 3 || signals != 3 {
		t.Errorf("audit: %d spawns, %d signals; want 3 and 3", spawns, signals)
	}
}

func TestKeepalive(t *testing.T) {
	f := newFixture(t)
	r := f.start(t, &rpc.StartRequest{Process: cmd("/bin/sh", "-c", "sleep 2; echo done")}, map[string]string{"Keepalive-Ping-Interval": "1"})
	p := r.started()
	r.until("a keep-alive", func(e *events) bool { return e.keepalives > 0 })
	r.ended()
	if r.ev.stdout.String() != "done\n" || r.ev.keepalives < 1 {
		t.Errorf("stdout %q, %d keep-alives", r.ev.stdout.String(), r.ev.keepalives)
	}
	// Connect keeps alive too; a bad interval takes the default (50 s),
	// so none comes in a short process.
	r = f.start(t, &rpc.StartRequest{Process: cmd("/bin/sh", "-c", "read x"), Stdin: yes()}, map[string]string{"Keepalive-Ping-Interval": "nonsense"})
	q := r.started()
	req := connect.NewRequest(&rpc.ConnectRequest{Process: pid(q)})
	req.Header().Set("Keepalive-Ping-Interval", "1")
	s, err := f.pc.Connect(f.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	c := connectReader(t, s)
	c.started()
	c.until("a keep-alive", func(e *events) bool { return e.keepalives > 0 })
	if _, err := f.pc.CloseStdin(f.ctx, connect.NewRequest(&rpc.CloseStdinRequest{Process: pid(q)})); err != nil {
		t.Fatal(err)
	}
	c.ended()
	r.ended()
	if r.ev.keepalives != 0 {
		t.Errorf("%d keep-alives at the default interval", r.ev.keepalives)
	}
	_ = p
}

func TestPTY(t *testing.T) {
	f := newFixture(t)
	r := f.start(t, &rpc.StartRequest{Process: &rpc.ProcessConfig{Cmd: "/bin/sh", Envs: map[string]string{"PS1": "$ "}},
		Pty: &rpc.PTY{Size: &rpc.PTY_Size{Rows: 24, Cols: 80}}}, nil)
	p := r.started()
	send := func(s string) {
		t.Helper()
		if _, err := f.pc.SendInput(f.ctx, connect.NewRequest(&rpc.SendInputRequest{Process: pid(p), Input: ptyIn(s)})); err != nil {
			t.Fatal(err)
		}
	}
	send("stty size\n")
	r.until("24 80", func(e *events) bool { return strings.Contains(e.pty.String(), "24 80") })
	if _, err := f.pc.Update(f.ctx, connect.NewRequest(&rpc.UpdateRequest{Process: pid(p), Pty: &rpc.PTY{Size: &rpc.PTY_Size{Rows: 40, Cols: 120}}})); err != nil {
		t.Fatal(err)
	}
	send("stty size\n")
	r.until("40 120", func(e *events) bool { return strings.Contains(e.pty.String(), "40 120") })
	if r.ev.stdout.Len() != 0 || r.ev.stderr.Len() != 0 {
		t.Errorf("a terminal's output came as stdout %q stderr %q", r.ev.stdout.String(), r.ev.stderr.String())
	}

	_, err := f.pc.SendInput(f.ctx, connect.NewRequest(&rpc.SendInputRequest{Process: pid(p), Input: stdin("x")}))
	wantCode(t, "stdin to a terminal", err, connect.CodeFailedPrecondition)
	_, err = f.pc.CloseStdin(f.ctx, connect.NewRequest(&rpc.CloseStdinRequest{Process: pid(p)}))
	wantCode(t, "closing a terminal's stdin", err, connect.CodeFailedPrecondition)
	_, err = f.pc.Update(f.ctx, connect.NewRequest(&rpc.UpdateRequest{Process: pid(p), Pty: &rpc.PTY{Size: &rpc.PTY_Size{Rows: 0, Cols: 120}}}))
	wantCode(t, "a terminal of 0 rows", err, connect.CodeInvalidArgument)

	plain := f.start(t, &rpc.StartRequest{Process: cmd("sleep", "60")}, nil)
	q := plain.started()
	_, err = f.pc.Update(f.ctx, connect.NewRequest(&rpc.UpdateRequest{Process: pid(q), Pty: &rpc.PTY{Size: &rpc.PTY_Size{Rows: 10, Cols: 10}}}))
	wantCode(t, "resizing a process without a terminal", err, connect.CodeFailedPrecondition)
	_, err = f.pc.SendInput(f.ctx, connect.NewRequest(&rpc.SendInputRequest{Process: pid(q), Input: ptyIn("x")}))
	wantCode(t, "pty input to a process without a terminal", err, connect.CodeFailedPrecondition)
	if _, err := f.pc.Update(f.ctx, connect.NewRequest(&rpc.UpdateRequest{Process: pid(q)})); err != nil {
		t.Errorf("an update without a size: %v", err)
	}

	send("exit 5\n")
	if end := r.ended(); end.GetExitCode() != 5 {
		t.Errorf("end %v", end)
	}
}

// A terminal's bytes are cut anywhere; its characters arrive whole, and
// every one of them arrives. A failure says which layer lost bytes: the
// process's end record counts what the sandbox read from the terminal,
// the daemon's log says whether the stream fell behind its ring.
func TestPTYOutputArrivesWhole(t *testing.T) {
	var logMu sync.Mutex
	var logged []string
	env := e2btest.Start(t, func(c *e2btest.Config) {
		c.Logf = func(format string, args ...any) {
			logMu.Lock()
			defer logMu.Unlock()
			logged = append(logged, fmt.Sprintf(format, args...))
		}
	})
	sb := env.CreateNative(t, client.AgentTokenFile, client.CreateRequest{})
	logMu.Lock()
	started := len(logged) // the start-up lines are no clue
	logMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	f := &fixture{env: env, sb: sb, pc: env.Process(sb), ctx: ctx}
	const n = 100000
	r := f.start(t, &rpc.StartRequest{Process: cmd("/bin/sh", "-c", "printf x; i=0; while [ $i -lt 2000 ]; do printf '"+strings.Repeat("é", 50)+"'; i=$((i+1)); done"),
		Pty: &rpc.PTY{Size: &rpc.PTY_Size{Rows: 24, Cols: 80}}}, nil)
	r.started()
	r.ended()
	out, want := r.ev.pty.String(), "x"+strings.Repeat("é", n)
	if out == want {
		return
	}
	at := 0
	for at < min(len(out), len(want)) && out[at] == want[at] {
		at++
	}
	// The end record is queued after the end is known: wait for it.
	read := "not found"
	for deadline := time.Now().Add(5 * time.Second); read == "not found" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, rec := range daemontest.VerifiedAudit(t, env.Oper) {
			if rec.Session == sb.SandboxID && rec.Kind == "sandbox.process.spawn" {
				read = string(rec.Data)
			}
		}
	}
	logMu.Lock()
	defer logMu.Unlock()
	t.Errorf("%d bytes arrived of %d (%d é, %d U+FFFD); the first difference at byte %d; the end record: %s; the daemon logged %q",
		len(out), len(want), strings.Count(out, "é"), strings.Count(out, "\uFFFD"), at, read, logged[started:])
}

func TestHostile(t *testing.T) {
	f := newFixture(t)
	r := f.start(t, &rpc.StartRequest{Process: cmd("cat"), Stdin: yes()}, nil)
	p := r.started()

	t.Run("unknown pid", func(t *testing.T) {
		for _, n := range []uint32{1, 999, 0, 1 << 31} { // 1: the sandbox's init, no process of the API
			_, err := f.pc.SendInput(f.ctx, connect.NewRequest(&rpc.SendInputRequest{Process: pid(n), Input: stdin("x")}))
			wantCode(t, "input", err, connect.CodeNotFound)
			_, err = f.pc.SendSignal(f.ctx, connect.NewRequest(&rpc.SendSignalRequest{Process: pid(n), Signal: rpc.Signal_SIGNAL_SIGKILL}))
			wantCode(t, "signal", err, connect.CodeNotFound)
			_, err = f.pc.CloseStdin(f.ctx, connect.NewRequest(&rpc.CloseStdinRequest{Process: pid(n)}))
			wantCode(t, "close stdin", err, connect.CodeNotFound)
			_, err = f.pc.Update(f.ctx, connect.NewRequest(&rpc.UpdateRequest{Process: pid(n)}))
			wantCode(t, "update", err, connect.CodeNotFound)
		}
	})
	t.Run("bad starts", func(t *testing.T) {
		for name, m := range map[string]*rpc.StartRequest{
			"no cmd":           {Process: &rpc.ProcessConfig{}},
			"no process":       {},
			"a missing cwd":    {Process: &rpc.ProcessConfig{Cmd: "true", Cwd: ptr("/workspace/no/such/dir")}},
			"a missing cmd":    {Process: cmd("/no/such/program")},
			"a bad tag":        {Process: cmd("true"), Tag: ptr("no spaces")},
			"a bad env name":   {Process: &rpc.ProcessConfig{Cmd: "true", Envs: map[string]string{"A=B": "c"}}},
			"a huge terminal":  {Process: cmd("sh"), Pty: &rpc.PTY{Size: &rpc.PTY_Size{Rows: 5000, Cols: 80}}},
			"a cwd with a NUL": {Process: &rpc.ProcessConfig{Cmd: "true", Cwd: ptr("/tmp/\x00")}},
		} {
			s, err := f.pc.Start(f.ctx, connect.NewRequest(m))
			if err != nil {
				t.Fatal(err)
			}
			if code := startReader(t, s).failed(); code != connect.CodeInvalidArgument {
				t.Errorf("%s: %v", name, code)
			}
		}
	})
	t.Run("oversize input", func(t *testing.T) {
		big := strings.Repeat("x", 1<<20+1)
		_, err := f.pc.SendInput(f.ctx, connect.NewRequest(&rpc.SendInputRequest{Process: pid(p), Input: stdin(big)}))
		wantCode(t, "1 MiB + 1 of input", err, connect.CodeResourceExhausted)
		huge := strings.Repeat("x", 2<<20)
		_, err = f.pc.SendInput(f.ctx, connect.NewRequest(&rpc.SendInputRequest{Process: pid(p), Input: stdin(huge)}))
		wantCode(t, "a 2 MiB message", err, connect.CodeResourceExhausted)
		// Nothing of them was written.
		if _, err := f.pc.SendInput(f.ctx, connect.NewRequest(&rpc.SendInputRequest{Process: pid(p), Input: stdin("ok\n")})); err != nil {
			t.Fatal(err)
		}
		r.until("ok", func(e *events) bool { return strings.Contains(e.stdout.String(), "ok") })
		if got := r.ev.stdout.String(); got != "ok\n" {
			t.Errorf("stdout %.40q (%d bytes)", got, len(got))
		}
	})
	t.Run("another principal's sandbox", func(t *testing.T) {
		bob := f.env.Process(e2btest.Sandbox{SandboxID: f.sb.SandboxID, EnvdAccessToken: accessTokenOf(t, f.env, "agents/bob.token", f.sb.SandboxID)})
		_, err := bob.List(f.ctx, connect.NewRequest(&rpc.ListRequest{}))
		wantCode(t, "bob's list", err, connect.CodeNotFound)
		_, err = bob.SendInput(f.ctx, connect.NewRequest(&rpc.SendInputRequest{Process: pid(p), Input: stdin("x")}))
		wantCode(t, "bob's input", err, connect.CodeNotFound)
		_, err = bob.SendSignal(f.ctx, connect.NewRequest(&rpc.SendSignalRequest{Process: pid(p), Signal: rpc.Signal_SIGNAL_SIGKILL}))
		wantCode(t, "bob's signal", err, connect.CodeNotFound)
		s, err := bob.Start(f.ctx, connect.NewRequest(&rpc.StartRequest{Process: cmd("true"), Tag: ptr("bob")}))
		if err != nil {
			t.Fatal(err)
		}
		if code := startReader(t, s).failed(); code != connect.CodeNotFound {
			t.Errorf("bob's start: %v", code)
		}
		cs, err := bob.Connect(f.ctx, connect.NewRequest(&rpc.ConnectRequest{Process: pid(p)}))
		if err != nil {
			t.Fatal(err)
		}
		if code := connectReader(t, cs).failed(); code != connect.CodeNotFound {
			t.Errorf("bob's connect: %v", code)
		}
		if ps, _ := f.env.Agent.Processes(f.ctx, f.sb.SandboxID, "bob"); len(ps) != 0 {
			t.Errorf("bob started %+v", ps)
		}
		nobody := f.env.Process(e2btest.Sandbox{SandboxID: f.sb.SandboxID})
		_, err = nobody.List(f.ctx, connect.NewRequest(&rpc.ListRequest{}))
		wantCode(t, "a list without a token", err, connect.CodeUnauthenticated)
	})
	t.Run("streams are bounded per sandbox", func(t *testing.T) {
		// The Start stream above holds one; 31 more fill the sandbox's 32.
		ctx, cancel := context.WithCancel(f.ctx)
		defer cancel()
		var streams []*reader
		for range 31 {
			s, err := f.pc.Connect(ctx, connect.NewRequest(&rpc.ConnectRequest{Process: pid(p)}))
			if err != nil {
				t.Fatal(err)
			}
			c := connectReader(t, s)
			c.started()
			streams = append(streams, c)
		}
		s, err := f.pc.Connect(ctx, connect.NewRequest(&rpc.ConnectRequest{Process: pid(p)}))
		if err != nil {
			t.Fatal(err)
		}
		if code := connectReader(t, s).failed(); code != connect.CodeResourceExhausted {
			t.Errorf("the 33rd stream: %v", code)
		}
		// Unary calls are not streams: input still goes.
		if _, err := f.pc.SendInput(f.ctx, connect.NewRequest(&rpc.SendInputRequest{Process: pid(p), Input: stdin("x")})); err != nil {
			t.Errorf("input with 32 streams open: %v", err)
		}
		cancel()
		for _, c := range streams {
			c.failed()
		}
		// Released: one more may open.
		var again *reader
		eventuallyOK(t, "a stream once the others closed", func() bool {
			s, err := f.pc.Connect(f.ctx, connect.NewRequest(&rpc.ConnectRequest{Process: pid(p)}))
			if err != nil {
				return false
			}
			again = connectReader(t, s)
			ev, ok := again.recv()
			return ok && ev.GetStart() != nil
		})
	})
	if _, err := f.pc.CloseStdin(f.ctx, connect.NewRequest(&rpc.CloseStdinRequest{Process: pid(p)})); err != nil {
		t.Fatal(err)
	}
	r.ended()
}

// eventuallyOK polls cond for up to 10 s.
func eventuallyOK(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// accessTokenOf is the envd access token of sandboxID for the agent whose
// token file is name.
func accessTokenOf(t *testing.T, env *e2btest.Env, name, sandboxID string) string {
	t.Helper()
	return auth.AccessTokenFor(daemontest.Token(t, env.Dir, name), sandboxID)
}

// A command the policy marks for approval does not run: Start is refused
// with the approval request it filed, which the operator decides and the
// native API spends.
func TestStartNeedsTheApprovalAnExecWould(t *testing.T) {
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte("exec:\n  require_approval: ['echo gated']\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := e2btest.Start(t, func(c *e2btest.Config) { c.PolicyFile = pol })
	sb := env.CreateNative(t, client.AgentTokenFile, client.CreateRequest{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := env.Process(sb).Start(ctx, connect.NewRequest(&rpc.StartRequest{Process: cmd("/bin/bash", "-l", "-c", "echo gated")}))
	if err != nil {
		t.Fatal(err)
	}
	r := startReader(t, s)
	if code := r.failed(); code != connect.CodePermissionDenied || !strings.Contains(r.err().Error(), "apr-") {
		t.Errorf("a marked command: %v", r.err())
	}
	if ps, err := env.Agent.Processes(ctx, sb.SandboxID, ""); err != nil || len(ps) != 0 {
		t.Errorf("processes %+v %v", ps, err)
	}
}
