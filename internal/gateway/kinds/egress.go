package kinds

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ironclaw/ironclaw/internal/egress"
)

// Scopes of an approved egress.host request.
const (
	ScopeSandbox = "sandbox" // the host joins that sandbox's allowlist
	ScopeGlobal  = "global"  // the host joins every sandbox's allowlist, durably
)

// EgressHost is an egress.host request: a sandbox wants one host at one
// port. Filed by the egress broker for a held connection, or by an agent.
type EgressHost struct {
	Host string `json:"host"` // a DNS name or an IP address, no wildcard
	Port int    `json:"port"` // 1-65535
}

func (*EgressHost) Kind() string { return KindEgressHost }

func (p *EgressHost) check() error {
	if p.Port < 1 || p.Port > 65535 {
		return errors.New("port must be 1-65535")
	}
	if strings.HasPrefix(p.Host, "*") {
		return fmt.Errorf("host %q: one host, not a wildcard (ask for wildcards with sandbox.widen)", p.Host)
	}
	r, err := egress.ParseRule(p.rawRule())
	if err != nil {
		return fmt.Errorf("host: %v", err)
	}
	// Store the normalised host, so what is shown is what the rule admits.
	p.Host = r.Host
	return nil
}

func (p *EgressHost) rawRule() string {
	if strings.Contains(p.Host, ":") && !strings.HasPrefix(p.Host, "[") {
		return fmt.Sprintf("[%s]:%d", p.Host, p.Port)
	}
	return fmt.Sprintf("%s:%d", p.Host, p.Port)
}

// Rule is the egress rule an approval adds.
func (p *EgressHost) Rule() string { return egress.Rule{Host: p.Host, Port: p.Port}.String() }

func (p *EgressHost) Summary(t Target) string {
	return summary("reach", esc(p.Rule()), "from sandbox", esc(sandboxName(t.Session)))
}

func (p *EgressHost) Fields(t Target) []Field {
	scope := fmt.Sprintf("sandbox %s only (the default; approving with scope global adds it for every sandbox, remembered)", sandboxName(t.Session))
	switch t.Scope {
	case ScopeSandbox:
		scope = "sandbox " + sandboxName(t.Session) + " only"
	case ScopeGlobal:
		scope = "global: every sandbox, remembered across restarts"
	}
	return []Field{{Name: "host:port", Value: p.Rule()}, {Name: "scope", Value: scope}, {Name: "sandbox", Value: sandboxName(t.Session)}}
}

func (p *EgressHost) Apply(ctx context.Context, env Env, t Target) (map[string]any, error) {
	rule := p.Rule()
	if t.Scope == ScopeGlobal {
		if env.Egress == nil {
			return nil, fmt.Errorf("%w: this daemon runs no egress broker", ErrUnavailable)
		}
		if err := env.Egress.AllowGlobal(ctx, rule, t.ID); err != nil {
			return nil, err
		}
		return map[string]any{"rule": rule, "scope": ScopeGlobal}, nil
	}
	if env.Sandboxes == nil {
		return nil, fmt.Errorf("%w: no sandboxes", ErrUnavailable)
	}
	if err := env.Sandboxes.AllowEgress(ctx, t.Session, []string{rule}); err != nil {
		return nil, err
	}
	return map[string]any{"rule": rule, "scope": ScopeSandbox, "sandbox": t.Session}, nil
}
