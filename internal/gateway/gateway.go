// Package gateway is the approval gateway: privileged actions (a new egress
// host, a wider sandbox, a new tool, a new agent, a marked command) are filed
// as requests, wait for an operator's decision, and are carried out only once
// approved.
//
// Requests live in the store, so a restart keeps pending ones pending and a
// decision made after it still applies. The store row is the truth; the
// in-memory part is only waiters and subscribers. Every request, decision,
// expiry and action result is an audit record.
//
// What an approved request does is not this package's business: the daemon
// registers an Action per kind (add a host to an allowlist, create a
// sandbox, ...). An approved row is marked applied only after its action
// ran, so a crash between the two is finished by the next start.
package gateway

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/store"
)

// Audit record kinds the gateway writes besides audit.KindApprovalRequest
// and audit.KindApprovalDecide.
const KindApprovalApply = "approval.apply"

// Defaults.
const (
	DefaultTimeout    = 10 * time.Minute
	DefaultMaxPending = 20
	maxDataBytes      = 64 << 10
	maxSummary        = 500
	maxReason         = 1000
	maxListLimit      = 500
	applyTimeout      = 2 * time.Minute
	subscriberBuffer  = 256
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
	// MaxPending caps pending requests per session (and, for requests not
	// tied to a sandbox, per requester); 0 means DefaultMaxPending.
	MaxPending int
	// Actions maps a kind to what an approval of it does; kinds without an
	// action only record the decision.
	Actions map[string]Action
	// Notify is told about every new request and decision (webhooks). It
	// must not block.
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
	if opts.Timeout < 0 || opts.MaxPending < 0 {
		return nil, fmt.Errorf("%w: negative timeout or pending cap", ErrInvalid)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.MaxPending == 0 {
		opts.MaxPending = DefaultMaxPending
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
// one. Errors: ErrInvalid (bad kind, data or session), ErrTooMany.
func (g *Gateway) File(ctx context.Context, r Request) (Approval, error) {
	if !slices.Contains(Kinds(), r.Kind) {
		return Approval{}, fmt.Errorf("%w: unknown kind %q (want one of %s)", ErrInvalid, r.Kind, strings.Join(Kinds(), ", "))
	}
	if needsSession(r.Kind) && r.Session == "" {
		return Approval{}, fmt.Errorf("%w: kind %s needs a session", ErrInvalid, r.Kind)
	}
	if r.By == "" {
		return Approval{}, fmt.Errorf("%w: no requester", ErrInvalid)
	}
	data, err := json.Marshal(r.Data)
	if err != nil {
		return Approval{}, fmt.Errorf("%w: data: %v", ErrInvalid, err)
	}
	if r.Data == nil {
		data = []byte("{}")
	}
	if len(data) == 0 || data[0] != '{' {
		return Approval{}, fmt.Errorf("%w: data must be a JSON object", ErrInvalid)
	}
	if len(data) > maxDataBytes {
		return Approval{}, fmt.Errorf("%w: data is %d bytes, more than %d", ErrInvalid, len(data), maxDataBytes)
	}
	summary := strings.TrimSpace(r.Summary)
	if summary == "" {
		summary = defaultSummary(r.Kind, r.Session, data)
	}
	if len(summary) > maxSummary {
		summary = summary[:maxSummary]
	}

	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return Approval{}, ErrClosed
	}
	if r.Join {
		got, err := g.query(ctx, `WHERE state = 'pending' AND kind = ? AND session = ? AND data = ? LIMIT 1`, r.Kind, r.Session, string(data))
		if err != nil {
			return Approval{}, err
		}
		if len(got) == 1 {
			return got[0], nil
		}
	}
	bucket, arg := `session = ?`, r.Session
	if r.Session == "" {
		bucket, arg = `session = '' AND requested_by = ?`, r.By
	}
	var open int
	if err := g.db.QueryRowContext(ctx, `SELECT count(*) FROM approvals WHERE state = 'pending' AND `+bucket, arg).Scan(&open); err != nil {
		return Approval{}, fmt.Errorf("gateway: count pending: %w", err)
	}
	if open >= g.opts.MaxPending {
		return Approval{}, fmt.Errorf("%w: %d requests already wait for a decision", ErrTooMany, open)
	}
	now := g.opts.Now().UTC()
	a := Approval{
		ID:          newID(),
		Kind:        r.Kind,
		State:       StatePending,
		Session:     r.Session,
		RequestedBy: r.By,
		Summary:     summary,
		Data:        data,
		CreatedAt:   now,
		ExpiresAt:   now.Add(g.opts.Timeout),
	}
	// The audit record comes first: a request the log does not show must
	// not exist.
	if _, err := g.opts.Audit.Append(ctx, audit.Entry{Session: a.Session, Actor: a.RequestedBy, Kind: audit.KindApprovalRequest, Data: map[string]any{
		"id": a.ID, "kind": a.Kind, "summary": a.Summary, "data": a.Data, "expires_at": formatTime(a.ExpiresAt),
	}}); err != nil {
		return Approval{}, fmt.Errorf("gateway: audit request: %w", err)
	}
	if _, err := g.db.ExecContext(ctx, `INSERT INTO approvals (id, kind, state, session, requested_by, summary, data,
	created_at, expires_at, decided_at, decided_by, scope, reason, result, applied, used)
	VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?, '', '', '', '', '', 0, 0)`,
		a.ID, a.Kind, a.Session, a.RequestedBy, a.Summary, string(a.Data), formatTime(a.CreatedAt), formatTime(a.ExpiresAt)); err != nil {
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

// List returns approvals matching f, newest first.
func (g *Gateway) List(ctx context.Context, f Filter) ([]Approval, error) {
	var where []string
	var args []any
	for _, c := range []struct{ col, v string }{{"state", f.State}, {"session", f.Session}, {"kind", f.Kind}} {
		if c.v != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.v)
		}
	}
	q := ""
	if len(where) > 0 {
		q = "WHERE " + strings.Join(where, " AND ")
	}
	limit := f.Limit
	if limit <= 0 || limit > maxListLimit {
		limit = maxListLimit
	}
	return g.query(ctx, q+` ORDER BY created_at DESC, id LIMIT ?`, append(args, limit)...)
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
	if err := g.recordDecision(ctx, a); err != nil {
		g.mu.Unlock()
		return Approval{}, err
	}
	if !d.Approve {
		g.publishLocked(a)
		g.mu.Unlock()
		g.opts.Notify(audit.KindApprovalDecide, a)
		return a, nil
	}
	g.mu.Unlock()
	a = g.apply(a)
	g.opts.Notify(audit.KindApprovalDecide, a)
	return a, nil
}

// recordDecision writes the audit record, then the row. Called with g.mu.
func (g *Gateway) recordDecision(ctx context.Context, a Approval) error {
	data := map[string]any{"id": a.ID, "kind": a.Kind, "decision": a.State, "requested_by": a.RequestedBy}
	if a.Scope != "" {
		data["scope"] = a.Scope
	}
	if a.Reason != "" {
		data["reason"] = a.Reason
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
				result = m
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
		if err := g.recordDecision(ctx, a); err != nil {
			return err
		}
		g.publishLocked(a)
		g.opts.Notify(audit.KindApprovalDecide, a)
	}
	return nil
}

const columns = `id, kind, state, session, requested_by, summary, data, created_at, expires_at, decided_at, decided_by, scope, reason, result`

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
		if err := rows.Scan(&a.ID, &a.Kind, &a.State, &a.Session, &a.RequestedBy, &a.Summary, &data,
			&created, &expires, &decided, &a.DecidedBy, &a.Scope, &a.Reason, &result); err != nil {
			return nil, fmt.Errorf("gateway: read approval: %w", err)
		}
		a.Data = json.RawMessage(data)
		if result != "" {
			a.Result = json.RawMessage(result)
		}
		a.CreatedAt, _ = time.Parse(timeLayout, created)
		a.ExpiresAt, _ = time.Parse(timeLayout, expires)
		if decided != "" {
			t, _ := time.Parse(timeLayout, decided)
			a.DecidedAt = &t
		}
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

func defaultSummary(kind, session string, data []byte) string {
	who := session
	if who == "" {
		who = "an agent"
	}
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	switch kind {
	case KindEgressHost:
		return fmt.Sprintf("%s wants to reach %v:%v", who, m["host"], m["port"])
	case KindExecCommand:
		return fmt.Sprintf("%s wants to run %q", who, m["command"])
	case KindToolRegister:
		return fmt.Sprintf("%s wants to register the tool %v", who, m["name"])
	case KindAgentSpawn:
		return fmt.Sprintf("%s wants to spawn an agent", who)
	case KindSandboxWiden:
		return fmt.Sprintf("%s wants a wider sandbox", who)
	case KindToolCall:
		return fmt.Sprintf("%s wants to call the tool %v", who, m["tool"])
	}
	return who + " asks for " + kind
}
