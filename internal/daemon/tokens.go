package daemon

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ironclaw/ironclaw/internal/api"
	"github.com/ironclaw/ironclaw/internal/client"
)

// Folders of named tokens inside the data directory, one NAME.token file
// each (mode 0600), read when the daemon starts.
const (
	// OperatorsDir holds further operator tokens; NAME is recorded as the
	// decider of what that token decides.
	OperatorsDir = "operators"
	// AgentsDir holds further agent tokens; each is the principal
	// "agent:NAME", with its own sandboxes, approvals and quotas.
	AgentsDir = client.AgentsDir
)

// namedTokens reads dir/sub/NAME.token files, sorted by name. T is
// api.Operator (dir/operators) or api.Agent (dir/agents): both are a name
// and its token, so one reader serves the two folders.
func namedTokens[T ~struct{ Name, Token string }](dir, sub string) ([]T, error) {
	ents, err := os.ReadDir(filepath.Join(dir, sub))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sub, err)
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].Name() < ents[j].Name() })
	var out []T
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".token")
		if !ok {
			continue
		}
		tok, err := readToken(filepath.Join(dir, sub, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, T{Name: name, Token: tok})
	}
	return out, nil
}

// AddOperator creates dir/operators/NAME.token with a new random token and
// returns its path. The daemon reads these files when it starts.
func AddOperator(dir, name string) (string, error) {
	return addNamedToken(dir, OperatorsDir, "operator", name)
}

// AddAgent creates dir/agents/NAME.token with a new random agent token and
// returns its path. The daemon reads these files when it starts.
func AddAgent(dir, name string) (string, error) {
	return addNamedToken(dir, AgentsDir, "agent", name)
}

func addNamedToken(dir, sub, role, name string) (string, error) {
	if !api.ValidOperatorName(name) || name == "operator" || name == "agent" || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("%s name %q: 1-64 letters, digits, '.', '_', '-', '@', not starting with '.', not agent or operator", role, name)
	}
	if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
		return "", err
	}
	p := filepath.Join(dir, sub, name+".token")
	if _, err := os.Lstat(p); err == nil {
		return "", fmt.Errorf("%s %s exists: %s", role, name, p)
	}
	if _, err := ensureToken(p); err != nil {
		return "", err
	}
	return p, nil
}
