package session

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// A namingRuntime tells who creates a sandbox its id before building it
// (native.Runtime.CreateNamed): named is called at most once, on the
// creating goroutine, as soon as the id is drawn and before the slow part
// of the build. The returned sandbox's ID is what counts; it differs from
// the one named when the runtime had to start over.
type namingRuntime interface {
	CreateNamed(ctx context.Context, spec sandbox.Spec, named func(id string)) (sandbox.Sandbox, error)
}

// createRecord is the commit of a new sandbox's row and its sandbox.create
// record, started for an id as soon as that id is known, so that on a
// runtime that names its sandboxes early (namingRuntime) the commit's
// fsync runs while the sandbox is built instead of after: on a cold
// create it is off the request's path. The record still precedes every
// use of the sandbox: Create returns it only once the commit is durable.
type createRecord struct {
	id   string
	done chan struct{}
	err  error // set before done closes
	// intent is the first command's intent record when it committed with
	// the create's (CreateThenExec); set before done closes.
	intent *audit.Intent
}

// recordCommit commits a create's record (and its first command's
// intent, if any) for id.
type recordCommit func(id string) (*audit.Intent, error)

// startCreateRecord runs commit for id on a goroutine of its own; wait
// gives its result. commit must bound itself (the create's record runs
// on a deadline of its own, never on the caller's context: a client that
// hangs up must not leave a row running for a sandbox the undo
// destroyed).
func startCreateRecord(id string, commit recordCommit) *createRecord {
	r := &createRecord{id: id, done: make(chan struct{})}
	go func() {
		r.intent, r.err = commit(id)
		close(r.done)
	}()
	return r
}

func (r *createRecord) wait() error {
	<-r.done
	return r.err
}

// namedRecord starts the record for the first id named and remembers it.
type namedRecord struct {
	mu     sync.Mutex
	rec    *createRecord
	commit recordCommit
}

func (n *namedRecord) named(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.rec == nil {
		n.rec = startCreateRecord(id, n.commit)
	}
}

func (n *namedRecord) started() *createRecord {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rec
}

// createSandbox builds the sandbox for spec and returns it with the
// commit of its record under way (or done) for its id.
//
// When the runtime named an id it did not return (it started over) or
// the build failed after naming one, the record made for that id is
// ended (dropRecord): the log then says that the create failed, not that
// a sandbox runs.
func (m *Manager) createSandbox(ctx context.Context, spec sandbox.Spec, actor string, commit recordCommit) (sandbox.Sandbox, *createRecord, error) {
	nr, ok := m.rt.(namingRuntime)
	if !ok {
		sb, err := m.rt.Create(ctx, spec)
		if err != nil {
			return nil, nil, err
		}
		return sb, startCreateRecord(sb.ID(), commit), nil
	}
	n := &namedRecord{commit: commit}
	sb, err := nr.CreateNamed(ctx, spec, n.named)
	early := n.started()
	if err != nil {
		if early != nil {
			m.dropRecord(ctx, early, actor, err)
		}
		return nil, nil, err
	}
	if early != nil && early.id == sb.ID() {
		return sb, early, nil
	}
	if early != nil {
		m.dropRecord(ctx, early, actor, errStartedOver)
	}
	return sb, startCreateRecord(sb.ID(), commit), nil
}

// errStartedOver is why a record made for a named id was ended: the
// runtime built the sandbox under another id.
var errStartedOver = errors.New("the runtime started over under another id")

// dropRecord waits for r and, once it has committed, ends its row and
// records the end (kind sandbox.destroy, actor daemon, with why), so the
// log never shows a create without its end for a sandbox that never ran.
// A commit that failed may still land later (its deadline ended the
// wait): the row's end is written anyway, and changes nothing on a row
// that never was.
func (m *Manager) dropRecord(ctx context.Context, r *createRecord, actor string, why error) {
	m.endFailedCreate(ctx, r, actor, why)
}

// endFailedCreate is the undo of a create's record r: the row ends as
// destroyed, and when the record had committed its end is recorded too,
// after the end of the first command's intent (not run) when that
// committed with it.
func (m *Manager) endFailedCreate(ctx context.Context, r *createRecord, actor string, why error) {
	committed := r.wait() == nil
	id := r.id
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	if err := m.end(rctx, id, StateDestroyed, "its create failed"); err != nil {
		m.opts.Logf("session: undoing the create of %s: %v", id, err)
	}
	if !committed {
		return
	}
	if r.intent != nil {
		m.endNotRun(id, r.intent, fmt.Errorf("its sandbox's create failed: %v", why))
	}
	data := map[string]any{"reason": "its create failed", "requested_by": actor}
	if why != nil {
		data["error"] = why.Error()
	}
	if _, err := m.log.Append(rctx, audit.Entry{Session: id, Actor: "daemon", Kind: audit.KindSandboxDestroy, Data: data}); err != nil {
		m.opts.Logf("session: recording the failed create of %s: %v", id, err)
	}
}
