package policy

import (
	"fmt"

	"github.com/ironclaw/ironclaw/internal/defaults"
)

// Quotas are the approvals section's caps beyond max_pending (per
// sandbox): how many requests may wait for a decision per principal (an
// agent token, across all its sandboxes and kinds) and in total, so that
// one agent cannot bury the others' requests.
type Quotas struct {
	MaxPendingPerPrincipal int `yaml:"max_pending_per_principal"`
	MaxPendingTotal        int `yaml:"max_pending_total"`
}

// Defaults of Quotas.
const (
	DefaultMaxPendingPerPrincipal = defaults.ApprovalMaxPendingPerPrincipal
	DefaultMaxPendingTotal        = defaults.ApprovalMaxPendingTotal
)

func (q *Quotas) validate() error {
	for _, c := range []struct {
		name string
		v    *int
		def  int
	}{
		{"approvals.max_pending_per_principal", &q.MaxPendingPerPrincipal, DefaultMaxPendingPerPrincipal},
		{"approvals.max_pending_total", &q.MaxPendingTotal, DefaultMaxPendingTotal},
	} {
		switch {
		case *c.v == 0:
			*c.v = c.def
		case *c.v < 0 || *c.v > 100000:
			return fmt.Errorf("%w: %s %d must be between 1 and 100000", ErrInvalid, c.name, *c.v)
		}
	}
	return nil
}
