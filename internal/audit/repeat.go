package audit

import (
	"context"
	"sync"
	"time"
)

// DefaultRepeatWindow is Options.RepeatWindow's default.
const DefaultRepeatWindow = 10 * time.Second

// maxRepeatKeys bounds the keys AppendRepeated tracks at once; past it,
// new keys of an (actor, kind) share one overflow entry, key "*", whose
// summary names no session (its sample does).
const maxRepeatKeys = 4096

// RepeatOverflowKey is the key of a summary that aggregates entries whose
// own keys did not fit in the table.
const RepeatOverflowKey = "*"

// AppendRepeated is Append for events a hostile caller can repeat at will
// and that change nothing, such as refusals (egress.deny, a denied model
// call): the first entry of a (session, actor, kind, key) in a window of
// Options.RepeatWindow is appended at once (durable when this returns nil,
// appended is true); later ones in the window are only counted (appended
// false, nil error). When the window ends, or at Close, one summary record
// of the same kind is appended for the counted ones:
//
//	{"key": key, "repeated": N, "first": TIME, "last": TIME, "sample": <the last entry's data>}
//
// so N refusals cost at most two records per key and window instead of N.
// key should name what makes events alike (the refused host, the rule);
// do not use it for anything that must be recorded every time, such as an
// action that took place.
func (l *Log) AppendRepeated(ctx context.Context, key string, e Entry) (appended bool, err error) {
	return l.repeats.add(ctx, key, e)
}

type repeatKey struct{ session, actor, kind, key string }

type repeatState struct {
	start       time.Time // when the window's first entry was appended
	n           int64     // entries counted since
	first, last time.Time // of the counted entries
	sample      any       // the last counted entry's data
}

type repeater struct {
	l    *Log
	mu   sync.Mutex
	m    map[repeatKey]*repeatState
	stop chan struct{} // nil until the flusher starts
	done chan struct{}
	shut bool
}

func newRepeater(l *Log) *repeater {
	return &repeater{l: l, m: map[repeatKey]*repeatState{}}
}

func (r *repeater) add(ctx context.Context, key string, e Entry) (bool, error) {
	now := r.l.opts.Clock()
	k := repeatKey{e.Session, e.Actor, e.Kind, key}
	r.mu.Lock()
	st := r.m[k]
	if st == nil && len(r.m) >= maxRepeatKeys {
		// One overflow bucket per actor and kind (names the daemon's code
		// chooses, so few), whatever the session: the table stays bounded.
		k = repeatKey{actor: e.Actor, kind: e.Kind, key: RepeatOverflowKey}
		st = r.m[k]
	}
	if st != nil && now.Sub(st.start) < r.l.opts.RepeatWindow && !r.shut {
		if st.n == 0 {
			st.first = now
		}
		st.n++
		st.last = now
		st.sample = e.Data
		r.mu.Unlock()
		return false, nil
	}
	var summary *Entry
	if st != nil && st.n > 0 {
		s := st.summary(k)
		summary = &s
	}
	if !r.shut {
		r.m[k] = &repeatState{start: now}
		if r.stop == nil {
			r.stop, r.done = make(chan struct{}), make(chan struct{})
			go r.flushLoop()
		}
	}
	r.mu.Unlock()
	if summary != nil {
		if _, err := r.l.Append(ctx, *summary); err != nil {
			return false, err
		}
	}
	if _, err := r.l.Append(ctx, e); err != nil {
		return false, err
	}
	return true, nil
}

func (st *repeatState) summary(k repeatKey) Entry {
	return Entry{Session: k.session, Actor: k.actor, Kind: k.kind, Data: map[string]any{
		"key": k.key, "repeated": st.n, "first": FormatTime(st.first), "last": FormatTime(st.last), "sample": st.sample,
	}}
}

// due removes the entries whose window ended before now (all of them if
// all) and returns the summaries to append.
func (r *repeater) due(now time.Time, all bool) []Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Entry
	for k, st := range r.m {
		if !all && now.Sub(st.start) < r.l.opts.RepeatWindow {
			continue
		}
		if st.n > 0 {
			out = append(out, st.summary(k))
		}
		delete(r.m, k)
	}
	return out
}

func (r *repeater) flushLoop() {
	defer close(r.done)
	t := time.NewTicker(max(r.l.opts.RepeatWindow/2, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		for _, e := range r.due(r.l.opts.Clock(), false) {
			if _, err := r.l.Append(context.Background(), e); err != nil {
				r.l.opts.Logf("audit: repeated-event summary not written: %v", err)
			}
		}
	}
}

// close stops the flusher and appends every pending summary.
func (r *repeater) close() {
	r.mu.Lock()
	if r.shut {
		r.mu.Unlock()
		return
	}
	r.shut = true
	stop := r.stop
	r.mu.Unlock()
	if stop != nil {
		close(stop)
		<-r.done
	}
	for _, e := range r.due(time.Time{}, true) {
		if _, err := r.l.Append(context.Background(), e); err != nil {
			r.l.opts.Logf("audit: repeated-event summary not written: %v", err)
		}
	}
}
