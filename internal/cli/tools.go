package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/spf13/cobra"
)

func newToolsCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "tools",
		Short: "List the tools operators approved (tool.register requests)",
		Long: `List the tool definitions of a running 'ironclaw serve': the tools agents may
offer a model, each registered through an approved tool.register request. The
daemon and token are found as for 'ironclaw sandbox'.`,
	}
	c.AddCommand(newToolsLsCmd(e))
	return c
}

// tool is a registered tool as GET /v1/tools sends it.
type tool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema,omitempty"`
	Command      string          `json:"command,omitempty"`
	Approval     string          `json:"approval,omitempty"`
	RegisteredAt time.Time       `json:"registered_at,omitzero"`
}

func newToolsLsCmd(e *env) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:     "ls [--json]",
		Aliases: []string{"list"},
		Short:   "List registered tools: NAME COMMAND APPROVAL DESCRIPTION",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			list, err := listTools(c.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSONLines(e.stdout, list)
			}
			// Names, commands and descriptions are an agent's text (an
			// operator approved them, but may not have read every byte):
			// the table escapes every cell.
			t := newTable(e.stdout, "NAME", "COMMAND", "APPROVAL", "DESCRIPTION")
			for _, tl := range list {
				cmd := tl.Command
				if cmd == "" {
					cmd = "-"
				}
				t.row(tl.Name, cmd, tl.Approval, tl.Description)
			}
			return t.flush()
		},
	}
	jsonFlag(c.Flags(), &asJSON)
	return c
}

// maxToolsAnswer bounds the answer of GET /v1/tools that listTools reads
// (a definition is at most about 72 KiB).
const maxToolsAnswer = 64 << 20

// listTools is GET /v1/tools with the agent token, found as package
// client finds it. The client has no call for it yet; when it has, this
// goes.
func listTools(ctx context.Context) ([]tool, error) {
	addr := os.Getenv(client.EnvAddr)
	if addr == "" {
		addr = client.DefaultAddr
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(addr, "/")+"/v1/tools", nil)
	if err != nil {
		return nil, err
	}
	if tok := agentToken(); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("cannot reach the ironclaw daemon at %s (is 'ironclaw serve' running?): %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxToolsAnswer))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var env struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		e := &client.Error{Status: resp.StatusCode, Code: fmt.Sprintf("http_%d", resp.StatusCode), Message: http.StatusText(resp.StatusCode)}
		if json.Unmarshal(body, &env) == nil && env.Error.Code != "" {
			e.Code, e.Message = env.Error.Code, env.Error.Message
		}
		return nil, e
	}
	var out struct {
		Tools []tool `json:"tools"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("decoding the daemon's answer to GET /v1/tools: %w", err)
	}
	return out.Tools, nil
}

// agentToken is the token package client would send on an agent route:
// $IRONCLAW_API_TOKEN, else agent.token in the data directory, else the
// operator's.
func agentToken() string {
	dir := client.DefaultDataDir()
	for _, src := range []struct{ env, file string }{
		{client.EnvAgentToken, client.AgentTokenFile},
		{client.EnvOperatorToken, client.OperatorTokenFile},
	} {
		if t := os.Getenv(src.env); t != "" {
			return t
		}
		if b, err := os.ReadFile(filepath.Join(dir, src.file)); err == nil {
			if t := strings.TrimSpace(string(b)); t != "" {
				return t
			}
		}
	}
	return ""
}
