package wire

import "time"

// Sandbox is the API's sandbox object (GET /v1/sandboxes/{id}). Times are
// UTC. State is running, paused, destroyed, reaped, lost or crashed.
type Sandbox struct {
	ID     string            `json:"id"`
	State  string            `json:"state"`
	Labels map[string]string `json:"labels"`
	// CreatedAt, and ExpiresAt when the sandbox has a TTL (zero: none).
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// IdleTimeout is a Go duration string; "0s" is none.
	IdleTimeout string `json:"idle_timeout"`
	// IdleAction is what the idle timeout does: destroy or pause.
	IdleAction string    `json:"idle_action,omitempty"`
	LastUsedAt time.Time `json:"last_used_at"`
	// EndedAt and EndReason are set once it ended.
	EndedAt   time.Time `json:"ended_at,omitzero"`
	EndReason string    `json:"end_reason,omitempty"`
	// Limits are the limits in force while it runs or is paused.
	Limits *Limits `json:"limits,omitempty"`
}

// CreatedSandbox is the answer to POST /v1/sandboxes: the sandbox, plus
// the sandbox.widen request filed for what the create asked beyond the
// operator's ceilings and allowlist (ApprovalError says why none could be
// filed; the sandbox exists either way), and the secret.use requests filed
// for the secrets it asked for whose grant is "ask".
type CreatedSandbox struct {
	Sandbox
	Approvals     []Approval `json:"approvals,omitempty"`
	ApprovalError string     `json:"approval_error,omitempty"`
}

// SandboxList is one page of GET /v1/sandboxes. Next, when set, is the
// ?after= of the next page.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
	Next      string    `json:"next,omitempty"`
}

// CreateSandboxRequest is POST /v1/sandboxes; every field is optional (an
// empty body asks for every default).
type CreateSandboxRequest struct {
	// Image is a local image or directory beneath the daemon's image
	// directory, or a registry reference; "" is the host-toolchain view.
	Image  string            `json:"image,omitempty"`
	Env    map[string]string `json:"env,omitempty"`
	Limits *Limits           `json:"limits,omitempty"`
	// TTL and Idle: 0 is the daemon's default.
	TTL  Duration `json:"ttl,omitempty"`
	Idle Duration `json:"idle,omitempty"`
	// IdleAction is what the idle timeout does: destroy or pause; "" is
	// the policy's limits.idle_action.
	IdleAction string            `json:"idle_action,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	// Egress adds hosts to the sandbox's allowlist; those the policy does
	// not cover are filed as a sandbox.widen request.
	Egress *EgressAllow `json:"egress,omitempty"`
	// Volumes are the caller's named volumes to mount (each in one running
	// sandbox at a time).
	Volumes []VolumeMount `json:"volumes,omitempty"`
	// Ports are loopback TCP ports (1024-65535) the sandbox's own servers
	// may listen on; only these can be reached inbound.
	Ports []uint16 `json:"ports,omitempty"`
	// Snapshot, if set, fills /workspace from that snapshot (a fork).
	Snapshot string `json:"snapshot,omitempty"`
	// Secrets names brokered secrets (GET /v1/secrets) the sandbox may
	// use: it sees a placeholder in each one's env variable, and the
	// egress broker puts the value into requests to the secret's hosts.
	// A secret whose grant is "ask" files a secret.use approval.
	Secrets []string `json:"secrets,omitempty"`
	// Exec, if set, is a first command to run in the new sandbox, in the
	// same request: the answer is then a stream (CreateFrame lines). Its
	// Approval must be empty (an approval names an existing sandbox).
	Exec *ExecRequest `json:"exec,omitempty"`
}

// CreatedFrame is the first line of a create's stream (a create with
// Exec): the sandbox, running. Exec frames follow, or an ExecPending
// when the command waits for an operator.
type CreatedFrame struct {
	Sandbox CreatedSandbox `json:"sandbox"`
}

// Limits are a sandbox's resource limits; zero fields take the daemon's
// defaults.
type Limits struct {
	Memory    Bytes    `json:"memory,omitempty"`
	Pids      int64    `json:"pids,omitempty"`
	CPUs      float64  `json:"cpus,omitempty"`
	Timeout   Duration `json:"timeout,omitempty"` // wall time per command
	Output    Bytes    `json:"output,omitempty"`  // output kept per command
	Workspace Bytes    `json:"workspace,omitempty"`
	Tmp       Bytes    `json:"tmp,omitempty"`
	OpenFiles int64    `json:"open_files,omitempty"`
}

// EgressAllow lists egress rules (host names, optional :port): the egress
// of a create, and POST /v1/sandboxes/{id}/egress.
type EgressAllow struct {
	Allow []string `json:"allow"`
}

// LifetimeRequest is POST /v1/sandboxes/{id}/lifetime: a new TTL counted
// from now, a new idle timeout, or both (0: unchanged).
type LifetimeRequest struct {
	TTL  Duration `json:"ttl,omitempty"`
	Idle Duration `json:"idle,omitempty"`
}

// SandboxStats is GET /v1/sandboxes/{id}/stats: a running or paused
// sandbox's resource use now, and the limits in force.
type SandboxStats struct {
	ID    string    `json:"id"`
	State string    `json:"state"`
	At    time.Time `json:"at"`
	// Uptime is the time since its creation.
	Uptime          Duration `json:"uptime"`
	MemoryBytes     int64    `json:"memory_bytes"`
	MemoryPeakBytes int64    `json:"memory_peak_bytes"`
	// CPUSeconds is the CPU time used since its creation.
	CPUSeconds float64 `json:"cpu_seconds"`
	Pids       int64   `json:"pids"`
	OOMKills   int64   `json:"oom_kills"`
	// The limits in force.
	MemoryLimitBytes int64   `json:"memory_limit_bytes"`
	CPUs             float64 `json:"cpus"`
	PidsLimit        int64   `json:"pids_limit"`
	WorkspaceBytes   int64   `json:"workspace_bytes"`
}
