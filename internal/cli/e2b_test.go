package cli

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

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

// The E2B flags fill the daemon's Config: templates repeatable or comma
// separated, ports likewise and within 1024-65535.
func TestServeE2BFlags(t *testing.T) {
	s := &serveSettings{}
	f := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	s.flags(f)
	err := f.Parse([]string{"--e2b-template", "base=/srv/images/base", "--e2b-template", "py=/srv/images/py,node=",
		"--e2b-port", "3000", "--e2b-port", "5173,8080", "--e2b-domain", "sb.example.com", "--no-e2b"})
	if err != nil {
		t.Fatal(err)
	}
	c := s.cfg
	if len(c.E2BTemplates) != 3 || c.E2BTemplates["base"] != "/srv/images/base" || c.E2BTemplates["py"] != "/srv/images/py" || c.E2BTemplates["node"] != "" {
		t.Fatalf("templates %v", c.E2BTemplates)
	}
	if len(c.E2BPorts) != 3 || c.E2BPorts[0] != 3000 || c.E2BPorts[2] != 8080 || c.E2BDomain != "sb.example.com" || !c.DisableE2B {
		t.Fatalf("config %+v %v", c.E2BPorts, c.E2BDomain)
	}
	for _, bad := range []string{"80", "70000", "x"} {
		f := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		f.SetOutput(io.Discard)
		(&serveSettings{}).flags(f)
		if err := f.Parse([]string{"--e2b-port", bad}); err == nil {
			t.Errorf("--e2b-port %s accepted", bad)
		}
	}
}
