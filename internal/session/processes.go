package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/errdefs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// Background processes (the processes API, docs/http-api.md): a command
// that runs in a sandbox beyond the request that started it. The daemon
// holds it on a context tied to the sandbox's life, keeps its output in a
// bounded ring of frames (stdout and stderr interleaved, in order, byte
// offsets into the whole log), feeds it stdin from a bounded buffer, and
// keeps its end for a while after it exited. Everything of a sandbox's
// processes is released when the sandbox ends.

// Process bounds: the defaults of ProcessLimits.
const (
	DefaultProcessesRunning = 32      // running processes per sandbox
	DefaultProcessesKept    = 64      // exited processes kept per sandbox, oldest dropped
	DefaultProcessRing      = 1 << 20 // output ring per process, bytes
	DefaultProcessRetained  = 32 << 20
	DefaultStdinBuffer      = 1 << 20 // stdin not yet read by the process, bytes
	DefaultProcessesTotal   = 1024    // running processes in the whole daemon
	DefaultProcessWaiters   = 64      // output reads, waits and stdin writes in flight per sandbox
	DefaultTerminals        = 16      // attached terminals per sandbox (one per process)
	// frameOverhead is what each frame costs in a ring besides its text,
	// so that many one-byte writes cannot hold more memory than the ring.
	frameOverhead = 64
	// maxProcessFrame bounds the text of one output frame.
	maxProcessFrame = 32 << 10
	// startWait bounds how long a spawn waits for its command to run.
	startWait = 10 * time.Second
	// signalTimeout bounds the in-sandbox kill that delivers a signal.
	signalTimeout = 10 * time.Second
	// MaxTag bounds a process tag.
	MaxTag = 64
	// MaxTerminalSize bounds a terminal's rows and columns.
	MaxTerminalSize = 1000
)

// Process states.
const (
	ProcessRunning = "running"
	ProcessExited  = "exited"
)

// Audit kinds of processes. Spawn is an intent (before it runs) and a
// result (when it exited); signal and kill likewise.
const (
	KindProcessSpawn  = "sandbox.process.spawn"
	KindProcessSignal = "sandbox.process.signal"
	KindProcessKill   = "sandbox.process.kill"
)

// ErrProcessNotFound is an unknown process handle.
var ErrProcessNotFound = errdefs.New(errdefs.ErrNotFound, "process not found")

// Signals are the signal names a process may be sent, and their numbers.
var Signals = map[string]int{"HUP": 1, "INT": 2, "QUIT": 3, "KILL": 9, "USR1": 10, "USR2": 12, "TERM": 15}

// ProcessLimits bound the processes of each sandbox; zero fields take the
// defaults above.
type ProcessLimits struct {
	Running  int   // running processes per sandbox
	Kept     int   // exited processes kept per sandbox
	Ring     int64 // output ring per process, bytes
	Retained int64 // output rings of one sandbox's processes together, bytes
	Stdin    int64 // stdin buffered per process, bytes
	Total    int   // running processes of all sandboxes together
	Waiters  int   // output reads, waits and stdin writes in flight per sandbox
	// Terminals bounds the terminals attached at once per sandbox (each
	// process takes one writer).
	Terminals int
}

func (l ProcessLimits) withDefaults() ProcessLimits {
	if l.Running <= 0 {
		l.Running = DefaultProcessesRunning
	}
	if l.Kept <= 0 {
		l.Kept = DefaultProcessesKept
	}
	if l.Ring <= 0 {
		l.Ring = DefaultProcessRing
	}
	if l.Retained <= 0 {
		l.Retained = DefaultProcessRetained
	}
	if l.Stdin <= 0 {
		l.Stdin = DefaultStdinBuffer
	}
	if l.Total <= 0 {
		l.Total = DefaultProcessesTotal
	}
	if l.Waiters <= 0 {
		l.Waiters = DefaultProcessWaiters
	}
	if l.Terminals <= 0 {
		l.Terminals = DefaultTerminals
	}
	return l
}

// SpawnRequest starts a process.
type SpawnRequest struct {
	Argv []string
	Cwd  string
	Env  []string
	Tag  string
	// Stdin opens a stdin buffer (WriteStdin, CloseStdin); without it the
	// process reads end of file.
	Stdin bool
	// Gate is an approved gated program (see sandbox.ExecRequest.Gate).
	Gate string
	// TTY runs it on a terminal inside the sandbox (its output is one
	// stream, stdout; its stdin is the terminal's input, always open) of
	// Rows x Cols (0: 24 x 80). A backend without terminals refuses it.
	TTY        bool
	Rows, Cols int
	// Timeout ends the process after that long (0: none; the sandbox's
	// ttl and a kill still end it).
	Timeout time.Duration
}

// ProcessInfo describes a process.
type ProcessInfo struct {
	PID       int // the daemon's handle, unique in its sandbox
	OSPID     int // its pid inside the sandbox (0 until known)
	Tag       string
	Argv      []string
	State     string
	Exit      *int
	Error     string
	StartedAt time.Time
	EndedAt   time.Time
	// Offset is the end of its output log; Dropped how much of it the
	// ring no longer holds.
	Offset, Dropped int64
	Stdin           bool // its stdin is open
	TTY             bool // it runs on a terminal
	Attached        bool // a terminal client is attached (AttachTerminal)
}

// procTables holds each sandbox's process table; the zero value is ready.
type procTables struct {
	mu      sync.Mutex
	tables  map[string]*procTable
	running atomic.Int64 // running processes of all sandboxes
}

// procTable is one sandbox's processes.
type procTable struct {
	m      *Manager
	id     string
	sb     sandbox.Sandbox
	limits ProcessLimits
	ctx    context.Context // ends with the sandbox
	cancel context.CancelFunc

	mu      sync.Mutex
	next    int
	procs   map[int]*process
	exited  []int // handles of exited processes, oldest first
	running int
	waiters int // requests in flight that may wait: output reads, waits, stdin writes
	terms   int // terminals attached
	closed  bool
}

// waiter admits one request that may wait on a process (a follow, a
// wait, a stdin write into a full buffer), within Waiters per sandbox;
// the returned func ends it.
func (t *procTable) waiter() (func(), error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.waiters >= t.limits.Waiters {
		return nil, fmt.Errorf("%w: sandbox %s has %d output reads, waits and stdin writes in flight, the most it may", ErrLimit, t.id, t.limits.Waiters)
	}
	t.waiters++
	return func() {
		t.mu.Lock()
		t.waiters--
		t.mu.Unlock()
	}, nil
}

// table returns sandbox id's process table, making it on first use.
func (m *Manager) table(id string) (*procTable, error) {
	m.mu.Lock()
	e, err := m.liveLocked(id)
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	pt := &m.procs
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if t := pt.tables[id]; t != nil {
		return t, nil
	}
	if pt.tables == nil {
		pt.tables = map[string]*procTable{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &procTable{m: m, id: id, sb: e.sb, limits: m.opts.Processes.withDefaults(), ctx: ctx, cancel: cancel, procs: map[int]*process{}}
	pt.tables[id] = t
	go func() {
		// The sandbox's end (destroy, reap, crash, daemon shutdown)
		// ends its processes and releases their buffers.
		select {
		case <-e.sb.Done():
		case <-ctx.Done():
		}
		t.close()
		pt.mu.Lock()
		if pt.tables[id] == t {
			delete(pt.tables, id)
		}
		pt.mu.Unlock()
	}()
	return t, nil
}

// lookupTable returns a sandbox's table if it has one; a running sandbox
// without one has no processes.
func (m *Manager) lookupTable(id string) (*procTable, error) {
	m.mu.Lock()
	_, err := m.liveLocked(id)
	m.mu.Unlock()
	if err != nil {
		return nil, err
	}
	m.procs.mu.Lock()
	defer m.procs.mu.Unlock()
	return m.procs.tables[id], nil
}

func (t *procTable) close() {
	t.cancel()
	t.mu.Lock()
	t.closed = true
	procs := slices.Collect(maps.Values(t.procs))
	t.procs = map[int]*process{}
	t.exited = nil
	t.mu.Unlock()
	for _, p := range procs {
		p.stdin.close()
		p.cancel()
	}
}

// process is one background process.
type process struct {
	t      *procTable
	pid    int
	tag    string
	argv   []string
	cancel context.CancelFunc
	stdin  *stdinBuffer
	out    *ring
	done   chan struct{} // closed when it exited
	start  chan struct{} // closed when it runs (or could not)
	tty    bool
	resize chan sandbox.WindowSize // with tty: the latest size not yet applied

	mu        sync.Mutex
	osPID     int
	exit      *int
	err       string
	startedAt time.Time
	endedAt   time.Time
	runErr    error // how its exec failed, if it did
	attached  bool  // a terminal writer is attached
}

func (p *process) info() ProcessInfo {
	p.mu.Lock()
	in := ProcessInfo{PID: p.pid, OSPID: p.osPID, Tag: p.tag, Argv: slices.Clone(p.argv), State: ProcessRunning,
		Error: p.err, StartedAt: p.startedAt, EndedAt: p.endedAt, TTY: p.tty, Attached: p.attached}
	if p.exit != nil {
		x := *p.exit
		in.Exit, in.State = &x, ProcessExited
	}
	p.mu.Unlock()
	in.Offset, in.Dropped = p.out.bounds()
	in.Stdin = p.stdin.open()
	return in
}

// Spawn starts a process in sandbox id for actor. Its intent record
// (argv, cwd, environment names, tag) is durable before it runs; its
// result record (exit, duration, bytes) is written when it exited. It
// returns once the command runs (or could not start: then the process is
// exited with 126 or 127 and Error says why).
func (m *Manager) Spawn(ctx context.Context, actor, id string, req SpawnRequest) (ProcessInfo, error) {
	if len(req.Tag) > MaxTag {
		return ProcessInfo{}, fmt.Errorf("%w: a tag is at most %d bytes", sandbox.ErrInvalidRequest, MaxTag)
	}
	if req.TTY {
		if req.Rows == 0 && req.Cols == 0 {
			req.Rows, req.Cols = 24, 80
		}
		if req.Rows < 1 || req.Rows > MaxTerminalSize || req.Cols < 1 || req.Cols > MaxTerminalSize {
			return ProcessInfo{}, fmt.Errorf("%w: a terminal has 1 to %d rows and columns", sandbox.ErrInvalidRequest, MaxTerminalSize)
		}
		req.Stdin = true
	}
	t, err := m.table(id)
	if err != nil {
		return ProcessInfo{}, err
	}
	_, done, err := m.use(id)
	if err != nil {
		return ProcessInfo{}, err
	}
	defer done()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return ProcessInfo{}, fmt.Errorf("%w: %s (not running)", ErrNotFound, id)
	}
	if t.running >= t.limits.Running {
		t.mu.Unlock()
		return ProcessInfo{}, fmt.Errorf("%w: sandbox %s runs %d processes, the most it may; wait for one to exit or kill one", ErrLimit, id, t.limits.Running)
	}
	if n := m.procs.running.Add(1); n > int64(t.limits.Total) {
		m.procs.running.Add(-1)
		t.mu.Unlock()
		return ProcessInfo{}, fmt.Errorf("%w: the daemon runs %d background processes, the most it may; wait for one to exit or kill one", ErrLimit, t.limits.Total)
	}
	t.running++ // held from here; released when it exited or did not start
	t.next++
	pid := t.next
	t.mu.Unlock()
	started := false
	defer func() {
		if !started {
			t.mu.Lock()
			t.running--
			t.mu.Unlock()
			m.procs.running.Add(-1)
		}
	}()

	data := map[string]any{"argv": req.Argv, "handle": pid}
	if req.Cwd != "" {
		data["cwd"] = req.Cwd
	}
	if names := envNames(req.Env); len(names) > 0 {
		data["env"] = names
	}
	if req.Tag != "" {
		data["tag"] = req.Tag
	}
	if req.Stdin {
		data["stdin"] = true
	}
	if req.Gate != "" {
		data["gate"] = req.Gate
	}
	if req.TTY {
		data["pty"] = map[string]int{"rows": req.Rows, "cols": req.Cols}
	}
	queued, err := m.log.BeginQueued(ctx, audit.Entry{Session: id, Actor: actor, Kind: KindProcessSpawn, Data: data})
	if err != nil {
		return ProcessInfo{}, fmt.Errorf("session: the process was not started, as its audit record could not be written: %w", err)
	}
	pctx, cancel := context.WithCancel(t.ctx)
	p := &process{t: t, pid: pid, tag: req.Tag, argv: slices.Clone(req.Argv), cancel: cancel,
		out: newRing(t.limits.Ring), done: make(chan struct{}), start: make(chan struct{}), startedAt: m.opts.Now(), tty: req.TTY}
	er := sandbox.ExecRequest{Argv: req.Argv, Cwd: req.Cwd, Env: req.Env, Gate: req.Gate, Background: true, Timeout: req.Timeout,
		Stdout: p.out.stream(streamStdout), Stderr: p.out.stream(streamStderr)}
	if req.TTY {
		// A terminal's output is bytes, not text: kept as they come.
		p.out.raw = true
		p.resize = make(chan sandbox.WindowSize, 1)
		er.TTY, er.Resize = true, p.resize
		er.WindowSize = sandbox.WindowSize{Rows: uint16(req.Rows), Cols: uint16(req.Cols)}
	}
	if req.Stdin {
		p.stdin = newStdinBuffer(t.limits.Stdin)
		er.Stdin = p.stdin
	}
	var once sync.Once
	er.Started = func(osPID int) {
		p.mu.Lock()
		p.osPID = osPID
		p.mu.Unlock()
		once.Do(func() { close(p.start) })
	}
	if env := m.extraEnv(id); len(env) > 0 {
		er.Env = append(slices.Clone(er.Env), env...)
	}
	// Readied while the intent commits; started once it is durable.
	run := ready(t.sb, er)
	intent, err := queued.Wait(ctx)
	if err != nil {
		run.abort()
		cancel()
		return ProcessInfo{}, fmt.Errorf("session: the process was not started, as its audit record could not be written: %w", err)
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		run.abort()
		cancel()
		_ = intent.EndQueued(map[string]any{"error": "the sandbox ended"}, nil)
		return ProcessInfo{}, fmt.Errorf("%w: %s (not running)", ErrNotFound, id)
	}
	t.procs[pid] = p
	t.mu.Unlock()
	started = true
	go p.run(pctx, run, intent, &once)
	select {
	case <-p.start:
	case <-p.done:
	case <-time.After(startWait):
	}
	if req.TTY {
		p.mu.Lock()
		ran := p.osPID > 0
		p.mu.Unlock()
		if !ran {
			// It did not run (yet): whether the backend refused the
			// terminal is known once its exec returned.
			select {
			case <-p.done:
			case <-time.After(startWait):
			}
		}
		select {
		case <-p.done:
			p.mu.Lock()
			rerr := p.runErr
			p.mu.Unlock()
			if errors.Is(rerr, sandbox.ErrUnsupported) {
				// Not a process that ran: the backend has no terminals.
				t.mu.Lock()
				if t.procs[pid] == p {
					delete(t.procs, pid)
					t.exited = slices.DeleteFunc(t.exited, func(h int) bool { return h == pid })
				}
				t.mu.Unlock()
				return ProcessInfo{}, fmt.Errorf("%w: this sandbox's backend offers no terminals (pty); the native backend does: %v", sandbox.ErrUnsupported, rerr)
			}
		default:
		}
	}
	return p.info(), nil
}

// run runs the process to its end and records it.
func (p *process) run(ctx context.Context, run readied, intent *audit.Intent, once *sync.Once) {
	t, m := p.t, p.t.m
	res, err := run.run(ctx)
	p.stdin.release()
	p.mu.Lock()
	code := res.ExitCode
	switch {
	case err == nil:
	case errors.Is(err, sandbox.ErrCommandNotFound) || errors.Is(err, sandbox.ErrNotExecutable):
		p.err = err.Error()
	case ctx.Err() != nil:
		// Killed (DELETE) or the sandbox ended.
		if code == 0 {
			code = 128 + 9
		}
		p.err = "killed"
	default:
		code, p.err = -1, err.Error()
	}
	p.runErr = err
	p.exit = &code
	p.endedAt = m.opts.Now()
	p.mu.Unlock()
	p.out.finish() // after the exit is known: a reader at the end sees it
	once.Do(func() { close(p.start) })
	t.exitedOne(p) // its slot is free before anyone learns it exited
	close(p.done)
	p.cancel()
	data := map[string]any{"handle": p.pid, "exit": code, "duration_ms": res.Duration.Milliseconds(),
		"stdout_bytes": res.StdoutBytes, "stderr_bytes": res.StderrBytes, "oom_killed": res.OOMKilled}
	if err != nil {
		data["error"] = err.Error()
	}
	logEnd := func(err error) { m.opts.Logf("session: audit of the end of process %d in %s: %v", p.pid, t.id, err) }
	if err := intent.EndQueued(data, logEnd); err != nil {
		logEnd(err)
	}
}

// exitedOne releases a process's running slot and keeps it among the
// exited ones, dropping the oldest beyond the bounds.
func (t *procTable) exitedOne(p *process) {
	t.m.procs.running.Add(-1)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.running--
	if t.procs[p.pid] != p {
		return // removed (DELETE, the sandbox's end)
	}
	t.exited = append(t.exited, p.pid)
	for len(t.exited) > 0 && (len(t.exited) > t.limits.Kept || t.retainedLocked() > t.limits.Retained) {
		delete(t.procs, t.exited[0])
		t.exited = t.exited[1:]
	}
}

func (t *procTable) retainedLocked() int64 {
	var n int64
	for _, p := range t.procs {
		n += p.out.size()
	}
	return n
}

// proc returns process pid of sandbox id.
func (m *Manager) proc(id string, pid int) (*process, error) {
	t, err := m.lookupTable(id)
	if err != nil {
		return nil, err
	}
	if t != nil {
		t.mu.Lock()
		p := t.procs[pid]
		t.mu.Unlock()
		if p != nil {
			return p, nil
		}
	}
	return nil, fmt.Errorf("%w: %d in sandbox %s", ErrProcessNotFound, pid, id)
}

// Processes lists a sandbox's processes (running and kept), oldest first;
// tag, if set, keeps those with that tag.
func (m *Manager) Processes(id, tag string) ([]ProcessInfo, error) {
	t, err := m.lookupTable(id)
	if err != nil || t == nil {
		return nil, err
	}
	t.mu.Lock()
	var ps []*process
	for _, pid := range slices.Sorted(maps.Keys(t.procs)) {
		if p := t.procs[pid]; tag == "" || p.tag == tag {
			ps = append(ps, p)
		}
	}
	t.mu.Unlock()
	out := make([]ProcessInfo, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.info())
	}
	return out, nil
}

// Process describes one process.
func (m *Manager) Process(id string, pid int) (ProcessInfo, error) {
	p, err := m.proc(id, pid)
	if err != nil {
		return ProcessInfo{}, err
	}
	return p.info(), nil
}

// WaitProcess waits until a process exited (or ctx ends) and describes it.
func (m *Manager) WaitProcess(ctx context.Context, id string, pid int) (ProcessInfo, error) {
	p, err := m.proc(id, pid)
	if err != nil {
		return ProcessInfo{}, err
	}
	release, err := p.t.waiter()
	if err != nil {
		return ProcessInfo{}, err
	}
	defer release()
	select {
	case <-p.done:
	case <-ctx.Done():
		return ProcessInfo{}, ctx.Err()
	}
	return p.info(), nil
}

// Frame is one frame of a process's output log, or a note that Dropped
// bytes before Offset are no longer held.
type Frame struct {
	Offset  int64
	Stream  int // streamStdout or streamStderr; 0 with Dropped
	Text    string
	Dropped int64
}

const (
	streamStdout = 1
	streamStderr = 2
)

// IsStderr reports whether f is stderr output.
func (f Frame) IsStderr() bool { return f.Stream == streamStderr }

// ReadOutput sends a process's output from offset on to emit, in order.
// With follow it waits for more until the process exited and everything
// was sent (or ctx ends); without, it sends what is held now. A reader
// behind the ring gets a frame with Dropped first; a slow reader never
// holds the process up. It returns the offset where reading stopped and
// the process as it was then.
//
// begin, if set, is called once the read is admitted, before any frame:
// a caller that streams sends its status line then, and answers a plain
// error when the read is refused.
func (m *Manager) ReadOutput(ctx context.Context, id string, pid int, offset int64, follow bool, begin func(), emit func(Frame) error) (int64, ProcessInfo, error) {
	p, err := m.proc(id, pid)
	if err != nil {
		return offset, ProcessInfo{}, err
	}
	if offset < 0 {
		return offset, ProcessInfo{}, fmt.Errorf("%w: offset must not be negative", sandbox.ErrInvalidRequest)
	}
	release, err := p.t.waiter()
	if err != nil {
		return offset, ProcessInfo{}, err
	}
	defer release()
	if begin != nil {
		begin()
	}
	for {
		frames, next, wake, ended := p.out.read(offset, 256<<10)
		for _, f := range frames {
			if err := emit(f); err != nil {
				return offset, p.info(), err
			}
		}
		offset = next
		if len(frames) > 0 {
			continue
		}
		if !follow || ended {
			return offset, p.info(), nil
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return offset, p.info(), ctx.Err()
		}
	}
}

// WriteStdin appends b to a process's stdin, waiting while its buffer is
// full (the process reads slower) until ctx ends.
func (m *Manager) WriteStdin(ctx context.Context, id string, pid int, b []byte) error {
	p, err := m.proc(id, pid)
	if err != nil {
		return err
	}
	if p.stdin == nil {
		return errdefs.New(errdefs.ErrConflict, fmt.Sprintf("process %d was started without stdin", pid))
	}
	release, err := p.t.waiter()
	if err != nil {
		return err
	}
	defer release()
	if err := p.stdin.write(ctx, b); err != nil {
		return err
	}
	m.touch(id)
	return nil
}

// CloseStdin closes a process's stdin: it reads end of file once it read
// what was written. Closing it twice is not an error.
func (m *Manager) CloseStdin(id string, pid int) error {
	p, err := m.proc(id, pid)
	if err != nil {
		return err
	}
	if p.stdin == nil {
		return errdefs.New(errdefs.ErrConflict, fmt.Sprintf("process %d was started without stdin", pid))
	}
	p.stdin.close()
	return nil
}

// touch marks a sandbox used now.
func (m *Manager) touch(id string) {
	m.mu.Lock()
	if e := m.live[id]; e != nil {
		e.lastUsed = m.opts.Now()
	}
	m.mu.Unlock()
}

// CheckSignal validates a signal name (TERM, or SIGTERM) and returns its
// short form.
func CheckSignal(name string) (string, error) {
	s := strings.TrimPrefix(strings.ToUpper(name), "SIG")
	if _, ok := Signals[s]; !ok {
		return "", fmt.Errorf("%w: signal %q: one of HUP, INT, QUIT, KILL, USR1, USR2, TERM", sandbox.ErrInvalidRequest, name)
	}
	return s, nil
}

// Signal sends a signal to a running process's process group, by running
// kill inside the sandbox as its user. It is audited before it is sent.
func (m *Manager) Signal(ctx context.Context, actor, id string, pid int, sig string) error {
	sig, err := CheckSignal(sig)
	if err != nil {
		return err
	}
	p, err := m.proc(id, pid)
	if err != nil {
		return err
	}
	p.mu.Lock()
	osPID, exited := p.osPID, p.exit != nil
	p.mu.Unlock()
	if exited {
		return errdefs.New(errdefs.ErrConflict, fmt.Sprintf("process %d has exited", pid))
	}
	if osPID <= 1 {
		return errdefs.New(errdefs.ErrConflict, fmt.Sprintf("process %d has no pid inside the sandbox yet", pid))
	}
	sb, done, err := m.use(id)
	if err != nil {
		return err
	}
	defer done()
	intent, err := m.log.Begin(ctx, audit.Entry{Session: id, Actor: actor, Kind: KindProcessSignal,
		Data: map[string]any{"handle": pid, "pid": osPID, "signal": sig}})
	if err != nil {
		return fmt.Errorf("session: the signal was not sent, as its audit record could not be written: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, signalTimeout)
	defer cancel()
	var stderr strings.Builder
	res, err := sb.Exec(sctx, sandbox.ExecRequest{Argv: []string{"/bin/sh", "-c", "kill -s " + sig + " -- -" + strconv.Itoa(osPID)},
		Stderr: &limitedWriter{w: &stderr, n: 4096}, Timeout: signalTimeout})
	if err == nil && res.ExitCode != 0 {
		select {
		case <-p.done:
			err = errdefs.New(errdefs.ErrConflict, fmt.Sprintf("process %d has exited", pid))
		default:
			err = fmt.Errorf("kill exited %d: %s", res.ExitCode, strings.TrimSpace(stderr.String()))
		}
	}
	out := map[string]any{"handle": pid}
	if err != nil {
		out["error"] = err.Error()
	}
	logEnd := func(err error) { m.opts.Logf("session: audit of a signal in %s: %v", id, err) }
	if aerr := intent.EndQueued(out, logEnd); aerr != nil {
		logEnd(aerr)
	}
	return err
}

type limitedWriter struct {
	w *strings.Builder
	n int
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if room := l.n - l.w.Len(); room > 0 {
		l.w.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// KillProcess kills a process (if it runs: its exec is cancelled, so the
// backend kills its process group), waits for its end and removes it. It
// is audited before it acts. It returns how the process ended.
func (m *Manager) KillProcess(ctx context.Context, actor, id string, pid int) (ProcessInfo, error) {
	p, err := m.proc(id, pid)
	if err != nil {
		return ProcessInfo{}, err
	}
	intent, err := m.log.Begin(ctx, audit.Entry{Session: id, Actor: actor, Kind: KindProcessKill, Data: map[string]any{"handle": pid}})
	if err != nil {
		return ProcessInfo{}, fmt.Errorf("session: the process was not killed, as its audit record could not be written: %w", err)
	}
	p.cancel()
	p.stdin.close()
	var werr error
	select {
	case <-p.done:
	case <-time.After(rollbackTimeout):
		werr = fmt.Errorf("session: process %d in %s did not end after it was killed", pid, id)
	}
	in := p.info()
	t := p.t
	t.mu.Lock()
	if t.procs[pid] == p {
		delete(t.procs, pid)
		t.exited = slices.DeleteFunc(t.exited, func(h int) bool { return h == pid })
	}
	t.mu.Unlock()
	data := map[string]any{"handle": pid}
	if in.Exit != nil {
		data["exit"] = *in.Exit
	}
	if werr != nil {
		data["error"] = werr.Error()
	}
	logEnd := func(err error) { m.opts.Logf("session: audit of a kill in %s: %v", id, err) }
	if aerr := intent.EndQueued(data, logEnd); aerr != nil {
		logEnd(aerr)
	}
	m.touch(id)
	return in, werr
}

// ring is a process's output log: frames of stdout and stderr in order,
// with byte offsets into the whole log, of which it keeps the newest
// (at most max bytes, counting frameOverhead per frame).
type ring struct {
	mu      sync.Mutex
	max     int64
	chunks  []chunk // oldest first
	used    int64   // bytes of chunks plus their overhead
	start   int64   // offset of the oldest byte held
	end     int64   // offset after the newest byte
	wake    chan struct{}
	ended   bool
	carry   [3][]byte // a UTF-8 sequence split across writes, per stream
	streams [3]*ringStream
	// raw keeps bytes as written (a terminal's output): no UTF-8 repair,
	// offsets at any byte.
	raw bool
}

type chunk struct {
	off    int64
	stream int
	data   []byte
}

func newRing(max int64) *ring { return &ring{max: max, wake: make(chan struct{})} }

type ringStream struct {
	r *ring
	s int
}

func (r *ring) stream(s int) *ringStream {
	w := &ringStream{r: r, s: s}
	r.streams[s] = w
	return w
}

// Write never blocks on readers: the ring drops its oldest frames.
func (w *ringStream) Write(p []byte) (int, error) {
	r := w.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return len(p), nil
	}
	if r.raw {
		r.appendLocked(w.s, p)
		return len(p), nil
	}
	buf := append(r.carry[w.s], p...)
	r.carry[w.s] = nil
	if cut := incompleteUTF8(buf); cut < len(buf) {
		if len(buf)-cut < utf8.UTFMax {
			r.carry[w.s] = append([]byte(nil), buf[cut:]...)
			buf = buf[:cut]
		}
	}
	r.appendLocked(w.s, buf)
	return len(p), nil
}

// appendLocked adds b (made valid UTF-8) to the log.
func (r *ring) appendLocked(s int, b []byte) {
	if len(b) == 0 {
		return
	}
	if !r.raw && !utf8.Valid(b) {
		b = []byte(strings.ToValidUTF8(string(b), "\uFFFD"))
	}
	for len(b) > 0 {
		n := len(b)
		if n > maxProcessFrame {
			n = maxProcessFrame
			for !r.raw && n > 0 && !utf8.RuneStart(b[n]) {
				n--
			}
		}
		piece := b[:n]
		b = b[n:]
		if k := len(r.chunks) - 1; k >= 0 && r.chunks[k].stream == s && len(r.chunks[k].data)+len(piece) <= maxProcessFrame {
			r.chunks[k].data = append(r.chunks[k].data, piece...)
			r.used += int64(len(piece))
		} else {
			r.chunks = append(r.chunks, chunk{off: r.end, stream: s, data: append(make([]byte, 0, len(piece)), piece...)})
			r.used += int64(len(piece)) + frameOverhead
		}
		r.end += int64(len(piece))
	}
	r.trimLocked()
	close(r.wake)
	r.wake = make(chan struct{})
}

// trimLocked drops the oldest bytes beyond max, at rune boundaries.
func (r *ring) trimLocked() {
	for r.used > r.max && len(r.chunks) > 0 {
		c := &r.chunks[0]
		over := r.used - r.max
		if int64(len(c.data))+frameOverhead <= over || len(r.chunks) > 1 && int64(len(c.data)) <= over {
			r.used -= int64(len(c.data)) + frameOverhead
			r.chunks[0] = chunk{}
			r.chunks = r.chunks[1:]
			if len(r.chunks) > 0 {
				r.start = r.chunks[0].off
			} else {
				r.start = r.end
			}
			continue
		}
		n := int(over)
		for !r.raw && n < len(c.data) && !utf8.RuneStart(c.data[n]) {
			n++
		}
		c.data = c.data[n:]
		c.off += int64(n)
		r.used -= int64(n)
		r.start = c.off
		if len(c.data) == 0 {
			r.used -= frameOverhead
			r.chunks = r.chunks[1:]
		}
	}
	if cap(r.chunks) > 64 && len(r.chunks) < cap(r.chunks)/4 {
		r.chunks = slices.Clone(r.chunks)
	}
}

// finish flushes split sequences and marks the log complete.
func (r *ring) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for s := range r.carry {
		if len(r.carry[s]) > 0 {
			c := r.carry[s]
			r.carry[s] = nil
			r.appendLocked(s, c)
		}
	}
	r.ended = true
	close(r.wake)
	r.wake = make(chan struct{})
}

// read returns frames from offset on (at most about max bytes), the
// offset after them, a channel closed on the next append, and whether the
// log is complete and offset is its end.
func (r *ring) read(offset int64, max int) (frames []Frame, next int64, wake <-chan struct{}, ended bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if offset > r.end {
		offset = r.end
	}
	if offset < r.start {
		frames = append(frames, Frame{Offset: r.start, Dropped: r.start - offset})
		offset = r.start
	}
	i, _ := slices.BinarySearchFunc(r.chunks, offset, func(c chunk, off int64) int {
		switch {
		case c.off+int64(len(c.data)) <= off:
			return -1
		case c.off > off:
			return 1
		}
		return 0
	})
	n := 0
	for ; i < len(r.chunks) && n < max; i++ {
		c := r.chunks[i]
		k := int(offset - c.off)
		if k < 0 {
			k = 0
		}
		for !r.raw && k < len(c.data) && !utf8.RuneStart(c.data[k]) {
			k++ // an offset inside a rune starts at the next one
		}
		if k >= len(c.data) {
			offset = c.off + int64(len(c.data))
			continue
		}
		frames = append(frames, Frame{Offset: c.off + int64(k), Stream: c.stream, Text: string(c.data[k:])})
		n += len(c.data) - k
		offset = c.off + int64(len(c.data))
	}
	return frames, offset, r.wake, r.ended && offset >= r.end
}

func (r *ring) bounds() (end, dropped int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.end, r.start
}

func (r *ring) size() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.used
}

// incompleteUTF8 returns where a trailing incomplete UTF-8 sequence
// starts in b, or len(b).
func incompleteUTF8(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if b[i] >= 0xC0 && !utf8.FullRune(b[i:]) {
				return i
			}
			return len(b)
		}
	}
	return len(b)
}

// stdinBuffer is a process's stdin: bounded, fed by WriteStdin, read by
// the backend's copy to the process.
type stdinBuffer struct {
	mu     sync.Mutex
	max    int64
	buf    []byte
	closed bool
	more   chan struct{} // closed when data or close arrives
	room   chan struct{} // closed when the reader took some
}

func newStdinBuffer(max int64) *stdinBuffer {
	return &stdinBuffer{max: max, more: make(chan struct{}), room: make(chan struct{})}
}

func (s *stdinBuffer) open() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.closed
}

func (s *stdinBuffer) write(ctx context.Context, b []byte) error {
	for len(b) > 0 {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return errdefs.New(errdefs.ErrConflict, "the process's stdin is closed")
		}
		n := min(int64(len(b)), s.max-int64(len(s.buf)))
		if n > 0 {
			s.buf = append(s.buf, b[:n]...)
			b = b[n:]
			close(s.more)
			s.more = make(chan struct{})
			s.mu.Unlock()
			continue
		}
		room := s.room
		s.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (s *stdinBuffer) Read(p []byte) (int, error) {
	for {
		s.mu.Lock()
		if len(s.buf) > 0 {
			n := copy(p, s.buf)
			s.buf = s.buf[n:]
			if len(s.buf) == 0 {
				s.buf = nil
			}
			close(s.room)
			s.room = make(chan struct{})
			s.mu.Unlock()
			return n, nil
		}
		if s.closed {
			s.mu.Unlock()
			return 0, io.EOF
		}
		more := s.more
		s.mu.Unlock()
		<-more
	}
}

// release closes s and drops what the process did not read (it exited).
func (s *stdinBuffer) release() {
	if s == nil {
		return
	}
	s.close()
	s.mu.Lock()
	s.buf = nil
	s.mu.Unlock()
}

func (s *stdinBuffer) close() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.more)
		s.more = make(chan struct{})
		close(s.room)
		s.room = make(chan struct{})
	}
}
