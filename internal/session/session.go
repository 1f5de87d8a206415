// Package session runs sandboxes on behalf of API callers: it creates them
// on a sandbox.Runtime, records them in the store, audits every lifecycle
// step and every exec, enforces a maximum count, reaps them when their TTL or
// idle timeout passes, and, at start-up, marks the sandboxes of a dead
// daemon run as lost.
//
// Re-adoption after a restart is deliberately not attempted: a sandbox's
// pid 1 dies with the daemon thread that started it (parent-death signal),
// and its control socket dies with the daemon, so there is nothing safe to
// reconnect to. The runtime collects the cgroups such a run left; this
// package records the outcome (state "lost", audit kind sandbox.lost).
package session

import (
	"github.com/ironclaw/ironclaw/internal/errdefs"

	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/store"
)

// Errors callers branch on (errors.Is). Runtime errors pass through with
// their own vocabulary (sandbox.ErrInvalidSpec, ...).
var (
	ErrNotFound = errdefs.New(errdefs.ErrNotFound, "sandbox not found")
	ErrLimit    = errdefs.New(errdefs.ErrLimitExceeded, "too many sandboxes")
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
	// MaxSandboxes bounds running sandboxes; 0 means 100.
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
	// destroyed, reaped or lost; reason is e.g. "ttl", "idle"), for metrics.
	OnEnd func(id, state, reason string)
	// Model, if set, gives every sandbox the model proxy on its own
	// loopback, with a per-sandbox token in its commands' environment.
	Model ModelAccess
	// Egress, if set, gives every sandbox an egress broker on its own
	// loopback (HTTP_PROXY/HTTPS_PROXY), admitting only its allowlist.
	Egress EgressAccess
	// Images, if set, resolves CreateRequest.Image; without it a create
	// naming an image is refused.
	Images ImageResolver
	// Gate lists the gated programs (policy exec.gate) every sandbox is
	// created with (sandbox.Spec.Gate).
	Gate []string
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
	return []string{"HTTP_PROXY=" + p, "HTTPS_PROXY=" + p, "http_proxy=" + p, "https_proxy=" + p,
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost"}
}

// ModelAccess is what the session layer needs of the model proxy.
type ModelAccess interface {
	// Port is where the proxy listens inside every sandbox.
	Port() uint16
	// Handler serves the proxy (paths /openai/v1/... and /anthropic/v1/...).
	Handler() http.Handler
	// Mint returns a proxy token bound to one sandbox; Revoke ends them.
	Mint(session string) (string, error)
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
	Image  string
	TTL    time.Duration // 0: Options.DefaultTTL
	Idle   time.Duration // 0: Options.DefaultIdle
	Labels map[string]string
	// EgressAllow adds hosts ("api.github.com", "*.pypi.org:443") to the
	// sandbox's egress allowlist; it needs Options.Egress.
	EgressAllow []string
}

// Info describes a sandbox, running or ended.
type Info struct {
	ID    string `json:"id"`
	State string `json:"state"`
	// Principal created it ("agent", "agent:NAME", an operator's name);
	// agent tokens see only their own sandboxes.
	Principal  string            `json:"principal"`
	Labels     map[string]string `json:"labels"`
	CreatedAt  time.Time         `json:"created_at"`
	ExpiresAt  time.Time         `json:"expires_at,omitzero"`
	Idle       time.Duration     `json:"idle_timeout"`
	LastUsedAt time.Time         `json:"last_used_at"`
	EndedAt    time.Time         `json:"ended_at,omitzero"`
	EndReason  string            `json:"end_reason,omitempty"`
}

// Manager is safe for concurrent use. Close destroys what it runs.
type Manager struct {
	rt   sandbox.Runtime
	db   *store.Store
	log  *audit.Log
	opts Options

	mu   sync.Mutex
	live map[string]*entry // running sandboxes of this run

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

type entry struct {
	sb       sandbox.Sandbox
	env      []string     // added to every exec: the model proxy's address and token
	serving  *http.Server // the model proxy on the sandbox's loopback, or nil
	egress   *http.Server // the egress broker on the sandbox's loopback, or nil
	broker   EgressBroker
	info     Info
	lastUsed time.Time // guarded by Manager.mu
	busy     int       // execs and file copies in flight; an entry is never idle while busy
}

// New marks the running sandboxes of earlier daemon runs as lost (auditing
// each) and starts the reaper.
func New(ctx context.Context, rt sandbox.Runtime, db *store.Store, log *audit.Log, opts Options) (*Manager, error) {
	if opts.Owner == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		opts.Owner = "run-" + hex.EncodeToString(b[:])
	}
	if opts.MaxSandboxes == 0 {
		opts.MaxSandboxes = 100
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
	m := &Manager{rt: rt, db: db, log: log, opts: opts, live: map[string]*entry{}, stop: make(chan struct{}), done: make(chan struct{})}
	if err := m.markLost(ctx); err != nil {
		return nil, err
	}
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
	rows, err := m.db.ReadDB().QueryContext(ctx, `SELECT id, owner FROM sandboxes WHERE state = ? AND owner != ?`, StateRunning, m.opts.Owner)
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
	_, err := m.db.DB().ExecContext(ctx, `UPDATE sandboxes SET state = ?, ended_at = ?, end_reason = ? WHERE id = ? AND state = ?`,
		state, fmtTime(m.opts.Now()), reason, id, StateRunning)
	if err != nil {
		return fmt.Errorf("session: end %s: %w", id, err)
	}
	return nil
}

// Create starts a sandbox. Nothing is left behind on error.
func (m *Manager) Create(ctx context.Context, actor string, req CreateRequest) (Info, error) {
	for k, v := range req.Labels {
		if k == "" || len(k) > 63 || len(v) > 255 {
			return Info{}, fmt.Errorf("%w: label %q: keys are 1-63 bytes, values at most 255", sandbox.ErrInvalidSpec, k)
		}
	}
	if req.TTL < 0 || req.Idle < 0 {
		return Info{}, fmt.Errorf("%w: ttl and idle timeout must not be negative", sandbox.ErrInvalidSpec)
	}
	switch {
	case m.opts.Egress != nil:
		if err := m.opts.Egress.Check(req.EgressAllow); err != nil {
			return Info{}, fmt.Errorf("%w: egress: %v", sandbox.ErrInvalidSpec, err)
		}
	case len(req.EgressAllow) > 0:
		return Info{}, fmt.Errorf("%w: egress: this daemon runs no egress broker", sandbox.ErrInvalidSpec)
	}
	if req.Image != "" {
		if m.opts.Images == nil {
			return Info{}, fmt.Errorf("%w: this daemon serves no images", sandbox.ErrInvalidSpec)
		}
		root, err := m.opts.Images.Root(ctx, req.Image)
		if err != nil {
			return Info{}, err
		}
		req.Spec.Root = root
	}
	m.mu.Lock()
	if len(m.live) >= m.opts.MaxSandboxes {
		m.mu.Unlock()
		return Info{}, fmt.Errorf("%w: %d running, the maximum", ErrLimit, m.opts.MaxSandboxes)
	}
	// Hold a slot while the sandbox starts, so concurrent creates cannot
	// overshoot the maximum.
	slot := fmt.Sprintf("pending-%p", &req)
	m.live[slot] = nil
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.live, slot)
		m.mu.Unlock()
	}()

	req.Spec.Gate = slices.Clone(m.opts.Gate)
	req.Spec.Network.ExposedTCP = slices.Clone(req.Spec.Network.ExposedTCP)
	if m.opts.Model != nil {
		req.Spec.Network.ExposedTCP = append(req.Spec.Network.ExposedTCP, m.opts.Model.Port())
	}
	if m.opts.Egress != nil {
		req.Spec.Network.ExposedTCP = append(req.Spec.Network.ExposedTCP, m.opts.Egress.Port())
	}
	sb, err := m.rt.Create(ctx, req.Spec)
	if err != nil {
		return Info{}, err
	}
	var extraEnv []string
	var serving *http.Server
	if m.opts.Model != nil {
		if extraEnv, serving, err = m.attachModel(sb); err != nil {
			_ = sb.Destroy(context.Background())
			return Info{}, err
		}
	}
	var egressSrv *http.Server
	var broker EgressBroker
	if m.opts.Egress != nil {
		if egressSrv, broker, err = m.attachEgress(sb, req.EgressAllow); err != nil {
			if serving != nil {
				serving.Close()
			}
			if m.opts.Model != nil {
				m.opts.Model.Revoke(sb.ID())
			}
			_ = sb.Destroy(context.Background())
			return Info{}, err
		}
		extraEnv = append(extraEnv, egressEnv(m.opts.Egress.Port())...)
	}
	now := m.opts.Now()
	ttl, idle := req.TTL, req.Idle
	if ttl == 0 {
		ttl = m.opts.DefaultTTL
	}
	if idle == 0 {
		idle = m.opts.DefaultIdle
	}
	info := Info{ID: sb.ID(), State: StateRunning, Principal: actor, Labels: maps.Clone(req.Labels), CreatedAt: now, Idle: idle, LastUsedAt: now}
	if info.Labels == nil {
		info.Labels = map[string]string{}
	}
	if ttl > 0 {
		info.ExpiresAt = now.Add(ttl)
	}
	// Environment values may be anyone's secrets: the record keeps names only.
	recorded := req.Spec
	recorded.Env = nil
	for _, kv := range req.Spec.Env {
		k, _, _ := strings.Cut(kv, "=")
		recorded.Env = append(recorded.Env, k+"=[not recorded]")
	}
	spec, _ := json.Marshal(recorded)
	labels, _ := json.Marshal(info.Labels)
	if _, err := m.db.DB().ExecContext(ctx, `INSERT INTO sandboxes
		(id, owner, principal, state, spec, labels, created_at, expires_at, idle_timeout_ms, last_used_at, ended_at, end_reason)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, '', '')`,
		info.ID, m.opts.Owner, actor, StateRunning, string(spec), string(labels), fmtTime(now), fmtTime(info.ExpiresAt), idle.Milliseconds(), fmtTime(now)); err != nil {
		_ = sb.Destroy(context.Background())
		return Info{}, fmt.Errorf("session: record %s: %w", info.ID, err)
	}
	if _, err := m.log.Append(ctx, audit.Entry{Session: info.ID, Actor: actor, Kind: audit.KindSandboxCreate, Data: map[string]any{
		"labels": info.Labels, "ttl_ms": ttl.Milliseconds(), "idle_ms": idle.Milliseconds(), "spec": json.RawMessage(spec)}}); err != nil {
		_ = sb.Destroy(context.Background())
		_ = m.end(context.Background(), info.ID, StateDestroyed, "audit failed")
		return Info{}, fmt.Errorf("session: audit: %w", err)
	}
	m.mu.Lock()
	m.live[info.ID] = &entry{sb: sb, info: info, lastUsed: now, env: extraEnv, serving: serving, egress: egressSrv, broker: broker}
	m.mu.Unlock()
	return info, nil
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
	e := m.live[id]
	m.mu.Unlock()
	if e == nil {
		return fmt.Errorf("%w: %s (not running)", ErrNotFound, id)
	}
	for _, r := range rules {
		if err := e.broker.Allow(r); err != nil {
			return fmt.Errorf("session: egress rule %q: %w", r, err)
		}
	}
	return nil
}

// UpdateLimits changes a running sandbox's memory, pids, CPU, timeout and
// output limits (zero fields stay as they are). The caller decides whether
// it may.
func (m *Manager) UpdateLimits(ctx context.Context, id string, l sandbox.Limits) error {
	if l.WorkspaceBytes != 0 || l.TmpBytes != 0 || l.OpenFiles != 0 {
		return fmt.Errorf("%w: workspace, tmp and open_files are fixed once a sandbox runs", sandbox.ErrInvalidRequest)
	}
	sb, done, err := m.use(id)
	if err != nil {
		return err
	}
	defer done()
	u, ok := sb.(limitUpdater)
	if !ok {
		return fmt.Errorf("%w: this runtime cannot change a running sandbox's limits", sandbox.ErrUnsupported)
	}
	return u.UpdateLimits(ctx, l)
}

// SetLifetime gives a running sandbox a new TTL (counted from its
// creation) and idle timeout; a zero value leaves that one as it is. The
// caller (the approval gateway) decides whether it may.
func (m *Manager) SetLifetime(ctx context.Context, id string, ttl, idle time.Duration) error {
	if ttl < 0 || idle < 0 {
		return fmt.Errorf("%w: ttl and idle timeout must not be negative", sandbox.ErrInvalidRequest)
	}
	m.mu.Lock()
	e := m.live[id]
	if e == nil {
		m.mu.Unlock()
		return fmt.Errorf("%w: %s (not running)", ErrNotFound, id)
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

// List returns the running sandboxes whose labels include every pair of
// selector, oldest first; a non-empty principal keeps only that
// principal's.
func (m *Manager) List(ctx context.Context, principal string, selector map[string]string) ([]Info, error) {
	where, args := `WHERE state = ? ORDER BY created_at, id`, []any{StateRunning}
	if principal != "" {
		where, args = `WHERE state = ? AND principal = ? ORDER BY created_at, id`, []any{StateRunning, principal}
	}
	all, err := m.query(ctx, where, args...)
	if err != nil {
		return nil, err
	}
	var out []Info
	for _, in := range all {
		match := true
		for k, v := range selector {
			if in.Labels[k] != v {
				match = false
				break
			}
		}
		if match {
			out = append(out, in)
		}
	}
	return out, nil
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
		// The store's last-used time is written at exec ends; the live one
		// is fresher.
		m.mu.Lock()
		if e := m.live[in.ID]; e != nil {
			in.LastUsedAt = e.lastUsed
		}
		m.mu.Unlock()
		out = append(out, in)
	}
	return out, rows.Err()
}

// use marks a sandbox busy for one operation; the returned func ends it.
func (m *Manager) use(id string) (sandbox.Sandbox, func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.live[id]
	if e == nil {
		return nil, nil, fmt.Errorf("%w: %s (not running)", ErrNotFound, id)
	}
	e.busy++
	e.lastUsed = m.opts.Now()
	return e.sb, func() {
		m.mu.Lock()
		e.busy--
		e.lastUsed = m.opts.Now()
		m.mu.Unlock()
	}, nil
}

// Exec runs a command and audits it (argv, exit, duration, bytes,
// truncation; never the output).
func (m *Manager) Exec(ctx context.Context, actor, id string, req sandbox.ExecRequest) (sandbox.ExecResult, error) {
	sb, done, err := m.use(id)
	if err != nil {
		return sandbox.ExecResult{}, err
	}
	defer done()
	if env := m.extraEnv(id); len(env) > 0 {
		// The daemon's values come last so a request cannot point the
		// sandbox's model calls elsewhere or swap its token.
		req.Env = append(slices.Clone(req.Env), env...)
	}
	res, execErr := sb.Exec(ctx, req)
	data := map[string]any{"argv": req.Argv, "exit": res.ExitCode, "duration_ms": res.Duration.Milliseconds(),
		"stdout_bytes": res.StdoutBytes, "stderr_bytes": res.StderrBytes, "truncated": res.Truncated,
		"timed_out": res.TimedOut, "oom_killed": res.OOMKilled}
	if execErr != nil {
		data["error"] = execErr.Error()
	}
	if req.Gate != "" {
		data["gate"] = req.Gate // an approved run of this gated program
	}
	// The audit record is the durable trace of the exec; last_used_at lives
	// in memory and reaches the row when the sandbox ends, which spares
	// every exec a second synchronous commit.
	if _, err := m.log.Append(context.WithoutCancel(ctx), audit.Entry{Session: id, Actor: actor, Kind: audit.KindSandboxExec, Data: data}); err != nil {
		return res, fmt.Errorf("session: audit: %w", err)
	}
	return res, execErr
}

// WriteFile copies into the sandbox (see sandbox.Sandbox.WriteFile) and
// audits it (path, bytes, mode; never the content).
func (m *Manager) WriteFile(ctx context.Context, actor, id, path string, r io.Reader, mode fs.FileMode) error {
	sb, done, err := m.use(id)
	if err != nil {
		return err
	}
	defer done()
	cr := &countingReader{r: r}
	werr := sb.WriteFile(ctx, path, cr, mode)
	data := map[string]any{"path": path, "bytes": cr.n, "mode": fmt.Sprintf("%#o", mode.Perm())}
	if werr != nil {
		data["error"] = werr.Error()
	}
	if _, err := m.log.Append(context.WithoutCancel(ctx), audit.Entry{Session: id, Actor: actor, Kind: KindFileWrite, Data: data}); err != nil {
		return fmt.Errorf("session: audit: %w", err)
	}
	return werr
}

// KindFileWrite is the audit kind of a file copied into a sandbox.
const KindFileWrite = "sandbox.file.write"

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
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

// Running counts the running sandboxes of this run.
func (m *Manager) Running() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, e := range m.live {
		if e != nil {
			n++
		}
	}
	return n
}

// Destroy ends a running sandbox. Destroying an ended one is not an error;
// an unknown id is ErrNotFound.
func (m *Manager) Destroy(ctx context.Context, actor, id string) error {
	return m.finish(ctx, actor, id, StateDestroyed, "destroyed by "+actor, audit.KindSandboxDestroy)
}

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
	if e.serving != nil {
		_ = e.serving.Close()
	}
	if e.egress != nil {
		_ = e.egress.Close()
		_ = e.broker.Close()
	}
	derr := e.sb.Destroy(ctx)
	m.mu.Lock()
	lastUsed := e.lastUsed
	m.mu.Unlock()
	_, _ = m.db.DB().ExecContext(context.WithoutCancel(ctx), `UPDATE sandboxes SET last_used_at = ? WHERE id = ?`, fmtTime(lastUsed), id)
	if err := m.end(context.WithoutCancel(ctx), id, state, reason); err != nil {
		return err
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
	if _, err := m.log.Append(context.WithoutCancel(ctx), audit.Entry{Session: id, Actor: actor, Kind: kind, Data: data}); err != nil {
		return fmt.Errorf("session: audit: %w", err)
	}
	return derr
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
		now := m.opts.Now()
		type due struct{ id, why string }
		var dues []due
		m.mu.Lock()
		for id, e := range m.live {
			switch {
			case e == nil: // a create in progress
			case !e.info.ExpiresAt.IsZero() && now.After(e.info.ExpiresAt):
				dues = append(dues, due{id, "ttl"})
			case e.info.Idle > 0 && e.busy == 0 && now.Sub(e.lastUsed) > e.info.Idle:
				dues = append(dues, due{id, "idle"})
			}
		}
		m.mu.Unlock()
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
	return errors.Join(errs...)
}
