package session

import (
	"fmt"
	"net"
	"net/http"

	"github.com/ironclaw/ironclaw/internal/netlimit"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// serveInside serves h on a listener inside a sandbox. Everything that
// connects to it is the sandbox's code, and hostile: Options.Inside caps
// the connections this listener (this sandbox) holds, all sandboxes'
// listeners draw from the process's descriptor budget, and heads, bodies,
// idle connections and stalled writes time out (see package netlimit).
func (m *Manager) serveInside(l net.Listener, h http.Handler) *http.Server {
	return netlimit.Serve(l, h, m.opts.Inside)
}

// attachModel mints the sandbox's proxy token, spending the budgets of
// principal (the sandbox's creator), and serves the proxy on the sandbox's
// loopback with a handler that accepts that token only. The token reaches
// commands through their environment only; it is worthless outside this
// sandbox's proxy and revoked when the sandbox ends.
func (m *Manager) attachModel(sb sandbox.Sandbox, principal string) ([]string, *http.Server, error) {
	port := m.opts.Model.Port()
	l, ok := sb.Listener(port)
	if !ok {
		return nil, nil, fmt.Errorf("session: no listener for the model proxy port %d", port)
	}
	token, h, err := m.opts.Model.Attach(sb.ID(), principal)
	if err != nil {
		return nil, nil, fmt.Errorf("session: model proxy token: %w", err)
	}
	return modelEnv(port, token), m.serveInside(l, h), nil
}

// attachEgress serves the sandbox's egress broker on its loopback.
func (m *Manager) attachEgress(sb sandbox.Sandbox, allow []string) (*http.Server, EgressBroker, error) {
	port := m.opts.Egress.Port()
	l, ok := sb.Listener(port)
	if !ok {
		return nil, nil, fmt.Errorf("session: no listener for the egress port %d", port)
	}
	b, err := m.opts.Egress.Broker(sb.ID(), allow)
	if err != nil {
		return nil, nil, fmt.Errorf("session: egress broker: %w", err)
	}
	return m.serveInside(l, b), b, nil
}
