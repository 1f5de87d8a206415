package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/e2b/auth"
)

func newE2BCmd(e *env) *cobra.Command {
	c := &cobra.Command{Use: "e2b", Short: "The E2B-compatible API (docs/e2b.md)"}
	var dataDir, agent string
	key := &cobra.Command{
		Use:   "key",
		Short: "Print the E2B API key (E2B_API_KEY) of the default agent token, or of a named agent's",
		Long: `Print the E2B API key of the default agent token (agent.token), or with --agent
NAME of agents/NAME.token. The key is derived from the token, so it is the one
the daemon writes to e2b.key (agents/NAME.e2b.key), and changes when the token
is rotated. Use it as:

  export E2B_API_URL=http://127.0.0.1:8787/e2b E2B_SANDBOX_URL=http://127.0.0.1:8787/e2b
  export E2B_API_KEY=$(ironclaw e2b key)`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			path := filepath.Join(dataDir, client.AgentTokenFile)
			if agent != "" {
				if strings.ContainsAny(agent, `/\`) || strings.HasPrefix(agent, ".") {
					return fmt.Errorf("--agent %q is not an agent name", agent)
				}
				path = filepath.Join(dataDir, client.AgentsDir, agent+".token")
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("reading the agent token: %w", err)
			}
			tok := strings.TrimSpace(string(b))
			if tok == "" {
				return fmt.Errorf("%s is empty", path)
			}
			_, err = fmt.Fprintln(e.stdout, auth.APIKey(tok))
			return err
		},
	}
	key.Flags().StringVar(&dataDir, "data-dir", defaults.DataDir(), "the daemon's data directory")
	key.Flags().StringVar(&agent, "agent", "", "a named agent (agents/NAME.token)")
	c.AddCommand(key)
	return c
}
