package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/e2b/auth"
)

// ironclaw e2b key prints the key the daemon derives from the agent
// token (the default one, or a named agent's), and refuses names that
// would leave the agents directory.
func TestE2BKey(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "agent.token"), []byte("default-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "agents"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "agents", "bob.token"), []byte("bob-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run(t, "", "e2b", "key", "--data-dir", dir)
	if code != 0 || strings.TrimSpace(out) != auth.APIKey("default-token-0123456789") {
		t.Fatalf("default: %d %q %q", code, out, errOut)
	}
	code, out, _ = run(t, "", "e2b", "key", "--data-dir", dir, "--agent", "bob")
	if code != 0 || strings.TrimSpace(out) != auth.APIKey("bob-token-0123456789") {
		t.Fatalf("bob: %d %q", code, out)
	}
	for _, bad := range []string{"../agent", ".hidden", "nobody"} {
		if code, _, _ := run(t, "", "e2b", "key", "--data-dir", dir, "--agent", bad); code == 0 {
			t.Errorf("--agent %q: exit 0", bad)
		}
	}
}
