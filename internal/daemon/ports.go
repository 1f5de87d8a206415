package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/ironclaw/ironclaw/internal/api"
	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/netlimit"
	"github.com/ironclaw/ironclaw/internal/policy"
	"github.com/ironclaw/ironclaw/internal/session"
)

// PortsSecretFile signs port URLs (0600, made on first use), so that URLs
// issued before a restart work until they expire.
const PortsSecretFile = "ports.secret"

// inboundPorts is the ports listener, bound before the API is built so
// that the URLs it issues name its real address.
type inboundPorts struct {
	ln  net.Listener
	cfg *api.Ports
}

func (p *inboundPorts) config() *api.Ports {
	if p == nil {
		return nil
	}
	return p.cfg
}

// portsConfig binds the ports listener when the policy turns inbound
// ports on; nil otherwise.
func portsConfig(cfg Config, dir string, pol *policy.Policy, mgr *session.Manager) (*inboundPorts, error) {
	if !pol.Ports.Inbound {
		return nil, nil
	}
	secret, err := ensureToken(filepath.Join(dir, PortsSecretFile))
	if err != nil {
		return nil, fmt.Errorf("ports secret: %w", err)
	}
	addr := cfg.PortsListen
	if addr == "" {
		addr = defaults.PortsListen
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ports: listen on %s: %w", addr, err)
	}
	return &inboundPorts{ln: ln, cfg: &api.Ports{
		Secret:  []byte(secret),
		BaseURL: "http://" + ln.Addr().String(),
		MaxTTL:  time.Duration(pol.Ports.URLTTL),
		Dial:    mgr.DialPort,
	}}, nil
}

// servePorts serves port URLs on their listener until Close.
func servePorts(p *inboundPorts, h http.Handler, bodyTimeout time.Duration, logf func(string, ...any)) (*http.Server, error) {
	if h == nil {
		return nil, errors.New("ports: no handler")
	}
	hs := &http.Server{
		// A request body that stalls or trickles is cut as on the API's
		// listener, so a slow client cannot hold one of a sandbox's
		// inbound slots forever; an upgraded connection (WebSocket) is the
		// two ends' own and lives as long as both do.
		Handler:           netlimit.GuardBodies(h, apiBodyLimits(bodyTimeout)),
		ReadHeaderTimeout: defaults.APIHeaderTimeout,
		IdleTimeout:       defaults.APIIdleTimeout,
		MaxHeaderBytes:    defaults.APIMaxHeaderBytes,
	}
	go func() {
		if err := hs.Serve(p.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logf("ports: %v", err)
		}
	}()
	logf("inbound ports: port URLs served on %s (policy ports.inbound)", p.cfg.BaseURL)
	return hs, nil
}
