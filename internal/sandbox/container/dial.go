package container

import (
	"context"
	"fmt"
	"net"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/netns"
)

// DialLoopback connects the daemon to 127.0.0.1:port inside the sandbox,
// through the container's network namespace. gVisor's loopback lives in
// its own network stack, which no host namespace reaches: runsc answers
// ErrUnsupported.
func (b *Sandbox) DialLoopback(ctx context.Context, port uint16) (net.Conn, error) {
	if b.rt.opts.Name == "runsc" {
		return nil, fmt.Errorf("%w: runsc's loopback is inside gVisor's own network stack; inbound ports need the native, runc, crun or docker backend", sandbox.ErrUnsupported)
	}
	alive := func() error { return sandbox.ClosedErr(b.id, b.done) }
	if err := alive(); err != nil {
		return nil, err
	}
	return netns.DialLoopback(ctx, b.InitPid(), port, alive)
}
