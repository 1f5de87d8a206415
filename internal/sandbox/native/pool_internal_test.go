package native

import (
	"testing"
	"time"
)

// The pool holds off a refill for refillQuiet after a take while it still
// has a sandbox ready, and refills at once when it has none.
func TestPoolRefillDelay(t *testing.T) {
	p := &pool{}
	if d := p.refillDelay(1, time.Second); d != 0 {
		t.Fatalf("no take yet: delay %v, want 0", d)
	}
	p.lastTake.Store(int64(time.Second))
	for _, c := range []struct {
		ready int
		now   time.Duration
		want  time.Duration
	}{
		{1, time.Second, refillQuiet},
		{1, time.Second + 10*time.Millisecond, refillQuiet - 10*time.Millisecond},
		{3, time.Second + refillQuiet, 0},
		{1, time.Second + time.Minute, 0},
		{0, time.Second, 0}, // none ready: the next take would be cold
	} {
		if got := p.refillDelay(c.ready, c.now); got != c.want {
			t.Errorf("refillDelay(ready %d, %v after the take) = %v, want %v", c.ready, c.now-time.Second, got, c.want)
		}
	}
}
