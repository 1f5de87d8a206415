package native

import (
	"context"
	"net"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/netns"
)

// DialLoopback connects the daemon to 127.0.0.1:port inside the sandbox
// (a server its code listens on): the socket is made in the sandbox's
// network namespace, so nothing of the host's network is involved.
func (b *Sandbox) DialLoopback(ctx context.Context, port uint16) (net.Conn, error) {
	alive := func() error { return sandbox.ClosedErr(b.id, b.done) }
	if err := alive(); err != nil {
		return nil, err
	}
	return netns.DialLoopback(ctx, b.proc.pid, port, alive)
}
