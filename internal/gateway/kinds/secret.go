package kinds

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ironclaw/ironclaw/internal/egress"
	"github.com/ironclaw/ironclaw/internal/secrets"
)

// SecretUse is a secret.use request: a sandbox asked at its create for a
// secret whose grant is "ask" (issue 15). Filed by the daemon. Approving
// it lets the egress broker put the secret's value into the sandbox's
// requests to the hosts shown; the sandbox itself only ever holds a
// placeholder.
type SecretUse struct {
	Secret string   `json:"secret"`
	Hosts  []string `json:"hosts"` // the secret's hosts when it was filed
}

// SecretGrants carries out approved secret.use requests (secrets.Grants).
type SecretGrants interface {
	Approve(ctx context.Context, sandbox, secret, approval string) error
}

func (*SecretUse) Kind() string { return KindSecretUse }

func (p *SecretUse) check() error {
	if err := secrets.CheckName(p.Secret); err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), secrets.ErrInvalid.Error()+": "))
	}
	if len(p.Hosts) == 0 || len(p.Hosts) > secrets.MaxHosts {
		return fmt.Errorf("hosts: 1 to %d", secrets.MaxHosts)
	}
	for i, h := range p.Hosts {
		r, err := egress.ParseRule(h)
		if err != nil {
			return fmt.Errorf("hosts %q: %v", h, err)
		}
		p.Hosts[i] = r.String()
	}
	return nil
}

func (p *SecretUse) Summary(t Target) string {
	return summary("let sandbox", esc(sandboxName(t.Session)), "use the secret", esc(p.Secret), "at", esc(strings.Join(p.Hosts, ", ")))
}

func (p *SecretUse) Fields(t Target) []Field {
	out := []Field{{Name: "secret", Value: p.Secret}}
	for _, h := range p.Hosts {
		out = append(out, Field{Name: "host", Value: h})
	}
	return append(out, Field{Name: "sandbox", Value: sandboxName(t.Session)},
		Field{Name: "what approving does", Value: "the egress broker puts the secret's value into this sandbox's requests to the hosts above; the sandbox sees only a placeholder"})
}

func (p *SecretUse) Apply(ctx context.Context, env Env, t Target) (map[string]any, error) {
	if env.Secrets == nil {
		return nil, fmt.Errorf("%w: this daemon brokers no secrets", ErrUnavailable)
	}
	if err := env.Secrets.Approve(ctx, t.Session, p.Secret, t.ID); err != nil {
		return nil, err
	}
	return map[string]any{"secret": p.Secret, "sandbox": t.Session, "granted": true}, nil
}
