package policy

import "github.com/ironclaw/ironclaw/internal/defaults"

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
	if err := setting("approvals.max_pending_per_principal", &q.MaxPendingPerPrincipal, DefaultMaxPendingPerPrincipal, 1, 100000); err != nil {
		return err
	}
	return setting("approvals.max_pending_total", &q.MaxPendingTotal, DefaultMaxPendingTotal, 1, 100000)
}
