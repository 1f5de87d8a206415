package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Roles of a token.
const (
	roleAgent    = "agent"
	roleOperator = "operator"
)

// principal is who a request comes from: a role and a name. The name is
// what the audit log records as the actor, what owns the sandboxes and
// approvals the request makes, and what quotas and rates are counted
// against: "agent" (the data dir's agent.token), "agent:NAME" (a named
// agent token), or an operator's name ("operator", "alice").
type principal struct {
	Role, Name string
}

// operator reports whether the principal is an operator, who sees and may
// act on everything.
func (p principal) operator() bool { return p.Role == roleOperator }

// listScope is the principal whose sandboxes a listing shows: "" (all)
// for an operator, else the caller's own.
func (p principal) listScope() string {
	if p.operator() {
		return ""
	}
	return p.Name
}

// AgentPrincipal is the principal name of the named agent token NAME.
func AgentPrincipal(name string) string { return roleAgent + ":" + name }

type principalHash struct {
	who  principal
	hash [sha256.Size]byte
}

// hashTokens checks the configured tokens (each at least 16 characters,
// none used twice, valid names) and hashes them.
func hashTokens(cfg Config) ([]principalHash, error) {
	if cfg.AgentToken == cfg.OperatorToken {
		return nil, errors.New("api: the agent and operator tokens must differ")
	}
	out := []principalHash{
		{principal{roleAgent, roleAgent}, sha256.Sum256([]byte(cfg.AgentToken))},
		{principal{roleOperator, roleOperator}, sha256.Sum256([]byte(cfg.OperatorToken))},
	}
	seen := map[string]bool{cfg.AgentToken: true, cfg.OperatorToken: true}
	names := map[string]bool{}
	add := func(role, name, token string) error {
		switch {
		case !ValidOperatorName(name):
			return fmt.Errorf("api: %s name %q: 1-64 letters, digits, '.', '_', '-', '@'", role, name)
		case len(token) < 16:
			return fmt.Errorf("api: %s %s: token shorter than 16 characters", role, name)
		case seen[token]:
			return fmt.Errorf("api: %s %s: token used twice", role, name)
		}
		who := principal{role, name}
		if role == roleAgent {
			who.Name = AgentPrincipal(name)
		}
		if names[who.Name] {
			return fmt.Errorf("api: %s %s named twice", role, name)
		}
		seen[token], names[who.Name] = true, true
		out = append(out, principalHash{who, sha256.Sum256([]byte(token))})
		return nil
	}
	for _, o := range cfg.Operators {
		if err := add(roleOperator, o.Name, o.Token); err != nil {
			return nil, err
		}
	}
	for _, a := range cfg.Agents {
		if err := add(roleAgent, a.Name, a.Token); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// principal returns who the request's bearer token belongs to. Every
// token is compared, each in constant time over fixed-size hashes, so
// neither which one matched nor the tokens' lengths show in the timing.
func (s *Server) principal(r *http.Request) (principal, bool) {
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return principal{}, false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(h[len(prefix):])))
	var who principal
	found := false
	for _, t := range s.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.hash[:]) == 1 {
			who, found = t.who, true
		}
	}
	return who, found
}

type principalKey struct{}

// identity is the name behind the request's token. It is what approvals
// record as their decider.
func identity(r *http.Request) string {
	p, _ := r.Context().Value(principalKey{}).(principal)
	return p.Name
}

// ValidOperatorName reports whether n may name an operator or an agent:
// 1-64 letters, digits, '.', '_', '-' or '@'.
func ValidOperatorName(n string) bool {
	if n == "" || len(n) > 64 {
		return false
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-@", c)) {
			return false
		}
	}
	return true
}
