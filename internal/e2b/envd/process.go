package envd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"path"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/client"
	rpc "github.com/ironclaw/ironclaw/internal/e2b/envdpb/process"
	"github.com/ironclaw/ironclaw/internal/e2b/envdpb/process/processconnect"
)

// The process service: E2B's processes are the native API's background
// processes (docs/http-api.md, Processes), and every call is a native
// call as the request's principal.
//
// The pid E2B speaks of is the process's pid inside the sandbox, as in
// envd (what ps and kill there see); each call finds the native process
// by it. The native handle, which counts from 1, would name the sandbox's
// init to a shell (`kill -9 $pid`).
//
// Processes outlive the stream that started them: a client that hangs up
// leaves its process running, as envd does. The Start request's deadline
// (Connect-Timeout-Ms, the SDKs' timeoutMs) is the process's timeout, as
// in envd: the daemon kills it then, and the stream ends with
// DeadlineExceeded.
//
// Output streams are native follows of the process's output log (one
// in-process request each): Start reads it from its beginning, Connect
// from where it is now (envd replays nothing either). List shows the
// running processes only, as envd forgets a process that exited; Connect
// still answers the start and end of one the daemon keeps.

const (
	// maxInput bounds the bytes of one SendInput or StreamInput data
	// event: the native API's bound of one stdin write.
	maxInput = 1 << 20
	// maxMessage bounds a request message: maxInput in the JSON codec
	// (base64, 4/3) and room for the rest. Both services are held to it,
	// after decompression: a gzip request of 64 KiB can inflate to 64 MiB.
	maxMessage = 2 << 20
	// compressMinBytes is the smallest answer message the services
	// compress when a client accepts gzip: a process's start and end
	// events and most filesystem answers are tens of bytes, which gzip
	// makes larger, at tens of microseconds of CPU each.
	compressMinBytes = 1 << 10
	// streamsPerSandbox and streamsTotal bound the long requests this
	// service holds (Start and Connect streams, StreamInput): each holds
	// a goroutine and, for output, one of the sandbox's 64 native waiters.
	streamsPerSandbox = 32
	streamsTotal      = 1024
	// Keep-alive events go out every Keepalive-Ping-Interval seconds of
	// silence (the SDKs send 50), within these bounds.
	keepaliveDefault = 50 * time.Second
	keepaliveMin     = time.Second
	keepaliveMax     = 60 * time.Second
	// maxProcessTimeout is the native API's longest process timeout.
	maxProcessTimeout = 7 * 24 * time.Hour
	// workdir is where relative working directories resolve, and the
	// default one: IronClaw's writable root, also the home of "~".
	workdir = "/workspace"
)

// processService implements processconnect.ProcessHandler.
type processService struct {
	cfg     Config
	streams *streamLimiter
}

// registerProcess mounts the process.Process service.
func registerProcess(mux *http.ServeMux, cfg Config) {
	s := &processService{cfg: cfg, streams: newStreamLimiter(streamsPerSandbox, streamsTotal)}
	p, h := processconnect.NewProcessHandler(s, connect.WithReadMaxBytes(maxMessage), connect.WithCompressMinBytes(compressMinBytes))
	mux.Handle(p, h)
}

// resolve finds the process sel names: by pid, the process with that pid
// inside the sandbox; by tag, the newest with that tag. A running one is
// preferred; unless live, one that exited answers too (the newest). With
// live, a process that exited is not found: envd forgets a process when
// it exits, and the SDKs read NotFound as "no such process" (kill answers
// false).
func resolve(ctx context.Context, api *client.Client, id string, sel *rpc.ProcessSelector, live bool) (client.Process, error) {
	var (
		match func(client.Process) bool
		name  string
		tag   string
	)
	switch s := sel.GetSelector().(type) {
	case *rpc.ProcessSelector_Pid:
		if s.Pid == 0 || s.Pid > math.MaxInt32 {
			return client.Process{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", s.Pid))
		}
		match = func(p client.Process) bool { return p.OSPID == int(s.Pid) }
		name = fmt.Sprintf("pid %d", s.Pid)
	case *rpc.ProcessSelector_Tag:
		match = func(client.Process) bool { return true }
		name, tag = fmt.Sprintf("tag %q", s.Tag), s.Tag
	default:
		return client.Process{}, connect.NewError(connect.CodeInvalidArgument, errors.New("a process selector (pid or tag) is required"))
	}
	ps, err := api.Processes(ctx, id, tag)
	if err != nil {
		return client.Process{}, rpcError(err)
	}
	var exited *client.Process
	for i := len(ps) - 1; i >= 0; i-- { // newest first
		if !match(ps[i]) {
			continue
		}
		if ps[i].State == processRunning {
			return ps[i], nil
		}
		if exited == nil {
			exited = &ps[i]
		}
	}
	switch {
	case exited != nil && !live:
		return *exited, nil
	case exited != nil:
		return client.Process{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with %s has exited", name))
	}
	return client.Process{}, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with %s not found", name))
}

// Native process states.
const (
	processRunning = "running"
	processExited  = "exited"
)

// Start runs a process and streams its events.
func (s *processService) Start(ctx context.Context, req *connect.Request[rpc.StartRequest], stream *connect.ServerStream[rpc.StartResponse]) error {
	api, id, err := caller(ctx)
	if err != nil {
		return err
	}
	m := req.Msg
	pc := m.GetProcess()
	if pc.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	sr := client.SpawnRequest{Argv: append([]string{pc.GetCmd()}, pc.GetArgs()...), Cwd: resolveCwd(pc.GetCwd()),
		Env: pc.GetEnvs(), Tag: m.GetTag(), Stdin: m.Stdin == nil || m.GetStdin()}
	if m.Pty != nil {
		// A terminal's input is always open.
		sr.PTY, sr.Stdin = true, false
		sr.Rows, sr.Cols = int(m.GetPty().GetSize().GetRows()), int(m.GetPty().GetSize().GetCols())
	}
	if d, ok := ctx.Deadline(); ok {
		// envd runs the process under the request's deadline; the daemon
		// kills it then too (the stream ends with DeadlineExceeded).
		sr.Timeout = min(max(time.Until(d), time.Millisecond), maxProcessTimeout)
	}
	release, err := s.streams.acquire(id)
	if err != nil {
		return err
	}
	defer release()
	p, err := api.Spawn(ctx, id, sr)
	if err != nil {
		var ce *client.Error
		if sr.PTY && errors.As(err, &ce) && ce.Code == wire.CodeUnavailable {
			// The backend has no terminals (only the native one has):
			// not "the sandbox is gone", which the SDKs read Unavailable as.
			return connect.NewError(connect.CodeUnimplemented, errors.New(ce.Message))
		}
		return rpcError(err)
	}
	if p.State != processRunning && p.Error != "" {
		// It could not start (no such program, a working directory that
		// is not one): envd refuses such a start.
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cannot start %s: %s", pc.GetCmd(), p.Error))
	}
	if p.OSPID <= 0 {
		// Not running within the daemon's start wait: a process E2B
		// cannot name is no use to it.
		_, _ = api.KillProcess(context.WithoutCancel(ctx), id, p.PID)
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("%s did not start in time", pc.GetCmd()))
	}
	return s.follow(ctx, api, id, p, 0, keepaliveOf(req.Header()), func(ev *rpc.ProcessEvent) error {
		return stream.Send(&rpc.StartResponse{Event: ev})
	})
}

// Connect streams a process's events from now on: output from where its
// log is, then its end. A process that exited answers its start and end.
func (s *processService) Connect(ctx context.Context, req *connect.Request[rpc.ConnectRequest], stream *connect.ServerStream[rpc.ConnectResponse]) error {
	api, id, err := caller(ctx)
	if err != nil {
		return err
	}
	release, err := s.streams.acquire(id)
	if err != nil {
		return err
	}
	defer release()
	p, err := resolve(ctx, api, id, req.Msg.GetProcess(), false)
	if err != nil {
		return err
	}
	return s.follow(ctx, api, id, p, p.Offset, keepaliveOf(req.Header()), func(ev *rpc.ProcessEvent) error {
		return stream.Send(&rpc.ConnectResponse{Event: ev})
	})
}

// follow sends p's start event, its output from offset until it exited,
// with keep-alives in the silences, then its end event.
func (s *processService) follow(ctx context.Context, api *client.Client, id string, p client.Process, offset int64,
	every time.Duration, send func(*rpc.ProcessEvent) error) error {
	out := &eventSender{send: send, sent: make(chan struct{}, 1)}
	if err := out.event(&rpc.ProcessEvent{Event: &rpc.ProcessEvent_Start{Start: &rpc.ProcessEvent_StartEvent{Pid: uint32(p.OSPID)}}}); err != nil {
		return err
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { out.keepalive(every, done) })
	stdout := out.data(func(b []byte) *rpc.ProcessEvent_DataEvent {
		return &rpc.ProcessEvent_DataEvent{Output: &rpc.ProcessEvent_DataEvent_Stdout{Stdout: b}}
	})
	if p.PTY {
		stdout = out.data(func(b []byte) *rpc.ProcessEvent_DataEvent {
			return &rpc.ProcessEvent_DataEvent{Output: &rpc.ProcessEvent_DataEvent_Pty{Pty: b}}
		})
	}
	stderr := out.data(func(b []byte) *rpc.ProcessEvent_DataEvent {
		return &rpc.ProcessEvent_DataEvent{Output: &rpc.ProcessEvent_DataEvent_Stderr{Stderr: b}}
	})
	end, err := api.ProcessOutput(ctx, id, p.PID, client.OutputRequest{Offset: offset, Follow: true, Stdout: stdout, Stderr: stderr,
		Dropped: func(n int64) {
			s.cfg.Logf("envd: process %d in %s: the stream fell %d bytes behind its output ring", p.PID, id, n)
		}})
	close(done)
	wg.Wait() // no send after the handler returns
	if err != nil {
		if cerr := out.failed(); cerr != nil {
			return cerr
		}
		if ctx.Err() != nil {
			return rpcError(ctx.Err())
		}
		return rpcError(err)
	}
	if end.State != processExited {
		return connect.NewError(connect.CodeUnavailable, fmt.Errorf("the output of process %d ended before it exited: %s", p.OSPID, end.Error))
	}
	return out.event(&rpc.ProcessEvent{Event: &rpc.ProcessEvent_End{End: endEvent(end.Exit, end.Error)}})
}

// endEvent is envd's end of a process that exited with code exit (nil:
// unknown). The native API reports death by signal N as 128+N, as a shell
// does, and cannot tell it from a process that exited so; 129 to 159 are
// reported as envd reports a signal (exit code -1, not exited, "signal:
// killed"), which is what the SDKs' kill and timeouts lead to.
func endEvent(exit *int, nativeErr string) *rpc.ProcessEvent_EndEvent {
	if exit == nil || *exit < 0 {
		msg := "the process's end is unknown"
		if nativeErr != "" {
			msg = nativeErr
		}
		return &rpc.ProcessEvent_EndEvent{ExitCode: -1, Status: "unknown", Error: &msg}
	}
	code := *exit
	if code > 128 && code < 128+32 {
		status := "signal: " + syscall.Signal(code-128).String()
		return &rpc.ProcessEvent_EndEvent{ExitCode: -1, Exited: false, Status: status, Error: &status}
	}
	e := &rpc.ProcessEvent_EndEvent{ExitCode: int32(code), Exited: true, Status: "exit status " + strconv.Itoa(code)}
	switch {
	case nativeErr != "":
		e.Error = &nativeErr
	case code != 0:
		e.Error = &e.Status
	}
	return e
}

// eventSender serializes a stream's sends (output and keep-alives come
// from two goroutines) and remembers the first failure.
type eventSender struct {
	send func(*rpc.ProcessEvent) error
	sent chan struct{} // a token per output event: the keep-alive waits anew

	mu  sync.Mutex
	err error
}

func (o *eventSender) event(ev *rpc.ProcessEvent) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.err != nil {
		return o.err
	}
	if err := o.send(ev); err != nil {
		o.err = err
		return err
	}
	return nil
}

func (o *eventSender) failed() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// data is a writer that sends what is written as data events.
func (o *eventSender) data(wrap func([]byte) *rpc.ProcessEvent_DataEvent) writerFunc {
	return func(b []byte) (int, error) {
		if err := o.event(&rpc.ProcessEvent{Event: &rpc.ProcessEvent_Data{Data: wrap(b)}}); err != nil {
			return 0, err
		}
		select {
		case o.sent <- struct{}{}:
		default:
		}
		return len(b), nil
	}
}

// keepalive sends a keep-alive event after every silence of every, until
// done.
func (o *eventSender) keepalive(every time.Duration, done <-chan struct{}) {
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-o.sent:
			t.Reset(every)
		case <-t.C:
			if o.event(&rpc.ProcessEvent{Event: &rpc.ProcessEvent_Keepalive{Keepalive: &rpc.ProcessEvent_KeepAlive{}}}) != nil {
				return
			}
			t.Reset(every)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// keepaliveOf is the keep-alive interval a request asks for.
func keepaliveOf(h http.Header) time.Duration {
	n, err := strconv.Atoi(strings.TrimSpace(h.Get("Keepalive-Ping-Interval")))
	if err != nil || n <= 0 {
		return keepaliveDefault
	}
	return min(max(time.Duration(min(n, 3600))*time.Second, keepaliveMin), keepaliveMax)
}

// resolveCwd is the working directory of a start: relative to /workspace,
// "~" being /workspace; the native API checks the rest.
func resolveCwd(cwd string) string {
	switch {
	case cwd == "" || cwd == "~":
		return workdir
	case strings.HasPrefix(cwd, "~/"):
		return path.Join(workdir, cwd[2:])
	case !path.IsAbs(cwd):
		return path.Join(workdir, cwd)
	}
	return path.Clean(cwd)
}

// List lists the running processes.
func (s *processService) List(ctx context.Context, _ *connect.Request[rpc.ListRequest]) (*connect.Response[rpc.ListResponse], error) {
	api, id, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	ps, err := api.Processes(ctx, id, "")
	if err != nil {
		return nil, rpcError(err)
	}
	out := &rpc.ListResponse{Processes: []*rpc.ProcessInfo{}}
	for _, p := range ps {
		if p.State != processRunning {
			continue
		}
		info := &rpc.ProcessInfo{Pid: uint32(p.OSPID), Config: &rpc.ProcessConfig{}}
		if len(p.Argv) > 0 {
			info.Config.Cmd, info.Config.Args = p.Argv[0], p.Argv[1:]
		}
		if p.Tag != "" {
			info.Tag = &p.Tag
		}
		out.Processes = append(out.Processes, info)
	}
	return connect.NewResponse(out), nil
}

// SendInput writes to a process's stdin or terminal.
func (s *processService) SendInput(ctx context.Context, req *connect.Request[rpc.SendInputRequest]) (*connect.Response[rpc.SendInputResponse], error) {
	api, id, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	p, err := resolve(ctx, api, id, req.Msg.GetProcess(), true)
	if err != nil {
		return nil, err
	}
	if err := writeInput(ctx, api, id, p, req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&rpc.SendInputResponse{}), nil
}

// writeInput writes in to p: stdin bytes to a process without a terminal,
// pty bytes to one with, as envd insists.
func writeInput(ctx context.Context, api *client.Client, id string, p client.Process, in *rpc.ProcessInput) error {
	var b []byte
	switch x := in.GetInput().(type) {
	case *rpc.ProcessInput_Stdin:
		if p.PTY {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d runs on a terminal: send pty input", p.OSPID))
		}
		b = x.Stdin
	case *rpc.ProcessInput_Pty:
		if !p.PTY {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has no terminal: send stdin input", p.OSPID))
		}
		b = x.Pty
	default:
		return connect.NewError(connect.CodeInvalidArgument, errors.New("input (stdin or pty) is required"))
	}
	if len(b) > maxInput {
		return connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("an input is at most %d bytes; nothing was written", maxInput))
	}
	if len(b) == 0 {
		return nil
	}
	_, err := api.WriteStdin(ctx, id, p.PID, b, false)
	return rpcError(err)
}

// StreamInput writes a stream of inputs, in order, to the process its
// first event selects.
func (s *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[rpc.StreamInputRequest]) (*connect.Response[rpc.StreamInputResponse], error) {
	api, id, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	release, err := s.streams.acquire(id)
	if err != nil {
		return nil, err
	}
	defer release()
	var p *client.Process
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *rpc.StreamInputRequest_Start:
			if p != nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the stream selected its process already"))
			}
			got, err := resolve(ctx, api, id, ev.Start.GetProcess(), true)
			if err != nil {
				return nil, err
			}
			p = &got
		case *rpc.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("the first event selects the process (start)"))
			}
			if err := writeInput(ctx, api, id, *p, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		case *rpc.StreamInputRequest_Keepalive:
		default:
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("an event (start, data or keepalive) is required"))
		}
	}
	if err := stream.Err(); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&rpc.StreamInputResponse{}), nil
}

// SendSignal sends SIGTERM or SIGKILL to a process's group.
func (s *processService) SendSignal(ctx context.Context, req *connect.Request[rpc.SendSignalRequest]) (*connect.Response[rpc.SendSignalResponse], error) {
	api, id, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	var sig string
	switch req.Msg.GetSignal() {
	case rpc.Signal_SIGNAL_SIGKILL:
		sig = "KILL"
	case rpc.Signal_SIGNAL_SIGTERM:
		sig = "TERM"
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal %s: SIGKILL or SIGTERM", req.Msg.GetSignal()))
	}
	p, err := resolve(ctx, api, id, req.Msg.GetProcess(), true)
	if err != nil {
		return nil, err
	}
	if err := api.SignalProcess(ctx, id, p.PID, sig); err != nil {
		var ce *client.Error
		if errors.As(err, &ce) && ce.Code == wire.CodeConflict {
			// It exited since: gone, as envd would say.
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d has exited", p.OSPID))
		}
		return nil, rpcError(err)
	}
	return connect.NewResponse(&rpc.SendSignalResponse{}), nil
}

// CloseStdin closes a process's stdin (a no-op when it is not open).
func (s *processService) CloseStdin(ctx context.Context, req *connect.Request[rpc.CloseStdinRequest]) (*connect.Response[rpc.CloseStdinResponse], error) {
	api, id, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	p, err := resolve(ctx, api, id, req.Msg.GetProcess(), true)
	if err != nil {
		return nil, err
	}
	if p.PTY {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d runs on a terminal: send Ctrl-D (0x04) instead", p.OSPID))
	}
	if p.Stdin {
		if _, err := api.WriteStdin(ctx, id, p.PID, nil, true); err != nil {
			return nil, rpcError(err)
		}
	}
	return connect.NewResponse(&rpc.CloseStdinResponse{}), nil
}

// Update resizes a process's terminal.
func (s *processService) Update(ctx context.Context, req *connect.Request[rpc.UpdateRequest]) (*connect.Response[rpc.UpdateResponse], error) {
	api, id, err := caller(ctx)
	if err != nil {
		return nil, err
	}
	p, err := resolve(ctx, api, id, req.Msg.GetProcess(), true)
	if err != nil {
		return nil, err
	}
	if size := req.Msg.GetPty().GetSize(); size != nil {
		if size.GetRows() > math.MaxInt32 || size.GetCols() > math.MaxInt32 {
			return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("rows and cols are 1 to 1000"))
		}
		if err := api.ResizeTerminal(ctx, id, p.PID, int(size.GetRows()), int(size.GetCols())); err != nil {
			return nil, rpcError(err)
		}
	}
	return connect.NewResponse(&rpc.UpdateResponse{}), nil
}

// streamLimiter bounds the long requests held, per sandbox and in all.
type streamLimiter struct {
	perSandbox, total int

	mu  sync.Mutex
	n   int
	per map[string]int // at most total entries: one is dropped at 0
}

func newStreamLimiter(perSandbox, total int) *streamLimiter {
	return &streamLimiter{perSandbox: perSandbox, total: total, per: map[string]int{}}
}

// acquire admits one stream of sandbox id; the func releases it.
func (l *streamLimiter) acquire(id string) (func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.n >= l.total:
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("envd holds %d process streams, the most it may", l.total))
	case l.per[id] >= l.perSandbox:
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("sandbox %s has %d process streams open, the most it may", id, l.perSandbox))
	}
	l.n++
	l.per[id]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.n--
			if l.per[id]--; l.per[id] == 0 {
				delete(l.per, id)
			}
		})
	}, nil
}
