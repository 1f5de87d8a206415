// Package policy reads the host-side policy file (`ironclaw serve --policy
// FILE`): the default egress allowlist, what happens to unknown hosts, the
// approval timeout and webhooks, and which programs and commands need
// approval (exec.gate, the wall; exec.require_approval, an advisory: see
// Exec).
//
// The file is YAML:
//
//	egress:
//	  allow: ["api.github.com", "*.pypi.org:443"]
//	  unknown: ask            # ask | deny
//	  allow_private: []       # CIDRs reachable although private
//	approvals:
//	  timeout: 10m
//	  max_pending: 20         # per sandbox (or per requester without one)
//	  webhooks: ["https://hooks.example.com/ironclaw"]
//	  webhook_secret_file: /etc/ironclaw/webhook.secret
//	exec:
//	  gate: [curl, wget, /usr/bin/ssh]           # run only when approved, however spelled
//	  require_approval: ["^curl ", "rm -rf /"]   # advisory: regexps over the command line
//	limits:                   # see Limits
//	  max: {memory: 1G, pids: 512, cpus: 2, timeout: 5m, ttl: 24h, idle: 2h}
//	  idle_action: pause      # destroy (default) | pause
//	  overcommit: {memory: 1, cpus: 16, pids: 1}
//	  per_agent: {sandboxes: 50, execs: 64}
//	  per_sandbox: {execs: 32}
//	secrets:                  # brokered credentials; see Secret
//	  - {name: github, hosts: [api.github.com], value_env: GITHUB_TOKEN, grant: ask}
//
// Unknown keys are errors, so a typo cannot silently weaken the policy.
package policy

import (
	"github.com/ironclaw/ironclaw/internal/errdefs"

	"bytes"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"os"
	"time"

	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/egress"
	"gopkg.in/yaml.v3"
)

// Unknown-host behaviours.
const (
	UnknownAsk  = "ask"  // hold the connection and file an egress.host approval
	UnknownDeny = "deny" // refuse at once
)

// ErrInvalid wraps every problem with a policy file.
var ErrInvalid = errdefs.New(errdefs.ErrInvalidArgument, "invalid policy")

// Policy is a parsed, validated policy.
type Policy struct {
	Egress    Egress    `yaml:"egress"`
	Approvals Approvals `yaml:"approvals"`
	Exec      Exec      `yaml:"exec"`
	Limits    Limits    `yaml:"limits"`
	Ports     Ports     `yaml:"ports"`
	Secrets   []Secret  `yaml:"secrets"` // secrets.go
}

// Egress is the egress section.
type Egress struct {
	Allow        []string `yaml:"allow"`
	Unknown      string   `yaml:"unknown"`
	AllowPrivate []string `yaml:"allow_private"`
}

// Approvals is the approvals section.
type Approvals struct {
	Timeout           Duration `yaml:"timeout"`
	MaxPending        int      `yaml:"max_pending"`
	Webhooks          []string `yaml:"webhooks"`
	WebhookSecretFile string   `yaml:"webhook_secret_file"`

	Quotas `yaml:",inline"` // max_pending_per_principal, max_pending_total (approvals.go)
}

// Duration is a time.Duration written as "10m" in YAML.
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration like 10m: %w", n.Line, n.Value, err)
	}
	*d = Duration(v)
	return nil
}

// Default is the policy without a file: nothing allowlisted, unknown hosts
// asked about, a 10 minute timeout, no marked commands.
func Default() *Policy {
	p := &Policy{}
	_ = p.validate()
	return p
}

// Load reads and validates a policy file.
func Load(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	defer f.Close()
	p, err := Parse(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", path, err)
	}
	return p, nil
}

// Parse reads and validates a policy document.
func Parse(r io.Reader) (*Policy, error) {
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	p := &Policy{}
	if len(bytes.TrimSpace(raw)) > 0 {
		dec := yaml.NewDecoder(bytes.NewReader(raw))
		dec.KnownFields(true)
		if err := dec.Decode(p); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Policy) validate() error {
	for _, r := range p.Egress.Allow {
		if _, err := egress.ParseRule(r); err != nil {
			return fmt.Errorf("%w: egress.allow %q: %v", ErrInvalid, r, err)
		}
	}
	switch p.Egress.Unknown {
	case "":
		p.Egress.Unknown = UnknownAsk
	case UnknownAsk, UnknownDeny:
	default:
		return fmt.Errorf("%w: egress.unknown is %q, want ask or deny", ErrInvalid, p.Egress.Unknown)
	}
	for _, c := range p.Egress.AllowPrivate {
		if _, err := netip.ParsePrefix(c); err != nil {
			return fmt.Errorf("%w: egress.allow_private %q: %v", ErrInvalid, c, err)
		}
	}
	switch t := time.Duration(p.Approvals.Timeout); {
	case t == 0:
		p.Approvals.Timeout = Duration(defaults.ApprovalTimeout)
	case t < time.Second || t > 7*24*time.Hour:
		return fmt.Errorf("%w: approvals.timeout %s must be between 1s and 168h", ErrInvalid, t)
	}
	if err := setting("approvals.max_pending", &p.Approvals.MaxPending, defaults.ApprovalMaxPending, 1, 10000); err != nil {
		return err
	}
	if err := p.Approvals.Quotas.validate(); err != nil {
		return err
	}
	for _, w := range p.Approvals.Webhooks {
		u, err := url.Parse(w)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%w: approvals.webhooks %q must be an absolute http(s) URL", ErrInvalid, w)
		}
	}
	if err := p.Limits.validate(); err != nil {
		return err
	}
	if err := p.Ports.validate(); err != nil {
		return err
	}
	if err := validateSecrets(p.Secrets); err != nil {
		return err
	}
	return p.Exec.validate()
}

// setting checks a number of the file: 0 (left out) becomes def, anything
// else must lie between lo and hi.
func setting[T int | float64](name string, v *T, def, lo, hi T) error {
	switch {
	case *v == 0:
		*v = def
	case !(*v >= lo && *v <= hi): // NaN too
		return fmt.Errorf("%w: %s %v must be between %v and %v", ErrInvalid, name, *v, lo, hi)
	}
	return nil
}
