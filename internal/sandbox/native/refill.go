package native

import (
	"sync/atomic"
	"time"
)

// refiller keeps a stock (the warm pool's sandboxes, the spare cgroups)
// at its size from one goroutine, paced so that a refill does not compete
// with the request that just took from it: see refillQuiet.
type refiller struct {
	wake     chan struct{} // a take happened
	epoch    time.Time     // lastTake counts from here (monotonic)
	lastTake atomic.Int64  // nanoseconds after epoch of the latest take; 0: none
}

func newRefiller() *refiller {
	return &refiller{wake: make(chan struct{}, 1), epoch: time.Now()}
}

// took notes a take and wakes the refill.
func (f *refiller) took() {
	f.lastTake.Store(max(int64(time.Since(f.epoch)), 1))
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// delay is how long the refill waits before making the next one, with
// ready ready, at now (after epoch): refillQuiet after the latest take
// while one is still ready; none when none is (the next take would go
// without).
func (f *refiller) delay(ready int, now time.Duration) time.Duration {
	last := f.lastTake.Load()
	if ready == 0 || last == 0 {
		return 0
	}
	return max(refillQuiet-(now-time.Duration(last)), 0)
}

// run keeps ready() at size by calling add, which makes one, hands it
// over and reports false once stop has closed (it waits out its own
// failures). run returns when stop closes.
func (f *refiller) run(size int, ready func() int, add func() bool, stop <-chan struct{}) {
	for {
		for ready() < size {
			if wait := f.delay(ready(), time.Since(f.epoch)); wait > 0 {
				select {
				case <-time.After(wait):
				case <-f.wake: // another take: the quiet moves on, or none is left
				case <-stop:
					return
				}
				continue
			}
			if !add() {
				return
			}
		}
		select {
		case <-f.wake:
		case <-stop:
			return
		}
	}
}
