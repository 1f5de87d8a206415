package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/daemon"
	"github.com/ironclaw/ironclaw/internal/sandbox"
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

func newServeCmd(e *env) *cobra.Command {
	var (
		configFile                     string
		cfg                            daemon.Config
		idle, ttl                      time.Duration
		pool                           int
		maxBody, maxUpload, waitOutput string
		storeWarn                      string
	)
	c := &cobra.Command{
		Use:   "serve [flags]",
		Short: "Run the IronClaw daemon: the HTTP API for sandboxes, exec, files and the audit log",
		Long: `Run the IronClaw daemon. It serves the HTTP API (docs/http-api.md) on a loopback
address, keeps its database, lock and tokens in the data directory, and runs
until SIGINT or SIGTERM, when it destroys its sandboxes and exits.

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
  default-ttl: 0
  rate: 50
  rate-burst: 100
  max-body: 1M
  max-upload: 256M
  policy: /etc/ironclaw/policy.yaml

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
  IRONCLAW_API_TOKEN=$(cat ~/.local/share/ironclaw/agent.token) ironclaw sandbox create`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := layerSettings(c.Flags(), configFile); err != nil {
				return err
			}
			switch {
			case pool < 0:
				return errors.New("--pool must not be negative")
			case pool == 0:
				cfg.PoolSize = -1
			default:
				cfg.PoolSize = pool
			}
			if idle < 0 || ttl < 0 {
				return errors.New("--default-idle and --default-ttl must not be negative")
			}
			cfg.DefaultIdle, cfg.DefaultTTL = idle, ttl
			if idle == 0 {
				cfg.DefaultIdle = -1 // none
			}
			if cfg.MaxSandboxes <= 0 {
				return errors.New("--max-sandboxes must be positive")
			}
			var err error
			if cfg.MaxBodyBytes, err = optionalSize("max-body", maxBody); err != nil {
				return err
			}
			if cfg.MaxUploadBytes, err = optionalSize("max-upload", maxUpload); err != nil {
				return err
			}
			if cfg.WaitOutputBytes, err = optionalSize("wait-output", waitOutput); err != nil {
				return err
			}
			if storeWarn == "off" {
				cfg.StoreSizeWarn = -1
			} else if cfg.StoreSizeWarn, err = optionalSize("store-size-warn", storeWarn); err != nil {
				return err
			}
			cfg.Logf = func(format string, args ...any) { fmt.Fprintf(e.stderr, "ironclaw: "+format+"\n", args...) }
			ctx := c.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			return daemon.Run(ctx, cfg)
		},
	}
	f := c.Flags()
	f.StringVar(&configFile, "config", "", "YAML file of settings (keys as the flag names)")
	f.StringVar(&cfg.Listen, "listen", daemon.DefaultListen, "address to serve the HTTP API on (port 0 picks one) [$IRONCLAW_LISTEN]")
	f.StringVar(&cfg.DataDir, "data-dir", daemon.DefaultDataDir(), "directory of the database, lock and tokens [$IRONCLAW_DATA_DIR]")
	f.StringVar(&cfg.Runtime, "runtime", backend.Native, "sandbox backend: "+strings.Join(backend.Names(), ", "))
	f.IntVar(&pool, "pool", daemon.DefaultPoolSize, "sealed idle sandboxes kept ready for fast creates (0: none)")
	f.IntVar(&cfg.MaxSandboxes, "max-sandboxes", daemon.DefaultMaxSandboxes, "maximum number of running sandboxes")
	f.DurationVar(&idle, "default-idle", daemon.DefaultIdle, "idle timeout of sandboxes created without one (0: none)")
	f.DurationVar(&ttl, "default-ttl", 0, "lifetime of sandboxes created without a ttl (0: none)")
	f.Float64Var(&cfg.RatePerSecond, "rate", 0, "requests per second allowed per token (0: 50)")
	f.IntVar(&cfg.RateBurst, "rate-burst", 0, "burst of requests allowed per token (0: 100)")
	f.StringVar(&maxBody, "max-body", "", "largest JSON request body (default 1M)")
	f.StringVar(&maxUpload, "max-upload", "", "largest file upload (default 256M)")
	f.DurationVar(&cfg.BodyTimeout, "body-timeout", daemon.DefaultBodyTimeout, "how long the API waits for a request body, and how long an upload may stall")
	f.StringVar(&waitOutput, "wait-output", "", "most output an exec with ?wait=1 returns (default 1M; held in memory until the command ends)")
	f.StringVar(&cfg.Model.Provider, "provider", "", "model provider: empty uses a provider whose key is in the environment (OPENAI_API_KEY, ANTHROPIC_API_KEY) and the offline mock for the rest; \"mock\" uses the mock for all")
	f.StringVar(&cfg.Model.MockScript, "mock-script", "", "JSON file of scripted turns for the mock provider")
	f.IntVar(&cfg.Model.Port, "model-port", daemon.DefaultModelPort, "port of the model proxy inside every sandbox (-1: none)")
	f.StringSliceVar(&cfg.Model.Models, "allow-model", nil, "model names agents may use (repeatable; default: any)")
	f.IntVar(&cfg.Model.RequestsPerMinute, "model-rpm", 0, "model requests per minute per proxy token (0: no limit)")
	f.Int64Var(&cfg.Model.SandboxBudget, "model-budget-sandbox", 0, "model tokens (input+output) each sandbox may use (0: no limit)")
	f.Int64Var(&cfg.Model.SandboxBudget, "model-tokens", 0, "model tokens per sandbox")
	_ = f.MarkDeprecated("model-tokens", "use --model-budget-sandbox")
	f.Int64Var(&cfg.Model.AgentBudget, "model-budget-agent", 0, "model tokens (input+output) each agent token (principal) may use across its sandboxes and host tokens; kept across restarts (0: no limit)")
	f.DurationVar(&cfg.Model.BudgetWindow, "model-budget-window", 0, "renew --model-budget-agent every window, e.g. 24h (0: never)")
	f.Int64Var(&cfg.Model.MaxOutput, "model-max-output", 0, "output bound given to model requests that set none while a budget applies (0: 16384)")
	f.DurationVar(&cfg.Model.TokenTTL, "model-token-ttl", 0, "lifetime of model tokens minted for programs on the host (POST /v1/model/tokens; 0: 24h)")
	f.IntVar(&cfg.Model.MaxTokens, "model-token-max", 0, "live host model tokens each principal may hold (0: 32)")
	f.IntVar(&cfg.Egress.Port, "egress-port", daemon.DefaultEgressPort, "port of the egress broker inside every sandbox (-1: none)")
	f.StringSliceVar(&cfg.Egress.Allow, "egress-allow", nil, "hosts every sandbox may reach through the broker, e.g. api.github.com or *.pypi.org:443 (repeatable)")
	f.StringSliceVar(&cfg.Egress.AllowPrivate, "egress-allow-private", nil, "CIDRs reachable although private or loopback (repeatable; for tests)")
	f.BoolVar(&cfg.Egress.DenyUnknown, "egress-deny-unknown", false, "refuse hosts off the allowlist at once instead of asking an operator (policy: egress.unknown: deny)")
	f.StringVar(&cfg.PolicyFile, "policy", "", "policy file (YAML): egress allowlist, unknown hosts ask|deny, approval timeout and webhooks, commands needing approval")
	f.BoolVar(&cfg.DisableConsole, "no-console", false, "do not serve the web console at /ui/")
	f.StringSliceVar(&cfg.ImageDirs, "image-dir", nil, "directory beneath which API clients may name local images: directories, OCI layouts, tarballs (repeatable; default: none)")
	f.StringSliceVar(&cfg.ImageRegistries, "image-registry", nil, "registry host API clients may pull images from, e.g. ghcr.io or localhost:5000 (repeatable; default: none)")
	f.StringVar(&cfg.AuditKeyFile, "audit-key", "", "key file authenticating the audit log, outside the data directory (default "+audit.DefaultKeyFile()+"; created 0600)")
	f.StringVar(&cfg.AuditCheckpointFile, "audit-checkpoints", "", "file the audit log's head is checkpointed to, outside the data directory (default: one per data directory under "+filepath.Dir(audit.DefaultCheckpointFile("x"))+")")
	f.StringVar(&cfg.AuditCheckpointURL, "audit-checkpoint-url", "", "URL that also receives every audit checkpoint as a JSON POST")
	f.StringVar(&storeWarn, "store-size-warn", "", "log a warning when the database grows past this size (default 1G; off: never)")
	return c
}

func optionalSize(flag, v string) (int64, error) {
	if v == "" || v == "0" {
		return 0, nil
	}
	n, err := sandbox.ParseBytes(v)
	if err != nil {
		return 0, fmt.Errorf("--%s: %v", flag, err)
	}
	return n, nil
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

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }
