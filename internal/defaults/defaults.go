// Package defaults holds the daemon's default settings, each written once:
// what daemon.Config applies to a zero field, what `ironclaw serve` shows
// as its flags' defaults and in its help, and what the packages that apply
// a setting (api, session, netlimit, egress, modelproxy, gateway, policy,
// store, client) fall back to when they are used on their own. Those
// packages' Default* names refer to the values here; no number is written
// twice.
//
// Limits of one sandbox (memory, pids, timeout, ...) are not here: they
// are sandbox.DefaultLimits, part of the sandbox's own contract.
//
// The package is a leaf: it imports nothing of IronClaw, so any package may
// use it.
package defaults

import (
	"os"
	"path/filepath"
	"time"
)

// The daemon and its HTTP API (daemon.Config, api.Config, session.Options).
const (
	// Listen is the address the daemon serves its API on.
	Listen = "127.0.0.1:8787"
	// Addr is where clients find the daemon unless told otherwise.
	Addr = "http://" + Listen
	// PortsListen is where port URLs are served when the policy turns
	// inbound ports on: another origin than the API's.
	PortsListen = "127.0.0.1:8788"
	// PoolSize is how many sealed idle sandboxes are kept ready.
	PoolSize = 2
	// SpareInits is how many sandbox inits the daemon's native runtime
	// keeps started ahead, waiting for their plans, for the creates the
	// pool cannot serve; it keeps as many spare cgroups (serve --spares).
	SpareInits = 2
	// MaxSandboxes bounds running sandboxes.
	MaxSandboxes = 100
	// Idle is the idle timeout of a sandbox created without one.
	Idle = 30 * time.Minute
	// TTL is the lifetime of a sandbox created without one: none.
	TTL time.Duration = 0
	// ShutdownGrace is how long requests in flight may finish at
	// shutdown before they are cancelled; ShutdownTimeout how long the
	// cancelled ones' handlers then get to return.
	ShutdownGrace   = 2 * time.Second
	ShutdownTimeout = 10 * time.Second
	// MaxBodyBytes bounds a JSON request body, MaxUploadBytes a file
	// upload, WaitOutputBytes the output an exec with ?wait=1 returns.
	MaxBodyBytes    int64 = 1 << 20
	MaxUploadBytes  int64 = 256 << 20
	WaitOutputBytes int64 = 1 << 20
	// BodyTimeout bounds how long the API waits for a request body, and
	// how long an upload may stall.
	BodyTimeout = 30 * time.Second
	// BodyMinRate is the rate (bytes per second) a request body must
	// average beyond its first BodyTimeout of waiting.
	BodyMinRate int64 = 4 << 10
	// RatePerSecond and RateBurst shape each principal's (token's)
	// request rate, SandboxRatePerSecond and SandboxRateBurst each running
	// sandbox's (its routes take from both). A Mastra workspace at full
	// speed, hundreds of small file reads and commands a second on one
	// sandbox, stays well below them (docs/http-api.md has the
	// measurement); they are there to stop a runaway loop, not to pace
	// work. RateBuckets bounds the sandbox buckets held at once (idle ones
	// are dropped; past the bound the least recently used).
	RatePerSecond        float64 = 4000
	RateBurst            int     = 8000
	SandboxRatePerSecond float64 = 2000
	SandboxRateBurst     int     = 4000
	RateBuckets          int     = 4096
	// The API server's own bounds on a request's head and on an idle
	// keep-alive connection.
	APIHeaderTimeout  = 10 * time.Second
	APIMaxHeaderBytes = 64 << 10
	APIIdleTimeout    = 2 * time.Minute
	// StoreSizeWarn is the database size past which a warning is logged.
	StoreSizeWarn int64 = 1 << 30
)

// The two servers on every sandbox's loopback.
const (
	ModelPort  = 4000 // the model proxy
	EgressPort = 4001 // the egress broker
)

// The model proxy (daemon.ModelConfig, modelproxy.Config).
const (
	// ModelMaxOutput is the output bound given to a model request that
	// sets none while a budget applies.
	ModelMaxOutput int64 = 16384
	// ModelTokenTTL is the lifetime of a model token minted for a program
	// on the host, ModelMaxTokens how many live ones a principal may hold.
	ModelTokenTTL  = 24 * time.Hour
	ModelMaxTokens = 32
)

// The egress brokers (daemon.EgressConfig, egress.Config).
const (
	EgressMaxConns          = 128  // one sandbox's tunnels and requests at once
	EgressMaxConnsTotal     = 2048 // all sandboxes' at once
	EgressMaxWaiting        = 64   // one sandbox's connections held for a decision
	EgressMaxWaitingPerHost = 16   // those held on one host's decision
	EgressTunnelIdle        = 10 * time.Minute
	EgressDenyWindow        = time.Minute // refusals aggregated per window
)

// The servers inside sandboxes (daemon.Config.Inside, netlimit.Config).
const (
	InsideMaxConns       = 256 // connections per sandbox and listener
	InsideHeaderTimeout  = 10 * time.Second
	InsideIdleTimeout    = 2 * time.Minute
	InsideWriteTimeout   = 2 * time.Minute
	InsideMaxHeaderBytes = 64 << 10
	// A request body may wait InsideBodyTimeout for its client in all,
	// one second more for every InsideBodyMinRate bytes it brings, and
	// InsideBodyIdle for any one read.
	InsideBodyTimeout       = time.Minute
	InsideBodyMinRate int64 = 16 << 10
	InsideBodyIdle          = time.Minute
)

// The approval gateway (the policy file's approvals section, gateway.Options).
const (
	ApprovalTimeout                = 10 * time.Minute
	ApprovalMaxPending             = 20   // per sandbox
	ApprovalMaxPendingPerPrincipal = 100  // per principal, across its sandboxes and kinds
	ApprovalMaxPendingTotal        = 1000 // in the whole daemon
)

// The policy file's limits section.
const (
	OvercommitMemory = 1.0
	OvercommitCPUs   = 16.0
	OvercommitPids   = 1.0
	AgentSandboxes   = 50 // running sandboxes per principal
	AgentExecs       = 64 // execs and file copies in flight per principal
	SandboxExecs     = 32 // execs and file copies in flight per sandbox
)

// DataDir is the daemon's data directory: $XDG_DATA_HOME/ironclaw (when
// absolute), else ~/.local/share/ironclaw. IRONCLAW_DATA_DIR, which
// clients read, is not consulted here.
func DataDir() string { return UserDir("XDG_DATA_HOME", ".local/share") }

// UserDir is ironclaw's directory in one of the user's XDG base
// directories: $env/ironclaw when the variable env (XDG_DATA_HOME,
// XDG_STATE_HOME, ...) holds an absolute path, else ~/fallback/ironclaw,
// taking / as the home directory when there is none.
func UserDir(env, fallback string) string {
	if x := os.Getenv(env); x != "" && filepath.IsAbs(x) {
		return filepath.Join(x, "ironclaw")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		home = "/"
	}
	return filepath.Join(home, fallback, "ironclaw")
}
