package daemon

import (
	"fmt"
	"net/http"
	"net/netip"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/egress"
)

// DefaultEgressPort is where the egress broker answers inside every sandbox.
const DefaultEgressPort = 4001

// EgressConfig configures the egress broker every sandbox gets.
type EgressConfig struct {
	// Port is the broker's port inside sandboxes; 0 means
	// DefaultEgressPort, negative disables the broker.
	Port int
	// Allow is the allowlist every sandbox starts with (rules such as
	// "api.github.com" or "*.pypi.org:443"); requests add to it per sandbox.
	Allow []string
	// AllowPrivate lists CIDRs reachable although private or loopback
	// (tests use 127.0.0.0/8 for a stand-in server). Empty is right for
	// production: an allowlisted name resolving to a private address is
	// refused (DNS rebinding).
	AllowPrivate []string
}

// egressAccess builds one broker per sandbox. Hosts off the allowlist are
// refused until the approval gateway exists to ask a human.
type egressAccess struct {
	port    uint16
	allow   []string
	private []netip.Prefix
	log     *audit.Log
	logf    func(string, ...any)
}

func newEgressAccess(ec EgressConfig, log *audit.Log, logf func(string, ...any)) (*egressAccess, error) {
	port := ec.Port
	if port == 0 {
		port = DefaultEgressPort
	}
	e := &egressAccess{port: uint16(port), log: log, logf: logf}
	if err := e.Check(ec.Allow); err != nil {
		return nil, fmt.Errorf("--egress-allow: %w", err)
	}
	e.allow = ec.Allow
	for _, c := range ec.AllowPrivate {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("--egress-allow-private %q: %w", c, err)
		}
		e.private = append(e.private, p.Masked())
	}
	return e, nil
}

func (e *egressAccess) Port() uint16 { return e.port }

func (e *egressAccess) Check(allow []string) error {
	for _, r := range allow {
		if _, err := egress.ParseRule(r); err != nil {
			return err
		}
	}
	return nil
}

func (e *egressAccess) Broker(session string, allow []string) (http.Handler, func() error, error) {
	list, err := egress.NewAllowlist(append(append([]string(nil), e.allow...), allow...)...)
	if err != nil {
		return nil, nil, err
	}
	b, err := egress.New(egress.Config{Session: session, Allow: list, AllowPrivate: e.private, Log: e.log, Logf: e.logf})
	if err != nil {
		return nil, nil, err
	}
	return b, b.Close, nil
}
