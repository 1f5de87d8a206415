package gateway

import (
	"github.com/ironclaw/ironclaw/internal/errdefs"
	"github.com/ironclaw/ironclaw/internal/gateway/kinds"

	"encoding/json"
	"time"
)

// Kinds of approval requests; package kinds defines each one's payload,
// display and action.
const (
	KindEgressHost   = kinds.KindEgressHost
	KindSandboxWiden = kinds.KindSandboxWiden
	KindToolRegister = kinds.KindToolRegister
	KindAgentSpawn   = kinds.KindAgentSpawn
	KindExecCommand  = kinds.KindExecCommand
	KindToolCall     = kinds.KindToolCall
	KindSecretUse    = kinds.KindSecretUse
)

// Kinds lists every kind the gateway accepts.
func Kinds() []string { return kinds.Names() }

// States of an approval. Pending moves exactly once to one of the others.
// A request withdrawn because its sandbox ended is expired, with a reason
// saying so.
const (
	StatePending  = "pending"
	StateApproved = "approved"
	StateDenied   = "denied"
	StateExpired  = "expired"
)

// Scopes of an approved egress.host request.
const (
	ScopeSandbox = kinds.ScopeSandbox // the host joins that sandbox's allowlist
	ScopeGlobal  = kinds.ScopeGlobal  // the host joins every sandbox's allowlist, durably
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
//
// Summary and Fields are derived from Data (the validated, canonical
// payload) each time an approval is read, never taken from the requester;
// AgentNote is the requester's own words about it, shown apart and
// labelled as such.
type Approval struct {
	ID          string `json:"id"`
	Kind        string `json:"kind"`
	State       string `json:"state"`
	Session     string `json:"session,omitempty"`
	RequestedBy string `json:"requested_by"`
	// Via names the part of the daemon that filed the request on
	// RequestedBy's behalf ("egress": a held connection).
	Via       string          `json:"via,omitempty"`
	Summary   string          `json:"summary"`
	Fields    []kinds.Field   `json:"fields"`
	AgentNote string          `json:"agent_note,omitempty"`
	Data      json.RawMessage `json:"data"`
	CreatedAt time.Time       `json:"created_at"`
	ExpiresAt time.Time       `json:"expires_at"`
	DecidedAt *time.Time      `json:"decided_at,omitempty"`
	DecidedBy string          `json:"decided_by,omitempty"`
	Scope     string          `json:"scope,omitempty"`
	Reason    string          `json:"reason,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`

	payload kinds.Payload // Data decoded; nil when it no longer validates
}

// Pending reports whether no decision has been made yet.
func (a Approval) Pending() bool { return a.State == StatePending }

// Payload is Data decoded and validated, or nil when stored data no longer
// validates (a row from an older version).
func (a Approval) Payload() kinds.Payload { return a.payload }

// Target is what the payload's display and action need of the request.
func (a Approval) Target() kinds.Target {
	return kinds.Target{ID: a.ID, Session: a.Session, RequestedBy: a.RequestedBy, Scope: a.Scope}
}

// Request files a new approval request.
type Request struct {
	Kind    string
	Session string // the sandbox it concerns; required for some kinds
	// Data is the kind's payload: a kinds payload, a map or raw JSON; it
	// is decoded and validated by package kinds and stored canonically.
	Data any
	// Note is the requester's own text about the request (at most
	// MaxNote bytes, printable: no control or bidi characters). It is
	// stored and shown as the agent's note, never as the summary.
	Note string
	// By is the principal who asks ("agent", "agent:NAME", an operator).
	By string
	// Via, when a part of the daemon files for a sandbox (the egress
	// broker: "egress"), names it; By may then be empty, and the gateway
	// takes the principal that owns Session (Options.SessionPrincipal).
	Via string
	// Join returns an identical pending request (same kind, session,
	// requester and data) instead of filing a second one, so a retrying
	// client or several held connections to one host wait on one
	// decision.
	Join bool
}

// Decision decides a pending request.
type Decision struct {
	Approve bool
	Scope   string // egress.host only: ScopeSandbox (default) or ScopeGlobal
	Reason  string
	By      string // the operator identity behind the token, never client-supplied
}

// Filter selects approvals for List. Empty fields match everything.
type Filter struct {
	State       string
	Session     string
	Kind        string
	RequestedBy string // an agent principal sees only what it filed
	// Limit is the page size: default and maximum MaxListLimit.
	Limit int
	// Cursor continues a listing where the Page that returned it ended.
	Cursor string
	// OldestFirst orders by creation, oldest first (default: newest first).
	OldestFirst bool
}

// Page is one page of a listing. Next, when not empty, is the cursor of
// the next page; a listing without it is complete.
type Page struct {
	Approvals []Approval
	Next      string
}
