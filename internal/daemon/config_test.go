package daemon

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/errdefs"
)

// The zero Config takes every default of package defaults.
func TestConfigZeroIsDefaults(t *testing.T) {
	c, err := Config{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"Listen", c.Listen, defaults.Listen},
		{"DataDir", c.DataDir, defaults.DataDir()},
		{"PoolSize", c.PoolSize, defaults.PoolSize},
		{"Spares", c.Spares, defaults.SpareInits},
		{"MaxSandboxes", c.MaxSandboxes, defaults.MaxSandboxes},
		{"DefaultTTL", c.DefaultTTL, defaults.TTL},
		{"DefaultIdle", c.DefaultIdle, defaults.Idle},
		{"RatePerSecond", c.RatePerSecond, defaults.RatePerSecond},
		{"RateBurst", c.RateBurst, defaults.RateBurst},
		{"SandboxRatePerSecond", c.SandboxRatePerSecond, defaults.SandboxRatePerSecond},
		{"SandboxRateBurst", c.SandboxRateBurst, defaults.SandboxRateBurst},
		{"RateBuckets", c.RateBuckets, defaults.RateBuckets},
		{"MaxBodyBytes", c.MaxBodyBytes, defaults.MaxBodyBytes},
		{"MaxUploadBytes", c.MaxUploadBytes, defaults.MaxUploadBytes},
		{"WaitOutputBytes", c.WaitOutputBytes, defaults.WaitOutputBytes},
		{"BodyTimeout", c.BodyTimeout, defaults.BodyTimeout},
		{"ShutdownGrace", c.ShutdownGrace, defaults.ShutdownGrace},
		{"ShutdownTimeout", c.ShutdownTimeout, defaults.ShutdownTimeout},
		{"StoreSizeWarn", c.StoreSizeWarn, defaults.StoreSizeWarn},
		{"Model.Port", c.Model.Port, defaults.ModelPort},
		{"Model.RequestsPerMinute", c.Model.RequestsPerMinute, 0},
		{"Model.SandboxBudget", c.Model.SandboxBudget, int64(0)},
		{"Model.AgentBudget", c.Model.AgentBudget, int64(0)},
		{"Model.BudgetWindow", c.Model.BudgetWindow, time.Duration(0)},
		{"Model.MaxOutput", c.Model.MaxOutput, defaults.ModelMaxOutput},
		{"Model.TokenTTL", c.Model.TokenTTL, defaults.ModelTokenTTL},
		{"Model.MaxTokens", c.Model.MaxTokens, defaults.ModelMaxTokens},
		{"Egress.Port", c.Egress.Port, defaults.EgressPort},
		{"Egress.MaxConns", c.Egress.MaxConns, defaults.EgressMaxConns},
		{"Egress.MaxConnsTotal", c.Egress.MaxConnsTotal, defaults.EgressMaxConnsTotal},
		{"Egress.MaxWaiting", c.Egress.MaxWaiting, defaults.EgressMaxWaiting},
		{"Egress.MaxWaitingPerHost", c.Egress.MaxWaitingPerHost, defaults.EgressMaxWaitingPerHost},
		{"Egress.TunnelIdle", c.Egress.TunnelIdle, defaults.EgressTunnelIdle},
		{"Egress.DenyWindow", c.Egress.DenyWindow, defaults.EgressDenyWindow},
		{"Egress.Body.Timeout", c.Egress.Body.Timeout, defaults.InsideBodyTimeout},
		{"Egress.Body.MinRate", c.Egress.Body.MinRate, defaults.InsideBodyMinRate},
		{"Egress.Body.Idle", c.Egress.Body.Idle, defaults.InsideBodyIdle},
		{"Inside.MaxConns", c.Inside.MaxConns, defaults.InsideMaxConns},
		{"Inside.MaxHeaderBytes", c.Inside.MaxHeaderBytes, defaults.InsideMaxHeaderBytes},
		{"Inside.HeaderTimeout", c.Inside.HeaderTimeout, defaults.InsideHeaderTimeout},
		{"Inside.IdleTimeout", c.Inside.IdleTimeout, defaults.InsideIdleTimeout},
		{"Inside.WriteTimeout", c.Inside.WriteTimeout, defaults.InsideWriteTimeout},
		{"Inside.Body.Timeout", c.Inside.Body.Timeout, defaults.InsideBodyTimeout},
	} {
		if f.got != f.want {
			t.Errorf("%s: %v (%T), want %v (%T)", f.name, f.got, f.got, f.want, f.want)
		}
	}
}

// A negative value is none where none makes sense, in the form the
// package that reads it takes for none.
func TestConfigNegativeIsNone(t *testing.T) {
	const neg = -7
	in := Config{PoolSize: neg, Spares: neg, DefaultTTL: neg, DefaultIdle: neg, StoreSizeWarn: neg,
		Model:  ModelConfig{Port: neg, RequestsPerMinute: neg, SandboxBudget: neg, AgentBudget: neg, BudgetWindow: neg},
		Egress: EgressConfig{Port: neg, TunnelIdle: neg, DenyWindow: neg},
	}
	in.Egress.Body.MinRate, in.Egress.Body.Idle = neg, neg
	in.Inside.HeaderTimeout, in.Inside.IdleTimeout, in.Inside.WriteTimeout = neg, neg, neg
	c, err := in.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"PoolSize (backend: 0 is no pool)", c.PoolSize, 0},
		{"Spares (native: 0 is none)", c.Spares, 0},
		{"DefaultTTL (session: 0 is none)", c.DefaultTTL, time.Duration(0)},
		{"DefaultIdle (session: 0 is none)", c.DefaultIdle, time.Duration(0)},
		{"StoreSizeWarn (store: negative is never)", c.StoreSizeWarn, int64(-1)},
		{"Model.Port (Run: negative is no listener)", c.Model.Port, -1},
		{"Model.RequestsPerMinute (modelproxy: 0 is none)", c.Model.RequestsPerMinute, 0},
		{"Model.SandboxBudget", c.Model.SandboxBudget, int64(0)},
		{"Model.AgentBudget", c.Model.AgentBudget, int64(0)},
		{"Model.BudgetWindow", c.Model.BudgetWindow, time.Duration(0)},
		{"Egress.Port", c.Egress.Port, -1},
		{"Egress.TunnelIdle (egress: negative is none)", c.Egress.TunnelIdle, time.Duration(-1)},
		{"Egress.DenyWindow (egress: negative is none)", c.Egress.DenyWindow, time.Duration(-1)},
		{"Egress.Body.MinRate (netlimit: not positive is none)", c.Egress.Body.MinRate, int64(-1)},
		{"Egress.Body.Idle (netlimit: not positive is none)", c.Egress.Body.Idle, time.Duration(-1)},
		{"Inside.HeaderTimeout (netlimit: negative is none)", c.Inside.HeaderTimeout, time.Duration(-1)},
		{"Inside.IdleTimeout", c.Inside.IdleTimeout, time.Duration(-1)},
		{"Inside.WriteTimeout", c.Inside.WriteTimeout, time.Duration(-1)},
	} {
		if f.got != f.want {
			t.Errorf("%s: %v, want %v", f.name, f.got, f.want)
		}
	}
}

// A negative value is refused where none would lift a bound, each named;
// so are ports beyond 65535, one port for both servers, and a rate that is
// not a number.
func TestConfigRefused(t *testing.T) {
	for _, tc := range []struct {
		field string
		set   func(*Config)
	}{
		{"MaxSandboxes", func(c *Config) { c.MaxSandboxes = -1 }},
		{"RatePerSecond", func(c *Config) { c.RatePerSecond = -1 }},
		{"RatePerSecond", func(c *Config) { c.RatePerSecond = math.NaN() }},
		{"RatePerSecond", func(c *Config) { c.RatePerSecond = math.Inf(1) }},
		{"RateBurst", func(c *Config) { c.RateBurst = -1 }},
		{"SandboxRatePerSecond", func(c *Config) { c.SandboxRatePerSecond = -1 }},
		{"SandboxRatePerSecond", func(c *Config) { c.SandboxRatePerSecond = math.NaN() }},
		{"SandboxRatePerSecond", func(c *Config) { c.SandboxRatePerSecond = math.Inf(1) }},
		{"SandboxRateBurst", func(c *Config) { c.SandboxRateBurst = -1 }},
		{"RateBuckets", func(c *Config) { c.RateBuckets = -1 }},
		{"MaxBodyBytes", func(c *Config) { c.MaxBodyBytes = -1 }},
		{"MaxUploadBytes", func(c *Config) { c.MaxUploadBytes = -1 }},
		{"WaitOutputBytes", func(c *Config) { c.WaitOutputBytes = -1 }},
		{"BodyTimeout", func(c *Config) { c.BodyTimeout = -1 }},
		{"ShutdownGrace", func(c *Config) { c.ShutdownGrace = -1 }},
		{"ShutdownTimeout", func(c *Config) { c.ShutdownTimeout = -1 }},
		{"Model.MaxOutput", func(c *Config) { c.Model.MaxOutput = -1 }},
		{"Model.TokenTTL", func(c *Config) { c.Model.TokenTTL = -1 }},
		{"Model.MaxTokens", func(c *Config) { c.Model.MaxTokens = -1 }},
		{"Model.Port", func(c *Config) { c.Model.Port = 65536 }},
		{"Egress.Port", func(c *Config) { c.Egress.Port = 1 << 20 }},
		{"Model.Port and Egress.Port", func(c *Config) { c.Model.Port, c.Egress.Port = 5000, 5000 }},
		{"Model.Port and Egress.Port", func(c *Config) { c.Egress.Port = defaults.ModelPort }},
		{"Egress.MaxConns", func(c *Config) { c.Egress.MaxConns = -1 }},
		{"Egress.MaxConnsTotal", func(c *Config) { c.Egress.MaxConnsTotal = -1 }},
		{"Egress.MaxWaiting", func(c *Config) { c.Egress.MaxWaiting = -1 }},
		{"Egress.MaxWaitingPerHost", func(c *Config) { c.Egress.MaxWaitingPerHost = -1 }},
		{"Egress.Body.Timeout", func(c *Config) { c.Egress.Body.Timeout = -1 }},
		{"Inside.MaxConns", func(c *Config) { c.Inside.MaxConns = -1 }},
		{"Inside.MaxHeaderBytes", func(c *Config) { c.Inside.MaxHeaderBytes = -1 }},
		{"Inside.Body.Timeout", func(c *Config) { c.Inside.Body.Timeout = -1 }},
	} {
		var c Config
		tc.set(&c)
		err := c.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want ErrInvalidConfig naming it", tc.field, err)
		}
	}
	// Both servers off may share "none".
	if err := (Config{Model: ModelConfig{Port: -1}, Egress: EgressConfig{Port: -1}}).Validate(); err != nil {
		t.Errorf("both ports off: %v", err)
	}
}

// Run refuses a bad configuration before it touches the data directory.
func TestRunRefusesBadConfig(t *testing.T) {
	dir := t.TempDir() + "/data"
	err := Run(t.Context(), Config{DataDir: dir, MaxSandboxes: -1})
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Run: %v", err)
	}
	if fileExists(dir) {
		t.Fatal("Run created the data directory of a refused configuration")
	}
}
