// Package gateway is the approval gateway: privileged actions (a new egress
// host, a wider sandbox, a new tool, a new agent, a marked command) are filed
// as requests, wait for an operator's decision, and are carried out only once
// approved.
//
// Requests live in the store, so a restart keeps pending ones pending and a
// decision made after it still applies. The store row is the truth; the
// in-memory part is only waiters and subscribers. Every request, decision,
// expiry, withdrawal and action result is an audit record.
//
// What a request holds, how it is shown and what its approval does are
// package kinds': the gateway validates every request's data through it,
// stores the canonical payload, derives the summary and the decisive fields
// from that payload whenever it reads a row, and runs the action of exactly
// that payload (Actions). Text the requester wrote is kept apart as the
// agent's note. An approved row is marked applied only after its action
// ran, so a crash between the two is finished by the next start.
//
// Requests are bounded three ways, so one agent cannot bury the others'
// requests: per sandbox (Options.MaxPending), per principal across all its
// sandboxes and kinds (MaxPendingPerPrincipal), and in total
// (MaxPendingTotal). A sandbox's pending requests are withdrawn when it
// ends (Withdraw): they expire with a reason naming the end, waiters wake,
// and the egress broker's held connections are refused.
//
// Webhooks (webhook.go) tell operator-configured URLs about every request
// and decision. Deliveries are written to the store first, one per URL,
// retried with backoff across restarts, bounded per URL, never sent
// through a redirect, and audited when dropped or given up.
package gateway

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/gateway/kinds"
	"github.com/ironclaw/ironclaw/internal/store"
	"github.com/ironclaw/ironclaw/internal/textsafe"
)

// Audit record kinds the gateway writes besides audit.KindApprovalRequest
// and audit.KindApprovalDecide.
const KindApprovalApply = "approval.apply"

// Defaults and bounds.
const (
	DefaultTimeout                = defaults.ApprovalTimeout
	DefaultMaxPending             = defaults.ApprovalMaxPending             // per sandbox
	DefaultMaxPendingPerPrincipal = defaults.ApprovalMaxPendingPerPrincipal // per principal, across its sandboxes and kinds
	DefaultMaxPendingTotal        = defaults.ApprovalMaxPendingTotal        // in the whole gateway
	// MaxNote bounds the agent's note of a request, in bytes.
	MaxNote = 500
	// MaxListLimit is the largest page List returns.
	MaxListLimit     = 500
	maxDataBytes     = kinds.MaxDataBytes
	maxReason        = 1000
	applyTimeout     = 2 * time.Minute
	subscriberBuffer = 256
)

// Action carries out an approved request and returns what it did, which
// becomes the approval's result. An error is recorded in the result too;
// the decision stands.
type Action func(ctx context.Context, a Approval) (result any, err error)

// Auditor is what the gateway needs of the audit log.
type Auditor interface {
	Append(ctx context.Context, e audit.Entry) (audit.Record, error)
}

// Options configure a Gateway.
type Options struct {
	Store *store.Store
	Audit Auditor
	// Timeout is how long a request stays pending before it expires (a
	// denial); 0 means DefaultTimeout.
	Timeout time.Duration
	// MaxPending caps pending requests per sandbox; 0 means
	// DefaultMaxPending.
	MaxPending int
	// MaxPendingPerPrincipal caps one principal's pending requests across
	// all its sandboxes and kinds, MaxPendingTotal all pending requests;
	// 0 means the defaults.
	MaxPendingPerPrincipal, MaxPendingTotal int
	// SessionPrincipal returns the principal that owns a sandbox; it
	// attributes requests a part of the daemon files for a sandbox
	// (Request.Via). Nil attributes them to the Via name itself.
	SessionPrincipal func(ctx context.Context, session string) (string, error)
	// Actions maps a kind to what an approval of it does (see Actions);
	// kinds without an action only record the decision.
	Actions map[string]Action
	// Notify is told about every new request and decision (webhooks). It
	// is called with the gateway's lock held: it may write to the store
	// but must not wait on anything else.
	Notify func(event string, a Approval)
	// Logf receives diagnostics; nil discards them.
	Logf func(format string, args ...any)
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Gateway files, stores, decides and expires approval requests. It is safe
// for concurrent use.
type Gateway struct {
	opts Options
	db   *sql.DB

	mu      sync.Mutex // orders state changes; held across their store write
	waiters map[string][]chan struct{}
	subs    map[chan Approval]struct{}
	closed  bool

	ctx    context.Context // for actions and the expiry loop
	cancel context.CancelFunc
	wake   chan struct{}
	wg     sync.WaitGroup
}

// New opens the gateway over the store's approvals table. Requests that
// expired while no daemon ran are expired now, and approved requests whose
// action never ran are carried out.
func New(ctx context.Context, opts Options) (*Gateway, error) {
	if opts.Store == nil || opts.Audit == nil {
		return nil, errors.New("gateway: a store and an audit log are required")
	}
	if opts.Timeout < 0 || opts.MaxPending < 0 || opts.MaxPendingPerPrincipal < 0 || opts.MaxPendingTotal < 0 {
		return nil, fmt.Errorf("%w: negative timeout or pending cap", ErrInvalid)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxPending == 0 {
		opts.MaxPending = DefaultMaxPending
	}
	if opts.MaxPendingPerPrincipal == 0 {
		opts.MaxPendingPerPrincipal = DefaultMaxPendingPerPrincipal
	}
	if opts.MaxPendingTotal == 0 {
		opts.MaxPendingTotal = DefaultMaxPendingTotal
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Notify == nil {
		opts.Notify = func(string, Approval) {}
	}
	g := &Gateway{
		opts:    opts,
		db:      opts.Store.DB(),
		waiters: map[string][]chan struct{}{},
		subs:    map[chan Approval]struct{}{},
		wake:    make(chan struct{}, 1),
	}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	if err := g.expireDue(ctx); err != nil {
		return nil, err
	}
	unapplied, err := g.query(ctx, `WHERE state = 'approved' AND applied = 0 ORDER BY created_at`)
	if err != nil {
		return nil, err
	}
	for _, a := range unapplied {
		g.opts.Logf("gateway: carrying out %s %s, approved before the last stop", a.Kind, a.ID)
		g.apply(a)
	}
	g.wg.Add(1)
	go g.expiryLoop()
	return g, nil
}

// Close stops the expiry loop and ends every subscription. Pending requests
// stay pending in the store.
func (g *Gateway) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	for ch := range g.subs {
		close(ch)
	}
	g.subs = nil
	for id, ws := range g.waiters {
		for _, w := range ws {
			close(w)
		}
		delete(g.waiters, id)
	}
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
	return nil
}

// Timeout is how long requests stay pending.
func (g *Gateway) Timeout() time.Duration { return g.opts.Timeout }

// File files a request, or with Request.Join returns an identical pending
// one. Errors: ErrInvalid (bad kind, data, note or session), ErrTooMany
// (a quota is used up; the message says which).
func (g *Gateway) File(ctx context.Context, r Request) (Approval, error) {
	if !slices.Contains(Kinds(), r.Kind) {
		return Approval{}, fmt.Errorf("%w: unknown kind %q (want one of %s)", ErrInvalid, r.Kind, strings.Join(Kinds(), ", "))
	}
	if kinds.NeedsSession(r.Kind) && r.Session == "" {
		return Approval{}, fmt.Errorf("%w: kind %s needs a session", ErrInvalid, r.Kind)
	}
	note := strings.TrimSpace(r.Note)
	if len(note) > MaxNote {
		return Approval{}, fmt.Errorf("%w: the note is %d bytes, more than %d", ErrInvalid, len(note), MaxNote)
	}
	if err := textsafe.Check("the note", note); err != nil {
		return Approval{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	payload, data, err := kinds.Canonical(r.Kind, r.Data)
	if err != nil {
		return Approval{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	by := r.By
	if by == "" && r.Via != "" {
		by = r.Via
		if g.opts.SessionPrincipal != nil && r.Session != "" {
			if by, err = g.opts.SessionPrincipal(ctx, r.Session); err != nil {
				return Approval{}, fmt.Errorf("%w: sandbox %s: %v", ErrInvalid, r.Session, err)
			}
		}
	}
	if by == "" {
		return Approval{}, fmt.Errorf("%w: no requester", ErrInvalid)
	}

	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return Approval{}, ErrClosed
	}
	if r.Join {
		got, err := g.query(ctx, `WHERE state = 'pending' AND kind = ? AND session = ? AND requested_by = ? AND data = ? LIMIT 1`,
			r.Kind, r.Session, by, string(data))
		if err != nil {
			return Approval{}, err
		}
		if len(got) == 1 {
			return got[0], nil
		}
	}
	if err := g.checkQuotas(ctx, r.Session, by); err != nil {
		return Approval{}, err
	}
	now := g.opts.Now().UTC()
	a := Approval{
		ID:          newID(),
		Kind:        r.Kind,
		State:       StatePending,
		Session:     r.Session,
		RequestedBy: by,
		Via:         r.Via,
		AgentNote:   note,
		Data:        data,
		CreatedAt:   now,
		ExpiresAt:   now.Add(g.opts.Timeout),
		payload:     payload,
	}
	a.describe()
	// The audit record comes first: a request the log does not show must
	// not exist.
	rec := map[string]any{"id": a.ID, "kind": a.Kind, "summary": a.Summary, "data": a.Data, "expires_at": formatTime(a.ExpiresAt)}
	if a.AgentNote != "" {
		rec["agent_note"] = a.AgentNote
	}
	if a.Via != "" {
		rec["via"] = a.Via
	}
	if _, err := g.opts.Audit.Append(ctx, audit.Entry{Session: a.Session, Actor: a.RequestedBy, Kind: audit.KindApprovalRequest, Data: rec}); err != nil {
		return Approval{}, fmt.Errorf("gateway: audit request: %w", err)
	}
	if _, err := g.db.ExecContext(ctx, `INSERT INTO approvals (id, kind, state, session, requested_by, summary, data,
	created_at, expires_at, decided_at, decided_by, scope, reason, result, applied, used, note, via)
	VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?, '', '', '', '', '', 0, 0, ?, ?)`,
		a.ID, a.Kind, a.Session, a.RequestedBy, a.Summary, string(a.Data), formatTime(a.CreatedAt), formatTime(a.ExpiresAt),
		a.AgentNote, a.Via); err != nil {
		return Approval{}, fmt.Errorf("gateway: store request: %w", err)
	}
	g.publishLocked(a)
	g.opts.Notify(audit.KindApprovalRequest, a)
	select {
	case g.wake <- struct{}{}:
	default:
	}
	return a, nil
}

// checkQuotas refuses a request over any of the three caps. Called with
// g.mu, so the counts cannot change before the insert.
func (g *Gateway) checkQuotas(ctx context.Context, session, by string) error {
	count := func(where string, args ...any) (int, error) {
		var n int
		if err := g.db.QueryRowContext(ctx, `SELECT count(*) FROM approvals WHERE state = 'pending'`+where, args...).Scan(&n); err != nil {
			return 0, fmt.Errorf("gateway: count pending: %w", err)
		}
		return n, nil
	}
	if session != "" {
		n, err := count(` AND session = ?`, session)
		if err != nil {
			return err
		}
		if n >= g.opts.MaxPending {
			return fmt.Errorf("%w: sandbox %s already has %d requests waiting for a decision (at most %d per sandbox, approvals.max_pending); wait for decisions",
				ErrTooMany, session, n, g.opts.MaxPending)
		}
	}
	n, err := count(` AND requested_by = ?`, by)
	if err != nil {
		return err
	}
	if n >= g.opts.MaxPendingPerPrincipal {
		return fmt.Errorf("%w: %s already has %d requests waiting for a decision across its sandboxes (at most %d per principal, approvals.max_pending_per_principal); wait for decisions",
			ErrTooMany, by, n, g.opts.MaxPendingPerPrincipal)
	}
	if n, err = count(``); err != nil {
		return err
	}
	if n >= g.opts.MaxPendingTotal {
		return fmt.Errorf("%w: %d requests already wait for a decision (at most %d in all, approvals.max_pending_total); retry after decisions",
			ErrTooMany, n, g.opts.MaxPendingTotal)
	}
	return nil
}

// describe derives the summary and the fields from the payload.
func (a *Approval) describe() {
	if a.payload == nil {
		a.Summary = fmt.Sprintf("%s request whose data does not validate; deny it", a.Kind)
		a.Fields = []kinds.Field{{Name: "data (does not validate)", Value: string(a.Data)}}
		return
	}
	t := a.Target()
	a.Summary = a.payload.Summary(t)
	a.Fields = a.payload.Fields(t)
	if a.Fields == nil {
		a.Fields = []kinds.Field{}
	}
}

// Get returns one approval, or ErrNotFound.
func (g *Gateway) Get(ctx context.Context, id string) (Approval, error) {
	got, err := g.query(ctx, `WHERE id = ?`, id)
	if err != nil {
		return Approval{}, err
	}
	if len(got) == 0 {
		return Approval{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	return got[0], nil
}

// List returns one page of the approvals matching f, newest first unless
// f.OldestFirst. Page.Next continues it; nothing is cut silently.
func (g *Gateway) List(ctx context.Context, f Filter) (Page, error) {
	var where []string
	var args []any
	for _, c := range []struct{ col, v string }{{"state", f.State}, {"session", f.Session}, {"kind", f.Kind}, {"requested_by", f.RequestedBy}} {
		if c.v != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	cmp, order := "<", "DESC"
	if f.OldestFirst {
		cmp, order = ">", "ASC"
	}
	if f.Cursor != "" {
		created, id, err := parseCursor(f.Cursor)
		if err != nil {
			return Page{}, err
		}
		where = append(where, fmt.Sprintf("(created_at %[1]s ? OR (created_at = ? AND id %[1]s ?))", cmp))
		args = append(args, created, created, id)
	}
	q := ""
	if len(where) > 0 {
		q = "WHERE " + strings.Join(where, " AND ")
	}
	limit := f.Limit
	if limit <= 0 || limit > MaxListLimit {
		limit = MaxListLimit
	}
	list, err := g.query(ctx, q+fmt.Sprintf(` ORDER BY created_at %[1]s, id %[1]s LIMIT ?`, order), append(args, limit+1)...)
	if err != nil {
		return Page{}, err
	}
	p := Page{Approvals: list}
	if len(list) > limit {
		p.Approvals = list[:limit]
		last := list[limit-1]
		p.Next = makeCursor(last.CreatedAt, last.ID)
	}
	return p, nil
}

// A cursor is the position of the last approval of a page: its creation
// time and id, opaque to clients.
func makeCursor(created time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(formatTime(created) + " " + id))
}

func parseCursor(c string) (created, id string, err error) {
	bad := fmt.Errorf("%w: cursor %q is not one this daemon gave out", ErrInvalid, c)
	if len(c) > 200 {
		return "", "", bad
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", "", bad
	}
	created, id, ok := strings.Cut(string(b), " ")
	if _, err := time.Parse(timeLayout, created); !ok || err != nil || !strings.HasPrefix(id, "apr-") {
		return "", "", bad
	}
	return created, id, nil
}

// Decide approves or denies a pending request. Deciding again the same way
// returns the approval unchanged; the opposite decision, or deciding an
// expired request, is ErrConflict. An approved request's action runs before
// Decide returns, so the returned approval carries its result.
func (g *Gateway) Decide(ctx context.Context, id string, d Decision) (Approval, error) {
	if d.By == "" {
		return Approval{}, fmt.Errorf("%w: no decider", ErrInvalid)
	}
	if len(d.Reason) > maxReason {
		return Approval{}, fmt.Errorf("%w: reason longer than %d bytes", ErrInvalid, maxReason)
	}
	g.mu.Lock()
	a, err := g.Get(ctx, id)
	if err != nil {
		g.mu.Unlock()
		return Approval{}, err
	}
	switch d.Scope {
	case "":
		if a.Kind == KindEgressHost && d.Approve {
			d.Scope = ScopeSandbox
		}
	case ScopeSandbox, ScopeGlobal:
		if a.Kind != KindEgressHost {
			g.mu.Unlock()
			return Approval{}, fmt.Errorf("%w: scope applies to egress.host requests only", ErrInvalid)
		}
		if !d.Approve {
			d.Scope = ""
		}
	default:
		g.mu.Unlock()
		return Approval{}, fmt.Errorf("%w: scope %q (want sandbox or global)", ErrInvalid, d.Scope)
	}
	if !a.Pending() {
		g.mu.Unlock()
		if (a.State == StateApproved && d.Approve) || (a.State == StateDenied && !d.Approve) {
			return a, nil
		}
		return a, fmt.Errorf("%w: %s is %s", ErrConflict, id, a.State)
	}
	if d.Approve && a.payload == nil {
		g.mu.Unlock()
		return a, fmt.Errorf("%w: %s holds data that no longer validates; deny it", ErrInvalid, id)
	}
	now := g.opts.Now().UTC()
	if !now.Before(a.ExpiresAt) {
		g.mu.Unlock()
		if err := g.expireDue(ctx); err != nil {
			return Approval{}, err
		}
		a, _ = g.Get(ctx, id)
		return a, fmt.Errorf("%w: %s expired", ErrConflict, id)
	}
	a.State = StateDenied
	if d.Approve {
		a.State = StateApproved
	}
	a.DecidedAt, a.DecidedBy, a.Scope, a.Reason = &now, d.By, d.Scope, d.Reason
	a.describe() // the scope is part of the display
	if err := g.recordDecision(ctx, a, nil); err != nil {
		g.mu.Unlock()
		return Approval{}, err
	}
	if !d.Approve {
		g.publishLocked(a)
		g.opts.Notify(audit.KindApprovalDecide, a)
		g.mu.Unlock()
		return a, nil
	}
	g.mu.Unlock()
	a = g.apply(a)
	g.mu.Lock()
	g.opts.Notify(audit.KindApprovalDecide, a)
	g.mu.Unlock()
	return a, nil
}

// recordDecision writes the audit record, then the row. Called with g.mu.
func (g *Gateway) recordDecision(ctx context.Context, a Approval, extra map[string]any) error {
	data := map[string]any{"id": a.ID, "kind": a.Kind, "decision": a.State, "requested_by": a.RequestedBy}
	if a.Scope != "" {
		data["scope"] = a.Scope
	}
	if a.Reason != "" {
		data["reason"] = a.Reason
	}
	for k, v := range extra {
		data[k] = v
	}
	if _, err := g.opts.Audit.Append(ctx, audit.Entry{Session: a.Session, Actor: a.DecidedBy, Kind: audit.KindApprovalDecide, Data: data}); err != nil {
		return fmt.Errorf("gateway: audit decision: %w", err)
	}
	res, err := g.db.ExecContext(ctx, `UPDATE approvals SET state = ?, decided_at = ?, decided_by = ?, scope = ?, reason = ?
	WHERE id = ? AND state = 'pending'`, a.State, formatTime(*a.DecidedAt), a.DecidedBy, a.Scope, a.Reason, a.ID)
	if err != nil {
		return fmt.Errorf("gateway: store decision: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("%w: %s changed under the decision", ErrConflict, a.ID)
	}
	return nil
}

// apply runs an approved request's action, stores its result and marks it
// applied, then tells waiters and subscribers.
func (g *Gateway) apply(a Approval) Approval {
	result := map[string]any{}
	if act, ok := g.opts.Actions[a.Kind]; ok {
		ctx, cancel := context.WithTimeout(g.ctx, applyTimeout)
		r, err := act(ctx, a)
		cancel()
		if err != nil {
			result = map[string]any{"error": err.Error()}
			g.opts.Logf("gateway: %s %s approved but failed: %v", a.Kind, a.ID, err)
		} else if r != nil {
			if m, ok := r.(map[string]any); ok {
				if m != nil {
					result = m
				}
			} else {
				result = map[string]any{"value": r}
			}
		}
	}
	raw, err := json.Marshal(result)
	if err != nil {
		raw = []byte(`{"error":"unencodable result"}`)
	}
	a.Result = raw
	ctx := context.Background()
	if _, err := g.opts.Audit.Append(ctx, audit.Entry{Session: a.Session, Actor: "gateway", Kind: KindApprovalApply, Data: map[string]any{
		"id": a.ID, "kind": a.Kind, "result": json.RawMessage(raw),
	}}); err != nil {
		g.opts.Logf("gateway: audit result of %s: %v", a.ID, err)
	}
	if _, err := g.db.ExecContext(ctx, `UPDATE approvals SET result = ?, applied = 1 WHERE id = ?`, string(raw), a.ID); err != nil {
		g.opts.Logf("gateway: store result of %s: %v", a.ID, err)
	}
	g.mu.Lock()
	g.publishLocked(a)
	g.mu.Unlock()
	return a
}

// Actions is the action table that carries out each kind's payload
// (kinds.Payload.Apply) through env: what runs is decoded from exactly
// the stored data the operator was shown.
func Actions(env kinds.Env) map[string]Action {
	out := map[string]Action{}
	for _, k := range Kinds() {
		out[k] = func(ctx context.Context, a Approval) (any, error) {
			p := a.Payload()
			if p == nil {
				return nil, fmt.Errorf("%w: %s data does not validate", ErrInvalid, a.Kind)
			}
			res, err := p.Apply(ctx, env, a.Target())
			if err != nil || res == nil {
				return nil, err
			}
			return res, nil
		}
	}
	return out
}

// Withdraw ends every pending request of a sandbox (it ended): each
// expires with why as its reason, audited as a decision by "gateway" with
// "withdrawn": true, and its waiters wake (the egress broker's held
// connections are refused). It works after Close too, so the sandboxes a
// shutdown destroys take their requests with them. It returns how many it
// withdrew.
func (g *Gateway) Withdraw(ctx context.Context, session, why string) (int, error) {
	if session == "" {
		return 0, fmt.Errorf("%w: no sandbox to withdraw requests of", ErrInvalid)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	due, err := g.query(ctx, `WHERE state = 'pending' AND session = ?`, session)
	if err != nil {
		return 0, err
	}
	now := g.opts.Now().UTC()
	for i, a := range due {
		a.State, a.DecidedAt, a.DecidedBy, a.Reason = StateExpired, &now, "gateway", why
		if err := g.recordDecision(ctx, a, map[string]any{"withdrawn": true}); err != nil {
			return i, err
		}
		g.publishLocked(a)
		g.opts.Notify(audit.KindApprovalDecide, a)
	}
	return len(due), nil
}

// SandboxEnded withdraws a sandbox's pending requests; its signature fits
// session.Options.OnEnd.
func (g *Gateway) SandboxEnded(id, state, reason string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	why := fmt.Sprintf("withdrawn: sandbox %s ended (%s", id, state)
	if reason != "" {
		why += ": " + reason
	}
	why += ")"
	if n, err := g.Withdraw(ctx, id, why); err != nil {
		g.opts.Logf("gateway: withdraw the requests of %s: %v", id, err)
	} else if n > 0 {
		g.opts.Logf("gateway: withdrew %d pending request(s) of %s (%s)", n, id, state)
	}
}

// Wait returns the approval once it is no longer pending, or after d (or
// when ctx ends) with the state as it is then.
func (g *Gateway) Wait(ctx context.Context, id string, d time.Duration) (Approval, error) {
	g.mu.Lock()
	a, err := g.Get(ctx, id)
	if err != nil || !a.Pending() || d <= 0 || g.closed {
		g.mu.Unlock()
		return a, err
	}
	ch := make(chan struct{})
	g.waiters[id] = append(g.waiters[id], ch)
	g.mu.Unlock()

	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	case <-ctx.Done():
	}
	g.mu.Lock()
	ws := g.waiters[id]
	if i := slices.Index(ws, ch); i >= 0 {
		g.waiters[id] = slices.Delete(ws, i, i+1)
		if len(g.waiters[id]) == 0 {
			delete(g.waiters, id)
		}
	}
	g.mu.Unlock()
	if ctx.Err() != nil {
		return a, ctx.Err()
	}
	return g.Get(context.WithoutCancel(ctx), id)
}

// Subscribe returns a channel that receives every approval as it is filed
// or changes state, and a function ending the subscription. A subscriber
// that falls behind by more than a buffer's worth is dropped (its channel
// closes), so a stuck client cannot hold the gateway back.
func (g *Gateway) Subscribe() (<-chan Approval, func()) {
	ch := make(chan Approval, subscriberBuffer)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		close(ch)
		return ch, func() {}
	}
	g.subs[ch] = struct{}{}
	return ch, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if _, ok := g.subs[ch]; ok {
			delete(g.subs, ch)
			close(ch)
		}
	}
}

// publishLocked wakes the approval's waiters and tells subscribers. Called
// with g.mu.
func (g *Gateway) publishLocked(a Approval) {
	if !a.Pending() {
		for _, w := range g.waiters[a.ID] {
			close(w)
		}
		delete(g.waiters, a.ID)
	}
	for ch := range g.subs {
		select {
		case ch <- a:
		default:
			delete(g.subs, ch)
			close(ch)
		}
	}
}

// Use spends a single-use approval: it must be an approved exec.command for
// this session that has not been used, and check must accept its data.
func (g *Gateway) Use(ctx context.Context, id, session string, check func(data json.RawMessage) error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	a, err := g.Get(ctx, id)
	if err != nil {
		return err
	}
	switch {
	case a.Kind != KindExecCommand:
		return fmt.Errorf("%w: %s is a %s request, not %s", ErrNotUsable, id, a.Kind, KindExecCommand)
	case a.Session != session:
		return fmt.Errorf("%w: %s was filed for another sandbox", ErrNotUsable, id)
	case a.State != StateApproved:
		return fmt.Errorf("%w: %s is %s", ErrNotUsable, id, a.State)
	}
	if err := check(a.Data); err != nil {
		return fmt.Errorf("%w: %v", ErrNotUsable, err)
	}
	res, err := g.db.ExecContext(ctx, `UPDATE approvals SET used = 1 WHERE id = ? AND used = 0`, id)
	if err != nil {
		return fmt.Errorf("gateway: spend approval: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("%w: %s was already used", ErrNotUsable, id)
	}
	return nil
}

// expiryLoop expires requests when their time comes. It sleeps until the
// earliest expiry, and is woken early when a request is filed.
func (g *Gateway) expiryLoop() {
	defer g.wg.Done()
	for {
		next := time.Minute
		var first string
		err := g.db.QueryRowContext(g.ctx, `SELECT ifnull(min(expires_at), '') FROM approvals WHERE state = 'pending'`).Scan(&first)
		if err == nil && first != "" {
			if t, err := time.Parse(timeLayout, first); err == nil {
				next = min(max(t.Sub(g.opts.Now()), 0), time.Minute)
			}
		}
		t := time.NewTimer(next)
		select {
		case <-g.ctx.Done():
			t.Stop()
			return
		case <-g.wake:
			t.Stop()
		case <-t.C:
		}
		if err := g.expireDue(g.ctx); err != nil && g.ctx.Err() == nil {
			g.opts.Logf("gateway: expire: %v", err)
		}
	}
}

// expireDue expires every pending request whose time has passed.
func (g *Gateway) expireDue(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.opts.Now().UTC()
	due, err := g.query(ctx, `WHERE state = 'pending' AND expires_at <= ?`, formatTime(now))
	if err != nil {
		return err
	}
	for _, a := range due {
		a.State, a.DecidedAt, a.DecidedBy = StateExpired, &now, "gateway"
		a.Reason = fmt.Sprintf("no decision within %s", g.opts.Timeout)
		if err := g.recordDecision(ctx, a, nil); err != nil {
			return err
		}
		g.publishLocked(a)
		g.opts.Notify(audit.KindApprovalDecide, a)
	}
	return nil
}

const columns = `id, kind, state, session, requested_by, via, note, data, created_at, expires_at, decided_at, decided_by, scope, reason, result`

func (g *Gateway) query(ctx context.Context, tail string, args ...any) ([]Approval, error) {
	rows, err := g.db.QueryContext(ctx, `SELECT `+columns+` FROM approvals `+tail, args...)
	if err != nil {
		return nil, fmt.Errorf("gateway: query approvals: %w", err)
	}
	defer rows.Close()
	var out []Approval
	for rows.Next() {
		var a Approval
		var data, created, expires, decided, result string
		if err := rows.Scan(&a.ID, &a.Kind, &a.State, &a.Session, &a.RequestedBy, &a.Via, &a.AgentNote, &data,
			&created, &expires, &decided, &a.DecidedBy, &a.Scope, &a.Reason, &result); err != nil {
			return nil, fmt.Errorf("gateway: read approval: %w", err)
		}
		a.Data = json.RawMessage(data)
		// The stored summary column is not read back: the summary is
		// derived again from the data (rows of older versions may hold
		// the requester's own words there).
		if p, err := kinds.Decode(a.Kind, a.Data); err == nil {
			a.payload = p
		}
		if result != "" {
			a.Result = json.RawMessage(result)
		}
		a.CreatedAt, _ = time.Parse(timeLayout, created)
		a.ExpiresAt, _ = time.Parse(timeLayout, expires)
		if decided != "" {
			t, _ := time.Parse(timeLayout, decided)
			a.DecidedAt = &t
		}
		a.describe()
		out = append(out, a)
	}
	return out, rows.Err()
}

// timeLayout is fixed-width UTC so stored times compare as strings.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "apr-" + hex.EncodeToString(b[:])
}
