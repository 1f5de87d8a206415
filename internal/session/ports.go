package session

import (
	"context"
	"fmt"
	"net"
	"slices"

	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// MaxPorts bounds CreateRequest.Ports.
const MaxPorts = 16

// loopbackDialer is a running sandbox the daemon can connect into (the
// backends that can: native, runc, crun, Docker).
type loopbackDialer interface {
	DialLoopback(ctx context.Context, port uint16) (net.Conn, error)
}

// reservedPorts are the loopback ports the daemon serves inside every
// sandbox (model proxy, egress broker): never a sandbox's own.
func (m *Manager) reservedPorts() []uint16 {
	var r []uint16
	if m.opts.Model != nil {
		r = append(r, m.opts.Model.Port())
	}
	if m.opts.Egress != nil {
		r = append(r, m.opts.Egress.Port())
	}
	return r
}

func checkPorts(ports, reserved []uint16) error {
	if len(ports) > MaxPorts {
		return fmt.Errorf("%w: %d ports asked, at most %d", sandbox.ErrInvalidSpec, len(ports), MaxPorts)
	}
	for i, p := range ports {
		switch {
		case p < 1024:
			return fmt.Errorf("%w: port %d: the sandbox user may listen only on ports 1024-65535", sandbox.ErrInvalidSpec, p)
		case slices.Contains(reserved, p):
			return fmt.Errorf("%w: port %d is the daemon's own inside every sandbox", sandbox.ErrInvalidSpec, p)
		case slices.Contains(ports[:i], p):
			return fmt.Errorf("%w: port %d listed twice", sandbox.ErrInvalidSpec, p)
		}
	}
	return nil
}

// DialPort connects to 127.0.0.1:port inside the running sandbox id, a
// port its create listed. It counts as use (the idle timer restarts) but
// holds no exec slot: the caller bounds its connections. A paused sandbox
// is resumed first, as for any request: a frozen server would take the
// connection into its backlog and never answer.
func (m *Manager) DialPort(ctx context.Context, id string, port uint16) (net.Conn, error) {
	for range 3 {
		m.mu.Lock()
		e, err := m.liveLocked(id)
		paused := err == nil && e.pause.paused
		if err == nil && !paused {
			e.lastUsed = m.opts.Now()
		}
		m.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if paused {
			rctx, cancel := context.WithTimeout(ctx, transitionTimeout)
			err := m.resume(rctx, "daemon", id, e, "inbound connection")
			cancel()
			if err != nil {
				return nil, fmt.Errorf("session: resuming paused sandbox %s: %w", id, err)
			}
			continue
		}
		if !slices.Contains(e.ports, port) {
			return nil, fmt.Errorf("%w: port %d is not one of the ports sandbox %s was created with (%v)", sandbox.ErrInvalidRequest, port, id, e.ports)
		}
		d, ok := e.sb.(loopbackDialer)
		if !ok {
			return nil, fmt.Errorf("%w: this backend offers no inbound connections", sandbox.ErrUnsupported)
		}
		return d.DialLoopback(ctx, port)
	}
	return nil, fmt.Errorf("%w: sandbox %s was paused again while resuming", ErrBusy, id)
}

// Ports lists the ports a running sandbox was created with.
func (m *Manager) Ports(id string) ([]uint16, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, err := m.liveLocked(id)
	if err != nil {
		return nil, err
	}
	return slices.Clone(e.ports), nil
}
