package session

import (
	"context"
	"sync/atomic"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/errdefs"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// FirstExec is a new sandbox's first command (CreateThenExec): its
// sandbox.exec.intent record committed in the transaction of the
// sandbox's create record, and the runtime readied it while the sandbox
// was made. Call Run or Drop, once: until then the intent has no result
// record, which reads as a command whose end is unknown.
type FirstExec struct {
	m      *Manager
	id     string
	req    sandbox.ExecRequest // with the daemon's variables
	intent *audit.Intent
	run    readied
	used   atomic.Bool
}

// ErrFirstExecUsed is Run's error for a FirstExec already run or dropped.
var ErrFirstExecUsed = errdefs.New(errdefs.ErrConflict, "session: the first command was already run or dropped")

// readyFirst makes the FirstExec of req in sb, readying it unless run
// holds it readied already (with the same environment).
func (m *Manager) readyFirst(id string, sb sandbox.Sandbox, req sandbox.ExecRequest, env []string, intent *audit.Intent, run *readied) *FirstExec {
	req = withDaemonEnv(req, env)
	if run == nil {
		r := ready(sb, req)
		run = &r
	}
	return &FirstExec{m: m, id: id, req: req, intent: intent, run: *run}
}

// Run starts the command, within the sandbox's quotas as any exec, and
// waits for its end; starting, if set, is called just before it starts
// (ExecStarting). When the sandbox can no longer take it (destroyed
// meanwhile, a quota), the command does not run, its intent's result says
// so, and the error is what Exec would have answered.
func (f *FirstExec) Run(ctx context.Context, starting func()) (sandbox.ExecResult, error) {
	if !f.used.CompareAndSwap(false, true) {
		return sandbox.ExecResult{}, ErrFirstExecUsed
	}
	_, done, err := f.m.use(f.id)
	if err != nil {
		f.run.abort()
		f.m.endNotRun(f.id, f.intent, err)
		return sandbox.ExecResult{}, err
	}
	defer done()
	return f.m.runIntended(ctx, f.id, f.req, f.intent, f.run, starting)
}

// Drop ends a FirstExec that will not run; its intent's result record
// gives why. It does nothing after Run or a first Drop.
func (f *FirstExec) Drop(why error) {
	if !f.used.CompareAndSwap(false, true) {
		return
	}
	f.run.abort()
	f.m.endNotRun(f.id, f.intent, why)
}

// endNotRun queues the result record of an intent whose command never
// started: exit -1 and why.
func (m *Manager) endNotRun(id string, intent *audit.Intent, why error) {
	msg := "unknown"
	if why != nil {
		msg = why.Error()
	}
	logEnd := func(err error) { m.opts.Logf("session: audit of a first command in %s that did not run: %v", id, err) }
	if err := intent.EndQueued(map[string]any{"exit": -1, "not_run": true, "error": "not run: " + msg}, logEnd); err != nil {
		logEnd(err)
	}
}
