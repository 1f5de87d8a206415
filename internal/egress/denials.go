package egress

import (
	"context"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/defaults"
)

// Defaults for the aggregation of refusals (Config.DenyWindow,
// Config.MaxDenyKeys).
const (
	DefaultDenyWindow  = defaults.EgressDenyWindow
	DefaultMaxDenyKeys = 32
)

// denyKey is what makes two refusals of one broker (one sandbox) the same.
type denyKey struct {
	host   string
	port   int
	reason string
}

// denials aggregates a broker's refusals in windows: in each, the first
// refusal of a kind (denyKey) is recorded in full, at most maxKeys kinds
// are, and at the end of the window one summary record per kind counts
// the repeats, plus one for the refusals of the kinds over maxKeys. So a
// refusal loop costs at most 2*maxKeys+1 records a window, however many
// hosts it tries.
//
// A window opens with the first refusal after the last one closed and
// closes window later (or at close), when its summaries are written.
type denials struct {
	b       *Broker
	kind    string        // of the records; "" is audit.KindEgressDeny
	window  time.Duration // <= 0: every refusal recorded in full
	maxKeys int

	mu       sync.Mutex
	start    time.Time // of the open window; zero: none
	timer    *time.Timer
	counts   map[denyKey]int // repeats after the full record
	overflow map[string]int  // reason -> refusals of kinds over maxKeys
	closed   bool
}

// note reports whether a refusal is to be recorded in full; if not, it is
// counted for the window's summary.
func (d *denials) note(k denyKey) bool {
	if d.window <= 0 {
		return true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return true
	}
	if d.start.IsZero() {
		d.start = time.Now()
		d.counts = map[denyKey]int{}
		d.overflow = map[string]int{}
		d.b.wg.Add(1)
		d.timer = time.AfterFunc(d.window, func() {
			defer d.b.wg.Done()
			d.flush(false)
		})
	}
	if n, ok := d.counts[k]; ok {
		d.counts[k] = n + 1
		return false
	}
	if len(d.counts) >= d.maxKeys {
		d.overflow[k.reason]++
		return false
	}
	d.counts[k] = 0
	return true
}

// flush closes the open window and writes its summaries; final (from
// Broker.Close) also stops the aggregation.
func (d *denials) flush(final bool) {
	d.mu.Lock()
	if final {
		d.closed = true
		if d.timer != nil && d.timer.Stop() {
			d.b.wg.Done() // the timer's func will not run
		}
	}
	start, counts, overflow := d.start, d.counts, d.overflow
	d.start, d.counts, d.overflow, d.timer = time.Time{}, nil, nil, nil
	d.mu.Unlock()
	if start.IsZero() || d.b.cfg.Log == nil {
		return
	}
	since := audit.FormatTime(start)
	ms := time.Since(start).Milliseconds()
	for k, n := range counts {
		if n == 0 {
			continue
		}
		d.write(map[string]any{"summary": true, "host": k.host, "port": k.port, "reason": k.reason,
			"count": n, "since": since, "window_ms": ms})
	}
	if len(overflow) > 0 {
		total := 0
		for _, n := range overflow {
			total += n
		}
		d.write(map[string]any{"summary": true, "overflow": true, "reasons": overflow,
			"count": total, "since": since, "window_ms": ms})
	}
}

func (d *denials) write(data map[string]any) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kind := d.kind
	if kind == "" {
		kind = audit.KindEgressDeny
	}
	e := audit.Entry{Session: d.b.cfg.Session, Actor: Actor, Kind: kind, Data: data}
	if _, err := d.b.cfg.Log.Append(ctx, e); err != nil {
		d.b.logf("egress: audit summary of refusals: %v", err)
	}
}
