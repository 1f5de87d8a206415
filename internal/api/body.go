package api

import (
	"errors"
	"io"
	"net"
	"net/http"
	"time"
)

// minUploadRate is the slowest an upload may arrive on average: its whole
// deadline is its length at this rate (or the largest upload's, when the
// length is not sent), plus the stall timeout.
const minUploadRate = 64 << 10 // bytes per second

// errBodyTimeout is a request body that did not arrive in time.
var errBodyTimeout = &apiError{http.StatusRequestTimeout, "request_timeout", "the request body did not arrive in time"}

// bodyOf returns r's JSON body, bounded in size (MaxBodyBytes) and in time
// (it must arrive within BodyTimeout), so that a client cannot hold a
// handler, a goroutine and a buffer with a body it never finishes. The
// deadline is lifted once the body has been read, so a response that
// streams for as long as its command runs is not cut.
func (s *Server) bodyOf(w http.ResponseWriter, r *http.Request) io.Reader {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
	return &deadlineBody{r: http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), rc: rc}
}

// uploadOf returns an upload's body, bounded in size (MaxUploadBytes) and
// in time: it may stall for at most BodyTimeout, and must arrive whole at
// minUploadRate on average.
func (s *Server) uploadOf(w http.ResponseWriter, r *http.Request) *deadlineBody {
	rc := http.NewResponseController(w)
	size := r.ContentLength
	if size < 0 {
		size = s.cfg.MaxUploadBytes
	}
	whole := time.Now().Add(s.cfg.BodyTimeout + time.Duration(size/minUploadRate)*time.Second)
	b := &deadlineBody{r: http.MaxBytesReader(w, r.Body, s.cfg.MaxUploadBytes), rc: rc, stall: s.cfg.BodyTimeout, whole: whole}
	b.extend()
	return b
}

// deadlineBody reads a request body under a read deadline on the
// connection: a fixed one, or (with stall set) one that moves forward as
// bytes arrive, never past whole.
type deadlineBody struct {
	r     io.Reader
	rc    *http.ResponseController
	stall time.Duration
	whole time.Time
	done  bool
	// failed is the body's own failure (a timeout, too large), which the
	// handler reports instead of what its consumer made of it.
	failed error
}

func (b *deadlineBody) extend() {
	d := time.Now().Add(b.stall)
	if d.After(b.whole) {
		d = b.whole
	}
	_ = b.rc.SetReadDeadline(d)
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.r.Read(p)
	if n > 0 && b.stall > 0 {
		b.extend()
	}
	if err != nil {
		// Lift the deadline: the handler may go on streaming a response,
		// and the server's own read of the connection must not time out
		// under it.
		_ = b.rc.SetReadDeadline(time.Time{})
		var ne net.Error
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			err = errBodyTimeout
			b.failed = err
		case errors.As(err, &tooBig):
			b.failed = err
		case err == io.EOF:
			b.done = true
		}
	}
	return n, err
}
