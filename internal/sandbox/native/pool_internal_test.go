package native

import (
	"testing"
	"time"
)

// A refill (the pool's, the spare cgroups') holds off for refillQuiet
// after a take while one is still ready, and refills at once when none is.
func TestRefillDelay(t *testing.T) {
	p := &refiller{}
	if d := p.delay(1, time.Second); d != 0 {
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
		if got := p.delay(c.ready, c.now); got != c.want {
			t.Errorf("delay(ready %d, %v after the take) = %v, want %v", c.ready, c.now-time.Second, got, c.want)
		}
	}
}
