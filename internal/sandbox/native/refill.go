package native

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// stock keeps size things made ahead (the warm pool's sandboxes, spare
// inits, spare cgroups) from one goroutine, so that a create takes one
// instead of making it on its path. The refill is paced so that it does
// not compete with the request that just took from it (refillQuiet), and
// a failure to make one pauses it for stockRetry, logged once per kind.
type stock[T any] struct {
	name    string
	size    int
	produce func() (T, error) // errStockOff: stop refilling for good
	discard func(T)
	logf    func(string, ...any)

	ready  chan T
	refill refiller
	stop   chan struct{}
	wg     sync.WaitGroup
	once   sync.Once
}

// errStockOff is what a stock's make returns when nothing it could make
// would serve a create on this host: refilling stops for good.
var errStockOff = errors.New("off")

// stockRetry is how long making pauses after a failure (a full host, a
// cgroup folder removed under the daemon): the creates that find none
// make their own, and report the failure themselves.
const stockRetry = time.Second

func newStock[T any](name string, size int, produce func() (T, error), discard func(T), logf func(string, ...any)) *stock[T] {
	s := &stock[T]{name: name, size: size, produce: produce, discard: discard, logf: logf,
		ready: make(chan T, size), refill: refiller{wake: make(chan struct{}, 1), epoch: time.Now()}, stop: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.refill.run(s.size, s.idle, s.add, s.stop)
	}()
	return s
}

// add makes one and stocks it; false: closing, or off.
func (s *stock[T]) add() bool {
	v, err := s.produce()
	if errors.Is(err, errStockOff) {
		s.logf("%s: %v", s.name, err)
		return false
	}
	if err != nil {
		if msg := err.Error(); msg != s.refill.lastErr {
			s.logf("%s: %v (retrying every %v)", s.name, err, stockRetry)
			s.refill.lastErr = msg
		}
		select {
		case <-time.After(stockRetry):
			return true
		case <-s.stop:
			return false
		}
	}
	s.refill.lastErr = ""
	select {
	case s.ready <- v:
		return true
	case <-s.stop:
		s.discard(v)
		return false
	}
}

// idle reports how many are ready.
func (s *stock[T]) idle() int { return len(s.ready) }

// pop takes a ready one, if any.
func (s *stock[T]) pop() (T, bool) {
	select {
	case v := <-s.ready:
		s.refill.took()
		return v, true
	default:
		var zero T
		return zero, false
	}
}

// close stops refilling and discards the ready ones.
func (s *stock[T]) close() {
	s.once.Do(func() { close(s.stop) })
	s.wg.Wait()
	for {
		select {
		case v := <-s.ready:
			s.discard(v)
		default:
			return
		}
	}
}

// refillQuiet is how long after the latest take a stock waits before it
// makes one, while it still has one ready. A create keeps both of this
// machine's cores busy for a few milliseconds, and a take is nearly always
// followed at once by the taker's first exec (and over HTTP by its audit
// writes), which a refill running beside it slows down. With none ready
// it refills at once: the next take would go without otherwise.
const refillQuiet = 25 * time.Millisecond

// refiller paces a stock's refill.
type refiller struct {
	wake     chan struct{} // a take happened
	epoch    time.Time     // lastTake counts from here (monotonic)
	lastTake atomic.Int64  // nanoseconds after epoch of the latest take; 0: none
	lastErr  string        // the latest failure, logged once (only the refill touches it)
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
// ready ready, at now (after epoch): see refillQuiet.
func (f *refiller) delay(ready int, now time.Duration) time.Duration {
	last := f.lastTake.Load()
	if ready == 0 || last == 0 {
		return 0
	}
	return max(refillQuiet-(now-time.Duration(last)), 0)
}

// run keeps ready() at size by calling add, which makes one, hands it
// over and reports false once it should stop. run returns then or when
// stop closes.
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
