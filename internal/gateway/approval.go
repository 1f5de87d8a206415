package gateway

import (
	"github.com/ironclaw/ironclaw/internal/errdefs"

	"encoding/json"
	"time"
)

// Kinds of approval requests.
const (
	KindEgressHost   = "egress.host"   // a sandbox reached a host off its allowlist
	KindSandboxWiden = "sandbox.widen" // more egress hosts or larger limits for a sandbox
	KindToolRegister = "tool.register" // a new tool definition
	KindAgentSpawn   = "agent.spawn"   // a new sandbox running an agent's command
	KindExecCommand  = "exec.command"  // a command the policy marks as needing approval
	KindToolCall     = "tool.call"     // an SDK or adapter gating a tool it flags; no daemon action
)

// Kinds lists every kind the gateway accepts.
func Kinds() []string {
	return []string{KindEgressHost, KindSandboxWiden, KindToolRegister, KindAgentSpawn, KindExecCommand, KindToolCall}
}

// needsSession tells which kinds act on one sandbox and so must name it.
func needsSession(kind string) bool {
	switch kind {
	case KindEgressHost, KindSandboxWiden, KindExecCommand:
		return true
	}
	return false
}

// States of an approval. Pending moves exactly once to one of the others.
const (
	StatePending  = "pending"
	StateApproved = "approved"
	StateDenied   = "denied"
	StateExpired  = "expired"
)

// Scopes of an approved egress.host request.
const (
	ScopeSandbox = "sandbox" // the host joins that sandbox's allowlist
	ScopeGlobal  = "global"  // the host joins every sandbox's allowlist, durably
)

// Errors; check them with errors.Is.
var (
	ErrNotFound   = errdefs.New(errdefs.ErrNotFound, "approval not found")
	ErrConflict   = errdefs.New(errdefs.ErrConflict, "approval already decided otherwise")
	ErrInvalid    = errdefs.New(errdefs.ErrInvalidArgument, "invalid approval request")
	ErrTooMany    = errdefs.New(errdefs.ErrLimitExceeded, "too many pending approval requests")
	ErrNotUsable  = errdefs.New(errdefs.ErrConflict, "approval not usable")
	ErrClosed     = errdefs.New(errdefs.ErrUnavailable, "gateway closed")
	ErrNotPending = errdefs.New(errdefs.ErrConflict, "approval is not pending")
)

// Approval is one request and, once decided, its decision. Its JSON form is
// the HTTP API's approval object.
type Approval struct {
	ID          string          `json:"id"`
	Kind        string          `json:"kind"`
	State       string          `json:"state"`
	Session     string          `json:"session,omitempty"`
	RequestedBy string          `json:"requested_by"`
	Summary     string          `json:"summary"`
	Data        json.RawMessage `json:"data"`
	CreatedAt   time.Time       `json:"created_at"`
	ExpiresAt   time.Time       `json:"expires_at"`
	DecidedAt   *time.Time      `json:"decided_at,omitempty"`
	DecidedBy   string          `json:"decided_by,omitempty"`
	Scope       string          `json:"scope,omitempty"`
	Reason      string          `json:"reason,omitempty"`
	Result      json.RawMessage `json:"result,omitempty"`
}

// Pending reports whether no decision has been made yet.
func (a Approval) Pending() bool { return a.State == StatePending }

// Request files a new approval request.
type Request struct {
	Kind    string
	Session string // the sandbox it concerns; required for some kinds
	Summary string // one line for a human; generated when empty
	Data    any    // marshals to a JSON object; what the action needs
	By      string // who asks: the role or component ("agent", "egress")
	// Join returns an identical pending request (same kind, session and
	// data) instead of filing a second one, so a retrying client or several
	// held connections to one host wait on one decision.
	Join bool
}

// Decision decides a pending request.
type Decision struct {
	Approve bool
	Scope   string // egress.host only: ScopeSandbox (default) or ScopeGlobal
	Reason  string
	By      string // the operator identity behind the token, never client-supplied
}

// Filter selects approvals for List.
type Filter struct {
	State   string
	Session string
	Kind    string
	Limit   int // default and maximum 500
}
