// Package session runs sandboxes on behalf of API callers: it creates them
// on a sandbox.Runtime, records them in the store, audits every lifecycle
// step and every exec, enforces a maximum count, reaps them when their TTL or
// idle timeout passes (or pauses them at the idle timeout, policy
// idle_action pause; the next request resumes them), snapshots /workspace
// and forks sandboxes from snapshots, and, at start-up, marks the
// sandboxes of a dead daemon run as lost.
//
// Re-adoption after a restart is deliberately not attempted: a sandbox's
// pid 1 dies with the daemon thread that started it (parent-death signal),
// and its control socket dies with the daemon, so there is nothing safe to
// reconnect to. The runtime collects the cgroups such a run left; this
// package records the outcome (state "lost", audit kind sandbox.lost).
//
// Durability: a create's row and its sandbox.create record, and an end's
// row update and its record, are durable before the call returns, and
// commit in one transaction of the audit log's batch (audit.Log.AppendWith):
// both or neither, for one shared fsync. A runtime that names a sandbox
// before building it (createrecord.go) has that commit run during the
// build. An exec costs the one fsync of
// its intent record; its result record is queued (audit.Intent.EndQueued).
package session

import (
	"cmp"
	"sync/atomic"

	"github.com/ironclaw/ironclaw/internal/errdefs"

	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/netlimit"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/store"
)

// Errors callers branch on (errors.Is). Runtime errors pass through with
// their own vocabulary (sandbox.ErrInvalidSpec, ...).
var (
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "sandbox not found")
	ErrLimit    = errdefs.New(errdefs.ErrLimitExceeded, "limit reached")
)

// States a sandbox row can be in.
const (
	StateRunning   = "running"
	StateDestroyed = "destroyed"
	StateReaped    = "reaped"
	StateLost      = "lost"
	StateCrashed   = "crashed" // its pid 1 died under it (a fork bomb, the OOM killer)
)

// Options configure a Manager. The zero value is usable.
type Options struct {
	// Owner names this daemon run in the store; "" picks a random one.
	Owner string
	// MaxSandboxes bounds running sandboxes; 0 means defaults.MaxSandboxes.
	MaxSandboxes int
	// DefaultTTL and DefaultIdle apply when a request sets none; 0 means
	// no limit of that kind.
	DefaultTTL, DefaultIdle time.Duration
	// ReapEvery is the reaper's period; 0 means one second.
	ReapEvery time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Logf receives diagnostics; nil discards them.
	Logf func(format string, args ...any)
	// OnEnd, if set, is called once for every sandbox that ends (state is
	// destroyed, reaped, lost or crashed; reason is e.g. "ttl", "idle"),
	// for metrics and to withdraw its pending approvals.
	OnEnd func(id, state, reason string)
	// Model, if set, gives every sandbox the model proxy on its own
	// loopback, with a per-sandbox token in its commands' environment.
	Model ModelAccess
	// Egress, if set, gives every sandbox an egress broker on its own
	// loopback (HTTP_PROXY/HTTPS_PROXY), admitting only its allowlist.
	Egress EgressAccess
	// Trust, if set, is the host directory of the trust files every
	// sandbox sees read-only at sandbox.TrustDir (Spec.Trust: the system's
	// CA bundle and the egress broker's CA); every exec then gets
	// sandbox.TrustEnv.
	Trust string
	// Inside bounds the servers on every sandbox's loopback (connections
	// per sandbox, timeouts; see package netlimit); zero takes the defaults.
	Inside netlimit.Config
	// Volumes, if set, mounts CreateRequest.Volumes; without it a create
	// that asks for volumes is refused.
	Volumes Volumes
	// Images, if set, resolves CreateRequest.Image; without it a create
	// naming an image is refused.
	Images ImageResolver
	// Capacity bounds what all sandboxes together may commit (see
	// HostCapacity); the zero value checks nothing.
	Capacity Capacity
	// Quotas bound what one principal and one sandbox may hold at once;
	// the zero value checks nothing.
	Quotas Quotas
	// SnapshotDir holds the snapshots of /workspace (emptied at start and
	// at Close: they last one daemon run); "" keeps none.
	SnapshotDir string
	// IdleAction is what happens to a sandbox idle past its idle timeout
	// (policy limits.idle_action): IdleDestroy ("" too) ends it, IdlePause
	// pauses it until the next request.
	IdleAction string
	// Gate lists the gated programs (policy exec.gate) every sandbox is
	// created with (sandbox.Spec.Gate).
	Gate []string
	// Processes bound every sandbox's background processes (processes.go);
	// zero fields take the defaults.
	Processes ProcessLimits
	// Secrets, if set, grants CreateRequest.Secrets (brokered credentials,
	// issue 15); without it a create that asks for secrets is refused.
	Secrets SecretsAccess
}

// SecretsAccess is what the session layer needs of the brokered secrets
// (package secrets' Grants).
type SecretsAccess interface {
	// Check validates the secrets a create asks for before anything is
	// made.
	Check(names []string) error
	// Attach grants them to the sandbox (or files their approvals) and
	// returns the environment (ENV=placeholder) its every command gets.
	Attach(ctx context.Context, sandbox, principal string, names []string) (env []string, err error)
	// Detach drops the sandbox's grants: it ended.
	Detach(sandbox string)
}

// ImageResolver turns an image reference into a root, under the operator's
// rules (which directories and registries are allowed).
type ImageResolver interface {
	Root(ctx context.Context, ref string) (sandbox.Root, error)
}

// EgressAccess is what the session layer needs of the egress broker.
type EgressAccess interface {
	// Port is where the broker listens inside every sandbox.
	Port() uint16
	// Check validates allowlist rules before anything is created.
	Check(allow []string) error
	// Broker serves one sandbox's egress with its allowlist.
	Broker(session string, allow []string) (EgressBroker, error)
}

// EgressBroker is one sandbox's broker.
type EgressBroker interface {
	http.Handler
	// Allow adds a rule to this sandbox's allowlist.
	Allow(rule string) error
	// Close ends its tunnels.
	Close() error
}

// limitUpdater is implemented by sandboxes whose limits can change while
// they run (the native runtime's).
type limitUpdater interface {
	UpdateLimits(ctx context.Context, l sandbox.Limits) error
}

// egressEnv points HTTP clients inside at the broker. Loopback stays
// direct: the model proxy lives there.
func egressEnv(port uint16) []string {
	p := fmt.Sprintf("http://127.0.0.1:%d", port)
	// NODE_USE_ENV_PROXY: Node (22.21 and later) routes fetch and https
	// through these only when asked to.
	return []string{"HTTP_PROXY=" + p, "HTTPS_PROXY=" + p, "http_proxy=" + p, "https_proxy=" + p,
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost", "NODE_USE_ENV_PROXY=1"}
}

// ModelAccess is what the session layer needs of the model proxy.
type ModelAccess interface {
	// Port is where the proxy listens inside every sandbox.
	Port() uint16
	// Attach mints the token of sandbox session, spending the budgets of
	// principal (its creator), and returns the handler to serve on that
	// sandbox's loopback (paths /openai/v1/... and /anthropic/v1/...): it
	// accepts that token and no other. Revoke ends the token.
	Attach(session, principal string) (token string, h http.Handler, err error)
	Revoke(session string)
}

// modelEnv is what a sandbox's commands are told about the model proxy.
func modelEnv(port uint16, token string) []string {
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	return []string{
		"OPENAI_BASE_URL=" + base + "/openai/v1", "OPENAI_API_KEY=" + token,
		"ANTHROPIC_BASE_URL=" + base + "/anthropic", "ANTHROPIC_API_KEY=" + token,
	}
}

// CreateRequest asks for a sandbox.
type CreateRequest struct {
	Spec sandbox.Spec
	// Image, if set, replaces Spec.Root with the root Options.Images makes
	// of it: a local image or directory, or a registry reference.
	Image string
	TTL   time.Duration // 0: Options.DefaultTTL
	Idle  time.Duration // 0: Options.DefaultIdle
	// IdleAction is what its idle timeout does: IdleDestroy or IdlePause;
	// "" is Options.IdleAction (the policy's limits.idle_action).
	IdleAction string
	Labels     map[string]string
	// EgressAllow adds hosts ("api.github.com", "*.pypi.org:443") to the
	// sandbox's egress allowlist; it needs Options.Egress.
	EgressAllow []string
	// Volumes are named volumes of the creator's to mount; they need
	// Options.Volumes.
	Volumes []VolumeMount
	// Ports are loopback TCP ports the sandbox's own servers may listen on
	// (Spec.Network.LoopbackTCP); only these can be reached inbound
	// (DialPort).
	Ports []uint16
	// Snapshot, if set, fills the new sandbox's /workspace from that
	// snapshot (a fork); the caller checks it may use it.
	Snapshot string
	// Secrets names brokered secrets the sandbox may use through the
	// egress broker (it sees placeholders only); they need
	// Options.Secrets.
	Secrets []string
}

// VolumeMount asks for a named volume at a path inside the sandbox.
type VolumeMount struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

// Volumes hands out the bind mounts of named volumes (package volume),
// each to one sandbox at a time. holder is any unique key: a create
// reserves under its own and, once the sandbox exists, Rehold moves the
// reservation to the sandbox's id.
type Volumes interface {
	Attach(ctx context.Context, principal, holder string, reqs []VolumeMount) ([]sandbox.Mount, error)
	Rehold(holder, sandboxID string)
	Release(holder string)
}

// Info describes a sandbox, running or ended.
type Info struct {
	ID    string `json:"id"`
	State string `json:"state"`
	// Principal created it ("agent", "agent:NAME", an operator's name);
	// agent tokens see only their own sandboxes.
	Principal string            `json:"principal"`
	Labels    map[string]string `json:"labels"`
	CreatedAt time.Time         `json:"created_at"`
	ExpiresAt time.Time         `json:"expires_at,omitzero"`
	Idle      time.Duration     `json:"idle_timeout"`
	// IdleAction is what the idle timeout does (IdleDestroy or IdlePause;
	// "" in records of earlier daemons: the policy's).
	IdleAction string    `json:"idle_action,omitempty"`
	LastUsedAt time.Time `json:"last_used_at"`
	EndedAt    time.Time `json:"ended_at,omitzero"`
	EndReason  string    `json:"end_reason,omitempty"`
	// Limits are the limits in force while it runs or is paused (zero
	// once it ended, or for a sandbox of an earlier daemon run).
	Limits sandbox.Limits `json:"-"`
}

// Manager is safe for concurrent use. Close destroys what it runs.
type Manager struct {
	rt   sandbox.Runtime
	db   *store.Store
	log  *audit.Log
	opts Options

	mu       sync.Mutex
	live     map[string]*entry // running sandboxes of this run
	starting int               // creates admitted and not yet running or failed
	// committed is what live and starting sandboxes hold of Capacity, and
	// perPrincipal how many of them each principal holds.
	committed         commitment
	perPrincipal      map[string]int
	execsPerPrincipal map[string]int
	// tearingDown holds sandboxes whose teardown failed; the reaper retries
	// until it succeeds, and their commitment stays held until then.
	tearingDown map[string]*entry
	// unrecorded holds ends the store could not take (a full disk): Get
	// answers from here, and the reaper retries the row's update, so an
	// ended sandbox never shows as running.
	unrecorded map[string]Info
	// procs holds the sandboxes' background processes (processes.go).
	procs procTables

	snaps *snapshots // nil without Options.SnapshotDir

	// rows are the statements of a sandbox's row, prepared once on the
	// store's writer: they run inside the audit committer's transaction
	// (AppendWith), where parsing them on every create and end was most
	// of their cost.
	rows rowStatements

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type entry struct {
	sb       sandbox.Sandbox
	limits   sandbox.Limits // in force (defaults applied; widened by UpdateLimits)
	ports    []uint16       // the create's Ports: what DialPort may reach
	commit   commitment     // what it holds of Options.Capacity
	env      []string       // added to every exec: the model proxy's address and token
	serving  *http.Server   // the model proxy on the sandbox's loopback, or nil
	egress   *http.Server   // the egress broker on the sandbox's loopback, or nil
	broker   EgressBroker
	info     Info
	lastUsed time.Time // guarded by Manager.mu
	busy     int       // execs and file copies in flight; an entry is never idle while busy
	pause    pauseState
}

// New marks the running sandboxes of earlier daemon runs as lost (auditing
// each) and starts the reaper.
func New(ctx context.Context, rt sandbox.Runtime, db *store.Store, log *audit.Log, opts Options) (*Manager, error) {
	if err := CheckIdleAction(opts.IdleAction); err != nil {
		return nil, err
	}
	if opts.Owner == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		opts.Owner = "run-" + hex.EncodeToString(b[:])
	}
	if opts.MaxSandboxes == 0 {
		opts.MaxSandboxes = defaults.MaxSandboxes
	}
	if opts.ReapEvery == 0 {
		opts.ReapEvery = time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.OnEnd == nil {
		opts.OnEnd = func(string, string, string) {}
	}
	m := &Manager{rt: rt, db: db, log: log, opts: opts, live: map[string]*entry{},
		perPrincipal: map[string]int{}, execsPerPrincipal: map[string]int{},
		tearingDown: map[string]*entry{}, unrecorded: map[string]Info{},
		stop: make(chan struct{}), done: make(chan struct{})}
	if err := m.markLost(ctx); err != nil {
		return nil, err
	}
	if err := m.rows.prepare(ctx, db.DB()); err != nil {
		return nil, err
	}
	snaps, err := openSnapshots(opts.SnapshotDir)
	if err != nil {
		m.rows.close()
		return nil, err
	}
	m.snaps = snaps
	go m.reap()
	return m, nil
}

const timeLayout = time.RFC3339Nano

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(timeLayout, s)
	return t
}

// markLost ends every row another run left running.
func (m *Manager) markLost(ctx context.Context) error {
	rows, err := m.db.ReadDB().QueryContext(ctx, `SELECT id, owner FROM sandboxes WHERE state IN (?, ?) AND owner != ?`, StateRunning, StatePaused, m.opts.Owner)
	if err != nil {
		return fmt.Errorf("session: find lost sandboxes: %w", err)
	}
	var ids, owners []string
	for rows.Next() {
		var id, owner string
		if err := rows.Scan(&id, &owner); err != nil {
			rows.Close()
			return fmt.Errorf("session: find lost sandboxes: %w", err)
		}
		ids, owners = append(ids, id), append(owners, owner)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("session: find lost sandboxes: %w", err)
	}
	for i, id := range ids {
		if err := m.end(ctx, id, StateLost, "its daemon run "+owners[i]+" ended"); err != nil {
			return err
		}
		m.opts.OnEnd(id, StateLost, "daemon restart")
		if _, err := m.log.Append(ctx, audit.Entry{Session: id, Actor: "daemon", Kind: audit.KindSandboxLost,
			Data: map[string]any{"previous_owner": owners[i]}}); err != nil {
			return fmt.Errorf("session: audit: %w", err)
		}
	}
	if len(ids) > 0 {
		m.opts.Logf("marked %d sandbox(es) of earlier runs as lost", len(ids))
	}
	return nil
}

func (m *Manager) end(ctx context.Context, id, state, reason string) error {
	_, err := m.db.DB().ExecContext(ctx, `UPDATE sandboxes SET state = ?, ended_at = ?, end_reason = ? WHERE id = ? AND state IN (?, ?)`,
		state, fmtTime(m.opts.Now()), reason, id, StateRunning, StatePaused)
	if err != nil {
		return fmt.Errorf("session: end %s: %w", id, err)
	}
	return nil
}

// rollbackTimeout bounds the undoing of a failed create and the teardown
// of an ending sandbox: they run on a context of their own, so a client
// that hangs up cannot stop them halfway.
const rollbackTimeout = 30 * time.Second

// Create starts a sandbox for actor, who becomes its principal. It is
// admitted only within Options.Capacity and the principal's quota. Nothing
// is left behind on error: every step that succeeded is undone, newest
// first, under a deadline of its own.
func (m *Manager) Create(ctx context.Context, actor string, req CreateRequest) (Info, error) {
	info, _, err := m.create(ctx, actor, req, nil)
	return info, err
}

// CreateThenExec is Create with the sandbox's first command: its
// sandbox.exec.intent record commits in the same transaction as the
// sandbox.create record (audit.Log.AppendWithIntent), so the command
// costs no commit of its own before it starts, and the command is
// readied for the new sandbox. Run the returned FirstExec, or Drop it:
// its intent is on record, and only then does its result follow. On
// error there is no sandbox and no FirstExec; an intent that committed
// is ended as not run.
func (m *Manager) CreateThenExec(ctx context.Context, actor string, req CreateRequest, first sandbox.ExecRequest) (Info, *FirstExec, error) {
	return m.create(ctx, actor, req, &first)
}

func (m *Manager) create(ctx context.Context, actor string, req CreateRequest, first *sandbox.ExecRequest) (info Info, fx *FirstExec, err error) {
	for k, v := range req.Labels {
		if k == "" || len(k) > 63 || len(v) > 255 {
			return Info{}, nil, fmt.Errorf("%w: label %q: keys are 1-63 bytes, values at most 255", sandbox.ErrInvalidSpec, k)
		}
	}
	if req.TTL < 0 || req.Idle < 0 {
		return Info{}, nil, fmt.Errorf("%w: ttl and idle timeout must not be negative", sandbox.ErrInvalidSpec)
	}
	if err := CheckIdleAction(req.IdleAction); err != nil {
		return Info{}, nil, err
	}
	switch {
	case m.opts.Egress != nil:
		if err := m.opts.Egress.Check(req.EgressAllow); err != nil {
			return Info{}, nil, fmt.Errorf("%w: egress: %v", sandbox.ErrInvalidSpec, err)
		}
	case len(req.EgressAllow) > 0:
		return Info{}, nil, fmt.Errorf("%w: egress: this daemon runs no egress broker", sandbox.ErrInvalidSpec)
	}
	if len(req.Secrets) > 0 {
		if m.opts.Secrets == nil {
			return Info{}, nil, fmt.Errorf("%w: secrets: this daemon brokers no secrets (it needs an egress broker)", sandbox.ErrInvalidSpec)
		}
		if err := m.opts.Secrets.Check(req.Secrets); err != nil {
			return Info{}, nil, err
		}
	}
	if req.Image != "" {
		if m.opts.Images == nil {
			return Info{}, nil, fmt.Errorf("%w: this daemon serves no images", sandbox.ErrInvalidSpec)
		}
		root, err := m.opts.Images.Root(ctx, req.Image)
		if err != nil {
			return Info{}, nil, err
		}
		req.Spec.Root = root
	}
	limits := req.Spec.WithDefaults().Limits
	if err := limits.Validate(); err != nil {
		return Info{}, nil, err
	}
	var snap *snapshot
	if req.Snapshot != "" {
		if snap, err = m.snapshotFor(req.Snapshot); err != nil {
			return Info{}, nil, err
		}
	}
	commit := commitmentOf(limits)
	m.mu.Lock()
	if err := m.admitLocked(actor, commit); err != nil {
		m.mu.Unlock()
		return Info{}, nil, err
	}
	m.starting++
	m.mu.Unlock()
	running := false
	defer func() {
		m.mu.Lock()
		m.starting--
		if !running {
			m.releaseLocked(actor, commit)
		}
		m.mu.Unlock()
	}()
	var undo []func(context.Context)
	defer func() {
		if err == nil {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i](rctx)
		}
	}()

	var volumeHolder string // the create's reservation of its volumes
	if len(req.Volumes) > 0 {
		if m.opts.Volumes == nil {
			return Info{}, nil, fmt.Errorf("%w: this daemon keeps no volumes", sandbox.ErrInvalidSpec)
		}
		var key [8]byte
		_, _ = rand.Read(key[:])
		volumeHolder = fmt.Sprintf("create-%x", key)
		mounts, aerr := m.opts.Volumes.Attach(ctx, actor, volumeHolder, req.Volumes)
		if aerr != nil {
			return Info{}, nil, aerr
		}
		undo = append(undo, func(context.Context) { m.opts.Volumes.Release(volumeHolder) })
		req.Spec.Mounts = append(slices.Clone(req.Spec.Mounts), mounts...)
	}
	if err := checkPorts(req.Ports, m.reservedPorts()); err != nil {
		return Info{}, nil, err
	}
	req.Spec.Network.LoopbackTCP = append(slices.Clone(req.Spec.Network.LoopbackTCP), req.Ports...)
	req.Spec.Gate = slices.Clone(m.opts.Gate)
	req.Spec.Trust = m.opts.Trust
	req.Spec.Network.ExposedTCP = slices.Clone(req.Spec.Network.ExposedTCP)
	if m.opts.Model != nil {
		req.Spec.Network.ExposedTCP = append(req.Spec.Network.ExposedTCP, m.opts.Model.Port())
	}
	if m.opts.Egress != nil {
		req.Spec.Network.ExposedTCP = append(req.Spec.Network.ExposedTCP, m.opts.Egress.Port())
	}
	now := m.opts.Now()
	ttl, idle := req.TTL, req.Idle
	if ttl == 0 {
		ttl = m.opts.DefaultTTL
	}
	if idle == 0 {
		idle = m.opts.DefaultIdle
	}
	info = Info{State: StateRunning, Principal: actor, Labels: maps.Clone(req.Labels), CreatedAt: now, Idle: idle, LastUsedAt: now,
		IdleAction: cmp.Or(req.IdleAction, m.opts.IdleAction, IdleDestroy)}
	if info.Labels == nil {
		info.Labels = map[string]string{}
	}
	if ttl > 0 {
		info.ExpiresAt = now.Add(ttl)
	}
	// Environment values may be anyone's secrets: the record keeps names only.
	recorded := req.Spec
	recorded.Limits = limits // what it got, defaults and ceilings applied
	recorded.Env = nil
	for _, kv := range req.Spec.Env {
		k, _, _ := strings.Cut(kv, "=")
		recorded.Env = append(recorded.Env, k+"=[not recorded]")
	}
	spec, _ := json.Marshal(recorded)
	labels, _ := json.Marshal(info.Labels)
	created := map[string]any{"labels": info.Labels, "ttl_ms": ttl.Milliseconds(), "idle_ms": idle.Milliseconds(), "spec": json.RawMessage(spec)}
	if snap != nil {
		created["snapshot"] = snap.info.ID
	}
	if len(req.Secrets) > 0 {
		created["secrets"] = req.Secrets // names; values never reach a sandbox or a record
	}
	// The row and the sandbox.create record commit in one transaction
	// (audit's AppendWith): both or neither, for one fsync, on a deadline
	// of their own. A create whose caller hangs up still waits for that
	// commit, so that a row is never left running for a sandbox the undo
	// destroyed; only the deadline ends the wait early, and the undo then
	// ends the row in case it commits after all (on a row that never was,
	// that changes nothing). The commit starts as soon as the runtime
	// names the sandbox (createSandbox), so on a cold create it runs
	// while the sandbox is built.
	//
	// A first command's intent (CreateThenExec) commits in that same
	// transaction, right after the create's record.
	expires := info.ExpiresAt
	commitRecord := func(id string) (*audit.Intent, error) {
		rowInsert := func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.StmtContext(ctx, m.rows.insert).ExecContext(ctx,
				id, m.opts.Owner, actor, StateRunning, string(spec), string(labels), fmtTime(now), fmtTime(expires), idle.Milliseconds(), fmtTime(now))
			return err
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		rec := audit.Entry{Session: id, Actor: actor, Kind: audit.KindSandboxCreate, Data: created}
		if first == nil {
			_, err := m.log.AppendWith(rctx, rec, rowInsert)
			return nil, err
		}
		_, intent, err := m.log.AppendWithIntent(rctx, rec, rowInsert,
			audit.Entry{Session: id, Actor: actor, Kind: audit.KindSandboxExec, Data: execIntentData(*first)})
		return intent, err
	}
	sb, record, err := m.createSandbox(ctx, req.Spec, actor, commitRecord)
	if err != nil {
		return Info{}, nil, err
	}
	info.ID = sb.ID()
	undo = append(undo, func(c context.Context) {
		if derr := sb.Destroy(c); derr != nil {
			m.opts.Logf("session: undoing the create of %s: %v", sb.ID(), derr)
		}
	})
	// On error from here, the record is waited for and its row ended
	// whether or not it committed (see above).
	undo = append(undo, func(c context.Context) {
		m.endFailedCreate(c, record, actor, err)
	})
	var extraEnv []string
	var serving *http.Server
	if m.opts.Model != nil {
		undo = append(undo, func(context.Context) { m.opts.Model.Revoke(sb.ID()) })
		if extraEnv, serving, err = m.attachModel(sb, actor); err != nil {
			return Info{}, nil, err
		}
		undo = append(undo, func(context.Context) { _ = serving.Close() })
	}
	var egressSrv *http.Server
	var broker EgressBroker
	if m.opts.Egress != nil {
		if egressSrv, broker, err = m.attachEgress(sb, req.EgressAllow); err != nil {
			return Info{}, nil, err
		}
		undo = append(undo, func(context.Context) { _ = egressSrv.Close(); _ = broker.Close() })
		extraEnv = append(extraEnv, egressEnv(m.opts.Egress.Port())...)
	}
	if m.opts.Trust != "" {
		extraEnv = append(extraEnv, sandbox.TrustEnv...)
	}
	// A first command is readied while the record commits when its
	// environment is final here (no secrets add to it later) and no
	// snapshot is yet to be restored under it; it starts only once the
	// record and its intent are durable (FirstExec.Run).
	var firstRun *readied
	if first != nil && len(req.Secrets) == 0 && snap == nil {
		r := ready(sb, withDaemonEnv(*first, extraEnv))
		firstRun = &r
		undo = append(undo, func(context.Context) { r.abort() })
	}
	if err = record.wait(); err != nil {
		return Info{}, nil, fmt.Errorf("session: audit: %w", err)
	}
	if snap != nil {
		rctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
		err := snap.restore(rctx, sb)
		cancel()
		if err != nil {
			return Info{}, nil, err
		}
	}
	if len(req.Secrets) > 0 {
		// After the sandbox is on record: the approvals filed name it.
		undo = append(undo, func(context.Context) { m.opts.Secrets.Detach(info.ID) })
		senv, err := m.opts.Secrets.Attach(ctx, info.ID, actor, req.Secrets)
		if err != nil {
			return Info{}, nil, err
		}
		extraEnv = append(extraEnv, senv...)
	}
	if volumeHolder != "" {
		// Before the sandbox is live, so that its end (watch, finish)
		// releases them under its id.
		m.opts.Volumes.Rehold(volumeHolder, info.ID)
	}
	e := &entry{sb: sb, limits: limits, commit: commit, info: info, lastUsed: now, env: extraEnv, serving: serving, egress: egressSrv, broker: broker,
		ports: slices.Clone(req.Ports)}
	if first != nil {
		// Run by FirstExec.Run under the sandbox's quotas.
		fx = m.readyFirst(info.ID, sb, *first, extraEnv, record.intent, firstRun)
	}
	m.mu.Lock()
	m.live[info.ID] = e
	running = true
	m.mu.Unlock()
	go m.watch(info.ID, e)
	return info, fx, nil
}

// watch marks a sandbox crashed when it ends on its own (its pid 1 died:
// a fork bomb, the OOM killer), so it frees its slot and its commitment
// instead of showing as running while every exec fails.
func (m *Manager) watch(id string, e *entry) {
	select {
	case <-e.sb.Done():
	case <-m.stop:
		return
	}
	m.mu.Lock()
	ours := m.live[id] == e
	m.mu.Unlock()
	if !ours {
		return // ended by finish, which closed Done
	}
	reason := "its pid 1 died"
	if st, err := e.sb.Stats(context.Background()); err == nil && st.OOMKills > 0 {
		reason += fmt.Sprintf(" (the memory limit's OOM killer ran %d time(s))", st.OOMKills)
	}
	m.opts.Logf("sandbox %s crashed: %s", id, reason)
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	if err := m.finish(ctx, "daemon", id, StateCrashed, reason, KindSandboxCrash); err != nil {
		m.opts.Logf("session: recording the crash of %s: %v", id, err)
	}
}

// Audit kinds of this package besides audit.KindSandbox*.
const (
	// KindFileWrite is a file copy into a sandbox: its intent record
	// (KindFileWrite + audit.IntentSuffix) is written before the copy
	// starts, this one when it ended.
	KindFileWrite = "sandbox.file.write"
	// KindSandboxCrash is a sandbox that ended on its own.
	KindSandboxCrash = "sandbox.crash"
)

// CheckImageRef checks the form of a CreateRequest's Image: a local image
// must be a clean absolute path (optionally followed by ":tag" or
// "@digest"), and no reference is over 1024 bytes or more than one line.
// Whether the image may be used is the daemon's image policy.
func CheckImageRef(ref string) error {
	if strings.HasPrefix(ref, "/") || strings.HasPrefix(ref, ".") {
		p := ref
		if i := strings.IndexAny(ref, ":@"); i > 0 {
			p = ref[:i]
		}
		if !path.IsAbs(p) || path.Clean(p) != p {
			return fmt.Errorf("image %q: a local image must be a clean absolute path", ref)
		}
	}
	if len(ref) > 1024 || strings.ContainsAny(ref, "\x00\n") {
		return errors.New("image reference too long or not one line")
	}
	return nil
}

// CheckEgress validates egress rules without using them.
func (m *Manager) CheckEgress(rules []string) error {
	if m.opts.Egress == nil {
		if len(rules) > 0 {
			return fmt.Errorf("%w: egress: this daemon runs no egress broker", sandbox.ErrInvalidSpec)
		}
		return nil
	}
	if err := m.opts.Egress.Check(rules); err != nil {
		return fmt.Errorf("%w: egress: %v", sandbox.ErrInvalidSpec, err)
	}
	return nil
}

// AllowEgress adds rules to a running sandbox's egress allowlist. The caller
// (the approval gateway) decides whether it may; rules are checked first
// and none is added unless all are valid.
func (m *Manager) AllowEgress(ctx context.Context, id string, rules []string) error {
	if m.opts.Egress == nil {
		return fmt.Errorf("%w: this daemon runs no egress broker", sandbox.ErrInvalidRequest)
	}
	if err := m.opts.Egress.Check(rules); err != nil {
		return fmt.Errorf("%w: egress: %v", sandbox.ErrInvalidRequest, err)
	}
	m.mu.Lock()
	e, err := m.liveLocked(id)
	m.mu.Unlock()
	if err != nil {
		return err
	}
	for _, r := range rules {
		if err := e.broker.Allow(r); err != nil {
			return fmt.Errorf("session: egress rule %q: %w", r, err)
		}
	}
	return nil
}

// UpdateLimits changes a running sandbox's memory, pids, CPU, timeout and
// output limits (zero fields stay as they are), if the host's capacity has
// room for the new commitment. The caller decides whether it may.
func (m *Manager) UpdateLimits(ctx context.Context, id string, l sandbox.Limits) error {
	if l.WorkspaceBytes != 0 || l.TmpBytes != 0 || l.OpenFiles != 0 {
		return fmt.Errorf("%w: workspace, tmp and open_files are fixed once a sandbox runs", sandbox.ErrInvalidRequest)
	}
	m.mu.Lock()
	e, err := m.liveLocked(id)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	u, ok := e.sb.(limitUpdater)
	if !ok {
		m.mu.Unlock()
		return fmt.Errorf("%w: this runtime cannot change a running sandbox's limits", sandbox.ErrUnsupported)
	}
	next := e.limits.Changed(l)
	if err := next.Validate(); err != nil {
		m.mu.Unlock()
		return err
	}
	old, nc := e.commit, commitmentOf(next)
	if err := m.recommitLocked(old, nc); err != nil {
		m.mu.Unlock()
		return err
	}
	e.commit, e.limits = nc, next
	m.mu.Unlock()
	if err := u.UpdateLimits(ctx, l); err != nil {
		m.mu.Lock()
		if m.live[id] == e && e.commit == nc {
			_ = m.recommitLocked(nc, old) // back down: always fits
			e.commit = old
		}
		m.mu.Unlock()
		return err
	}
	return nil
}

// SetLifetime gives a running sandbox a new TTL (counted from its
// creation) and idle timeout; a zero value leaves that one as it is. The
// caller (the approval gateway) decides whether it may.
func (m *Manager) SetLifetime(ctx context.Context, id string, ttl, idle time.Duration) error {
	if ttl < 0 || idle < 0 {
		return fmt.Errorf("%w: ttl and idle timeout must not be negative", sandbox.ErrInvalidRequest)
	}
	m.mu.Lock()
	e, err := m.liveLocked(id)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	if ttl > 0 {
		e.info.ExpiresAt = e.info.CreatedAt.Add(ttl)
	}
	if idle > 0 {
		e.info.Idle = idle
	}
	expires, idleNow := e.info.ExpiresAt, e.info.Idle
	m.mu.Unlock()
	if _, err := m.db.DB().ExecContext(ctx, `UPDATE sandboxes SET expires_at = ?, idle_timeout_ms = ? WHERE id = ?`,
		fmtTime(expires), idleNow.Milliseconds(), id); err != nil {
		return fmt.Errorf("session: record lifetime of %s: %w", id, err)
	}
	return nil
}

func (m *Manager) extraEnv(id string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.live[id]; e != nil {
		return e.env
	}
	return nil
}

// Get describes a sandbox of any state. A running one is described from
// memory, which spares the exec and file paths a store read.
func (m *Manager) Get(ctx context.Context, id string) (Info, error) {
	m.mu.Lock()
	if e := m.live[id]; e != nil {
		in := e.info
		in.LastUsedAt = e.lastUsed
		in.Labels = maps.Clone(in.Labels)
		in.Limits = e.limits
		m.mu.Unlock()
		return in, nil
	}
	if in, ok := m.unrecorded[id]; ok {
		m.mu.Unlock()
		return in, nil
	}
	m.mu.Unlock()
	infos, err := m.query(ctx, `WHERE id = ?`, id)
	if err != nil {
		return Info{}, err
	}
	if len(infos) == 0 {
		return Info{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return infos[0], nil
}

// ListPage selects running sandboxes for List.
type ListPage struct {
	// Principal, if set, keeps only that principal's sandboxes.
	Principal string
	// Selector keeps sandboxes whose labels include every pair.
	Selector map[string]string
	// After continues a listing after the sandbox with this id (the last
	// of the previous page); Limit bounds the page (0: all).
	After string
	Limit int
}

// List returns running and paused sandboxes, oldest first, a page at a time; more
// reports that another page follows.
func (m *Manager) List(ctx context.Context, p ListPage) (infos []Info, more bool, err error) {
	where := []string{"state IN (?, ?)"}
	args := []any{StateRunning, StatePaused}
	if p.Principal != "" {
		where, args = append(where, "principal = ?"), append(args, p.Principal)
	}
	for _, k := range slices.Sorted(maps.Keys(p.Selector)) {
		where = append(where, "json_extract(labels, ?) IS ?")
		args = append(args, `$."`+strings.ReplaceAll(k, `"`, ``)+`"`, p.Selector[k])
	}
	if p.After != "" {
		where = append(where, "(created_at, id) > (SELECT created_at, id FROM sandboxes WHERE id = ?)")
		args = append(args, p.After)
	}
	q := "WHERE " + strings.Join(where, " AND ") + " ORDER BY created_at, id"
	if p.Limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", p.Limit+1)
	}
	infos, err = m.query(ctx, q, args...)
	if err != nil {
		return nil, false, err
	}
	if p.Limit > 0 && len(infos) > p.Limit {
		return infos[:p.Limit], true, nil
	}
	return infos, false, nil
}

func (m *Manager) query(ctx context.Context, where string, args ...any) ([]Info, error) {
	rows, err := m.db.ReadDB().QueryContext(ctx, `SELECT id, state, principal, labels, created_at, expires_at, idle_timeout_ms, last_used_at, ended_at, end_reason FROM sandboxes `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("session: query: %w", err)
	}
	defer rows.Close()
	var out []Info
	for rows.Next() {
		var in Info
		var labels, created, expires, lastUsed, ended string
		var idleMS int64
		if err := rows.Scan(&in.ID, &in.State, &in.Principal, &labels, &created, &expires, &idleMS, &lastUsed, &ended, &in.EndReason); err != nil {
			return nil, fmt.Errorf("session: query: %w", err)
		}
		_ = json.Unmarshal([]byte(labels), &in.Labels)
		in.CreatedAt, in.ExpiresAt, in.LastUsedAt, in.EndedAt = parseTime(created), parseTime(expires), parseTime(lastUsed), parseTime(ended)
		in.Idle = time.Duration(idleMS) * time.Millisecond
		// The store's last-used time is written at exec ends, its state
		// once a pause or resume is done; the live ones are fresher.
		m.mu.Lock()
		if e := m.live[in.ID]; e != nil {
			in.LastUsedAt, in.State, in.Limits = e.lastUsed, e.info.State, e.limits
		}
		m.mu.Unlock()
		out = append(out, in)
	}
	return out, rows.Err()
}

// use marks a sandbox busy for one operation, within the quotas, resuming
// it first if it is paused; the returned func ends it.
func (m *Manager) use(id string) (sandbox.Sandbox, func(), error) {
	return m.useResuming(id)
}

// useLocked is use of the running entry e; m.mu is held.
func (m *Manager) useLocked(id string, e *entry) (sandbox.Sandbox, func(), error) {
	if err := m.startUseLocked(id, e); err != nil {
		return nil, nil, err
	}
	e.lastUsed = m.opts.Now()
	return e.sb, func() {
		m.mu.Lock()
		m.endUseLocked(e)
		e.lastUsed = m.opts.Now()
		m.mu.Unlock()
	}, nil
}

// Exec runs a command. Its sandbox.exec.intent record (argv, cwd,
// environment names) is made durable before the command starts — if it
// cannot be, the command does not run — and a sandbox.exec record (exit,
// duration, bytes, truncation, the intent's seq; never the output) follows.
func (m *Manager) Exec(ctx context.Context, actor, id string, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	return m.ExecStarting(ctx, actor, id, req, nil)
}

// ExecStarting is Exec that calls starting (if set) once the command's
// intent record is durable, just before it starts: a caller that streams
// can send its status line then, and still answer a plain error when the
// command is refused (its record could not be written, a quota).
func (m *Manager) ExecStarting(ctx context.Context, actor, id string, req sandbox.ExecRequest, starting func()) (sandbox.ExecResult, error) {
	sb, done, err := m.use(id)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	defer done()
	start := execIntentData(req)
	req = withDaemonEnv(req, m.extraEnv(id))
	queued, err := m.log.BeginQueued(ctx, audit.Entry{Session: id, Actor: actor, Kind: audit.KindSandboxExec, Data: start})
	if err != nil {
		return sandbox.ExecResult{}, intentNotWritten(err)
	}
	// While the intent commits, the runtime readies what the command will
	// get; it starts only once the intent is durable.
	run := ready(sb, req)
	intent, err := queued.Wait(ctx)
	if err != nil {
		run.abort()
		return sandbox.ExecResult{}, intentNotWritten(err)
	}
	return m.runIntended(ctx, id, req, intent, run, starting)
}

// intentNotWritten is the error of a command refused because its intent
// record could not be made durable.
func intentNotWritten(err error) error {
	return fmt.Errorf("session: the command was not run, as its audit record could not be written: %w", err)
}

// execIntentData is what a command's sandbox.exec.intent record holds:
// argv, cwd, environment names (never values), timeout, tty and gate.
func execIntentData(req sandbox.ExecRequest) map[string]any {
	start := map[string]any{"argv": req.Argv, "tty": req.TTY}
	if req.Cwd != "" {
		start["cwd"] = req.Cwd
	}
	if names := envNames(req.Env); len(names) > 0 {
		start["env"] = names
	}
	if req.Timeout > 0 {
		start["timeout_ms"] = req.Timeout.Milliseconds()
	}
	if req.Gate != "" {
		start["gate"] = req.Gate // an approved run of this gated program
	}
	return start
}

// withDaemonEnv adds the daemon's variables to a command's environment.
// They come last so a request cannot point the sandbox's model calls
// elsewhere or swap its token.
func withDaemonEnv(req sandbox.ExecRequest, env []string) sandbox.ExecRequest {
	if len(env) > 0 {
		req.Env = append(slices.Clone(req.Env), env...)
	}
	return req
}

// runIntended starts a command whose intent is durable, waits for its
// end and queues its sandbox.exec record.
func (m *Manager) runIntended(ctx context.Context, id string, req sandbox.ExecRequest, intent *audit.Intent, run readied, starting func()) (sandbox.ExecResult, error) {
	if starting != nil && run.err == nil {
		starting()
	}
	res, execErr := run.run(ctx)
	data := map[string]any{"exit": res.ExitCode, "duration_ms": res.Duration.Milliseconds(),
		"stdout_bytes": res.StdoutBytes, "stderr_bytes": res.StderrBytes, "truncated": res.Truncated,
		"timed_out": res.TimedOut, "oom_killed": res.OOMKilled}
	if execErr != nil {
		data["error"] = execErr.Error()
	}
	if req.Gate != "" {
		data["gate"] = req.Gate // an approved run of this gated program
	}
	// The command ran whatever becomes of this record: its intent is on
	// record, so the answer does not wait for this one's commit (it is
	// queued in order, ahead of anything later), and a failure here is the
	// daemon's to report, not the caller's.
	logEnd := func(err error) { m.opts.Logf("session: audit of the end of an exec in %s: %v", id, err) }
	if err := intent.EndQueued(data, logEnd); err != nil {
		logEnd(err)
	}
	return res, execErr
}

// envNames lists the variable names of "KEY=VALUE" pairs: values may be
// anyone's secrets and are never recorded.
func envNames(env []string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		out = append(out, k)
	}
	return out
}

// WriteFile copies into the sandbox (see sandbox.Sandbox.WriteFile). Its
// sandbox.file.write.intent record (path, mode) is made durable before the
// copy starts, and a sandbox.file.write record with the bytes written and
// any error follows; never the content.
func (m *Manager) WriteFile(ctx context.Context, actor, id, path string, r io.Reader, mode fs.FileMode) error {
	sb, done, err := m.use(id)
	if err != nil {
		return err
	}
	defer done()
	perm := fmt.Sprintf("%#o", mode.Perm())
	intent, err := m.log.Begin(ctx, audit.Entry{Session: id, Actor: actor, Kind: KindFileWrite, Data: map[string]any{"path": path, "mode": perm}})
	if err != nil {
		return fmt.Errorf("session: the file was not written, as its audit record could not be written: %w", err)
	}
	cr := &countingReader{r: r}
	werr := sb.WriteFile(ctx, path, cr, mode)
	data := map[string]any{"path": path, "bytes": cr.n.Load()}
	if werr != nil {
		data["error"] = werr.Error()
	}
	logEnd := func(err error) { m.opts.Logf("session: audit of the end of a file write in %s: %v", id, err) }
	if err := intent.EndQueued(data, logEnd); err != nil {
		logEnd(err)
	}
	return werr
}

// countingReader counts what was read. n is atomic: a sandbox that gives
// up on a write (its context ended) may return while its copier's Read of
// the body is still pending.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// ReadFile copies out of the sandbox (see sandbox.Sandbox.ReadFile).
func (m *Manager) ReadFile(ctx context.Context, id, path string, w io.Writer) error {
	sb, done, err := m.use(id)
	if err != nil {
		return err
	}
	defer done()
	return sb.ReadFile(ctx, path, w)
}

// ListDir lists a directory inside (see sandbox.Sandbox.ListDir).
func (m *Manager) ListDir(ctx context.Context, id, path string) ([]sandbox.FileInfo, error) {
	sb, done, err := m.use(id)
	if err != nil {
		return nil, err
	}
	defer done()
	return sb.ListDir(ctx, path)
}

// Limits returns the limits in force in a running sandbox.
func (m *Manager) Limits(id string) (sandbox.Limits, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, err := m.liveLocked(id)
	if err != nil {
		return sandbox.Limits{}, err
	}
	return e.limits, nil
}

// liveLocked returns the running sandbox id, or ErrNotFound; m.mu is held.
func (m *Manager) liveLocked(id string) (*entry, error) {
	if e := m.live[id]; e != nil {
		return e, nil
	}
	return nil, fmt.Errorf("%w: %s (not running)", ErrNotFound, id)
}

// Running counts the running sandboxes of this run.
func (m *Manager) Running() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.live)
}

// Destroy ends a running sandbox. Destroying an ended one is not an error;
// an unknown id is ErrNotFound.
func (m *Manager) Destroy(ctx context.Context, actor, id string) error {
	return m.finish(ctx, actor, id, StateDestroyed, "destroyed by "+actor, audit.KindSandboxDestroy)
}

// finish ends a running sandbox: it stops serving it, tears it down and
// records the end. The teardown runs on a context of its own: a client
// that hangs up must not leave processes running behind an ended row. A
// teardown that fails is retried by the reaper (its commitment stays held
// until it succeeds); an end the store cannot take is kept in memory and
// retried, so the sandbox never shows as running again.
func (m *Manager) finish(ctx context.Context, actor, id, state, reason, kind string) error {
	m.mu.Lock()
	e := m.live[id]
	if e != nil {
		delete(m.live, id)
	}
	m.mu.Unlock()
	if e == nil {
		if _, err := m.Get(ctx, id); err != nil {
			return err
		}
		return nil // already ended
	}
	if m.opts.Model != nil {
		m.opts.Model.Revoke(id)
	}
	if m.opts.Secrets != nil {
		m.opts.Secrets.Detach(id)
	}
	if e.serving != nil {
		_ = e.serving.Close()
	}
	if e.egress != nil {
		_ = e.egress.Close()
		_ = e.broker.Close()
	}
	// Not while a pause or resume is under way: a freeze landing after
	// the kill would hold the sandbox's processes (cgroup v1). The
	// backends destroy a paused sandbox as they do a running one.
	e.pause.mu.Lock()
	derr := m.teardown(ctx, id, e)
	e.pause.mu.Unlock()
	if m.opts.Volumes != nil && derr == nil {
		// Only once nothing of the sandbox runs: a volume is never in two
		// sandboxes at once. A failed teardown keeps its volumes held.
		m.opts.Volumes.Release(id)
	}
	m.mu.Lock()
	lastUsed := e.lastUsed
	m.mu.Unlock()
	ended := e.info
	ended.State, ended.EndReason, ended.EndedAt, ended.LastUsedAt = state, reason, m.opts.Now(), lastUsed
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	// The row's end and the end's record commit in one transaction
	// (AppendWith). If the store refuses the row's change, the record is
	// written on its own and the row's end is retried (retry); if the
	// record fails, neither was written and the row's end is retried too.
	unrecorded := func(err error) {
		m.mu.Lock()
		m.unrecorded[id] = ended
		m.mu.Unlock()
		m.opts.Logf("session: recording the end of %s (retried): %v", id, err)
	}
	metricReason := reason
	if state == StateDestroyed {
		metricReason = "destroy" // the stored reason names the actor
	}
	m.opts.OnEnd(id, state, metricReason)
	data := map[string]any{"reason": reason}
	if derr != nil {
		data["error"] = derr.Error()
	}
	entry := audit.Entry{Session: id, Actor: actor, Kind: kind, Data: data}
	_, err := m.log.AppendWith(wctx, entry, func(ctx context.Context, tx *sql.Tx) error { return m.rows.writeEnd(ctx, tx, ended) })
	if errors.Is(err, audit.ErrChangeRefused) {
		unrecorded(err)
		_, err = m.log.Append(wctx, entry)
	} else if err != nil {
		unrecorded(fmt.Errorf("its audit record failed, so its row was not written: %w", err))
	}
	if err != nil {
		return fmt.Errorf("session: audit: %w", err)
	}
	return derr
}

// teardown destroys e's sandbox under a deadline of its own and, on
// success, returns what it held of the capacity; on failure it is queued
// for the reaper to retry.
func (m *Manager) teardown(ctx context.Context, id string, e *entry) error {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	err := e.sb.Destroy(dctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.tearingDown[id] = e
		return err
	}
	delete(m.tearingDown, id)
	m.releaseLocked(e.info.Principal, e.commit)
	return nil
}

// recordEnd writes a sandbox's end to its row, durably, in one commit.
func (m *Manager) recordEnd(ctx context.Context, in Info) error {
	tx, err := m.db.DB().BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("session: end %s: %w", in.ID, err)
	}
	if err := m.rows.writeEnd(ctx, tx, in); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("session: end %s: %w", in.ID, err)
	}
	return nil
}

// rowStatements are the writes of a sandbox's row (see Manager.rows).
type rowStatements struct {
	insert, touch, end *sql.Stmt
}

func (r *rowStatements) prepare(ctx context.Context, db *sql.DB) error {
	for _, s := range []struct {
		st  **sql.Stmt
		sql string
	}{
		{&r.insert, `INSERT INTO sandboxes
		(id, owner, principal, state, spec, labels, created_at, expires_at, idle_timeout_ms, last_used_at, ended_at, end_reason)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '', '')`},
		{&r.touch, `UPDATE sandboxes SET last_used_at = ? WHERE id = ?`},
		{&r.end, `UPDATE sandboxes SET state = ?, ended_at = ?, end_reason = ? WHERE id = ? AND state IN (?, ?)`},
	} {
		st, err := db.PrepareContext(ctx, s.sql)
		if err != nil {
			r.close()
			return fmt.Errorf("session: prepare: %w", err)
		}
		*s.st = st
	}
	return nil
}

func (r *rowStatements) close() {
	for _, st := range []*sql.Stmt{r.insert, r.touch, r.end} {
		if st != nil {
			_ = st.Close()
		}
	}
}

// writeEnd is recordEnd's two statements: the last use whatever the
// state, the end only over a running or paused row.
func (r *rowStatements) writeEnd(ctx context.Context, tx *sql.Tx, in Info) error {
	if _, err := tx.StmtContext(ctx, r.touch).ExecContext(ctx, fmtTime(in.LastUsedAt), in.ID); err != nil {
		return fmt.Errorf("session: end %s: %w", in.ID, err)
	}
	_, err := tx.StmtContext(ctx, r.end).ExecContext(ctx, in.State, fmtTime(in.EndedAt), in.EndReason, in.ID, StateRunning, StatePaused)
	if err != nil {
		return fmt.Errorf("session: end %s: %w", in.ID, err)
	}
	return nil
}

// retry finishes what finish could not: teardowns that failed and ends
// the store did not take.
func (m *Manager) retry() {
	m.mu.Lock()
	tear := maps.Clone(m.tearingDown)
	ends := maps.Clone(m.unrecorded)
	m.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(tear)) {
		if err := m.teardown(context.Background(), id, tear[id]); err != nil {
			m.opts.Logf("session: tearing down %s (retried): %v", id, err)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(ends)) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := m.recordEnd(ctx, ends[id])
		cancel()
		if err == nil {
			m.mu.Lock()
			delete(m.unrecorded, id)
			m.mu.Unlock()
		}
	}
}

// idleAction is what a sandbox's idle timeout does: its own, else the
// policy's.
func (m *Manager) idleAction(in Info) string {
	if in.IdleAction != "" {
		return in.IdleAction
	}
	return m.opts.IdleAction
}

// reap ends sandboxes past their TTL or idle timeout.
func (m *Manager) reap() {
	defer close(m.done)
	t := time.NewTicker(m.opts.ReapEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
		}
		m.retry()
		now := m.opts.Now()
		type due struct{ id, why string }
		var dues []due
		var toPause []string
		m.mu.Lock()
		for id, e := range m.live {
			switch {
			case !e.info.ExpiresAt.IsZero() && now.After(e.info.ExpiresAt):
				dues = append(dues, due{id, "ttl"}) // paused or not
			case e.pause.paused:
				// Idle already, and frozen: only its TTL ends it.
			case e.info.Idle > 0 && e.busy == 0 && now.Sub(e.lastUsed) > e.info.Idle:
				if m.idleAction(e.info) == IdlePause {
					toPause = append(toPause, id)
				} else {
					dues = append(dues, due{id, "idle"})
				}
			}
		}
		m.mu.Unlock()
		slices.Sort(toPause)
		for _, id := range m.idlePause(toPause) {
			dues = append(dues, due{id, "idle"})
		}
		sort.Slice(dues, func(i, j int) bool { return dues[i].id < dues[j].id })
		for _, d := range dues {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if err := m.finish(ctx, "reaper", d.id, StateReaped, d.why, audit.KindSandboxReap); err != nil {
				m.opts.Logf("reaping %s: %v", d.id, err)
			}
			cancel()
		}
	}
}

// Close stops the reaper and destroys every running sandbox of this run
// (graceful shutdown).
func (m *Manager) Close(ctx context.Context) error {
	m.once.Do(func() { close(m.stop) })
	<-m.done
	m.mu.Lock()
	ids := slices.Sorted(maps.Keys(m.live))
	m.mu.Unlock()
	var errs []error
	for _, id := range ids {
		if err := m.finish(ctx, "daemon", id, StateDestroyed, "daemon shut down", audit.KindSandboxDestroy); err != nil && !errors.Is(err, ErrNotFound) {
			errs = append(errs, err)
		}
	}
	m.retry()
	m.closeSnapshots()
	m.rows.close()
	m.mu.Lock()
	for id := range m.tearingDown {
		errs = append(errs, fmt.Errorf("session: sandbox %s could not be torn down", id))
	}
	m.mu.Unlock()
	return errors.Join(errs...)
}

// Stats reports the resource use of a running or paused sandbox, with the
// limits in force.
func (m *Manager) Stats(ctx context.Context, id string) (sandbox.Stats, sandbox.Limits, error) {
	m.mu.Lock()
	e, err := m.liveLocked(id)
	m.mu.Unlock()
	if err != nil {
		return sandbox.Stats{}, sandbox.Limits{}, err
	}
	st, err := e.sb.Stats(ctx)
	if err != nil {
		return sandbox.Stats{}, sandbox.Limits{}, fmt.Errorf("session: stats of %s: %w", id, err)
	}
	m.mu.Lock()
	l := e.limits
	m.mu.Unlock()
	return st, l, nil
}

// An execPreparer readies an exec without starting it
// (native.Sandbox.PrepareExec), so that the readying runs while the
// command's intent record commits.
type execPreparer interface {
	PrepareExec(req sandbox.ExecRequest) (sandbox.PreparedExec, error)
}

// readied is an exec made ready before its intent is durable: prepared
// where the sandbox is an execPreparer (err is the preparation's
// refusal), else run as a plain Exec once started.
type readied struct {
	sb       sandbox.Sandbox
	req      sandbox.ExecRequest
	prepared sandbox.PreparedExec
	err      error
}

func ready(sb sandbox.Sandbox, req sandbox.ExecRequest) readied {
	r := readied{sb: sb, req: req}
	if p, ok := sb.(execPreparer); ok {
		r.prepared, r.err = p.PrepareExec(req)
	}
	return r
}

// run starts the command (its intent is durable) and waits for its end.
func (r readied) run(ctx context.Context) (sandbox.ExecResult, error) {
	switch {
	case r.err != nil:
		return sandbox.ExecResult{}, r.err
	case r.prepared != nil:
		return r.prepared.Run(ctx)
	}
	return r.sb.Exec(ctx, r.req)
}

// abort drops a command that is not to run.
func (r readied) abort() {
	if r.prepared != nil {
		r.prepared.Abort()
	}
}
