package api

import (
	"container/list"
	"sync"
	"time"
)

// limiter is the API's fair rate limit: a token bucket per principal (the
// client) and one per running sandbox, each of its own shape. A request
// takes a token from its principal's bucket and, on a sandbox's route, from
// that sandbox's bucket; it passes only if both have one (neither is taken
// otherwise). So one busy sandbox cannot use up what a principal's other
// sandboxes get beyond the principal's own rate, and one principal cannot
// use up another's.
//
// Buckets are bounded: there is one per configured token, and sandbox
// buckets are made only for running sandboxes the caller may use (the
// caller checks; an unknown or foreign id makes none), at most maxBuckets
// of them. A bucket idle long enough to have refilled is the same as a new
// one and is dropped; past maxBuckets the least recently used is.
type limiter struct {
	now func() time.Time

	mu      sync.Mutex
	client  table
	sandbox table
}

// table is the buckets of one shape, most recently used first.
type table struct {
	rate  float64 // tokens per second
	burst float64
	max   int // buckets at most; 0: no bound (the principals: one per token)

	byKey map[string]*list.Element
	lru   list.List // of *bucket
}

type bucket struct {
	key    string
	tokens float64
	last   time.Time
}

// rateShape is the rate and burst of one kind of bucket.
type rateShape struct {
	rate  float64
	burst int
}

func newLimiter(client, sandbox rateShape, maxSandboxBuckets int) *limiter {
	return &limiter{
		now:     time.Now,
		client:  table{rate: client.rate, burst: float64(client.burst), byKey: map[string]*list.Element{}},
		sandbox: table{rate: sandbox.rate, burst: float64(sandbox.burst), max: maxSandboxBuckets, byKey: map[string]*list.Element{}},
	}
}

// Limit names which bucket refused a request.
const (
	limitPrincipal = "principal"
	limitSandbox   = "sandbox"
)

// allow takes a token for the principal and, if sandbox is not "", one for
// the sandbox; or says which bucket is empty and how long until both have a
// token.
func (l *limiter) allow(principal, sandbox string) (ok bool, wait time.Duration, which string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	cb := l.client.get(principal, now)
	var sb *bucket
	if sandbox != "" {
		sb = l.sandbox.get(sandbox, now)
	}
	if w := l.client.wait(cb); w > 0 {
		wait, which = w, limitPrincipal
	}
	if sb != nil {
		if w := l.sandbox.wait(sb); w > 0 {
			if w > wait {
				wait = w
			}
			if which == "" {
				which = limitSandbox
			}
		}
	}
	if which != "" {
		return false, wait, which
	}
	cb.tokens--
	if sb != nil {
		sb.tokens--
	}
	return true, 0, ""
}

// size is how many buckets there are of each kind (for tests).
func (l *limiter) size() (principals, sandboxes int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.client.byKey), len(l.sandbox.byKey)
}

// wait is how long until b has a whole token (0: it has one).
func (t *table) wait(b *bucket) time.Duration {
	if b.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - b.tokens) / t.rate * float64(time.Second))
}

// get returns key's bucket refilled to now, making it (full) if need be.
// It first drops buckets idle long enough to be full again, and, if the
// table is at its bound, the least recently used.
func (t *table) get(key string, now time.Time) *bucket {
	full := time.Duration(t.burst / t.rate * float64(time.Second))
	for e := t.lru.Back(); e != nil; e = t.lru.Back() {
		b := e.Value.(*bucket)
		if b.key == key || now.Sub(b.last) < full {
			break
		}
		t.lru.Remove(e)
		delete(t.byKey, b.key)
	}
	if e, ok := t.byKey[key]; ok {
		b := e.Value.(*bucket)
		if el := now.Sub(b.last).Seconds(); el > 0 {
			b.tokens = min(t.burst, b.tokens+el*t.rate)
		}
		b.last = now
		t.lru.MoveToFront(e)
		return b
	}
	for t.max > 0 && len(t.byKey) >= t.max {
		e := t.lru.Back()
		t.lru.Remove(e)
		delete(t.byKey, e.Value.(*bucket).key)
	}
	b := &bucket{key: key, tokens: t.burst, last: now}
	t.byKey[key] = t.lru.PushFront(b)
	return b
}
