package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ironclaw/ironclaw/internal/cli/full"
	"github.com/ironclaw/ironclaw/internal/daemontest"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside"
	"github.com/ironclaw/ironclaw/internal/testutil/gobuild"
	"github.com/ironclaw/ironclaw/internal/testutil/selfcopy"
)

func TestMain(m *testing.M) {
	if inside.Entered() {
		inside.Main()
	}
	if os.Getenv("IRONCLAW_CLI_TEST_MAIN") == "1" { // the test binary as the ironclaw CLI
		Exit(full.Commands{}) // as cmd/ironclaw-full does
	}
	if os.Getenv("IRONCLAW_CLI_TEST_THIN") == "1" { // the thin CLI, its streams not the process's
		var out, errb bytes.Buffer
		code := Main(nil, os.Args[1:], os.Stdin, &out, &errb)
		_, _ = os.Stdout.Write(out.Bytes())
		_, _ = os.Stderr.Write(errb.Bytes())
		os.Exit(code)
	}
	if os.Getenv("IRONCLAW_CLI_TEST_SIGNALS") == "1" {
		signalHelper()
	}
	code := m.Run()
	gobuild.Cleanup()
	os.Exit(code)
}

func run(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(full.Commands{}, args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func sandboxCgroups() int {
	n := 0
	prefix := fmt.Sprintf("ic-%d.", os.Getpid()) // ours only: other processes may run sandboxes
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), prefix) {
			n++
			return filepath.SkipDir
		}
		return nil
	})
	return n
}

// Bad input gets one clear line, exit 125, and creates nothing.
func TestRunBadInput(t *testing.T) {
	before := sandboxCgroups()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"run"}, "run needs a command"},
		{[]string{"run", "--"}, "run needs a command"},
		{[]string{"run", "--bogus", "--", "true"}, "unknown flag: --bogus"},
		{[]string{"run", "--memory", "12X", "--", "true"}, "--memory"},
		{[]string{"run", "--memory", "0", "--", "true"}, "memory must be positive"},
		{[]string{"run", "--memory", "9000G", "--", "true"}, "above the maximum"},
		{[]string{"run", "--pids", "-1", "--", "true"}, "pids must be positive"},
		{[]string{"run", "--cpus", "abc", "--", "true"}, "invalid argument"},
		{[]string{"run", "--timeout", "soon", "--", "true"}, "invalid argument"},
		{[]string{"run", "--env", "NOEQUALS", "--", "true"}, "not KEY=VALUE"},
		{[]string{"run", "--image", "/no/such/dir", "--", "true"}, "no such file or directory"},
		{[]string{"run", "--workspace", "/no/such/dir", "--", "true"}, "workspace"},
		{[]string{"run", "--mount", "/etc", "--", "true"}, "SRC:DST"},
		{[]string{"nosuchcommand"}, "unknown command"},
		{[]string{"versoin"}, `unknown command "versoin" for "ironclaw" (did you mean "version"?)`},
		{[]string{"sandbox", "lst"}, `unknown command "lst" for "ironclaw sandbox" (did you mean "ls" or "ps"?)`},
		{[]string{"audit", "vrfy"}, `(did you mean "verify"?)`},
		{[]string{"x\x1b[2J"}, `unknown command "x\x1b[2J"`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := run(t, "", tc.args...)
			if code != ExitIronClaw {
				t.Errorf("exit %d, want %d", code, ExitIronClaw)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			if strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, "ironclaw: ") || !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q, want one line mentioning %q", stderr, tc.want)
			}
		})
	}
	if after := sandboxCgroups(); after != before {
		t.Fatalf("bad input created cgroups: %d -> %d", before, after)
	}
}

func TestRunExitCodes(t *testing.T) {
	daemontest.NeedSandbox(t)
	tests := []struct {
		name   string
		stdin  string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"success", "", []string{"run", "--", "echo", "hi"}, 0, "hi\n", ""},
		{"own code", "", []string{"run", "--", "sh", "-c", "exit 7"}, 7, "", ""},
		{"flags after the command belong to it", "", []string{"run", "echo", "--memory", "1"}, 0, "--memory 1\n", ""},
		{"stdin forwarded", "from stdin", []string{"run", "--", "cat"}, 0, "from stdin", ""},
		{"env", "", []string{"run", "-e", "A=1", "--env", "B=2", "--", "sh", "-c", "echo $A$B"}, 0, "12\n", ""},
		{"not found", "", []string{"run", "--", "no-such-command"}, 127, "", "command not found"},
		{"cannot execute", "", []string{"run", "--", "/etc/passwd"}, 126, "", "cannot be executed"},
		{"timeout", "", []string{"run", "--timeout", "200ms", "--", "sleep", "10"}, 137, "", "wall-time limit"},
		{"output cap", "", []string{"run", "--output", "10", "--", "echo", "0123456789abcdef"}, 0, "0123456789", "output truncated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := sandboxCgroups()
			code, stdout, stderr := run(t, tc.stdin, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", code, tc.code, stderr)
			}
			if stdout != tc.stdout {
				t.Errorf("stdout %q, want %q", stdout, tc.stdout)
			}
			if !strings.Contains(stderr, tc.stderr) || (tc.stderr == "" && stderr != "") {
				t.Errorf("stderr %q, want %q", stderr, tc.stderr)
			}
			if after := sandboxCgroups(); after != before {
				t.Errorf("run left cgroups behind: %d -> %d", before, after)
			}
		})
	}
}

func TestDoctor(t *testing.T) {
	daemontest.NeedSandbox(t)
	code, stdout, _ := run(t, "", "doctor")
	if code != 0 {
		t.Fatalf("doctor exit %d:\n%s", code, stdout)
	}
	for _, want := range []string{"user namespaces", "cgroups", "seccomp", "landlock", "sealed sandbox"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "FAIL") {
		t.Fatalf("doctor reports a failure here:\n%s", stdout)
	}
}

// As an ordinary user, run either works (user namespaces plus a writable
// cgroup) or stops with exit 125 and a line saying what to enable; it never
// runs without limits.
func TestRunRootless(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to start an unprivileged copy of itself")
	}
	exe := selfcopy.Path(t, "ironclaw")
	cmd := exec.Command(exe, "run", "--", "id", "-u")
	cmd.Dir = "/"
	cmd.Env = []string{"IRONCLAW_CLI_TEST_MAIN=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	switch code {
	case 0:
		if strings.TrimSpace(stdout.String()) != "65532" {
			t.Fatalf("rootless sandbox ran as %q", stdout.String())
		}
	case ExitIronClaw:
		msg := stderr.String()
		if strings.Count(msg, "\n") != 1 || !(strings.Contains(msg, "delegated cgroup") || strings.Contains(msg, "sysctl")) {
			t.Fatalf("rootless refusal does not say what to enable: %q", msg)
		}
		t.Logf("rootless here: %s", strings.TrimSpace(msg))
	default:
		t.Fatalf("rootless run: exit %d, stderr %q", code, stderr.String())
	}
}
