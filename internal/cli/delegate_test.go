package cli

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/cli/full"
	"github.com/ironclaw/ironclaw/internal/testutil/gobuild"
	"github.com/ironclaw/ironclaw/internal/testutil/selfcopy"
	"github.com/spf13/cobra"
)

// The lazy tree finds a command by the name in its table: that name must
// be the one the command answers to.
func TestCommandTableNames(t *testing.T) {
	for _, fl := range []Full{nil, full.Commands{}} {
		e := &env{full: fl, stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
		for _, c := range e.commandTable() {
			if got := c.make().Name(); got != c.name {
				t.Errorf("full=%T: table name %q builds command %q", fl, c.name, got)
			}
			if (c.warm != nil) != (c.name == "run") {
				t.Errorf("full=%T: %q has a warm-up: %v; only run reads ahead (warmRun)", fl, c.name, c.warm != nil)
			}
			if c.quick != (c.name == "version") {
				t.Errorf("full=%T: %q quick: %v; only version runs without the signal context", fl, c.name, c.quick)
			}
		}
	}
}

// Only the command the line names is built, and only its warm-up starts;
// a line that names none (help, a typo) builds them all, warms none and
// is not quick.
func TestPickCommandsWarmsTheNamedOne(t *testing.T) {
	warmed := map[string]int{}
	table := []namedCommand{
		{name: "run", make: func() *cobra.Command { return &cobra.Command{Use: "run"} }, warm: func() { warmed["run"]++ }},
		{name: "version", make: func() *cobra.Command { return &cobra.Command{Use: "version"} }, quick: true},
		{name: "serve", make: func() *cobra.Command { return &cobra.Command{Use: "serve"} }, warm: func() { warmed["serve"]++ }},
	}
	for _, c := range []struct {
		args   []string
		built  []string
		warmed map[string]int
		quick  bool
	}{
		{[]string{"run", "--", "true"}, []string{"run"}, map[string]int{"run": 1}, false},
		{[]string{"version"}, []string{"version"}, map[string]int{}, true},
		{[]string{"--help"}, []string{"run", "version", "serve"}, map[string]int{}, false},
		{[]string{"rnu"}, []string{"run", "version", "serve"}, map[string]int{}, false},
		{nil, []string{"run", "version", "serve"}, map[string]int{}, false},
	} {
		clear(warmed)
		var built []string
		cmds, quick := pickCommands(table, c.args)
		for _, cmd := range cmds {
			built = append(built, cmd.Name())
		}
		if !slices.Equal(built, c.built) || !maps.Equal(warmed, c.warmed) || quick != c.quick {
			t.Errorf("args %q: built %q, warmed %v, quick %v; want %q, %v, %v", c.args, built, warmed, quick, c.built, c.warmed, c.quick)
		}
	}
}

// The thin binaries side by side, as make build and go install leave them.
func thinAndFull(t *testing.T) (thin, fullExe string) {
	t.Helper()
	dir := gobuild.Commands(t, "github.com/ironclaw/ironclaw/cmd/ironclaw", "github.com/ironclaw/ironclaw/cmd/ironclaw-full")
	return filepath.Join(dir, "ironclaw"), filepath.Join(dir, FullExeName)
}

func runExe(t *testing.T, exe string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errb.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// ironclaw hands serve and token add to ironclaw-full beside it: flags,
// help, output and the exit code are ironclaw-full's.
func TestThinCLIHandsCommandsToFull(t *testing.T) {
	thin, _ := thinAndFull(t)

	code, stdout, stderr := runExe(t, thin, nil, "serve", "--help")
	if code != 0 || !strings.Contains(stdout, "order of precedence") {
		t.Fatalf("serve --help: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	code, _, stderr = runExe(t, thin, nil, "serve", "--no-such-flag")
	if code != ExitIronClaw || !strings.Contains(stderr, "unknown flag: --no-such-flag") || strings.Count(stderr, "\n") != 1 {
		t.Fatalf("serve --no-such-flag: exit %d, stderr %q; want %d and one line naming the flag", code, stderr, ExitIronClaw)
	}

	data := t.TempDir()
	code, stdout, stderr = runExe(t, thin, nil, "operator", "add", "alice", "--data-dir", data)
	if code != 0 {
		t.Fatalf("operator add: exit %d, stderr %q", code, stderr)
	}
	tokenFile := strings.TrimSpace(stdout)
	if !strings.HasPrefix(tokenFile, data) {
		t.Fatalf("operator add printed %q, want a file under %s", tokenFile, data)
	}
	if fi, err := os.Stat(tokenFile); err != nil || fi.Size() == 0 {
		t.Fatalf("token file %s: %v", tokenFile, err)
	}

	// doctor names the ironclaw-full it would hand over to (whatever else
	// this host lacks: only the line matters here).
	_, stdout, _ = runExe(t, thin, nil, "doctor")
	found := false
	for _, l := range strings.Split(stdout, "\n") {
		f := strings.Fields(l)
		found = found || len(f) == 5 && f[0] == "ok" && strings.Join(f[1:4], " ") == "full command line" && f[4] == filepath.Join(filepath.Dir(thin), FullExeName)
	}
	if !found {
		t.Errorf("doctor beside %s: no line naming it in\n%s", FullExeName, stdout)
	}

	// The light commands stay in ironclaw, with no mark of a hand-over.
	if code, stdout, _ := runExe(t, thin, nil, "version"); code != 0 || !strings.HasPrefix(stdout, "ironclaw ") {
		t.Fatalf("version: exit %d, %q", code, stdout)
	}
}

// Through a symlink elsewhere (a bin directory on PATH), ironclaw-full is
// found beside the real file.
func TestThinCLIFollowsItsSymlink(t *testing.T) {
	thin, _ := thinAndFull(t)
	link := filepath.Join(t.TempDir(), "ironclaw")
	if err := os.Symlink(thin, link); err != nil {
		t.Fatal(err)
	}
	if code, stdout, stderr := runExe(t, link, nil, "serve", "--help"); code != 0 || !strings.Contains(stdout, "order of precedence") {
		t.Fatalf("through a symlink: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

// Alone, or beside a file that is not ironclaw-full, ironclaw says what is
// missing in one line and exits 125; it never searches $PATH.
func TestThinCLIWithoutFull(t *testing.T) {
	thin, _ := thinAndFull(t)

	alone := filepath.Join(t.TempDir(), "ironclaw")
	copyFile(t, thin, alone)
	pathDir := filepath.Dir(thin) // an ironclaw-full there must not be used
	for _, args := range [][]string{{"serve"}, {"agent", "add", "bob", "--data-dir", t.TempDir()}} {
		code, stdout, stderr := runExe(t, alone, []string{"PATH=" + pathDir + ":" + os.Getenv("PATH")}, args...)
		if code != ExitIronClaw || stdout != "" || strings.Count(stderr, "\n") != 1 ||
			!strings.Contains(stderr, "runs in "+FullExeName) || !strings.Contains(stderr, "no "+FullExeName+" beside "+alone) {
			t.Errorf("%v alone: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}

	_, stdout, _ := runExe(t, alone, nil, "doctor")
	if !strings.Contains(stdout, "warn  full command line") || !strings.Contains(stdout, "fix: make build (bin/ironclaw-full beside bin/ironclaw)") {
		t.Errorf("doctor alone: no warning for %s in\n%s", FullExeName, stdout)
	}

	// A copy of the thin binary under the full one's name hands the
	// command back: refused, not a loop.
	dir := t.TempDir()
	loop := filepath.Join(dir, "ironclaw")
	copyFile(t, thin, loop)
	copyFile(t, thin, filepath.Join(dir, FullExeName))
	code, _, stderr := runExe(t, loop, nil, "serve")
	if code != ExitIronClaw || !strings.Contains(stderr, "is a copy of the ironclaw binary") {
		t.Fatalf("thin binary as %s: exit %d, stderr %q", FullExeName, code, stderr)
	}
}

// When its standard streams are not the process's (Main called with
// buffers), ironclaw runs ironclaw-full as a child wired to them and
// returns its exit code.
func TestThinCLIDelegatesToAChild(t *testing.T) {
	_, fullBin := thinAndFull(t)
	self := selfcopy.Path(t, "ironclaw")
	copyFile(t, fullBin, filepath.Join(filepath.Dir(self), FullExeName))
	env := []string{"IRONCLAW_CLI_TEST_THIN=1"}
	if code, stdout, stderr := runExe(t, self, env, "serve", "--help"); code != 0 || !strings.Contains(stdout, "order of precedence") {
		t.Fatalf("serve --help as a child: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, _, stderr := runExe(t, self, env, "serve", "--no-such-flag"); code != ExitIronClaw || !strings.Contains(stderr, "--no-such-flag") {
		t.Fatalf("serve --no-such-flag as a child: exit %d, stderr %q", code, stderr)
	}

	// In this process (the test binary has no ironclaw-full beside it).
	var out, errb bytes.Buffer
	if code := Main(nil, []string{"serve"}, strings.NewReader(""), &out, &errb); code != ExitIronClaw || !strings.Contains(errb.String(), "no "+FullExeName+" beside") {
		t.Fatalf("Main(nil, serve): exit %d, stderr %q", code, errb.String())
	}
}
