package session

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/errdefs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// Terminals (the tty route, docs/http-api.md): a process spawned with
// TTY runs on a terminal inside the sandbox; a client attaches to it to
// type into it and resize it, one at a time, and reads its output from
// the process's ring (ReadOutput) like any reader.

// KindProcessAttach is the audit kind of a terminal attach: an intent
// when it attaches, a result (bytes typed, resizes) when it detaches.
const KindProcessAttach = "sandbox.process.attach"

// ErrTerminalBusy is a second writer on a process's terminal.
var ErrTerminalBusy = errdefs.New(errdefs.ErrConflict, "the terminal is attached")

// Terminal is one client's attachment to a process's terminal: the one
// writer of that process until Close.
type Terminal struct {
	m      *Manager
	p      *process
	id     string
	intent *audit.Intent
	once   sync.Once
	typed  atomic.Int64
	resize atomic.Int64
}

// AttachTerminal attaches actor to process pid's terminal in sandbox id.
// A process without a terminal, or whose terminal has a writer already,
// is a conflict; more than Terminals attached in the sandbox is a limit.
// The attach is audited before it is granted.
func (m *Manager) AttachTerminal(ctx context.Context, actor, id string, pid int) (*Terminal, error) {
	p, err := m.proc(id, pid)
	if err != nil {
		return nil, err
	}
	if !p.tty {
		return nil, errdefs.New(errdefs.ErrConflict, fmt.Sprintf("process %d has no terminal (spawn it with pty)", pid))
	}
	t := p.t
	t.mu.Lock()
	p.mu.Lock()
	switch {
	case p.attached:
		err = fmt.Errorf("%w: process %d has a terminal client already (one writer at a time)", ErrTerminalBusy, pid)
	case t.terms >= t.limits.Terminals:
		err = fmt.Errorf("%w: sandbox %s has %d terminals attached, the most it may", ErrLimit, id, t.limits.Terminals)
	default:
		p.attached = true
		t.terms++
	}
	p.mu.Unlock()
	t.mu.Unlock()
	if err != nil {
		return nil, err
	}
	term := &Terminal{m: m, p: p, id: id}
	intent, err := m.log.Begin(ctx, audit.Entry{Session: id, Actor: actor, Kind: KindProcessAttach,
		Data: map[string]any{"handle": pid, "pid": p.info().OSPID}})
	if err != nil {
		term.release()
		return nil, fmt.Errorf("session: the terminal was not attached, as its audit record could not be written: %w", err)
	}
	term.intent = intent
	m.touch(id)
	return term, nil
}

func (term *Terminal) release() {
	t, p := term.p.t, term.p
	t.mu.Lock()
	p.mu.Lock()
	p.attached = false
	t.terms--
	p.mu.Unlock()
	t.mu.Unlock()
}

// Done is closed when the process exited.
func (term *Terminal) Done() <-chan struct{} { return term.p.done }

// Write types b into the terminal, waiting while its input buffer is
// full until ctx ends.
func (term *Terminal) Write(ctx context.Context, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if err := term.p.stdin.write(ctx, b); err != nil {
		return err
	}
	term.typed.Add(int64(len(b)))
	term.m.touch(term.id)
	return nil
}

// Resize sets the terminal's size; sizes not yet applied are replaced by
// the newest.
func (term *Terminal) Resize(rows, cols int) error {
	if err := term.p.setSize(rows, cols); err != nil {
		return err
	}
	term.resize.Add(1)
	return nil
}

// ResizeTerminal sets the size of process pid's terminal in sandbox id,
// without attaching to it (a resize is not audited: like what is typed,
// it changes nothing outside the terminal). A process without a terminal,
// or that exited, is a conflict.
func (m *Manager) ResizeTerminal(id string, pid, rows, cols int) error {
	p, err := m.proc(id, pid)
	if err != nil {
		return err
	}
	if !p.tty {
		return errdefs.New(errdefs.ErrConflict, fmt.Sprintf("process %d has no terminal (spawn it with pty)", pid))
	}
	select {
	case <-p.done:
		return errdefs.New(errdefs.ErrConflict, fmt.Sprintf("process %d exited", pid))
	default:
	}
	if err := p.setSize(rows, cols); err != nil {
		return err
	}
	m.touch(id)
	return nil
}

// setSize queues a size for p's terminal, replacing one not yet applied.
func (p *process) setSize(rows, cols int) error {
	if rows < 1 || rows > MaxTerminalSize || cols < 1 || cols > MaxTerminalSize {
		return fmt.Errorf("%w: a terminal has 1 to %d rows and columns", sandbox.ErrInvalidRequest, MaxTerminalSize)
	}
	ws := sandbox.WindowSize{Rows: uint16(rows), Cols: uint16(cols)}
	for {
		select {
		case p.resize <- ws:
			return nil
		default:
		}
		select {
		case <-p.resize: // drop the stale size
		default:
		}
	}
}

// Close detaches: another client may attach. Closing twice is a no-op.
func (term *Terminal) Close() {
	term.once.Do(func() {
		term.release()
		data := map[string]any{"handle": term.p.pid, "typed_bytes": term.typed.Load(), "resizes": term.resize.Load()}
		logEnd := func(err error) { term.m.opts.Logf("session: audit of a terminal detach in %s: %v", term.id, err) }
		if err := term.intent.EndQueued(data, logEnd); err != nil {
			logEnd(err)
		}
	})
}
