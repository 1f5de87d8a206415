package api

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/netlimit"
)

// minUploadRate is the slowest an upload may arrive on average, beyond its
// first BodyTimeout of waiting.
const minUploadRate = 16 << 10 // bytes per second

// errBodyTimeout is a request body that did not arrive in time.
var errBodyTimeout = &apiError{http.StatusRequestTimeout, wire.CodeRequestTimeout, "the request body did not arrive in time"}

// bodyOf returns r's JSON body, bounded in size (MaxBodyBytes) and in time
// (waiting for it may take BodyTimeout in all), so that a client cannot
// hold a handler, a goroutine and a buffer with a body it never finishes.
// The connection's read deadline is cleared at the end of the body, so a
// response that streams for as long as its command runs is not cut.
func (s *Server) bodyOf(w http.ResponseWriter, r *http.Request) io.Reader {
	return s.limitBody(w, r, netlimit.BodyLimits{Timeout: s.cfg.BodyTimeout, Idle: s.cfg.BodyTimeout}, s.cfg.MaxBodyBytes)
}

// uploadOf returns an upload's body, bounded in size (MaxUploadBytes) and
// in time: it may stall for at most BodyTimeout, and must average
// minUploadRate beyond its first BodyTimeout of waiting.
func (s *Server) uploadOf(w http.ResponseWriter, r *http.Request) *limitedBody {
	return s.limitBody(w, r, netlimit.BodyLimits{Timeout: s.cfg.BodyTimeout, MinRate: minUploadRate, Idle: s.cfg.BodyTimeout}, s.cfg.MaxUploadBytes)
}

func (s *Server) limitBody(w http.ResponseWriter, r *http.Request, l netlimit.BodyLimits, maxBytes int64) *limitedBody {
	b := &limitedBody{}
	if g := netlimit.LimitBody(w, r, l); g != nil {
		b.guard = g
		b.r = http.MaxBytesReader(w, g, maxBytes)
	} else {
		b.r = http.NoBody
	}
	return b
}

// limitedBody turns the body's own failures (too slow, too large) into the
// API's errors, and remembers them: a handler whose consumer (a sandbox's
// file write) reports the failure in its own words answers with the body's.
type limitedBody struct {
	r     io.Reader
	guard *netlimit.Body
	// failed is the body's own failure, or nil. Atomic: a consumer that
	// gave up (its context ended) may return while its copier's Read is
	// still pending, and the handler asks err meanwhile.
	failed atomic.Pointer[error]
}

// err is the body's own failure, or nil. The guard is asked too: its
// failure cancels the request's context, which a consumer may report
// before its own read returns.
func (b *limitedBody) err() error {
	if f := b.failed.Load(); f != nil {
		return *f
	}
	if b.guard != nil && errors.Is(b.guard.Err(), netlimit.ErrSlowBody) {
		return errBodyTimeout
	}
	return nil
}

func (b *limitedBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		var tooBig *http.MaxBytesError
		switch {
		case errors.Is(err, netlimit.ErrSlowBody), b.guard != nil && errors.Is(b.guard.Err(), netlimit.ErrSlowBody):
			err = errBodyTimeout
			b.fail(err)
		case errors.As(err, &tooBig):
			b.fail(err)
		}
	}
	return n, err
}

func (b *limitedBody) fail(err error) { b.failed.Store(&err) }
