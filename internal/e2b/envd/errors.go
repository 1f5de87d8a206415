package envd

import (
	"context"
	"errors"

	"connectrpc.com/connect"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/client"
)

// rpcError turns a native API error into a Connect error: its code from
// the native error code, its message the native message.
func rpcError(err error) error {
	if err == nil {
		return nil
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		return connect.NewError(codeOf(ce.Code), errors.New(ce.Message))
	}
	var approval *client.ApprovalRequiredError
	if errors.As(err, &approval) {
		// The policy gates it: an operator approves the request, and the
		// native API (with "approval") runs it; envd's calls cannot carry one.
		return connect.NewError(connect.CodePermissionDenied, err)
	}
	switch {
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	var cerr *connect.Error
	if errors.As(err, &cerr) {
		return cerr
	}
	return connect.NewError(connect.CodeInternal, err)
}

func codeOf(native string) connect.Code {
	switch native {
	case wire.CodeNotFound:
		return connect.CodeNotFound
	case wire.CodeInvalidArgument:
		return connect.CodeInvalidArgument
	case wire.CodeConflict:
		return connect.CodeFailedPrecondition
	case wire.CodeForbidden:
		return connect.CodePermissionDenied
	case wire.CodeUnauthorized:
		return connect.CodeUnauthenticated
	case wire.CodeRateLimited, wire.CodeTooLarge, wire.CodeLimitExceeded, wire.CodeInsufficientStorage:
		return connect.CodeResourceExhausted
	case wire.CodeUnavailable:
		return connect.CodeUnavailable
	case wire.CodeRequestTimeout:
		return connect.CodeDeadlineExceeded
	}
	return connect.CodeInternal
}
