package netlimit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/errdefs"
)

// Defaults for Config's zero values: limits a real client never meets
// (their values live in package defaults).
const (
	DefaultMaxConns       = defaults.InsideMaxConns
	DefaultHeaderTimeout  = defaults.InsideHeaderTimeout
	DefaultIdleTimeout    = defaults.InsideIdleTimeout
	DefaultWriteTimeout   = defaults.InsideWriteTimeout
	DefaultMaxHeaderBytes = defaults.InsideMaxHeaderBytes
)

// DefaultBody is the zero BodyLimits' meaning: a body may wait a minute for
// its client in all, one second more for every 16 KiB it brings, and a
// minute for any one read.
var DefaultBody = BodyLimits{Timeout: defaults.InsideBodyTimeout, MinRate: defaults.InsideBodyMinRate, Idle: defaults.InsideBodyIdle}

// Config bounds one HTTP server whose clients are hostile. The zero value
// takes every default; for the durations, negative means none.
type Config struct {
	// MaxConns caps the connections one listener holds at once (for an
	// in-sandbox server, the sandbox's); 0 means DefaultMaxConns.
	MaxConns int
	// Budget is shared by listeners, one unit per connection; nil means
	// Process().
	Budget *Budget
	// HeaderTimeout bounds sending a request's head; 0 means
	// DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle that long between
	// requests; 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// WriteTimeout fails a write to the client that makes no progress for
	// that long; 0 means DefaultWriteTimeout. It does not bound a whole
	// response.
	WriteTimeout time.Duration
	// Body bounds how slowly request bodies may arrive; the zero value
	// means DefaultBody.
	Body BodyLimits
	// MaxHeaderBytes bounds a request's head; 0 means
	// DefaultMaxHeaderBytes.
	MaxHeaderBytes int
}

func (c Config) withDefaults() Config {
	if c.MaxConns <= 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.Budget == nil {
		c.Budget = Process()
	}
	c.HeaderTimeout = orDefault(c.HeaderTimeout, DefaultHeaderTimeout)
	c.IdleTimeout = orDefault(c.IdleTimeout, DefaultIdleTimeout)
	c.WriteTimeout = orDefault(c.WriteTimeout, DefaultWriteTimeout)
	if c.Body == (BodyLimits{}) {
		c.Body = DefaultBody
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	return c
}

// orDefault maps 0 to def and a negative duration to 0 (none).
func orDefault(d, def time.Duration) time.Duration {
	switch {
	case d == 0:
		return def
	case d < 0:
		return 0
	}
	return d
}

// NewServer returns a server for h with c's timeouts and body limits. Serve
// it on a NewListener for the connection caps and WriteTimeout. It sets
// no ReadTimeout or WriteTimeout: those would cut long uploads and streamed
// responses.
func NewServer(h http.Handler, c Config) *http.Server {
	c = c.withDefaults()
	return &http.Server{
		Handler:           GuardBodies(h, c.Body),
		ReadHeaderTimeout: c.HeaderTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
	}
}

// Serve serves h on l within c's bounds, in a goroutine, and returns the
// server; Close or Shutdown it to stop (closing l).
func Serve(l net.Listener, h http.Handler, c Config) *http.Server {
	srv := NewServer(h, c)
	nl := NewListener(l, c)
	go func() { _ = srv.Serve(nl) }()
	return srv
}

// BodyLimits bound how slowly a request body may arrive. Only the time
// spent waiting for the client counts: time the handler spends between
// reads (forwarding to a slow upstream, waiting for an approval) does not.
// A read that breaks the limits fails with ErrSlowBody.
type BodyLimits struct {
	// Timeout is how long reading the body may wait for the client in
	// all. It must be positive in a non-zero BodyLimits.
	Timeout time.Duration
	// MinRate, if positive, extends Timeout by one second for every
	// MinRate bytes received, so a large body sent at least that fast is
	// never cut.
	MinRate int64
	// Idle, if positive, is how long one read may wait for the client's
	// next bytes.
	Idle time.Duration
}

// ErrSlowBody is the error of a body read that broke its BodyLimits.
var ErrSlowBody = errdefs.New(errdefs.ErrUnavailable, "the request body arrived too slowly")

// GuardBodies applies l (the zero value: DefaultBody) to the body of every
// request h serves. If h returns without reading a body to its end, the
// server's discarding of the rest (up to 256 KiB, to reuse the
// connection) may wait l.Idle (or l.Timeout) for it. Handlers that hijack
// a request with a body must clear the connection's deadlines themselves.
func GuardBodies(h http.Handler, l BodyLimits) http.Handler {
	if l == (BodyLimits{}) {
		l = DefaultBody
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := LimitBody(w, r, l)
		h.ServeHTTP(w, r)
		if b != nil {
			b.finish()
		}
	})
}

// LimitBody applies l to r's body, replacing the limits GuardBodies set
// (the time already waited still counts), and returns the guarded body, or
// nil for a request without a body. Call it before anything else wraps
// r.Body. The deadlines are set through http.ResponseController on w; a
// handler not served under GuardBodies (which detaches the body from w
// when the handler returns) must not let the body be read after it
// returns.
func LimitBody(w http.ResponseWriter, r *http.Request, l BodyLimits) *Body {
	if b, ok := r.Body.(*Body); ok {
		b.lim = l
		return b
	}
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	b := &Body{ReadCloser: r.Body, rc: http.NewResponseController(w), lim: l}
	r.Body = b
	return b
}

// Body is a request body under BodyLimits. Its Read must not be called
// from more than one goroutine at a time (as for any request body).
type Body struct {
	io.ReadCloser
	rc     *http.ResponseController
	lim    BodyLimits
	n      int64         // bytes received
	waited time.Duration // time spent in reads
	// ended is set at EOF or an error; atomic because a Transport
	// forwarding the body may still read it when the handler returns.
	ended atomic.Bool
	slow  atomic.Pointer[error] // the ErrSlowBody error, once it happened
	// deadline is the read deadline a Read in progress set (Unix nanos; 0:
	// none), so that Err can tell a body that broke its limits while that
	// Read has not yet returned (see Err).
	deadline atomic.Int64
	// mu orders the deadlines a Read sets against the handler's return:
	// once detached (the handler returned) the ResponseWriter is dead (an
	// HTTP/2 one panics when used), and a Read still forwarding the body
	// leaves the connection's deadline as finish set it.
	mu       sync.Mutex
	detached bool
}

// setReadDeadline sets the connection's read deadline unless the handler
// has returned.
func (b *Body) setReadDeadline(t time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.detached {
		_ = b.rc.SetReadDeadline(t)
	}
}

// Err is the ErrSlowBody error a read returned, or nil. A handler may meet
// the failure only indirectly: the failed read on the connection also
// cancels the request's context, and a Transport forwarding the body
// reports that instead.
func (b *Body) Err() error {
	if p := b.slow.Load(); p != nil {
		return *p
	}
	// The connection's failed read cancels the request's context before
	// that Read returns here: a handler woken by the cancellation may ask
	// before the Read has said why. A deadline that has passed with the
	// body unfinished is the answer.
	if d := b.deadline.Load(); d != 0 && !b.ended.Load() && time.Now().UnixNano() >= d {
		return fmt.Errorf("%w (its read deadline passed)", ErrSlowBody)
	}
	return nil
}

func (b *Body) slowErr() error {
	return fmt.Errorf("%w (waited %v in all for %d bytes)", ErrSlowBody, b.waited.Round(time.Millisecond), b.n)
}

func (b *Body) tooSlow(err error) error {
	b.ended.Store(true)
	b.slow.Store(&err)
	return err
}

// Read reads with a read deadline on the connection that enforces the
// limits; at the end of the body the deadline is cleared, so a response
// streamed afterwards is never cut by it.
func (b *Body) Read(p []byte) (int, error) {
	if b.ended.Load() || len(p) == 0 {
		return b.ReadCloser.Read(p)
	}
	left := b.lim.Timeout - b.waited
	if r := b.lim.MinRate; r > 0 {
		left += time.Duration(b.n/r)*time.Second + time.Duration(b.n%r)*time.Second/time.Duration(r)
	}
	if b.lim.Idle > 0 && left > b.lim.Idle {
		left = b.lim.Idle
	}
	start := time.Now()
	if left <= 0 {
		return 0, b.tooSlow(b.slowErr())
	}
	b.deadline.Store(start.Add(left).UnixNano())
	b.setReadDeadline(start.Add(left))
	n, err := b.ReadCloser.Read(p)
	defer b.deadline.Store(0) // once slow says why, if it was that
	b.waited += time.Since(start)
	b.n += int64(n)
	switch {
	case err == io.EOF:
		b.ended.Store(true)
		b.setReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = b.tooSlow(b.slowErr())
	case err != nil:
		b.ended.Store(true)
	}
	return n, err
}

// finish runs when the handler returns: it bounds the server's discarding
// of an unread rest of the body, and detaches the body from the
// ResponseWriter, which a Transport still forwarding the body (its
// request-writing goroutine outlives the handler) must no longer touch.
func (b *Body) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.detached = true
	if b.ended.Load() {
		return
	}
	d := b.lim.Idle
	if d <= 0 {
		d = b.lim.Timeout
	}
	_ = b.rc.SetReadDeadline(time.Now().Add(d))
}
