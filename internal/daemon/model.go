package daemon

import (
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/modelproxy"
	"github.com/ironclaw/ironclaw/internal/modelproxy/mock"
)

// DefaultModelPort is where the model proxy answers inside every sandbox.
const DefaultModelPort = 4000

// ModelConfig configures the model proxy. Provider keys come from the
// daemon's own environment (OPENAI_API_KEY, OPENAI_BASE_URL,
// ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL) and nowhere else; they never reach
// the store, the audit log, a sandbox or an agent.
type ModelConfig struct {
	// Provider is "" (a provider with a key in the environment is used,
	// the offline mock answers for the others) or "mock" (the mock answers
	// for all, whatever keys are set).
	Provider string
	// MockScript is a scripted list of turns for the mock (see package mock).
	MockScript string
	// Port is the proxy's port inside sandboxes; 0 means DefaultModelPort,
	// negative disables the in-sandbox listener.
	Port int
	// Models is an allowlist of model names (empty: any).
	Models []string
	// RequestsPerMinute and TokensPerSession are per-token budgets (0: none).
	RequestsPerMinute int
	TokensPerSession  int64
}

// providerKeys reads the upstreams from the environment.
func providerKeys(getenv func(string) string) (openai, anthropic *modelproxy.Upstream) {
	if k := getenv("OPENAI_API_KEY"); k != "" {
		base := getenv("OPENAI_BASE_URL")
		if base == "" {
			base = "https://api.openai.com/v1"
		}
		openai = &modelproxy.Upstream{BaseURL: strings.TrimRight(base, "/"), APIKey: k}
	}
	if k := getenv("ANTHROPIC_API_KEY"); k != "" {
		base := getenv("ANTHROPIC_BASE_URL")
		if base == "" {
			base = "https://api.anthropic.com"
		}
		base = strings.TrimRight(base, "/")
		if !strings.HasSuffix(base, "/v1") {
			base += "/v1" // the SDKs' base URL omits it; the proxy's includes it
		}
		anthropic = &modelproxy.Upstream{BaseURL: base, APIKey: k}
	}
	return openai, anthropic
}

// newModelProxy builds the proxy and reports which upstream each provider uses.
func newModelProxy(mc ModelConfig, log *audit.Log, logf func(string, ...any)) (*modelproxy.Proxy, error) {
	var script *mock.Script
	if mc.MockScript != "" {
		s, err := mock.LoadScript(mc.MockScript)
		if err != nil {
			return nil, fmt.Errorf("mock script: %w", err)
		}
		script = s
	}
	m := mock.New(script)
	cfg := modelproxy.Config{
		Mock:              map[modelproxy.Provider]http.Handler{modelproxy.OpenAI: m.OpenAI(), modelproxy.Anthropic: m.Anthropic()},
		Models:            mc.Models,
		RequestsPerMinute: mc.RequestsPerMinute,
		TokensPerSession:  mc.TokensPerSession,
		Log:               log,
		Logf:              logf,
	}
	switch mc.Provider {
	case "", "auto":
		cfg.OpenAI, cfg.Anthropic = providerKeys(os.Getenv)
	case "mock":
	default:
		return nil, fmt.Errorf("--provider %q: want mock or nothing", mc.Provider)
	}
	for name, up := range map[string]*modelproxy.Upstream{"openai": cfg.OpenAI, "anthropic": cfg.Anthropic} {
		if up != nil {
			logf("model proxy: %s -> %s (key from the environment)", name, up.BaseURL)
		} else {
			logf("model proxy: %s -> offline mock", name)
		}
	}
	return modelproxy.New(cfg)
}

// modelAccess adapts the proxy to what sessions need.
type modelAccess struct {
	*modelproxy.Proxy
	port uint16
}

func (m modelAccess) Port() uint16 { return m.port }

// secretsOf lists the provider keys, for the audit log's redactor.
func secretsOf(getenv func(string) string) []string {
	var out []string
	for _, k := range []string{"OPENAI_API_KEY", "ANTHROPIC_API_KEY"} {
		if v := getenv(k); v != "" {
			out = append(out, v)
		}
	}
	return out
}
