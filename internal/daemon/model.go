package daemon

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/modelproxy"
	"github.com/ironclaw/ironclaw/internal/modelproxy/mock"
	"github.com/ironclaw/ironclaw/internal/store"
)

// ModelConfig configures the model proxy. Provider keys come from the
// daemon's own environment (OPENAI_API_KEY, OPENAI_BASE_URL,
// ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL) and nowhere else; they never reach
// the store, the audit log, a sandbox or an agent. Its numbers follow
// Config's rule: 0 the default, negative none or refused, as each says.
type ModelConfig struct {
	// Provider is "" (a provider with a key in the environment is used,
	// the offline mock answers for the others) or "mock" (the mock answers
	// for all, whatever keys are set).
	Provider string
	// MockScript is a scripted list of turns for the mock (see package mock).
	MockScript string
	// Port is the proxy's port inside sandboxes (0: defaults.ModelPort,
	// 4000; negative: none, no in-sandbox listener; at most 65535).
	Port int
	// Models is an allowlist of model names (empty: any).
	Models []string
	// RequestsPerMinute bounds each proxy token's requests (0: the
	// default, none; negative: none).
	RequestsPerMinute int
	// SandboxBudget bounds the input+output tokens each sandbox's model
	// requests use (flag --model-budget-sandbox). AgentBudget bounds those
	// of each principal (an agent token, or an operator): its sandboxes'
	// and its host tokens' requests together, kept in the store so a
	// restart does not renew it (--model-budget-agent). BudgetWindow
	// renews AgentBudget every window, counted from the Unix epoch
	// (--model-budget-window; at least a second). For all three, 0 is the
	// default, none (never renewed), and negative is none.
	SandboxBudget int64
	AgentBudget   int64
	BudgetWindow  time.Duration
	// MaxOutput is the output bound the proxy gives a request that sets
	// none while a budget applies; never above what is left
	// (--model-max-output; 0: defaults.ModelMaxOutput, 16384; negative:
	// refused).
	MaxOutput int64
	// TokenTTL is the lifetime of host tokens (POST /v1/model/tokens;
	// --model-token-ttl; 0: defaults.ModelTokenTTL, 24h) and MaxTokens
	// how many live ones a principal may hold (--model-token-max; 0:
	// defaults.ModelMaxTokens, 32). Negative: refused.
	TokenTTL  time.Duration
	MaxTokens int
}

// withDefaults applies Config's rule; the limits' none is 0, which is
// what modelproxy reads as none (it refuses negative ones).
func (m ModelConfig) withDefaults(errs *[]error) ModelConfig {
	m.Port = orNone(m.Port, defaults.ModelPort, -1)
	m.RequestsPerMinute = orNone(m.RequestsPerMinute, 0, 0)
	m.SandboxBudget = orNone(m.SandboxBudget, 0, 0)
	m.AgentBudget = orNone(m.AgentBudget, 0, 0)
	m.BudgetWindow = orNone(m.BudgetWindow, 0, 0)
	m.MaxOutput = bound(errs, "Model.MaxOutput", m.MaxOutput, defaults.ModelMaxOutput)
	m.TokenTTL = bound(errs, "Model.TokenTTL", m.TokenTTL, defaults.ModelTokenTTL)
	m.MaxTokens = bound(errs, "Model.MaxTokens", m.MaxTokens, defaults.ModelMaxTokens)
	return m
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

// newModelProxy builds the proxy and reports which upstream each provider
// uses. Principal spend is kept in st.
func newModelProxy(mc ModelConfig, st *store.Store, log *audit.Log, logf func(string, ...any)) (*modelproxy.Proxy, error) {
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
		SandboxBudget:     mc.SandboxBudget,
		PrincipalBudget:   mc.AgentBudget,
		BudgetWindow:      mc.BudgetWindow,
		DefaultMaxOutput:  mc.MaxOutput,
		HostTokenTTL:      mc.TokenTTL,
		MaxHostTokens:     mc.MaxTokens,
		Log:               log,
		Logf:              logf,
	}
	if st != nil {
		cfg.Spend = spendStore{st}
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

// Attach mints the sandbox's token and returns the handler that accepts
// it, and only it, on the sandbox's loopback.
func (m modelAccess) Attach(session, principal string) (string, http.Handler, error) {
	tok, err := m.MintSandbox(session, principal)
	if err != nil {
		return "", nil, err
	}
	return tok, m.SandboxHandler(session), nil
}

// spendStore keeps principal model spend in the store's model_spend table.
type spendStore struct{ st *store.Store }

func (s spendStore) Spent(ctx context.Context, principal string, period int64) (int64, error) {
	var n int64
	err := s.st.ReadDB().QueryRowContext(ctx, `SELECT tokens FROM model_spend WHERE principal = ? AND period = ?`, principal, period).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return n, err
}

func (s spendStore) AddSpent(ctx context.Context, deltas []modelproxy.SpendDelta) error {
	tx, err := s.st.DB().BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, d := range deltas {
		if _, err := tx.ExecContext(ctx, `INSERT INTO model_spend (principal, period, tokens, updated_at) VALUES (?, ?, ?, ?)
ON CONFLICT (principal, period) DO UPDATE SET tokens = tokens + excluded.tokens, updated_at = excluded.updated_at`,
			d.Principal, d.Period, d.Tokens, now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM model_spend WHERE principal = ? AND period < ?`, d.Principal, d.Period); err != nil {
			return err
		}
	}
	return tx.Commit()
}

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
