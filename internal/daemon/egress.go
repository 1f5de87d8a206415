package daemon

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/egress"
	"github.com/ironclaw/ironclaw/internal/gateway"
	"github.com/ironclaw/ironclaw/internal/netlimit"
	"github.com/ironclaw/ironclaw/internal/session"
	"github.com/ironclaw/ironclaw/internal/store"
)

// EgressConfig configures the egress broker every sandbox gets. The policy
// file's egress section adds to it. Its numbers follow Config's rule: 0
// the default, negative none or refused, as each says.
type EgressConfig struct {
	// Port is the broker's port inside sandboxes (0: defaults.EgressPort,
	// 4001; negative: none, no broker; at most 65535).
	Port int
	// Allow is the allowlist every sandbox starts with (rules such as
	// "api.github.com" or "*.pypi.org:443"); approvals add to it per
	// sandbox or for all.
	Allow []string
	// AllowPrivate lists CIDRs reachable although private or loopback
	// (tests use 127.0.0.0/8 for a stand-in server). Empty is right for
	// production: an allowlisted name resolving to a private address is
	// refused (DNS rebinding).
	AllowPrivate []string
	// DenyUnknown refuses hosts off the allowlist at once instead of
	// holding the connection while an operator decides.
	DenyUnknown bool
	// Resolver resolves names host-side; nil is the system resolver. Tests
	// map made-up names to a loopback stand-in or to private addresses.
	Resolver egress.Resolver

	// The brokers' bounds (see package egress). The connection-level
	// bounds (connections per sandbox, the request head's deadline) are
	// Config.Inside's, shared with the model proxy.
	//
	// MaxConns bounds one sandbox's tunnels and plain-HTTP requests at
	// once (0: defaults.EgressMaxConns, 128), MaxConnsTotal all
	// sandboxes' (0: defaults.EgressMaxConnsTotal, 2048). Negative:
	// refused.
	MaxConns, MaxConnsTotal int
	// MaxWaiting bounds one sandbox's connections held while an operator
	// decides about unknown hosts, MaxWaitingPerHost those held on one
	// host's decision; beyond them a connection is refused at once (429)
	// (0: defaults.EgressMaxWaiting, 64, and EgressMaxWaitingPerHost, 16;
	// negative: refused).
	MaxWaiting, MaxWaitingPerHost int
	// TunnelIdle closes a tunnel without traffic either way for that long
	// (0: defaults.EgressTunnelIdle, 10m; negative: none).
	TunnelIdle time.Duration
	// Body bounds how slowly plain-HTTP request bodies may arrive, field
	// by field: Timeout, the wait for the client in all (0:
	// defaults.InsideBodyTimeout, 1m; negative: refused); MinRate, the
	// bytes per second that extend it (0: defaults.InsideBodyMinRate, 16
	// KiB; negative: none); Idle, the wait for one read (0:
	// defaults.InsideBodyIdle, 1m; negative: none).
	Body netlimit.BodyLimits
	// TrustCA are PEM files of CA certificates the broker trusts, beside
	// the system's roots, when it verifies the hosts whose TLS it
	// terminates (serve --egress-trust-ca; tests' own upstream CA).
	TrustCA []string
	// Secrets, if set, brokers credentials: the broker terminates TLS for
	// the hosts it names and swaps placeholders for values (see package
	// egress). The daemon's secrets store; tests may give a fake.
	Secrets egress.Secrets

	// DenyWindow is the window in which repeated refusals are aggregated
	// into one summary record (0: defaults.EgressDenyWindow, 1m;
	// negative: none, every refusal recorded in full).
	DenyWindow time.Duration
}

// withDefaults applies Config's rule; the durations' none is -1, which is
// what package egress reads as none.
func (e EgressConfig) withDefaults(errs *[]error) EgressConfig {
	e.Port = orNone(e.Port, defaults.EgressPort, -1)
	e.MaxConns = bound(errs, "Egress.MaxConns", e.MaxConns, defaults.EgressMaxConns)
	e.MaxConnsTotal = bound(errs, "Egress.MaxConnsTotal", e.MaxConnsTotal, defaults.EgressMaxConnsTotal)
	e.MaxWaiting = bound(errs, "Egress.MaxWaiting", e.MaxWaiting, defaults.EgressMaxWaiting)
	e.MaxWaitingPerHost = bound(errs, "Egress.MaxWaitingPerHost", e.MaxWaitingPerHost, defaults.EgressMaxWaitingPerHost)
	e.TunnelIdle = orNone(e.TunnelIdle, defaults.EgressTunnelIdle, -1)
	e.Body = bodyWithDefaults(errs, "Egress.Body", e.Body)
	e.DenyWindow = orNone(e.DenyWindow, defaults.EgressDenyWindow, -1)
	return e
}

// egressAccess builds one broker per sandbox. Every broker shares the
// global list (rules operators approved for all sandboxes, kept in the
// store) and asks the gateway about hosts on neither list.
type egressAccess struct {
	port    uint16
	allow   []string
	shared  *egress.Allowlist
	private []netip.Prefix
	deny    bool
	resolve egress.Resolver
	st      *store.Store
	log     *audit.Log
	logf    func(string, ...any)
	gw      atomic.Pointer[gateway.Gateway] // set once the gateway exists
	bounds  egress.Config                   // the bounds every broker gets
	// ca signs the leaves of intercepted hosts; roots verify those
	// hosts; trustDir is the host directory every sandbox sees at
	// sandbox.TrustDir (trust.go).
	ca       *egress.CA
	roots    *x509.CertPool
	trustDir string
	secrets  egress.Secrets
}

func newEgressAccess(ctx context.Context, ec EgressConfig, st *store.Store, log *audit.Log, logf func(string, ...any), dataDir string) (*egressAccess, error) {
	port := ec.Port
	if port == 0 { // a zero EgressConfig, not through Config.withDefaults
		port = defaults.EgressPort
	}
	e := &egressAccess{port: uint16(port), log: log, logf: logf, st: st, deny: ec.DenyUnknown, resolve: ec.Resolver, shared: &egress.Allowlist{}}
	total := ec.MaxConnsTotal
	if total <= 0 {
		total = defaults.EgressMaxConnsTotal
	}
	e.bounds = egress.Config{MaxActive: ec.MaxConns, Total: netlimit.NewBudget(total), MaxWaiting: ec.MaxWaiting,
		MaxWaitingPerHost: ec.MaxWaitingPerHost, IdleTimeout: ec.TunnelIdle, Body: ec.Body, DenyWindow: ec.DenyWindow}
	var err error
	if e.ca, e.trustDir, err = egressTrust(dataDir, logf); err != nil {
		return nil, err
	}
	if e.roots, err = egress.UpstreamRoots(ec.TrustCA...); err != nil {
		return nil, err
	}
	e.secrets = ec.Secrets
	if err := e.Check(ec.Allow); err != nil {
		return nil, fmt.Errorf("egress allowlist: %w", err)
	}
	e.allow = ec.Allow
	for _, c := range ec.AllowPrivate {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, fmt.Errorf("egress allow_private %q: %w", c, err)
		}
		e.private = append(e.private, p.Masked())
	}
	rows, err := st.ReadDB().QueryContext(ctx, `SELECT rule FROM egress_rules ORDER BY added_at`)
	if err != nil {
		return nil, fmt.Errorf("egress: read global rules: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, fmt.Errorf("egress: read global rules: %w", err)
		}
		r, err := egress.ParseRule(s)
		if err != nil {
			logf("egress: skipping stored global rule %q: %v", s, err)
			continue
		}
		_ = e.shared.Add(r)
	}
	return e, rows.Err()
}

func (e *egressAccess) Port() uint16 { return e.port }

func (e *egressAccess) Check(allow []string) error {
	for _, r := range allow {
		if _, err := egress.ParseRule(r); err != nil {
			return err
		}
	}
	return nil
}

// Covers reports whether a rule adds nothing to what every sandbox may
// already reach: it is on the default or the global list, or it names one
// host and port those lists admit.
func (e *egressAccess) Covers(rule string) bool {
	r, err := egress.ParseRule(rule)
	if err != nil {
		return false
	}
	base, _ := egress.NewAllowlist(e.allow...)
	for _, l := range []*egress.Allowlist{base, e.shared} {
		for _, have := range l.Rules() {
			if have == r {
				return true
			}
		}
		if r.Port != 0 && !strings.HasPrefix(r.Host, "*.") && l.Allows(r.Host, r.Port) {
			return true
		}
	}
	return false
}

// Broker builds one sandbox's broker.
func (e *egressAccess) Broker(sess string, allow []string) (session.EgressBroker, error) {
	list, err := egress.NewAllowlist(append(append([]string(nil), e.allow...), allow...)...)
	if err != nil {
		return nil, err
	}
	var unknown egress.UnknownFunc
	if !e.deny {
		unknown = e.ask
	}
	cfg := e.bounds
	cfg.Session, cfg.Allow, cfg.Shared, cfg.Unknown = sess, list, e.shared, unknown
	cfg.AllowPrivate, cfg.Resolver, cfg.Log, cfg.Logf = e.private, e.resolve, e.log, e.logf
	cfg.CA, cfg.UpstreamRoots, cfg.Secrets = e.ca, e.roots, e.secrets
	b, err := egress.New(cfg)
	if err != nil {
		return nil, err
	}
	return broker{b}, nil
}

type broker struct{ *egress.Broker }

func (b broker) Allow(rule string) error {
	r, err := egress.ParseRule(rule)
	if err != nil {
		return err
	}
	return b.Allowlist().Add(r)
}

// ask files (or joins) an egress.host request and holds the connection
// until it is decided, it expires, or the client goes away.
func (e *egressAccess) ask(ctx context.Context, sess, host string, port int) (bool, error) {
	gw := e.gw.Load()
	if gw == nil {
		return false, &egress.Denied{Detail: "the approval gateway is not running"}
	}
	a, err := gw.File(ctx, gateway.Request{Kind: gateway.KindEgressHost, Session: sess, Via: "egress", Join: true,
		Data: map[string]any{"host": host, "port": port}})
	if errors.Is(err, gateway.ErrTooMany) {
		return false, &egress.Denied{Detail: err.Error()} // which quota is used up
	}
	if err != nil {
		return false, err
	}
	// Wait returns early only on a decision, an expiry or a closed
	// gateway; the deadline stops a closed gateway from spinning this loop.
	deadline := a.ExpiresAt.Add(5 * time.Second)
	for a.Pending() && time.Now().Before(deadline) {
		if a, err = gw.Wait(ctx, a.ID, time.Until(deadline)); err != nil {
			return false, err
		}
	}
	switch a.State {
	case gateway.StateApproved:
		return true, nil
	case gateway.StateExpired, gateway.StatePending:
		detail := fmt.Sprintf("request %s timed out with no decision", a.ID)
		if strings.HasPrefix(a.Reason, "withdrawn") {
			detail = fmt.Sprintf("request %s was %s", a.ID, a.Reason)
		}
		return false, &egress.Denied{Detail: detail}
	default:
		detail := fmt.Sprintf("request %s was denied by %s", a.ID, a.DecidedBy)
		if a.Reason != "" {
			detail += ": " + a.Reason
		}
		return false, &egress.Denied{Detail: detail}
	}
}

// allowGlobal adds a rule for every sandbox, durably.
func (e *egressAccess) allowGlobal(ctx context.Context, rule, approval string) error {
	r, err := egress.ParseRule(rule)
	if err != nil {
		return err
	}
	if _, err := e.st.DB().ExecContext(ctx, `INSERT INTO egress_rules (rule, approval, added_at) VALUES (?, ?, ?)
	ON CONFLICT (rule) DO NOTHING`, r.String(), approval, time.Now().UTC().Format(time.RFC3339Nano)); err != nil {
		return fmt.Errorf("egress: store global rule: %w", err)
	}
	return e.shared.Add(r)
}
