package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// IntentSuffix ends the kind of an intent record: Begin with kind
// "sandbox.exec" writes "sandbox.exec.intent".
const IntentSuffix = ".intent"

// IntentSeqKey is the data member of a result record that names its
// intent record's seq.
const IntentSeqKey = "intent_seq"

// Intent is the durable record that an action is about to happen, from
// Begin. Call End exactly once with the action's outcome. An intent record
// with no result record after it means the daemon died (or End failed)
// while the action ran: it may or may not have happened.
//
// Intent is safe for concurrent use, but End only succeeds once.
type Intent struct {
	log  *Log
	seq  int64
	base Entry // session, actor and kind of the action
	once sync.Once
}

// ErrIntentEnded is returned by a second End.
var ErrIntentEnded = errors.New("audit: intent already ended")

// Begin writes the intent record of an action (kind e.Kind+IntentSuffix,
// data e.Data: what is about to be done) and returns once it is durable.
// The caller must not act if Begin fails: that is what makes the log fail
// closed (no action without a record). Errors are those of Append.
//
//	in, err := log.Begin(ctx, audit.Entry{Session: id, Actor: who, Kind: audit.KindSandboxExec,
//		Data: map[string]any{"argv": argv}})
//	if err != nil {
//		return err // not run
//	}
//	res, runErr := run()
//	_, err = in.End(context.WithoutCancel(ctx), map[string]any{"exit": res.Exit})
func (l *Log) Begin(ctx context.Context, e Entry) (*Intent, error) {
	q, err := l.BeginQueued(ctx, e)
	if err != nil {
		return nil, err
	}
	return q.Wait(ctx)
}

// QueuedIntent is an intent record on its way to the disk (BeginQueued).
type QueuedIntent struct {
	log  *Log
	p    *pending
	base Entry
}

// BeginQueued is Begin in two steps: it queues the intent record and
// returns at once; Wait returns the Intent once the record is durable.
// In between, the caller may prepare the action (what does not act: the
// descriptors a command will get, say), so that the preparation runs
// during the record's commit instead of after it; it must not act before
// Wait returns nil, and must undo the preparation when Wait fails.
func (l *Log) BeginQueued(ctx context.Context, e Entry) (*QueuedIntent, error) {
	ie := e
	ie.Kind = e.Kind + IntentSuffix
	data, err := l.checkEntry(ie)
	if err != nil {
		return nil, err
	}
	p, err := l.enqueue(ctx, ie, data, false, nil)
	if err != nil {
		return nil, err
	}
	e.Data = nil
	return &QueuedIntent{log: l, p: p, base: e}, nil
}

// Wait waits until the intent record is durable and returns its Intent.
// Its errors are Begin's; when ctx ends first the record may still be
// committed (and then has no result record, as for a daemon that died).
func (q *QueuedIntent) Wait(ctx context.Context) (*Intent, error) {
	select {
	case <-q.p.done:
		if q.p.err != nil {
			return nil, q.p.err
		}
		return &Intent{log: q.log, seq: q.p.rec.Seq, base: q.base}, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("audit: append %s: %w (the record may still be committed)", q.base.Kind+IntentSuffix, ctx.Err())
	}
}

// Seq is the intent record's seq.
func (in *Intent) Seq() int64 { return in.seq }

// End writes the result record: kind the action's own (Begin's e.Kind),
// data the outcome with IntentSeqKey set to the intent's seq. data must be
// a JSON object like any Entry.Data and must not have an IntentSeqKey
// member of its own.
func (in *Intent) End(ctx context.Context, data any) (Record, error) {
	canon, err := in.result(data)
	if err != nil {
		return Record{}, err
	}
	return in.log.appendCanonical(ctx, in.base, canon)
}

// EndQueued is End without waiting for the result record to be durable:
// the record is queued in order (a record the caller appends afterwards
// comes after it in the chain) and committed with the next batch, and a
// failure to commit it goes to onErr (if set). The intent is what makes
// the log fail closed, and it is durable already; so an action's answer
// need not wait for a second commit. Close commits what is queued.
func (in *Intent) EndQueued(data any, onErr func(error)) error {
	canon, err := in.result(data)
	if err != nil {
		return err
	}
	p, err := in.log.enqueue(context.Background(), in.base, canon, true, nil)
	if err != nil {
		return err
	}
	if onErr != nil {
		go func() {
			<-p.done
			if p.err != nil {
				onErr(p.err)
			}
		}()
	}
	return nil
}

// result ends the intent (ErrIntentEnded the second time) and returns the
// result record's data: data canonicalised, with IntentSeqKey added.
func (in *Intent) result(data any) ([]byte, error) {
	first := false
	in.once.Do(func() { first = true })
	if !first {
		return nil, ErrIntentEnded
	}
	canon, err := in.log.redact.Canonicalize(data)
	if err == nil {
		canon, err = withMember(canon, IntentSeqKey, strconv.FormatInt(in.seq, 10))
	}
	if err != nil {
		return nil, fmt.Errorf("audit: end %s: %w", in.base.Kind, err)
	}
	return canon, nil
}

// withMember adds member key with the JSON text val to canonical object
// text, keeping it canonical (sorted keys). The result may exceed
// MaxDataBytes by the member's length, which is small.
func withMember(canon []byte, key, val string) ([]byte, error) {
	v, err := parseJSON(canon)
	if err != nil {
		return nil, err
	}
	o, ok := v.(*object)
	if !ok {
		return nil, errors.New("data is not an object")
	}
	for _, m := range o.members {
		if m.key == key {
			return nil, fmt.Errorf("data already has a member %q", key)
		}
	}
	nv, err := parseJSON([]byte(val))
	if err != nil {
		return nil, err
	}
	i, _ := slices.BinarySearchFunc(o.members, key, func(m member, k string) int { return strings.Compare(m.key, k) })
	o.members = slices.Insert(o.members, i, member{key: key, val: nv})
	return appendCanonical(make([]byte, 0, len(canon)+len(key)+len(val)+4), o), nil
}
