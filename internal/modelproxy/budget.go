package modelproxy

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// SpendStore keeps each principal's settled spend, so a principal's
// budget survives a daemon restart. The proxy reads a principal's spend
// once (on its first request of a window) and writes settled spend
// behind the requests, batched: a crash loses at most the spend of the
// last moment's requests, never a reservation's hold (reservations live
// only while their request does).
type SpendStore interface {
	// Spent returns the tokens principal spent in the window starting at
	// period (Unix seconds; 0 when budgets have no window).
	Spent(ctx context.Context, principal string, period int64) (int64, error)
	// AddSpent adds each delta to its principal's spend in its window and
	// may forget windows older than a principal's newest.
	AddSpent(ctx context.Context, deltas []SpendDelta) error
}

// SpendDelta is spend to add to one principal's window.
type SpendDelta struct {
	Principal string
	Period    int64
	Tokens    int64
}

// ledger is one budget: a sandbox's (in memory: sandboxes end with the
// daemon) or a principal's (backed by the SpendStore). spent counts
// settled requests, reserved the holds of requests in flight; a request
// is admitted only if spent+reserved+its reservation stays within limit.
type ledger struct {
	limit int64 // 0: no limit (spend is still counted)

	mu       sync.Mutex
	period   int64 // window of spent (principal ledgers)
	spent    int64
	reserved int64
	loaded   bool // spent holds the SpendStore's value for period
}

func (l *ledger) left() int64 { return l.limit - l.spent - l.reserved }

// period returns the budget window that t falls in.
func (p *Proxy) period(t time.Time) int64 {
	w := p.cfg.BudgetWindow
	if w <= 0 {
		return 0
	}
	s := int64(w / time.Second)
	return t.Unix() / s * s
}

// principalLedger returns principal's ledger, its spend loaded for the
// current window.
func (p *Proxy) principalLedger(ctx context.Context, principal string) (*ledger, error) {
	p.mu.Lock()
	l := p.principals[principal]
	if l == nil {
		l = &ledger{limit: p.cfg.PrincipalBudget}
		p.principals[principal] = l
	}
	p.mu.Unlock()
	per := p.period(p.now())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.loaded && l.period == per {
		return l, nil
	}
	var spent int64
	if p.cfg.Spend != nil {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		n, err := p.cfg.Spend.Spent(lctx, principal, per)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("modelproxy: read spend of %s: %w", principal, err)
		}
		spent = n
	}
	// Spend not yet written for this window counts too.
	spent += p.unwritten(principal, per)
	l.period, l.spent, l.loaded = per, spent, true
	return l, nil
}

// reservation is the hold of one request on its budgets.
type reservation struct {
	sandbox   *ledger // nil for host tokens
	principal *ledger
	name      string // the principal
	amount    int64
}

// refusal says which budget refused a request, and why.
type refusal struct {
	reason string // "budget_sandbox" | "budget_principal" (set by reserve)
	msg    string
}

// reserve holds a request's tokens on g's budgets. plan gets what the
// budgets have left (limited reports whether any budget applies; if not,
// left is meaningless) and returns the amount to hold, or a refusal.
// Checking and holding happen under the budgets' locks (sandbox, then
// principal), so concurrent requests cannot together pass a budget that
// each passes alone.
func (p *Proxy) reserve(ctx context.Context, g *grant, plan func(left int64, limited bool) (int64, *refusal)) (*reservation, *refusal, error) {
	pl, err := p.principalLedger(ctx, g.principal)
	if err != nil {
		return nil, nil, err
	}
	sl := g.sandbox
	if sl != nil {
		sl.mu.Lock()
		defer sl.mu.Unlock()
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if per := p.period(p.now()); per != pl.period {
		// A new window began since the load: it starts empty (any spend
		// of it is still in the write queue).
		pl.period, pl.spent = per, p.unwritten(g.principal, per)
	}
	left, limited := int64(maxCount), false
	which := ""
	if sl != nil && sl.limit > 0 {
		left, limited, which = sl.left(), true, "budget_sandbox"
	}
	if pl.limit > 0 && (!limited || pl.left() < left) {
		left, limited, which = pl.left(), true, "budget_principal"
	}
	amount, ref := plan(max(left, 0), limited)
	if ref == nil && limited && amount > left {
		ref = &refusal{msg: fmt.Sprintf("this request may use up to %d tokens (input estimate plus its output bound)", amount)}
	}
	if ref != nil {
		ref.reason = which
		ref.msg = fmt.Sprintf("token budget exhausted: %d tokens are left of %s; %s", max(left, 0), budgetName(which, sl, pl), ref.msg)
		return nil, ref, nil
	}
	if sl != nil {
		sl.reserved += amount
	}
	pl.reserved += amount
	return &reservation{sandbox: sl, principal: pl, name: g.principal, amount: amount}, nil, nil
}

func budgetName(which string, sl, pl *ledger) string {
	if which == "budget_sandbox" {
		return fmt.Sprintf("this sandbox's budget of %d input+output tokens", sl.limit)
	}
	return fmt.Sprintf("this principal's budget of %d input+output tokens", pl.limit)
}

// settle releases r's hold and charges n tokens to its budgets.
func (p *Proxy) settle(r *reservation, n int64) {
	if r == nil {
		return
	}
	n = max(n, 0)
	if r.sandbox != nil {
		r.sandbox.mu.Lock()
		r.sandbox.reserved -= r.amount
		r.sandbox.spent += n
		r.sandbox.mu.Unlock()
	}
	pl := r.principal
	pl.mu.Lock()
	pl.reserved -= r.amount
	per := p.period(p.now())
	if per != pl.period {
		pl.period, pl.spent = per, p.unwritten(r.name, per)
	}
	pl.spent += n
	pl.mu.Unlock()
	if n > 0 {
		p.queueSpend(r.name, per, n)
	}
}

// Spent reports a principal's settled spend in the current window and
// the tokens its requests in flight hold.
func (p *Proxy) Spent(ctx context.Context, principal string) (spent, reserved int64, err error) {
	l, err := p.principalLedger(ctx, principal)
	if err != nil {
		return 0, 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.spent, l.reserved, nil
}

// ---- write-behind of principal spend ----

type spendKey struct {
	principal string
	period    int64
}

// queueSpend adds n to what the writer will persist.
func (p *Proxy) queueSpend(principal string, period, n int64) {
	if p.cfg.Spend == nil {
		return
	}
	p.spendMu.Lock()
	p.dirty[spendKey{principal, period}] += n
	p.spendMu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// unwritten is the queued spend of principal in period.
func (p *Proxy) unwritten(principal string, period int64) int64 {
	p.spendMu.Lock()
	defer p.spendMu.Unlock()
	return p.dirty[spendKey{principal, period}] + p.writing[spendKey{principal, period}]
}

// writeSpend persists queued spend until stop closes, then once more.
func (p *Proxy) writeSpend() {
	defer close(p.writerDone)
	for {
		select {
		case <-p.kick:
		case <-p.stop:
			p.flushSpend()
			return
		}
		if !p.flushSpend() {
			// The store refused (a full disk): the spend stays queued, and
			// counted, until a later write succeeds.
			select {
			case <-time.After(time.Second):
			case <-p.stop:
				p.flushSpend()
				return
			}
		}
	}
}

// flushSpend writes the queued spend in one batch; it reports success.
func (p *Proxy) flushSpend() bool {
	p.spendMu.Lock()
	if len(p.dirty) == 0 {
		p.spendMu.Unlock()
		return true
	}
	p.writing, p.dirty = p.dirty, map[spendKey]int64{}
	deltas := make([]SpendDelta, 0, len(p.writing))
	for k, n := range p.writing {
		deltas = append(deltas, SpendDelta{Principal: k.principal, Period: k.period, Tokens: n})
	}
	p.spendMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err := p.cfg.Spend.AddSpent(ctx, deltas)
	cancel()
	p.spendMu.Lock()
	defer p.spendMu.Unlock()
	if err != nil {
		p.logf("modelproxy: persist model spend: %v (kept in memory, retrying)", err)
		for k, n := range p.writing {
			p.dirty[k] += n
		}
	}
	p.writing = map[spendKey]int64{}
	return err == nil
}
