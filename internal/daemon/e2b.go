package daemon

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/ironclaw/ironclaw/internal/api"
	"github.com/ironclaw/ironclaw/internal/e2b"
	"github.com/ironclaw/ironclaw/internal/e2b/auth"
)

// E2BKeyFile holds the default agent's E2B API key (an e2b_<hex> key the
// official SDKs accept as E2B_API_KEY); a named agent's is
// agents/NAME.e2b.key. Both are derived from the agent tokens, so they
// change when a token is rotated, and are written anew at each start.
const E2BKeyFile = "e2b.key"

// serveE2B builds the E2B-compatible API over the native API h and writes
// every agent's key file.
func serveE2B(cfg Config, dir string, h http.Handler, agentTok string, agents []api.Agent, logf func(string, ...any)) (*e2b.Server, error) {
	all := []auth.Agent{{Name: "agent", Token: agentTok}}
	for _, a := range agents {
		all = append(all, auth.Agent{Name: "agent:" + a.Name, Token: a.Token})
	}
	es, err := e2b.New(e2b.Config{API: h, Agents: all, Domain: cfg.E2BDomain, Templates: cfg.E2BTemplates, Ports: cfg.E2BPorts, Logf: logf})
	if err != nil {
		return nil, err
	}
	if err := writeKey(filepath.Join(dir, E2BKeyFile), auth.APIKey(agentTok)); err != nil {
		return nil, err
	}
	for _, a := range agents {
		if err := writeKey(filepath.Join(dir, AgentsDir, a.Name+".e2b.key"), auth.APIKey(a.Token)); err != nil {
			return nil, err
		}
	}
	logf("E2B-compatible API under %s; its key in %s", e2b.Prefix, filepath.Join(dir, E2BKeyFile))
	return es, nil
}

// writeKey writes a key file 0600, replacing it whole (a reader never sees
// half a key).
func writeKey(path, key string) error {
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	if err := os.WriteFile(tmp, []byte(key+"\n"), 0o600); err != nil {
		return fmt.Errorf("e2b key: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("e2b key: %w", err)
	}
	return nil
}
