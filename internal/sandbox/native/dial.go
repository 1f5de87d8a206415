package native

import (
	"context"
	"fmt"
	"net"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/netns"
)

// DialLoopback connects the daemon to 127.0.0.1:port inside the sandbox
// (a server its code listens on): the socket is made in the sandbox's
// network namespace, so nothing of the host's network is involved.
func (b *Sandbox) DialLoopback(ctx context.Context, port uint16) (net.Conn, error) {
	select {
	case <-b.done:
		return nil, fmt.Errorf("%w: sandbox %s has ended", sandbox.ErrClosed, b.id)
	default:
	}
	return netns.DialLoopback(ctx, b.proc.Pid, port)
}
