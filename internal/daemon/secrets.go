package daemon

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/gateway"
	"github.com/ironclaw/ironclaw/internal/policy"
	"github.com/ironclaw/ironclaw/internal/secrets"
	"github.com/ironclaw/ironclaw/internal/session"
)

// secretsKeyFile is where the secrets key is kept: cfg.SecretsKeyFile,
// else beside the audit key (so both share one custody: /etc/ironclaw as
// root, else $XDG_CONFIG_HOME/ironclaw, and a test's temp tree in tests).
// Like the audit key it must lie outside the data directory.
func secretsKeyFile(cfg Config, dir string) (string, error) {
	p := cfg.SecretsKeyFile
	if p == "" {
		ak := cfg.AuditKeyFile
		if ak == "" {
			ak = audit.DefaultKeyFile()
		}
		p = filepath.Join(filepath.Dir(ak), "secrets.key")
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	if within(dir, abs) {
		return "", fmt.Errorf("%w: secrets key %s is inside the data directory %s: keep it elsewhere, or the sealed values are as readable as the data directory", ErrInvalidConfig, abs, dir)
	}
	return abs, nil
}

// policySecretValues reads the values of the policy's secrets (from the
// daemon's environment or from files) before anything starts, so that a
// missing one stops the start and the audit log's redactor knows them.
func policySecretValues(pol *policy.Policy, getenv func(string) string) ([][]byte, error) {
	out := make([][]byte, len(pol.Secrets))
	for i, s := range pol.Secrets {
		var v []byte
		switch {
		case s.ValueEnv != "":
			e := getenv(s.ValueEnv)
			if e == "" {
				return nil, fmt.Errorf("policy secret %s: value_env %s is not set in the daemon's environment", s.Name, s.ValueEnv)
			}
			v = []byte(e)
		default:
			b, err := readValueFile(s.ValueFile)
			if err != nil {
				return nil, fmt.Errorf("policy secret %s: %w", s.Name, err)
			}
			v = b
		}
		if err := secrets.CheckValue(v); err != nil {
			return nil, fmt.Errorf("policy secret %s: %w", s.Name, err)
		}
		out[i] = v
	}
	return out, nil
}

// readValueFile reads a value file: a regular file of at most
// secrets.MaxValueBytes (and a newline), that other users cannot read.
func readValueFile(p string) ([]byte, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("value_file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("value_file %s: not a regular file", p)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("value_file %s: accessible to other users (mode %04o); chmod 600 it", p, st.Mode().Perm())
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("value_file: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, secrets.MaxValueBytes+3))
	if err != nil {
		return nil, fmt.Errorf("value_file: %w", err)
	}
	return trimNewline(b), nil
}

// trimNewline drops one trailing line break, which editors and echo add.
func trimNewline(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

// openSecrets opens the secrets store with its key, adds the policy's
// secrets and makes the grants, which ask the gateway through asker. The
// values are handed to the audit log's redactor.
func openSecrets(cfg Config, dir string, pol *policy.Policy, values [][]byte, alog *audit.Log, redactor *audit.Redactor, asker *secretAsker, logf func(string, ...any)) (*secrets.Store, *secrets.Grants, error) {
	keyFile, err := secretsKeyFile(cfg, dir)
	if err != nil {
		return nil, nil, err
	}
	key, created, err := secrets.EnsureKey(keyFile)
	if err != nil {
		return nil, nil, err
	}
	if created {
		logf("secrets key created in %s (keep it; without it the stored secrets cannot be opened)", keyFile)
	}
	// Every current value is redacted from the audit log, as the
	// daemon's tokens and keys are.
	st, err := secrets.Open(filepath.Join(dir, secrets.FileName), key, secrets.Options{Audit: alog, Redact: redactor.SetExtra})
	if err != nil {
		return nil, nil, err
	}
	for i, s := range pol.Secrets {
		if _, err := st.Get(s.Name); err == nil {
			logf("policy secret %s shadows the stored secret of that name while the policy lists it", s.Name)
		}
		if err := st.AddPolicy(s.Meta(), values[i]); err != nil {
			return nil, nil, fmt.Errorf("policy secret %s: %w", s.Name, err)
		}
	}
	if n := len(st.List()); n > 0 {
		logf("%d brokered secret(s), key %s in %s", n, key.ID(), keyFile)
	}
	g, err := secrets.NewGrants(secrets.GrantsOptions{Store: st, Audit: alog, Asker: asker})
	if err != nil {
		return nil, nil, err
	}
	return st, g, nil
}

// secretAsker files secret.use approvals through the gateway (set once it
// exists) and waits for their decisions.
type secretAsker struct {
	gw atomic.Pointer[gateway.Gateway]
}

func (a *secretAsker) Ask(ctx context.Context, sandbox, principal string, m secrets.Meta) (string, error) {
	gw := a.gw.Load()
	if gw == nil {
		return "", fmt.Errorf("%w: the approval gateway is not running", secrets.ErrUnavailable)
	}
	ap, err := gw.File(ctx, gateway.Request{Kind: gateway.KindSecretUse, Session: sandbox, By: principal, Via: "secrets", Join: true,
		Data: map[string]any{"secret": m.Name, "hosts": m.Hosts}})
	if err != nil {
		return "", err
	}
	return ap.ID, nil
}

func (a *secretAsker) Withdraw(ctx context.Context, sandbox string) {
	if gw := a.gw.Load(); gw != nil {
		_, _ = gw.Withdraw(ctx, sandbox, "withdrawn: the sandbox's create failed")
	}
}

func (a *secretAsker) Wait(ctx context.Context, id string) (bool, string, error) {
	gw := a.gw.Load()
	if gw == nil {
		return false, "the approval gateway is not running", nil
	}
	ap, err := gw.Get(ctx, id)
	if err != nil {
		return false, "", err
	}
	// Wait returns early only on a decision, an expiry or a closed
	// gateway; the deadline stops a closed gateway from spinning here.
	deadline := ap.ExpiresAt.Add(5 * time.Second)
	for ap.Pending() && time.Now().Before(deadline) {
		if ap, err = gw.Wait(ctx, id, time.Until(deadline)); err != nil {
			return false, "", err
		}
		if ap.Pending() {
			// Still pending after Wait: a closed gateway answers at once;
			// do not spin on it.
			select {
			case <-ctx.Done():
				return false, "", ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	switch ap.State {
	case gateway.StateApproved:
		return true, "", nil
	case gateway.StateExpired, gateway.StatePending:
		if strings.HasPrefix(ap.Reason, "withdrawn") {
			return false, fmt.Sprintf("request %s was %s", ap.ID, ap.Reason), nil
		}
		return false, fmt.Sprintf("request %s timed out with no decision", ap.ID), nil
	default:
		detail := fmt.Sprintf("request %s was denied by %s", ap.ID, ap.DecidedBy)
		if ap.Reason != "" {
			detail += ": " + ap.Reason
		}
		return false, detail, nil
	}
}

// sessionSecrets is what the session manager grants through: nothing
// without an egress broker, since only the broker can put a value into a
// request.
func sessionSecrets(eg *egressAccess, g *secrets.Grants) session.SecretsAccess {
	if eg == nil || g == nil {
		return nil
	}
	return g
}

func stringsOf(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}
