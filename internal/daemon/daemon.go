// Package daemon is `ironclaw serve`: it opens the data directory (lock,
// tokens, database), starts the sandbox runtime, the session manager and
// the HTTP API, serves until its context ends, and then shuts everything
// down in order, destroying the sandboxes it runs.
package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/api"
	"github.com/ironclaw/ironclaw/internal/api/console"
	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/errdefs"
	"github.com/ironclaw/ironclaw/internal/gateway"
	"github.com/ironclaw/ironclaw/internal/image"
	"github.com/ironclaw/ironclaw/internal/metrics"
	"github.com/ironclaw/ironclaw/internal/netlimit"
	"github.com/ironclaw/ironclaw/internal/policy"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/backend"
	"github.com/ironclaw/ironclaw/internal/session"
	"github.com/ironclaw/ironclaw/internal/store"
	"github.com/ironclaw/ironclaw/internal/tools"
	"golang.org/x/sys/unix"
)

// File names inside the data directory.
const (
	AgentTokenFile    = client.AgentTokenFile
	OperatorTokenFile = client.OperatorTokenFile
	DatabaseFile      = "ironclaw.db"
	LockFile          = "lock"
)

// ErrLocked is returned by Run when another daemon holds the data directory.
var ErrLocked = errors.New("another ironclaw daemon is using this data directory")

// ErrInvalidConfig is returned by Run (and Config.Validate) for a setting
// the rule below refuses; nothing has been started then.
var ErrInvalidConfig = errdefs.New(errdefs.ErrInvalidArgument, "invalid daemon configuration")

// Config configures Run. The zero value is usable: every zero field takes
// its default, and the defaults are those of package defaults.
//
// One rule holds for every number and duration here, in ModelConfig,
// EgressConfig and Inside: 0 means the default; a negative value means
// none (no pool, no idle timeout, no listener, no budget, no warning)
// wherever having none makes sense, and is refused (ErrInvalidConfig)
// wherever it does not (a bound that guards the daemon against hostile
// clients, a size, a rate). Each field says which, as "negative: none" or
// "negative: refused". `ironclaw serve` spells none as "off".
type Config struct {
	// Listen is the TCP address to serve on ("" means defaults.Listen,
	// 127.0.0.1:8787; port 0 picks a free one, see Ready).
	Listen string
	// PortsListen is where port URLs are served when the policy turns
	// inbound ports on (ports.inbound): a listener of its own, so that a
	// sandbox's pages are another origin than the API and the console.
	// "" means defaults.PortsListen.
	PortsListen string
	// VolumesDir holds the named volumes' filesystems: the operator's
	// choice of which host directory (and disk) backs them. "" means the
	// data directory's volumes/. It is created 0700.
	VolumesDir string
	// DataDir holds the lock, the token files and the database ("" means
	// defaults.DataDir(): $XDG_DATA_HOME/ironclaw or
	// ~/.local/share/ironclaw). It is created with mode 0700.
	DataDir string
	// Model configures the model proxy (keys come from the environment).
	Model ModelConfig
	// Egress configures the egress broker of every sandbox.
	Egress EgressConfig
	// Inside bounds the servers on every sandbox's loopback (the model
	// proxy and the egress broker): connections per sandbox, the request
	// head, body, idle and write timeouts (see package netlimit). Its
	// counts (MaxConns, MaxHeaderBytes) follow the rule with negative:
	// refused; its timeouts with negative: none; its Body as
	// EgressConfig.Body.
	Inside netlimit.Config
	// PolicyFile is the host-side policy (YAML, see package policy): its
	// egress rules add to Egress, and it sets the approval timeout,
	// webhooks and which commands need approval. "" is the default policy.
	PolicyFile string
	// ImageDirs are the directories beneath which API clients may name
	// local images (plain directory roots, OCI layouts, tarballs), and
	// ImageRegistries the registry hosts they may pull from. Both empty:
	// no images, only the host-toolchain view. Images are unpacked once
	// into <data dir>/images.
	ImageDirs, ImageRegistries []string
	// Console serves the web console at /ui/ (the default); DisableConsole
	// turns it off.
	DisableConsole bool
	// The E2B-compatible API is served under /e2b (package e2b) unless
	// DisableE2B; its key for the default agent is written to e2b.key.
	// E2BDomain, if set, routes hosts <port>-<id>.<E2BDomain> to sandboxes;
	// E2BTemplates maps template ids and aliases onto images.
	// E2BPorts are the loopback ports every sandbox created through E2B
	// declares, so its servers can be previewed (policy ports.inbound).
	DisableE2B   bool
	E2BDomain    string
	E2BTemplates map[string]string
	E2BPorts     []uint16
	// PoolSize is how many sealed idle sandboxes are kept ready (0:
	// defaults.PoolSize, 2; negative: none, no pool).
	PoolSize int
	// Spares is how many sandbox inits, and as many cgroups, the native
	// runtime keeps started ahead for the creates the pool cannot serve
	// (0: defaults.SpareInits, 2; negative: none).
	Spares int
	// MaxSandboxes bounds running sandboxes (0: defaults.MaxSandboxes,
	// 100; negative: refused).
	MaxSandboxes int
	// DefaultTTL applies to sandboxes created without a ttl (0:
	// defaults.TTL, which is none; negative: none).
	DefaultTTL time.Duration
	// DefaultIdle applies to sandboxes created without an idle timeout (0:
	// defaults.Idle, 30m; negative: none).
	DefaultIdle time.Duration
	// RatePerSecond and RateBurst shape each principal's (token's)
	// request rate, SandboxRatePerSecond and SandboxRateBurst each running
	// sandbox's, and RateBuckets bounds the sandbox buckets held at once
	// (0: defaults.RatePerSecond and RateBurst, 4000/s with a burst of
	// 8000, SandboxRatePerSecond and SandboxRateBurst, 2000/s and 4000,
	// RateBuckets, 4096; negative, NaN or infinite: refused).
	RatePerSecond        float64
	RateBurst            int
	SandboxRatePerSecond float64
	SandboxRateBurst     int
	RateBuckets          int
	// MaxBodyBytes bounds JSON request bodies and MaxUploadBytes file
	// uploads (0: defaults.MaxBodyBytes, 1 MiB, and MaxUploadBytes, 256
	// MiB; negative: refused).
	MaxBodyBytes, MaxUploadBytes int64
	// WaitOutputBytes bounds the output of an exec with ?wait=1 (0:
	// defaults.WaitOutputBytes, 1 MiB; negative: refused).
	WaitOutputBytes int64
	// BodyTimeout bounds how long the API waits for a request body, and how
	// long an upload may stall (0: defaults.BodyTimeout, 30s; negative:
	// refused).
	BodyTimeout time.Duration
	// At shutdown, requests in flight get ShutdownGrace to finish; then
	// the rest, typically exec and audit follow streams, are cancelled
	// (killing their commands), and their handlers get ShutdownTimeout to
	// return before their connections are cut (0: defaults.ShutdownGrace,
	// 2s, and ShutdownTimeout, 10s; negative: refused).
	ShutdownGrace, ShutdownTimeout time.Duration
	// Runtime names the sandbox backend (see package backend): "" or
	// "native", "runc", "crun", "runsc". The warm pool is native's.
	Runtime string
	// InitExe is the binary re-executed as the sandbox init ("" means this
	// very binary; see native.Options.Exe).
	InitExe string
	// Logf receives start-up messages and diagnostics (never a token); nil
	// discards them.
	Logf func(format string, args ...any)
	// Ready, if set, is called with the listening address (host:port) once
	// the daemon accepts requests.
	Ready func(addr string)
	// AuditKeyFile holds the key that authenticates the audit chain
	// ("" means audit.DefaultKeyFile(): /etc/ironclaw/audit.key as root,
	// else $XDG_CONFIG_HOME/ironclaw/audit.key). It is created (0600) on
	// first start; a file other users can access, or one inside DataDir,
	// is refused.
	AuditKeyFile string
	// AuditCheckpointFile receives the audit chain's head periodically
	// and at shutdown ("" means audit.DefaultCheckpointFile(DataDir):
	// under /var/log/ironclaw as root, else $XDG_STATE_HOME/ironclaw); it
	// must lie outside DataDir. AuditCheckpointURL, if set, also receives
	// every checkpoint as a JSON POST.
	AuditCheckpointFile, AuditCheckpointURL string
	// SecretsKeyFile holds the key that seals the brokered secrets at
	// rest (<data dir>/secrets.json; issue 15). "" means secrets.key
	// beside AuditKeyFile. It is created (0600) on first start; a file
	// other users can access, or one inside DataDir, is refused.
	SecretsKeyFile string
	// StoreSizeWarn is the database size in bytes past which a warning is
	// logged (0: defaults.StoreSizeWarn, 1 GiB; negative: none, never).
	StoreSizeWarn int64
}

// Validate reports what Run would refuse in c (ErrInvalidConfig), without
// starting anything.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

// withDefaults applies the rule of Config to every field: a zero becomes
// its default; a negative value becomes none in the form the package
// reading it takes for none (0 for the pool, the lifetimes and the model
// budgets; -1 for the ports, the size warning and the timeouts of netlimit
// and egress), or is refused.
func (c Config) withDefaults() (Config, error) {
	var errs []error
	if c.Listen == "" {
		c.Listen = defaults.Listen
	}
	if c.DataDir == "" {
		c.DataDir = defaults.DataDir()
	}
	c.PoolSize = orNone(c.PoolSize, defaults.PoolSize, 0)
	c.Spares = orNone(c.Spares, defaults.SpareInits, 0)
	c.MaxSandboxes = bound(&errs, "MaxSandboxes", c.MaxSandboxes, defaults.MaxSandboxes)
	c.DefaultTTL = orNone(c.DefaultTTL, defaults.TTL, 0)
	c.DefaultIdle = orNone(c.DefaultIdle, defaults.Idle, 0)
	c.RatePerSecond = rate(&errs, "RatePerSecond", c.RatePerSecond, defaults.RatePerSecond)
	c.RateBurst = bound(&errs, "RateBurst", c.RateBurst, defaults.RateBurst)
	c.SandboxRatePerSecond = rate(&errs, "SandboxRatePerSecond", c.SandboxRatePerSecond, defaults.SandboxRatePerSecond)
	c.SandboxRateBurst = bound(&errs, "SandboxRateBurst", c.SandboxRateBurst, defaults.SandboxRateBurst)
	c.RateBuckets = bound(&errs, "RateBuckets", c.RateBuckets, defaults.RateBuckets)
	c.MaxBodyBytes = bound(&errs, "MaxBodyBytes", c.MaxBodyBytes, defaults.MaxBodyBytes)
	c.MaxUploadBytes = bound(&errs, "MaxUploadBytes", c.MaxUploadBytes, defaults.MaxUploadBytes)
	c.WaitOutputBytes = bound(&errs, "WaitOutputBytes", c.WaitOutputBytes, defaults.WaitOutputBytes)
	c.BodyTimeout = bound(&errs, "BodyTimeout", c.BodyTimeout, defaults.BodyTimeout)
	c.ShutdownGrace = bound(&errs, "ShutdownGrace", c.ShutdownGrace, defaults.ShutdownGrace)
	c.ShutdownTimeout = bound(&errs, "ShutdownTimeout", c.ShutdownTimeout, defaults.ShutdownTimeout)
	c.StoreSizeWarn = orNone(c.StoreSizeWarn, defaults.StoreSizeWarn, -1)
	c.Model = c.Model.withDefaults(&errs)
	c.Egress = c.Egress.withDefaults(&errs)
	c.Inside = insideWithDefaults(&errs, c.Inside)
	for _, p := range []struct {
		name string
		v    int
	}{{"Model.Port", c.Model.Port}, {"Egress.Port", c.Egress.Port}} {
		if p.v > 65535 {
			errs = append(errs, fmt.Errorf("%w: %s %d is not a port (1-65535)", ErrInvalidConfig, p.name, p.v))
		}
	}
	if c.Model.Port > 0 && c.Model.Port == c.Egress.Port {
		errs = append(errs, fmt.Errorf("%w: Model.Port and Egress.Port are both %d", ErrInvalidConfig, c.Model.Port))
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return c, errors.Join(errs...)
}

// number is what Config's rule applies to: counts, sizes and durations.
type number interface{ ~int | ~int64 }

// orNone applies Config's rule to a field that can be off: 0 is def, a
// negative value is none.
func orNone[T number](v, def, none T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return none
	}
	return v
}

// bound applies Config's rule to a field that cannot be off: 0 is def, a
// negative value is refused (added to errs, naming the field).
func bound[T number](errs *[]error, name string, v, def T) T {
	if v < 0 {
		*errs = append(*errs, fmt.Errorf("%w: %s is %v: must not be negative (0 means the default)", ErrInvalidConfig, name, v))
	}
	if v == 0 {
		return def
	}
	return v
}

// rate applies Config's rule to a rate, which cannot be off: 0 is def; a
// negative value, NaN or an infinity is refused.
func rate(errs *[]error, name string, v, def float64) float64 {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0) || v < 0:
		*errs = append(*errs, fmt.Errorf("%w: %s is %v: want a number, not negative (0 means the default)", ErrInvalidConfig, name, v))
	case v == 0:
		return def
	}
	return v
}

// insideWithDefaults applies Config's rule to the in-sandbox servers'
// bounds: the counts cannot be off; the timeouts can (-1, which netlimit
// reads as none).
func insideWithDefaults(errs *[]error, n netlimit.Config) netlimit.Config {
	n.MaxConns = bound(errs, "Inside.MaxConns", n.MaxConns, defaults.InsideMaxConns)
	n.MaxHeaderBytes = bound(errs, "Inside.MaxHeaderBytes", n.MaxHeaderBytes, defaults.InsideMaxHeaderBytes)
	n.HeaderTimeout = orNone(n.HeaderTimeout, defaults.InsideHeaderTimeout, -1)
	n.IdleTimeout = orNone(n.IdleTimeout, defaults.InsideIdleTimeout, -1)
	n.WriteTimeout = orNone(n.WriteTimeout, defaults.InsideWriteTimeout, -1)
	n.Body = bodyWithDefaults(errs, "Inside.Body", n.Body)
	return n
}

// bodyWithDefaults applies Config's rule to each field of a BodyLimits:
// Timeout cannot be off (a body must arrive some time); MinRate and Idle
// can (-1, which netlimit reads as none).
func bodyWithDefaults(errs *[]error, name string, b netlimit.BodyLimits) netlimit.BodyLimits {
	b.Timeout = bound(errs, name+".Timeout", b.Timeout, defaults.InsideBodyTimeout)
	b.MinRate = orNone(b.MinRate, defaults.InsideBodyMinRate, -1)
	b.Idle = orNone(b.Idle, defaults.InsideBodyIdle, -1)
	return b
}

// Run serves until ctx ends, then shuts down: it stops accepting, lets
// in-flight requests finish (see ShutdownGrace), destroys every
// sandbox (audited as "daemon shut down") and closes the runtime, the
// audit log and the store. A shutdown caused by ctx is a nil error.
func Run(ctx context.Context, cfg Config) (err error) {
	cfg, err = cfg.withDefaults()
	if err != nil {
		return err
	}
	logf := cfg.Logf
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return err
	}
	if err := prepareDir(dir, logf); err != nil {
		return err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	raiseFileLimit(logf)

	// A data dir that has run before holds its tokens: there, a missing or
	// empty database is lost state (and a lost audit trail), not a first
	// start.
	used := fileExists(filepath.Join(dir, AgentTokenFile)) || fileExists(filepath.Join(dir, OperatorTokenFile))
	agentTok, err := ensureToken(filepath.Join(dir, AgentTokenFile))
	if err != nil {
		return err
	}
	operTok, err := ensureToken(filepath.Join(dir, OperatorTokenFile))
	if err != nil {
		return err
	}
	logf("agent token in %s", filepath.Join(dir, AgentTokenFile))
	logf("operator token in %s", filepath.Join(dir, OperatorTokenFile))
	operators, err := namedTokens[api.Operator](dir, OperatorsDir)
	if err != nil {
		return err
	}
	agents, err := namedTokens[api.Agent](dir, AgentsDir)
	if err != nil {
		return err
	}
	pol := policy.Default()
	if cfg.PolicyFile != "" {
		if pol, err = policy.Load(cfg.PolicyFile); err != nil {
			return err
		}
		logf("policy from %s", cfg.PolicyFile)
	}
	cfg.Egress.Allow = append(slices.Clone(cfg.Egress.Allow), pol.Egress.Allow...)
	cfg.Egress.AllowPrivate = append(slices.Clone(cfg.Egress.AllowPrivate), pol.Egress.AllowPrivate...)
	cfg.Egress.DenyUnknown = cfg.Egress.DenyUnknown || pol.Egress.Unknown == policy.UnknownDeny
	// The policy's secrets are read now: a missing one stops the start,
	// and the audit log redacts their values wherever they might appear.
	policyValues, err := policySecretValues(pol, os.Getenv)
	if err != nil {
		return err
	}

	// Everything below is closed in reverse order; the closers run with a
	// fresh context because ctx is usually already cancelled by then.
	var closers []func(context.Context) error
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout+20*time.Second)
		defer cancel()
		for i := len(closers) - 1; i >= 0; i-- {
			if cerr := closers[i](cctx); cerr != nil {
				logf("shutdown: %v", cerr)
				err = errors.Join(err, cerr)
			}
		}
	}()

	st, err := store.OpenWith(ctx, filepath.Join(dir, DatabaseFile), store.Options{MustExist: used, PresizeWAL: true})
	if err != nil {
		return err
	}
	closers = append(closers, func(context.Context) error { return st.Close() })
	akey, cpFile, err := auditCustody(cfg, dir, logf)
	if err != nil {
		return err
	}
	// The API tokens and the provider keys are redacted wherever they might
	// appear in an audit record.
	redactor := audit.NewRedactor(append(append(secretsOf(os.Getenv), agentTok, operTok), stringsOf(policyValues)...)...)
	alog, err := audit.New(ctx, st, audit.Options{
		Redactor:       redactor,
		Key:            akey,
		CheckpointFile: cpFile,
		CheckpointURL:  cfg.AuditCheckpointURL,
		Logf:           logf,
	})
	if err != nil {
		return err
	}
	reg := metrics.NewRegistry()
	if err := registerStoreMetrics(reg, st); err != nil {
		return err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	go st.WatchSize(wctx, store.SizeWatch{Threshold: cfg.StoreSizeWarn, Logf: logf})
	closers = append(closers, func(context.Context) error { stopWatch(); return nil })
	closers = append(closers, func(context.Context) error { return alog.Close() })
	proxy, err := newModelProxy(cfg.Model, st, alog, logf)
	if err != nil {
		return err
	}
	closers = append(closers, func(context.Context) error { return proxy.Close() })
	var model session.ModelAccess
	var poolPorts []uint16
	if cfg.Model.Port > 0 { // negative: none
		port := uint16(cfg.Model.Port)
		model = modelAccess{Proxy: proxy, port: port}
		poolPorts = []uint16{port}
	}
	asker := &secretAsker{}
	secretStore, grants, err := openSecrets(cfg, dir, pol, policyValues, alog, redactor, asker, logf)
	if err != nil {
		return err
	}
	if cfg.Egress.Secrets == nil {
		cfg.Egress.Secrets = grants // the broker swaps what the grants allow
	}
	var eg session.EgressAccess
	var egAccess *egressAccess
	var trustDir string      // the sandboxes' trust files (sandbox.TrustDir)
	if cfg.Egress.Port > 0 { // negative: none
		e, err := newEgressAccess(ctx, cfg.Egress, st, alog, logf, dir)
		if err != nil {
			return err
		}
		eg, egAccess = e, e
		poolPorts = append(poolPorts, e.Port())
		trustDir = e.trustDir
	}
	// Opened before the runtime, so closed after it: no sandbox holds a
	// volume when its filesystem is unmounted.
	volDir := cfg.VolumesDir
	if volDir == "" {
		volDir = filepath.Join(dir, "volumes")
	} else if !filepath.IsAbs(volDir) {
		return fmt.Errorf("--volumes-dir %q must be an absolute path", volDir)
	}
	vols, err := openVolumes(ctx, st, volDir, logf)
	if err != nil {
		return err
	}
	var sessionVolumes session.Volumes
	var apiVolumes api.Volumes
	if vols != nil {
		closers = append(closers, func(c context.Context) error { return vols.m.Close(c) })
		sessionVolumes, apiVolumes = vols, vols
	}
	rt, err := backend.Open(ctx, backend.Options{Name: cfg.Runtime, PoolSize: cfg.PoolSize, PoolExposedTCP: poolPorts, PoolGate: pol.Exec.Gate, PoolTrust: trustDir, SpareCgroups: cfg.Spares, SpareInits: cfg.Spares, Logf: logf, Exe: cfg.InitExe})
	if err != nil {
		return err
	}
	closers = append(closers, func(c context.Context) error { return rt.Close(c) })

	var images session.ImageResolver
	if len(cfg.ImageDirs)+len(cfg.ImageRegistries) > 0 {
		ist, err := image.Open(filepath.Join(dir, "images"), image.Options{})
		if err != nil {
			return err
		}
		images = &image.Roots{Store: ist, LocalDirs: cfg.ImageDirs, Registries: cfg.ImageRegistries}
	}

	// The session manager reports ends to the API's metrics; ends before
	// the API exists (sandboxes of a crashed run marked lost) are replayed.
	ends := &endForwarder{}
	lim := pol.Limits
	capacity, err := session.HostCapacity(lim.Overcommit.Memory, lim.Overcommit.CPUs, lim.Overcommit.Pids)
	if err != nil {
		return err
	}
	logf("sandboxes may commit %s of memory, %g CPUs and %d processes in all (policy limits.overcommit)",
		sandbox.FormatBytes(capacity.MemoryBytes), capacity.CPUs, capacity.Pids)
	mgr, err := session.New(ctx, rt, st, alog, session.Options{
		MaxSandboxes: cfg.MaxSandboxes,
		DefaultTTL:   cfg.DefaultTTL,
		DefaultIdle:  cfg.DefaultIdle,
		Logf:         logf,
		OnEnd:        ends.onEnd,
		Model:        model,
		Egress:       eg,
		Inside:       cfg.Inside,
		Images:       images,
		Volumes:      sessionVolumes,
		Capacity:     capacity,
		IdleAction:   lim.IdleAction,
		SnapshotDir:  filepath.Join(dir, "snapshots"),
		Quotas: session.Quotas{SandboxesPerPrincipal: lim.PerAgent.Sandboxes, ExecsPerPrincipal: lim.PerAgent.Execs,
			ExecsPerSandbox: lim.PerSandbox.Execs},
		Gate:    pol.Exec.Gate,
		Trust:   trustDir,
		Secrets: sessionSecrets(egAccess, grants),
	})
	if err != nil {
		return err
	}
	// inflight counts requests still in handlers, so the manager, the log
	// and the store close only once no handler can use them.
	var inflight sync.WaitGroup
	mgrCloser := len(closers)
	closers = append(closers, func(c context.Context) error {
		err := mgr.Close(c)
		waitGroup(c, &inflight, 5*time.Second)
		return err
	})

	// The gateway: approved requests act through the session manager,
	// and the egress brokers ask it about unknown hosts.
	toolReg := tools.New(st)
	acts := &actions{mgr: mgr, eg: egAccess, tools: toolReg, secrets: grants, log: alog, logf: logf}
	gopts := gateway.Options{Store: st, Audit: alog, Timeout: time.Duration(pol.Approvals.Timeout),
		MaxPending: pol.Approvals.MaxPending, MaxPendingPerPrincipal: pol.Approvals.MaxPendingPerPrincipal,
		MaxPendingTotal: pol.Approvals.MaxPendingTotal, Actions: acts.table(), Logf: logf,
		SessionPrincipal: func(ctx context.Context, id string) (string, error) {
			info, err := mgr.Get(ctx, id)
			return info.Principal, err
		}}
	if len(pol.Approvals.Webhooks) > 0 {
		secret, err := webhookSecret(dir, pol.Approvals.WebhookSecretFile)
		if err != nil {
			return err
		}
		hooks, err := gateway.NewWebhooks(gateway.WebhookOptions{URLs: pol.Approvals.Webhooks, Secret: secret, Store: st, Audit: alog, Logf: logf})
		if err != nil {
			return err
		}
		closers = append(closers, func(c context.Context) error { hooks.Close(c); return nil })
		gopts.Notify = hooks.Notify
	}
	gw, err := gateway.New(ctx, gopts)
	if err != nil {
		return err
	}
	// Closed before the manager (closers run in reverse): held egress
	// connections end, then sandboxes go.
	closers = append(closers, func(context.Context) error { return gw.Close() })
	// Spawned agents' commands end when the manager destroys their
	// sandboxes; their last records are written before the log closes.
	closers = slices.Insert(closers, mgrCloser, func(c context.Context) error {
		waitGroup(c, &acts.wg, 5*time.Second)
		return nil
	})
	var covers func(string) bool
	if egAccess != nil {
		egAccess.gw.Store(gw)
		covers = egAccess.Covers
	}
	asker.gw.Store(gw)
	var ui http.Handler
	if !cfg.DisableConsole {
		ui = console.Handler()
	}

	ports, err := portsConfig(cfg, dir, pol, mgr)
	if err != nil {
		return err
	}
	srv, err := api.New(api.Config{
		AgentToken:      agentTok,
		OperatorToken:   operTok,
		Operators:       operators,
		Agents:          agents,
		Gateway:         gw,
		Policy:          &pol.Exec,
		EgressCovers:    covers,
		Tools:           toolReg,
		Volumes:         apiVolumes,
		Ports:           ports.config(),
		Console:         ui,
		MaxBodyBytes:    cfg.MaxBodyBytes,
		MaxUploadBytes:  cfg.MaxUploadBytes,
		WaitOutputBytes: cfg.WaitOutputBytes,
		BodyTimeout:     cfg.BodyTimeout,
		Ceiling: &api.Ceiling{
			Limits: lim.Max.SandboxLimits(sandbox.DefaultLimits),
			TTL:    ceilingOr(time.Duration(lim.Max.TTL), cfg.DefaultTTL), Idle: ceilingOr(time.Duration(lim.Max.Idle), cfg.DefaultIdle),
			DefaultTTL: cfg.DefaultTTL, DefaultIdle: cfg.DefaultIdle,
		},
		RatePerSecond:        cfg.RatePerSecond,
		RateBurst:            cfg.RateBurst,
		SandboxRatePerSecond: cfg.SandboxRatePerSecond,
		SandboxRateBurst:     cfg.SandboxRateBurst,
		RateBuckets:          cfg.RateBuckets,
		Logf:                 logf,
		Model:                proxy,
		Secrets:              secretStore,
	}, mgr, alog, reg)
	if err != nil {
		return err
	}
	// A sandbox's end counts in the metrics and withdraws its pending
	// approval requests.
	ends.set(func(id, state, reason string) {
		srv.OnEnd(id, state, reason)
		gw.SandboxEnded(id, state, reason)
	})

	if ports != nil {
		ps, err := servePorts(ports, srv.PortsHandler(), cfg.BodyTimeout, logf)
		if err != nil {
			return err
		}
		closers = append(closers, func(context.Context) error { return ps.Close() })
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	h := srv.Handler()
	if !cfg.DisableE2B {
		es, err := serveE2B(cfg, dir, srv.Handler(), agentTok, agents, logf)
		if err != nil {
			return err
		}
		h = es.Mount(h)
	}
	reqCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	hs := &http.Server{
		Handler: netlimit.GuardBodies(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			inflight.Add(1)
			defer inflight.Done()
			h.ServeHTTP(w, r)
		}), apiBodyLimits(cfg.BodyTimeout)),
		ReadHeaderTimeout: defaults.APIHeaderTimeout,
		IdleTimeout:       defaults.APIIdleTimeout,
		MaxHeaderBytes:    defaults.APIMaxHeaderBytes,
		// No ReadTimeout or WriteTimeout: uploads may be large and exec and
		// audit follow stream for as long as they run. Bodies are bounded
		// by apiBodyLimits instead.
		// Requests outlive ctx: shutdown cancels them itself, after a grace.
		BaseContext: func(net.Listener) context.Context { return reqCtx },
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	addr := ln.Addr().String()
	logf("listening on http://%s (data in %s)", addr, dir)
	if cfg.Ready != nil {
		cfg.Ready(addr)
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			closers = append(closers, func(context.Context) error { return hs.Close() })
			return fmt.Errorf("serve: %w", err)
		}
	}
	logf("shutting down")
	// Stop accepting and give requests in flight a grace period; then
	// cancel the rest (exec and audit follow streams run indefinitely),
	// which kills their commands, and wait for their handlers to return.
	gctx, gcancel := context.WithTimeout(context.Background(), min(cfg.ShutdownGrace, cfg.ShutdownTimeout))
	err = hs.Shutdown(gctx)
	gcancel()
	if err != nil {
		cancelRequests()
		sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil {
			logf("shutdown: requests still running after %v; closing their connections", cfg.ShutdownTimeout)
			_ = hs.Close()
		}
	}
	return nil
}

// ceilingOr is a lifetime ceiling: the policy's, else the default (zero,
// none, when the default is none).
func ceilingOr(policy, def time.Duration) time.Duration {
	if policy > 0 {
		return policy
	}
	return def
}

// auditCustody loads (or creates) the audit key and names the checkpoint
// file, both outside the data directory dir: the point of both is that
// write access to the data directory alone cannot rewrite or cut the log
// unnoticed.
func auditCustody(cfg Config, dir string, logf func(string, ...any)) (*audit.Key, string, error) {
	keyFile, cpFile := cfg.AuditKeyFile, cfg.AuditCheckpointFile
	if keyFile == "" {
		keyFile = audit.DefaultKeyFile()
	}
	if cpFile == "" {
		cpFile = audit.DefaultCheckpointFile(dir)
	}
	for _, f := range []struct{ what, path string }{{"audit key", keyFile}, {"audit checkpoint file", cpFile}} {
		abs, err := filepath.Abs(f.path)
		if err != nil {
			return nil, "", err
		}
		if within(dir, abs) {
			return nil, "", fmt.Errorf("%s %s is inside the data directory %s: keep it elsewhere, or it protects nothing", f.what, abs, dir)
		}
	}
	key, created, err := audit.EnsureKey(keyFile)
	if err != nil {
		return nil, "", err
	}
	if created {
		logf("audit key created in %s (keep it; without it the log cannot be verified)", keyFile)
		// The first keyed start on this host: an existing (legacy) log
		// gets its first checkpoint file now. Later, audit.New refuses a
		// log with records but no checkpoint file (it was deleted).
		if err := os.MkdirAll(filepath.Dir(cpFile), 0o700); err != nil {
			return nil, "", fmt.Errorf("audit checkpoints: %w", err)
		}
		f, err := os.OpenFile(cpFile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			f.Close()
		} else if !errors.Is(err, os.ErrExist) {
			return nil, "", fmt.Errorf("audit checkpoints: %w", err)
		}
	} else {
		logf("audit key %s in %s", key.ID(), keyFile)
	}
	logf("audit checkpoints in %s", cpFile)
	return key, cpFile, nil
}

// within reports whether path is dir or beneath it, also through symbolic
// links in either.
func within(dir, path string) bool {
	in := func(d, p string) bool {
		rel, err := filepath.Rel(d, p)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
	}
	if in(dir, path) {
		return true
	}
	rd, err1 := filepath.EvalSymlinks(dir)
	rp, err2 := filepath.EvalSymlinks(filepath.Dir(path))
	return err1 == nil && err2 == nil && in(rd, filepath.Join(rp, filepath.Base(path)))
}

// registerStoreMetrics exposes the database's size and the free space
// beside it, so growth (the audit log) is seen before the disk fills.
func registerStoreMetrics(reg *metrics.Registry, st *store.Store) error {
	if err := reg.GaugeFunc("ironclaw_store_bytes", "Size of the database (main file, WAL and shared memory) in bytes.",
		func() float64 { n, _ := st.Size(); return float64(n) }); err != nil {
		return err
	}
	return reg.GaugeFunc("ironclaw_store_free_bytes", "Bytes available on the file system holding the database.",
		func() float64 { n, _ := st.FreeBytes(); return float64(n) })
}

// endForwarder buffers sandbox ends until the API is there to count them.
type endForwarder struct {
	mu      sync.Mutex
	fn      func(id, state, reason string)
	pending [][3]string
}

func (f *endForwarder) onEnd(id, state, reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fn == nil {
		f.pending = append(f.pending, [3]string{id, state, reason})
		return
	}
	f.fn(id, state, reason)
}

func (f *endForwarder) set(fn func(id, state, reason string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fn = fn
	for _, p := range f.pending {
		fn(p[0], p[1], p[2])
	}
	f.pending = nil
}

func waitGroup(ctx context.Context, wg *sync.WaitGroup, max time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
}

func fileExists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// prepareDir creates the data directory (0700) or checks the existing one.
func prepareDir(dir string, logf func(string, ...any)) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("data directory %s: not a directory", dir)
	}
	if st.Mode().Perm()&0o077 != 0 {
		logf("warning: data directory %s is accessible to other users (mode %04o); chmod 700 it", dir, st.Mode().Perm())
	}
	return nil
}

// lockDir takes an exclusive flock on dir/lock, held until the returned
// func runs (or the process dies: the kernel drops it).
func lockDir(dir string) (func(), error) {
	p := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			who := ""
			if b, rerr := os.ReadFile(p); rerr == nil {
				if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil {
					who = fmt.Sprintf(" (pid %d)", pid)
				}
			}
			return nil, fmt.Errorf("%w: %s is locked by a running daemon%s; stop it or use another --data-dir", ErrLocked, dir, who)
		}
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		_ = f.Truncate(0)
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	}, nil
}

// ensureToken returns the token in path, creating a random one (32 bytes,
// hex, mode 0600) if the file does not exist. An existing file must be a
// regular file others cannot read and must hold a token.
func ensureToken(path string) (string, error) {
	tok, err := readToken(path)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return tok, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	tok = hex.EncodeToString(b[:])
	// Write a temporary file and link it into place, so the token file
	// never exists half-written and an existing one is never replaced.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".token-*")
	if err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", fmt.Errorf("token: %w", err)
	}
	if _, err := tmp.WriteString(tok + "\n"); err != nil {
		tmp.Close()
		return "", fmt.Errorf("token: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return "", fmt.Errorf("token: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			return readToken(path)
		}
		return "", fmt.Errorf("token: %w", err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return tok, nil
}

func readToken(path string) (string, error) {
	st, err := os.Lstat(path)
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("token file %s: not a regular file", path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("token file %s: readable by other users (mode %04o); chmod 600 it", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("token file %s: does not hold a token (16 or more characters on one line); delete it to get a new one", path)
	}
	return tok, nil
}
