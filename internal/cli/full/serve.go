package full

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/cli/flagtypes"
	"github.com/ironclaw/ironclaw/internal/daemon"
	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/sandbox/backend"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// serveEnv maps the serve settings that an environment variable may set.
var serveEnv = map[string]string{
	"listen":   "IRONCLAW_LISTEN",
	"data-dir": "IRONCLAW_DATA_DIR",
}

// serveSettings are the flags of 'ironclaw serve': the daemon's Config,
// which they fill directly, and the config file that may set them.
type serveSettings struct {
	configFile string
	cfg        daemon.Config
}

func serveCommand(stderr io.Writer) *cobra.Command {
	s := &serveSettings{}
	c := &cobra.Command{
		Use:   "serve [flags]",
		Short: "Run the IronClaw daemon: the HTTP API for sandboxes, exec, files and the audit log",
		Long: `Run the IronClaw daemon. It serves the HTTP API (docs/http-api.md) on a loopback
address, keeps its database, lock and tokens in the data directory, and runs
until SIGINT, SIGTERM or SIGHUP (unless started with SIGHUP ignored, as under
nohup), when it destroys its sandboxes and exits; a second signal ends it at
once.

On first start it writes two random tokens, agent.token and operator.token
(mode 0600), into the data directory; clients read them from there or from
IRONCLAW_API_TOKEN / IRONCLAW_OPERATOR_TOKEN. Only one daemon may use a data
directory at a time. Sandboxes a crashed daemon left are killed with it and
shown as "lost" after the next start.

Settings come from, in order of precedence: command-line flags, then the
environment (IRONCLAW_LISTEN, IRONCLAW_DATA_DIR), then the YAML file named by
--config, whose keys are the flag names:

  listen: 127.0.0.1:8787
  data-dir: /var/lib/ironclaw
  pool: 2
  max-sandboxes: 100
  default-idle: 30m
  default-ttl: off
  rate: 50
  rate-burst: 100
  max-body: 1M
  max-upload: 256M
  policy: /etc/ironclaw/policy.yaml

Every number, size and duration follows one rule: 0 means the default (the
value shown in the flag's help), and "off" (or a negative value) means none
where a setting can be off (the pool, the lifetimes, the in-sandbox ports,
the model limits, the size warning); the others refuse a negative value.
Durations are Go durations (30s, 1m30s, 2h); a bare number other than 0 is
refused.

The policy file (--policy) is YAML:

  egress:
    allow: ["api.github.com", "*.pypi.org:443"]
    unknown: ask              # ask: hold and file an egress.host approval; deny
    allow_private: []         # CIDRs reachable although private (tests: 127.0.0.0/8)
  approvals:
    timeout: 10m              # then the request is expired (denied)
    max_pending: 20           # open requests per sandbox
    max_pending_per_principal: 100
    max_pending_total: 1000
    webhooks: ["https://hooks.example.com/ironclaw"]
    webhook_secret_file: ""   # default: webhook.secret in the data directory
  exec:
    gate: [curl, wget]        # run only when approved, however the command spells them
    require_approval: ["^curl ", "rm -rf /"]   # advisory: regexps over the command line
  limits:                     # what agents may ask for, and what the host may promise
    max: {memory: 1G, pids: 512, cpus: 2, timeout: 5m, ttl: 24h, idle: 2h}
    overcommit: {memory: 1, cpus: 16, pids: 1}
    per_agent: {sandboxes: 50, execs: 64}
    per_sandbox: {execs: 32}

Every key: docs/configuration.md.

Further operators: 'ironclaw operator add NAME' writes operators/NAME.token in
the data directory; approvals decided with it record NAME as the decider.

The audit log is keyed and checkpointed outside the data directory, so that
write access to the data directory alone cannot rewrite or cut it unnoticed:
--audit-key (default /etc/ironclaw/audit.key as root, else
~/.config/ironclaw/audit.key; created 0600 on first start; keep it, without it
the log cannot be verified) and --audit-checkpoints (default
/var/log/ironclaw/audit-checkpoints/ as root, else
~/.local/state/ironclaw/audit-checkpoints/; one file per data directory, never
to be rotated or deleted). 'ironclaw audit verify' checks both.`,

		Example: `  ironclaw serve
  ironclaw serve --listen 127.0.0.1:9000 --data-dir /var/lib/ironclaw
  ironclaw serve --pool off --default-idle 2h --model-budget-agent 1000000
  IRONCLAW_API_TOKEN=$(cat ~/.local/share/ironclaw/agent.token) ironclaw sandbox create`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := layerSettings(c.Flags(), s.configFile); err != nil {
				return err
			}
			cfg := s.cfg
			cfg.Logf = func(format string, args ...any) { fmt.Fprintf(stderr, "ironclaw: "+format+"\n", args...) }
			// Until the root context ends (SIGINT, SIGTERM, SIGHUP): the daemon then
			// destroys its sandboxes and returns nil.
			return daemon.Run(c.Context(), cfg)
		},
	}
	s.flags(c.Flags())
	return c
}

// flags defines serve's flags over s. Their defaults are package
// defaults', which the daemon also applies to a zero field: a 0 given here
// means the default too.
func (s *serveSettings) flags(f *pflag.FlagSet) {
	cfg := &s.cfg
	const (
		orDefault = " (0: the default)"
		orOff     = " (0: the default; off: none)"
	)
	f.StringVar(&s.configFile, "config", "", "YAML file of settings (keys as the flag names)")
	f.StringVar(&cfg.Listen, "listen", defaults.Listen, "address to serve the HTTP API on (port 0 picks one) [$IRONCLAW_LISTEN]")
	f.StringVar(&cfg.VolumesDir, "volumes-dir", "", "absolute host directory whose disk backs the named volumes (default: the data directory's volumes/)")
	f.StringVar(&cfg.PortsListen, "ports-listen", defaults.PortsListen, "address to serve port URLs on when the policy turns inbound ports on (ports.inbound; port 0 picks one)")
	f.StringVar(&cfg.DataDir, "data-dir", defaults.DataDir(), "directory of the database, lock and tokens [$IRONCLAW_DATA_DIR]")
	f.StringVar(&cfg.Runtime, "runtime", backend.Native, "sandbox backend: "+strings.Join(backend.Names(), ", "))
	flagtypes.IntOff(f, &cfg.PoolSize, "pool", defaults.PoolSize, "sealed idle sandboxes kept ready for fast creates"+orOff)
	flagtypes.IntOff(f, &cfg.Spares, "spares", defaults.SpareInits, "sandbox inits (and cgroups) started ahead for the creates the pool cannot serve"+orOff)
	flagtypes.Int(f, &cfg.MaxSandboxes, "max-sandboxes", defaults.MaxSandboxes, "maximum number of running sandboxes"+orDefault)
	flagtypes.DurationOff(f, &cfg.DefaultIdle, "default-idle", defaults.Idle, "idle timeout of sandboxes created without one"+orOff)
	flagtypes.DurationOff(f, &cfg.DefaultTTL, "default-ttl", defaults.TTL, "lifetime of sandboxes created without a ttl (the default, 0 and off: none)")
	flagtypes.Rate(f, &cfg.RatePerSecond, "rate", defaults.RatePerSecond, "requests per second allowed per token (principal)"+orDefault)
	flagtypes.Int(f, &cfg.RateBurst, "rate-burst", defaults.RateBurst, "burst of requests allowed per token (principal)"+orDefault)
	flagtypes.Rate(f, &cfg.SandboxRatePerSecond, "sandbox-rate", defaults.SandboxRatePerSecond, "requests per second allowed per running sandbox, on its routes (on top of --rate)"+orDefault)
	flagtypes.Int(f, &cfg.SandboxRateBurst, "sandbox-rate-burst", defaults.SandboxRateBurst, "burst of requests allowed per running sandbox"+orDefault)
	flagtypes.Int(f, &cfg.RateBuckets, "rate-buckets", defaults.RateBuckets, "most sandbox rate buckets held at once (idle ones are dropped)"+orDefault)
	flagtypes.Size(f, &cfg.MaxBodyBytes, "max-body", defaults.MaxBodyBytes, "largest JSON request body, a `size` such as 1M"+orDefault)
	flagtypes.Size(f, &cfg.MaxUploadBytes, "max-upload", defaults.MaxUploadBytes, "largest file upload, a `size`"+orDefault)
	flagtypes.Duration(f, &cfg.BodyTimeout, "body-timeout", "", defaults.BodyTimeout, "how long the API waits for a request body, and how long an upload may stall"+orDefault)
	flagtypes.Size(f, &cfg.WaitOutputBytes, "wait-output", defaults.WaitOutputBytes, "most output an exec with ?wait=1 returns, a `size` (held in memory until the command ends)"+orDefault)
	f.StringVar(&cfg.Model.Provider, "provider", "", "model provider: empty uses a provider whose key is in the environment (OPENAI_API_KEY, ANTHROPIC_API_KEY) and the offline mock for the rest; \"mock\" uses the mock for all")
	f.StringVar(&cfg.Model.MockScript, "mock-script", "", "JSON file of scripted turns for the mock provider")
	flagtypes.IntOff(f, &cfg.Model.Port, "model-port", defaults.ModelPort, "port of the model proxy inside every sandbox"+orOff)
	f.StringSliceVar(&cfg.Model.Models, "allow-model", nil, "model names agents may use (repeatable; default: any)")
	flagtypes.IntOff(f, &cfg.Model.RequestsPerMinute, "model-rpm", 0, "model requests per minute per proxy token (the default, 0 and off: no limit)")
	flagtypes.IntOff(f, &cfg.Model.SandboxBudget, "model-budget-sandbox", 0, "model tokens (input+output) each sandbox may use (the default, 0 and off: no limit)")
	flagtypes.IntOff(f, &cfg.Model.SandboxBudget, "model-tokens", 0, "model tokens per sandbox")
	_ = f.MarkDeprecated("model-tokens", "use --model-budget-sandbox")
	flagtypes.IntOff(f, &cfg.Model.AgentBudget, "model-budget-agent", 0, "model tokens (input+output) each agent token (principal) may use across its sandboxes and host tokens; kept across restarts (the default, 0 and off: no limit)")
	flagtypes.DurationOff(f, &cfg.Model.BudgetWindow, "model-budget-window", 0, "renew --model-budget-agent every window, e.g. 24h (the default, 0 and off: never)")
	flagtypes.Int(f, &cfg.Model.MaxOutput, "model-max-output", defaults.ModelMaxOutput, "output bound given to model requests that set none while a budget applies"+orDefault)
	flagtypes.Duration(f, &cfg.Model.TokenTTL, "model-token-ttl", "", defaults.ModelTokenTTL, "lifetime of model tokens minted for programs on the host (POST /v1/model/tokens)"+orDefault)
	flagtypes.Int(f, &cfg.Model.MaxTokens, "model-token-max", defaults.ModelMaxTokens, "live host model tokens each principal may hold"+orDefault)
	flagtypes.IntOff(f, &cfg.Egress.Port, "egress-port", defaults.EgressPort, "port of the egress broker inside every sandbox"+orOff)
	f.StringSliceVar(&cfg.Egress.Allow, "egress-allow", nil, "hosts every sandbox may reach through the broker, e.g. api.github.com or *.pypi.org:443 (repeatable)")
	f.StringSliceVar(&cfg.Egress.AllowPrivate, "egress-allow-private", nil, "CIDRs reachable although private or loopback (repeatable; for tests)")
	f.StringArrayVar(&cfg.Egress.TrustCA, "egress-trust-ca", nil, "PEM file of CA certificates the broker trusts, beside the system's, when it verifies hosts whose TLS it terminates to inject secrets (repeatable)")
	f.BoolVar(&cfg.Egress.DenyUnknown, "egress-deny-unknown", false, "refuse hosts off the allowlist at once instead of asking an operator (policy: egress.unknown: deny)")
	f.StringVar(&cfg.PolicyFile, "policy", "", "policy file (YAML): egress allowlist, unknown hosts ask|deny, approval timeout and webhooks, commands needing approval")
	f.BoolVar(&cfg.DisableConsole, "no-console", false, "do not serve the web console at /ui/")
	f.StringSliceVar(&cfg.ImageDirs, "image-dir", nil, "directory beneath which API clients may name local images: directories, OCI layouts, tarballs (repeatable; default: none)")
	f.StringSliceVar(&cfg.ImageRegistries, "image-registry", nil, "registry host API clients may pull images from, e.g. ghcr.io or localhost:5000 (repeatable; default: none)")
	f.StringVar(&cfg.AuditKeyFile, "audit-key", "", "key file authenticating the audit log, outside the data directory (default "+audit.DefaultKeyFile()+"; created 0600)")
	f.StringVar(&cfg.SecretsKeyFile, "secrets-key-file", "", "key file sealing the brokered secrets at rest, outside the data directory (default: secrets.key beside the audit key; created 0600)")
	f.StringVar(&cfg.AuditCheckpointFile, "audit-checkpoints", "", "file the audit log's head is checkpointed to, outside the data directory (default: one per data directory under "+filepath.Dir(audit.DefaultCheckpointFile("x"))+")")
	f.StringVar(&cfg.AuditCheckpointURL, "audit-checkpoint-url", "", "URL that also receives every audit checkpoint as a JSON POST")
	f.BoolVar(&cfg.DisableE2B, "no-e2b", false, "do not serve the E2B-compatible API under /e2b (docs/e2b.md)")
	f.StringVar(&cfg.E2BDomain, "e2b-domain", "", "domain of E2B sandbox hosts <port>-<id>.DOMAIN (wildcard DNS to this daemon), reported to the SDKs as each sandbox's domain")
	f.StringToStringVar(&cfg.E2BTemplates, "e2b-template", nil, "map an E2B template id or alias onto an image, ALIAS=IMAGE (repeatable; \"base\" is the host-toolchain view unless mapped)")
	f.Var(e2bPortsFlag{&cfg.E2BPorts}, "e2b-port", "loopback port every E2B sandbox declares for previews, 1024-65535 (repeatable, or comma-separated)")
	flagtypes.SizeOff(f, &cfg.StoreSizeWarn, "store-size-warn", defaults.StoreSizeWarn, "log a warning when the database grows past this `size`"+orOff)
}

// layerSettings applies, to every flag not given on the command line, its
// environment variable if set, else its value in the config file.
func layerSettings(f *pflag.FlagSet, file string) error {
	fromFile := map[string]string{}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("--config: %v", err)
		}
		var raw map[string]any
		if err := yaml.Unmarshal(b, &raw); err != nil {
			return fmt.Errorf("--config %s: %v", file, oneLine(err))
		}
		keys := make([]string, 0, len(raw))
		for k := range raw {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fl := f.Lookup(k)
			if fl == nil || k == "config" {
				return fmt.Errorf("--config %s: unknown setting %q", file, k)
			}
			switch v := raw[k].(type) {
			case nil:
			case map[string]any, []any:
				return fmt.Errorf("--config %s: %s: want a single value", file, k)
			default:
				fromFile[k] = fmt.Sprint(v)
			}
		}
	}
	var err error
	f.VisitAll(func(fl *pflag.Flag) {
		if err != nil || fl.Changed {
			return
		}
		v, ok := "", false
		if name, has := serveEnv[fl.Name]; has {
			v, ok = os.LookupEnv(name)
			ok = ok && v != ""
			if ok {
				if serr := fl.Value.Set(v); serr != nil {
					err = fmt.Errorf("$%s: %v", name, serr)
				}
				return
			}
		}
		if v, ok = fromFile[fl.Name]; ok {
			if serr := fl.Value.Set(v); serr != nil {
				err = fmt.Errorf("--config %s: %s: %v", file, fl.Name, serr)
			}
		}
	})
	return err
}

// e2bPortsFlag is a repeatable --e2b-port N[,N...].
type e2bPortsFlag struct{ ports *[]uint16 }

func (p e2bPortsFlag) String() string {
	if p.ports == nil || len(*p.ports) == 0 {
		return ""
	}
	return strings.Trim(fmt.Sprint(*p.ports), "[]")
}

func (p e2bPortsFlag) Set(s string) error {
	for _, f := range strings.Split(s, ",") {
		n, err := flagtypes.ParsePort(strings.TrimSpace(f))
		if err != nil {
			return err
		}
		if n < 1024 {
			return fmt.Errorf("port %d: sandbox ports are 1024-65535", n)
		}
		*p.ports = append(*p.ports, uint16(n))
	}
	return nil
}

func (e2bPortsFlag) Type() string { return "port" }

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
