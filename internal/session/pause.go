package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/errdefs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// StatePaused is a sandbox frozen by Pause: its processes take no CPU and
// keep their memory; it still counts toward every quota and the host's
// capacity, its TTL still runs, and the next request resumes it.
const StatePaused = "paused"

// Idle actions (policy limits.idle_action): what the reaper does with a
// sandbox idle past its idle timeout.
const (
	IdleDestroy = "destroy" // the default: it ends (state reaped, reason idle)
	IdlePause   = "pause"   // it pauses; the next request resumes it
)

// Audit kinds of Pause and Resume: an intent record (kind +
// audit.IntentSuffix) is durable before the sandbox is frozen or thawed,
// and this record follows with the outcome.
const (
	KindSandboxPause  = "sandbox.pause"
	KindSandboxResume = "sandbox.resume"
)

// ErrBusy refuses to pause a sandbox with commands or file copies in flight.
var ErrBusy = errdefs.New(errdefs.ErrConflict, "sandbox busy")

// Active reports whether state is one of a sandbox that has not ended
// (running or paused).
func Active(state string) bool { return state == StateRunning || state == StatePaused }

// pauser is what a backend's sandbox offers to be paused (native: the
// cgroup freezer; runc, crun, runsc: `pause`/`resume`; Docker: the Engine
// API's pause/unpause). Both are idempotent.
type pauser interface {
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
}

// pauseState is an entry's pause bookkeeping. mu serialises its
// transitions with each other and with the teardown; paused is guarded by
// Manager.mu (read by use, Get and the reaper).
type pauseState struct {
	mu     sync.Mutex
	paused bool
}

// transitionTimeout bounds one freeze or thaw, whoever asked;
// idlePauseTimeout the reaper's, which holds up the reaping of the others.
const (
	transitionTimeout = 30 * time.Second
	idlePauseTimeout  = 5 * time.Second
)

// CheckIdleAction validates a policy's idle action ("" is destroy).
func CheckIdleAction(a string) error {
	switch a {
	case "", IdleDestroy, IdlePause:
		return nil
	}
	return fmt.Errorf("%w: idle action %q: want pause or destroy", sandbox.ErrInvalidSpec, a)
}

// Pause freezes a running sandbox: no CPU until Resume or the next request
// (exec, files, ...), which resumes it first. It is refused while commands
// or file copies are in flight (ErrBusy) and on a backend that cannot
// pause (sandbox.ErrUnsupported). Pausing a paused sandbox is not an
// error. The caller decides whether actor may.
func (m *Manager) Pause(ctx context.Context, actor, id string) error {
	return m.pause(ctx, actor, id, "requested")
}

// Resume thaws a paused sandbox; resuming a running one is not an error.
func (m *Manager) Resume(ctx context.Context, actor, id string) error {
	m.mu.Lock()
	e, err := m.liveLocked(id)
	m.mu.Unlock()
	if err != nil {
		return err
	}
	return m.resume(ctx, actor, id, e, "requested")
}

func (m *Manager) pause(ctx context.Context, actor, id, reason string) error {
	m.mu.Lock()
	e, err := m.liveLocked(id)
	m.mu.Unlock()
	if err != nil {
		return err
	}
	p, ok := e.sb.(pauser)
	if !ok {
		return fmt.Errorf("%w: this runtime cannot pause a sandbox", sandbox.ErrUnsupported)
	}
	e.pause.mu.Lock()
	defer e.pause.mu.Unlock()
	m.mu.Lock()
	switch {
	case m.live[id] != e:
		m.mu.Unlock()
		return fmt.Errorf("%w: %s (not running)", ErrNotFound, id)
	case e.pause.paused:
		m.mu.Unlock()
		return nil
	case e.busy > 0:
		n := e.busy
		m.mu.Unlock()
		return fmt.Errorf("%w: %s has %d commands or file copies in flight; pause it when they end", ErrBusy, id, n)
	}
	// From here every new request waits on e.pause.mu (see use), then
	// resumes what this froze.
	e.pause.paused = true
	e.info.State = StatePaused
	m.mu.Unlock()
	undo := func() {
		m.mu.Lock()
		e.pause.paused = false
		e.info.State = StateRunning
		m.mu.Unlock()
	}
	intent, err := m.log.Begin(ctx, audit.Entry{Session: id, Actor: actor, Kind: KindSandboxPause, Data: map[string]any{"reason": reason}})
	if err != nil {
		undo()
		return fmt.Errorf("session: the sandbox was not paused, as its audit record could not be written: %w", err)
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), transitionTimeout)
	defer cancel()
	if dl, ok := ctx.Deadline(); ok {
		pctx, cancel = context.WithDeadline(pctx, dl) // the reaper's shorter bound
		defer cancel()
	}
	start := time.Now()
	perr := p.Pause(pctx)
	data := map[string]any{"reason": reason, "duration_ms": time.Since(start).Milliseconds()}
	if perr != nil {
		data["error"] = perr.Error()
		// The backend may have frozen part of it: thaw what it did.
		_ = p.Resume(pctx)
		undo()
	} else if err := m.recordState(pctx, id, StateRunning, StatePaused); err != nil {
		m.opts.Logf("session: recording the pause of %s: %v", id, err)
	}
	logEnd := func(err error) { m.opts.Logf("session: audit of the pause of %s: %v", id, err) }
	if err := intent.EndQueued(data, logEnd); err != nil {
		logEnd(err)
	}
	return perr
}

// resume thaws e if it is paused.
func (m *Manager) resume(ctx context.Context, actor, id string, e *entry, reason string) error {
	e.pause.mu.Lock()
	defer e.pause.mu.Unlock()
	m.mu.Lock()
	paused := e.pause.paused && m.live[id] == e
	m.mu.Unlock()
	if !paused {
		return nil
	}
	p := e.sb.(pauser) // only a pauser is ever paused
	intent, err := m.log.Begin(ctx, audit.Entry{Session: id, Actor: actor, Kind: KindSandboxResume, Data: map[string]any{"reason": reason}})
	if err != nil {
		return fmt.Errorf("session: the sandbox was not resumed, as its audit record could not be written: %w", err)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), transitionTimeout)
	defer cancel()
	start := time.Now()
	rerr := p.Resume(rctx)
	data := map[string]any{"reason": reason, "duration_ms": time.Since(start).Milliseconds()}
	if rerr != nil {
		data["error"] = rerr.Error()
	} else {
		m.mu.Lock()
		e.pause.paused = false
		e.info.State = StateRunning
		e.lastUsed = m.opts.Now()
		m.mu.Unlock()
		if err := m.recordState(rctx, id, StatePaused, StateRunning); err != nil {
			m.opts.Logf("session: recording the resume of %s: %v", id, err)
		}
	}
	logEnd := func(err error) { m.opts.Logf("session: audit of the resume of %s: %v", id, err) }
	if err := intent.EndQueued(data, logEnd); err != nil {
		logEnd(err)
	}
	return rerr
}

// recordState moves a sandbox's row from one live state to the other.
func (m *Manager) recordState(ctx context.Context, id, from, to string) error {
	_, err := m.db.DB().ExecContext(ctx, `UPDATE sandboxes SET state = ? WHERE id = ? AND state = ?`, to, id, from)
	return err
}

// useResuming is use that first resumes a paused sandbox (the next request
// resumes it). A request racing a new pause resumes again; a sandbox that
// will not resume fails the request.
func (m *Manager) useResuming(id string) (sandbox.Sandbox, func(), error) {
	for range 3 {
		m.mu.Lock()
		e, err := m.liveLocked(id)
		if err != nil {
			m.mu.Unlock()
			return nil, nil, err
		}
		if !e.pause.paused {
			defer m.mu.Unlock()
			return m.useLocked(id, e)
		}
		m.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), transitionTimeout)
		err = m.resume(ctx, "daemon", id, e, "request")
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("session: resuming paused sandbox %s: %w", id, err)
		}
	}
	return nil, nil, fmt.Errorf("%w: sandbox %s was paused again while resuming", ErrBusy, id)
}

// idlePause pauses the idle sandboxes whose idle action is pause, and
// reports those it could not (the reaper then ends them as idle).
func (m *Manager) idlePause(ids []string) (failed []string) {
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), idlePauseTimeout)
		err := m.pause(ctx, "reaper", id, "idle")
		cancel()
		switch {
		case err == nil, errors.Is(err, ErrBusy), errors.Is(err, ErrNotFound):
			// Busy: used again since; not found: ended since.
		default:
			m.opts.Logf("session: pausing idle %s: %v (destroying it instead)", id, err)
			failed = append(failed, id)
		}
	}
	return failed
}
