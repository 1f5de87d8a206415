// Package wire holds the JSON bodies of IronClaw's HTTP API, as Go types:
// what the daemon (package api) writes and reads, and what the Go client
// (package client) sends and decodes. The API's description is
// api/openapi.yaml at the repository root; docs/http-api.md is its prose.
//
// Each exported struct here is the Go form of the schema of the same name
// in the document's components, and a test holds them together: field for
// field, the JSON names, whether a field is required (no omitempty or
// omitzero) or optional, and the types. The TypeScript SDK's wire types
// (sdk/typescript/src/wire.ts) are generated from the same document. To
// change a body, change the document first, then the type here, then
// regenerate the TypeScript (go generate ./internal/api/openapi).
//
// Request bodies whose decoding belongs to the approval kinds (POST
// /v1/tools, /v1/agents, /v1/sandboxes/{id}/limits, and each kind's data)
// are package kinds' types; the same test holds those to the document.
//
// The package depends only on the standard library and on package
// sandbox's JSON forms of durations and sizes, so that a client carries
// nothing of the daemon.
package wire

import (
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// Duration is a duration as the API writes it: a Go duration string such
// as "30s" ("0s" when none), never negative.
type Duration = sandbox.Duration

// Bytes is a size in a request: a JSON number of bytes or a string such
// as "256M". It is written as a number.
type Bytes = sandbox.Bytes

// Error codes: the code of every error answer ({"error": {"code", ...}}).
// The daemon maps error classes to them in one table (api/errors.go); the
// document's ErrorCode enum lists the same set.
const (
	CodeInvalidArgument     = "invalid_argument"     // 400: malformed or impossible; retrying unchanged fails again
	CodeUnauthorized        = "unauthorized"         // 401: no or unknown token
	CodeForbidden           = "forbidden"            // 403: a token of the wrong role
	CodeNotFound            = "not_found"            // 404: unknown sandbox, file, approval or route
	CodeMethodNotAllowed    = "method_not_allowed"   // 405
	CodeRequestTimeout      = "request_timeout"      // 408: the request body did not arrive in time
	CodeConflict            = "conflict"             // 409: the object's state does not allow it
	CodeTooLarge            = "too_large"            // 413
	CodeRateLimited         = "rate_limited"         // 429 with Retry-After: the token's or the sandbox's request rate
	CodeLimitExceeded       = "limit_exceeded"       // 429: a quota or capacity is used up
	CodeInternal            = "internal"             // 500: a bug; see the daemon's log
	CodeUnavailable         = "unavailable"          // 503: cannot now (shutting down, out of resources); a retry may work
	CodeInsufficientStorage = "insufficient_storage" // 507: the daemon's disk is full; nothing was changed
)

// ErrorCodes lists every error code, in the order of their statuses.
func ErrorCodes() []string {
	return []string{CodeInvalidArgument, CodeUnauthorized, CodeForbidden, CodeNotFound, CodeMethodNotAllowed,
		CodeRequestTimeout, CodeConflict, CodeTooLarge, CodeRateLimited, CodeLimitExceeded, CodeInternal,
		CodeUnavailable, CodeInsufficientStorage}
}

// ErrorResponse is the body of every error answer of the API (the model
// proxy's routes answer in the provider's shape instead).
type ErrorResponse struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what went wrong. Message is written for the caller and
// names nothing secret; Code is one of the Code constants.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Health is GET /healthz.
type Health struct {
	OK bool `json:"ok"`
}
