// Package inproc is an http.RoundTripper that serves each request with an
// http.Handler in this process: no socket, no port, the same handler the
// daemon's listener serves. The E2B-compatible API uses it to call the
// native API as one of its clients, so every call it makes passes the
// same authentication, rate limits, body limits, audit records and
// approval gates as a call from outside.
package inproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// Transport serves requests with Handler. The response's headers are
// returned once the handler writes them (or returns); its body streams
// what the handler writes, with back-pressure: a handler's Write waits
// until the caller reads. Closing the response body cancels the
// request's context, which ends a handler that follows a stream.
type Transport struct {
	Handler http.Handler
	// RemoteAddr is the address handlers see; empty means "inproc".
	RemoteAddr string
}

// ErrAborted is the body error of a response whose handler aborted it
// (panicked with http.ErrAbortHandler, or with anything else).
var ErrAborted = errors.New("inproc: the handler aborted the response")

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.Handler == nil {
		return nil, errors.New("inproc: no handler")
	}
	ctx, cancel := context.WithCancel(req.Context())
	in := req.Clone(ctx)
	if in.Body == nil {
		in.Body = http.NoBody
	}
	if in.ContentLength == 0 && in.Body != http.NoBody {
		// A client's 0 with a body means "unknown" (a reader whose length
		// http.NewRequest could not tell); a server's means empty, and
		// handlers would read nothing.
		in.ContentLength = -1
	}
	in.RequestURI = req.URL.RequestURI()
	in.RemoteAddr = t.RemoteAddr
	if in.RemoteAddr == "" {
		in.RemoteAddr = "inproc"
	}
	if in.Host == "" {
		in.Host = req.URL.Host
	}
	pr, pw := io.Pipe()
	w := &writer{header: http.Header{}, body: pw, ready: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			if v := recover(); v != nil {
				if v != http.ErrAbortHandler {
					err := fmt.Errorf("%w: %v", ErrAborted, v)
					w.abort(err)
					return
				}
				w.abort(ErrAborted)
				return
			}
			w.finish()
		}()
		t.Handler.ServeHTTP(w, in)
	}()
	select {
	case <-w.ready:
	case <-ctx.Done():
		// The caller gave up before the headers: stop the handler.
		cancel()
		_ = pr.CloseWithError(ctx.Err())
		<-done
		return nil, ctx.Err()
	}
	w.mu.Lock()
	status, header := w.status, w.sent
	w.mu.Unlock()
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        header,
		Body:          &body{PipeReader: pr, cancel: cancel, done: done},
		ContentLength: -1,
		Request:       req,
	}, nil
}

// writer is the handler's http.ResponseWriter.
type writer struct {
	header http.Header
	body   *io.PipeWriter
	ready  chan struct{}

	mu     sync.Mutex
	status int
	sent   http.Header // header as of WriteHeader
}

func (w *writer) Header() http.Header { return w.header }

func (w *writer) WriteHeader(code int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.status != 0 || code < 200 {
		return // informational answers are not passed on
	}
	w.status = code
	w.sent = w.header.Clone()
	close(w.ready)
}

func (w *writer) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(p)
}

// Flush is a no-op: every Write already reaches the reader.
func (w *writer) Flush() {}

func (w *writer) finish() {
	w.WriteHeader(http.StatusOK)
	_ = w.body.Close()
}

func (w *writer) abort(err error) {
	w.mu.Lock()
	if w.status == 0 {
		// No headers yet: answer 500 with an empty body that fails.
		w.status = http.StatusInternalServerError
		w.sent = http.Header{}
		close(w.ready)
	}
	w.mu.Unlock()
	_ = w.body.CloseWithError(err)
}

// body is the response body; Close cancels the handler's request and
// waits for the handler to return, so no goroutine outlives the call.
type body struct {
	*io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

func (b *body) Close() error {
	b.once.Do(func() {
		b.cancel()
		_ = b.PipeReader.CloseWithError(context.Canceled)
		<-b.done
	})
	return nil
}
