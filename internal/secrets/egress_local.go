package secrets

// TEMPORARY until sec-broker is merged: package egress declares these (the
// consumer owns the interface); at the merge this file goes and the
// aliases below point at egress.ErrSecretMisuse and egress.ErrSecretDenied.

import (
	"context"
	"errors"
	"net/http"
)

var (
	errSecretMisuse = errors.New("secret misuse")
	errSecretDenied = errors.New("secret denied")
)

// egressSecrets is egress.Secrets, as the contract gives it.
type egressSecrets interface {
	Intercept(sandbox, host string, port int) bool
	Swap(ctx context.Context, sandbox, host string, port int, h http.Header) (swapped []string, err error)
	Contains(sandbox string, b []byte) bool
}

var _ egressSecrets = (*Grants)(nil)

// ErrMisuse and ErrDenied are the broker's errors (egress.ErrSecretMisuse,
// egress.ErrSecretDenied): Swap's errors wrap them.
var (
	ErrMisuse = errSecretMisuse
	ErrDenied = errSecretDenied
)
