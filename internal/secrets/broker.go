package secrets

import "github.com/ironclaw/ironclaw/internal/egress"

// ErrMisuse and ErrDenied are the broker's (egress.ErrSecretMisuse,
// egress.ErrSecretDenied): Swap's errors wrap them, and the broker
// answers 403 (misuse audited as secret.misuse).
var (
	ErrMisuse = egress.ErrSecretMisuse
	ErrDenied = egress.ErrSecretDenied
)

// Grants is what the egress broker asks about brokered credentials.
var _ egress.Secrets = (*Grants)(nil)
