package netlimit

import (
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// Listener is a net.Listener that holds at most Config.MaxConns
// connections at once and takes one unit of its Budget for each; see the
// package doc for what happens to connections over either cap. Its
// connections' writes fail after Config.WriteTimeout without progress.
// It is safe for concurrent use (Accept from one goroutine at a time, as
// http.Server does).
type Listener struct {
	net.Listener
	max          int64
	budget       *Budget
	writeTimeout time.Duration

	open    atomic.Int64
	refused atomic.Uint64

	overCap, overBudget []byte // refusals
	scratch             []byte // drains a refused connection; used by Accept only
}

// NewListener wraps l with c's MaxConns, Budget and WriteTimeout (zero
// values take the defaults).
func NewListener(l net.Listener, c Config) *Listener {
	c = c.withDefaults()
	return &Listener{
		Listener:     l,
		max:          int64(c.MaxConns),
		budget:       c.Budget,
		writeTimeout: c.WriteTimeout,
		overCap: refusal(fmt.Sprintf("ironclaw: this server already holds the %d connections you may have open at once; close idle ones and retry",
			c.MaxConns)),
		overBudget: refusal("ironclaw: the daemon is at its limit of connections from all sandboxes; retry later"),
		scratch:    make([]byte, 4096),
	}
}

func refusal(msg string) []byte {
	msg += "\n"
	return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"+
		"Content-Length: %d\r\nConnection: close\r\nRetry-After: 1\r\n\r\n%s", len(msg), msg)
}

// Accept returns the next connection within the caps, refusing the ones
// over them.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			l.refuse(c, l.overCap)
			continue
		}
		if !l.budget.TryAcquire() {
			l.open.Add(-1)
			l.refuse(c, l.overBudget)
			continue
		}
		return &conn{Conn: c, l: l}, nil
	}
}

// Open is how many connections the listener holds now.
func (l *Listener) Open() int { return int(l.open.Load()) }

// Refused is how many connections it has refused.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// refuse answers c with msg and closes it. Whatever the client already sent
// is read first, so that the close is a FIN and the client can read the
// answer; a request arriving later meets a reset instead.
func (l *Listener) refuse(c net.Conn, msg []byte) {
	l.refused.Add(1)
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond)) // a fresh socket's buffer takes it at once
	_, _ = c.Write(msg)
	if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			_ = rc.Read(func(fd uintptr) bool {
				for range 16 { // non-blocking: at most 64 KiB, then give up
					if n, err := syscall.Read(int(fd), l.scratch); n <= 0 || err != nil {
						break
					}
				}
				return true
			})
		}
	}
	_ = c.Close()
}

// conn is an accepted connection; closing it frees its place.
type conn struct {
	net.Conn
	l      *Listener
	closed atomic.Bool
	armed  atomic.Int64 // unix nanos of the last write deadline Write set; 0: none since SetDeadline
}

// Write fails after the listener's WriteTimeout without progress (between
// 15/16 of it and all of it: the deadline is moved at most 16 times per
// timeout, as moving it costs more than a small write). It replaces any
// write deadline set on the connection before.
func (c *conn) Write(p []byte) (int, error) {
	if d := c.l.writeTimeout; d > 0 {
		now := time.Now()
		if n := now.UnixNano(); n-c.armed.Load() >= int64(d/16) {
			c.armed.Store(n)
			_ = c.Conn.SetWriteDeadline(now.Add(d))
		}
	}
	return c.Conn.Write(p)
}

func (c *conn) SetDeadline(t time.Time) error {
	c.armed.Store(0)
	return c.Conn.SetDeadline(t)
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	c.armed.Store(0)
	return c.Conn.SetWriteDeadline(t)
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.open.Add(-1)
		c.l.budget.Release()
	}
	return err
}

// WriteTo passes the underlying connection's WriteTo on (TCP's), so that a
// bufio.Reader over the connection copies in large chunks, as it would over
// the bare connection, instead of its own 4 KiB ones.
func (c *conn) WriteTo(w io.Writer) (int64, error) {
	if wt, ok := c.Conn.(io.WriterTo); ok {
		return wt.WriteTo(w)
	}
	return io.Copy(w, struct{ io.Reader }{c.Conn})
}

// CloseWrite half-closes the connection where the underlying one can (TCP).
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("netlimit: %T cannot half-close", c.Conn)
}
