package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/client"
)

// secret set (stdin and --from-file, one trailing newline dropped), ls
// (table and --json), rotation, sandbox create --secret, rm; bad input
// gets one line and exit 125 and changes nothing; the value is never
// printed.
func TestSecretCommands(t *testing.T) {
	startDaemon(t)
	const value = "cli_VALUE_0123456789abcdef0123"
	code, out, stderr := run(t, value+"\n", "secret", "set", "github", "--host", "api.github.com", "--env", "GITHUB_TOKEN", "--grant", "all")
	if code != 0 || !strings.Contains(out, "created github (version 1): GITHUB_TOKEN=<placeholder> for api.github.com") {
		t.Fatalf("secret set: %d %q %q", code, out, stderr)
	}
	f := filepath.Join(t.TempDir(), "v")
	if err := os.WriteFile(f, []byte(value+"-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := run(t, "", "secret", "set", "github", "--host", "api.github.com", "--env", "GITHUB_TOKEN", "--grant", "all", "--from-file", f); code != 0 || !strings.Contains(out, "rotated github (version 2)") {
		t.Fatalf("secret set --from-file: %d %q %q", code, out, stderr)
	}
	for _, bad := range []struct {
		stdin string
		args  []string
	}{
		{value, []string{"secret", "set", "x"}},                                                    // no --host
		{"", []string{"secret", "set", "x", "--host", "a.com"}},                                    // empty value
		{value, []string{"secret", "set", "x", "--host", "a.com", "--value", value}},               // no such flag
		{value, []string{"secret", "set", "Bad Name", "--host", "a.com"}},                          // bad name
		{value, []string{"secret", "set", "x", "--host", "a.com", "--grant", "sometimes"}},         // bad grant
		{value, []string{"secret", "set", "x", "--host", "a.com", "--from-file", "/nope"}},         // no file
		{strings.Repeat("v", maxSecretValue+1), []string{"secret", "set", "x", "--host", "a.com"}}, // too big
		{value, []string{"secret", "rm", "missing"}},
	} {
		code, out, stderr := run(t, bad.stdin, bad.args...)
		if code != ExitIronClaw || stderr == "" {
			t.Errorf("%v: exit %d, stderr %q", bad.args, code, stderr)
		}
		if strings.Contains(out+stderr, value) {
			t.Errorf("%v printed the value", bad.args)
		}
	}
	code, out, _ = run(t, "", "secret", "ls", "--json")
	list := jsonLines[client.Secret](t, "secret ls --json", out)
	if code != 0 || len(list) != 1 || list[0].Name != "github" || list[0].Version != 2 || list[0].Source != "api" {
		t.Fatalf("secret ls --json: %d %+v", code, list)
	}
	if code, out, _ := run(t, "", "secret", "ls"); code != 0 || !strings.Contains(out, "github") || !strings.Contains(out, "GITHUB_TOKEN") || strings.Contains(out, value) {
		t.Fatalf("secret ls: %d %q", code, out)
	}
	code, out, stderr = run(t, "", "sandbox", "create", "--secret", "github")
	if code != 0 {
		t.Fatalf("sandbox create --secret: %d %q", code, stderr)
	}
	id := strings.TrimSpace(out)
	if code, out, _ := run(t, "", "sandbox", "exec", id, "--", "sh", "-c", `echo "$GITHUB_TOKEN"`); code != 0 || !strings.HasPrefix(out, "ironclaw-secret-github-") {
		t.Fatalf("exec in a granted sandbox: %d %q", code, out)
	}
	if code, _, stderr := run(t, "", "sandbox", "create", "--secret", "missing"); code != ExitIronClaw || !strings.Contains(stderr, "missing") {
		t.Fatalf("sandbox create --secret missing: %d %q", code, stderr)
	}
	if code, out, stderr := run(t, "", "secret", "rm", "github"); code != 0 || out != "github\n" {
		t.Fatalf("secret rm: %d %q %q", code, out, stderr)
	}
}
