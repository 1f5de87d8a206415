package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// FullExeName is the binary that holds the whole command line, package
// cli/full included (cmd/ironclaw-full). The ironclaw binary runs the
// commands that need it there: `make build` and `go install
// github.com/ironclaw/ironclaw/cmd/...` put both side by side.
const FullExeName = "ironclaw-full"

// DelegatedEnv marks the environment of a command line handed to
// ironclaw-full (its value: the ironclaw that handed it). ironclaw-full
// removes it at once; an ironclaw that finds it was handed a command by
// another ironclaw and refuses, rather than loop.
const DelegatedEnv = "IRONCLAW_DELEGATED_BY"

// serveCmd is 'serve': the daemon itself, or a stand-in that hands the
// whole command line, flags and --help included, to ironclaw-full.
func (e *env) serveCmd() *cobra.Command {
	if e.full != nil {
		return e.full.ServeCommand(e.stderr)
	}
	return &cobra.Command{
		Use:                "serve [flags]",
		Short:              "Run the IronClaw daemon: the HTTP API for sandboxes, exec, files and the audit log (in " + FullExeName + ")",
		DisableFlagParsing: true,
		RunE:               func(c *cobra.Command, _ []string) error { return e.delegate(c.Context(), "serve") },
	}
}

// delegate runs this command line in ironclaw-full beside this executable
// and ends with its exit code. When our standard streams are the
// process's, ironclaw-full replaces this process (execve): same pid,
// signals and terminal, nothing left running here. Otherwise (tests
// calling Main with buffers) it runs as a child wired to them.
//
// what names the command for the error when ironclaw-full is missing.
func (e *env) delegate(ctx context.Context, what string) error {
	path, err := fullExe()
	if err != nil {
		return fmt.Errorf("'ironclaw %s' runs in %s: %w; build both with `make build`, or install both with `go install github.com/ironclaw/ironclaw/cmd/...`", what, FullExeName, err)
	}
	if by := os.Getenv(DelegatedEnv); by != "" {
		// A copy of this binary under the other name would hand the
		// command back and forth for ever.
		return fmt.Errorf("'ironclaw %s' runs in %s, but %s is a copy of the ironclaw binary (it was handed the command by %s); rebuild both with `make build`", what, FullExeName, path, by)
	}
	self, _ := os.Executable()
	env := append(os.Environ(), DelegatedEnv+"="+self)
	if e.stdin == os.Stdin && e.stdout == os.Stdout && e.stderr == os.Stderr {
		argv := append([]string{path}, e.args...)
		err := syscall.Exec(path, argv, env)
		return fmt.Errorf("running %s: %w", path, err) // Exec returns only on failure
	}
	cmd := exec.CommandContext(ctx, path, e.args...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	err = cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() >= 0 {
		return exitCode(exit.ExitCode())
	}
	if err != nil {
		return fmt.Errorf("running %s: %w", path, err)
	}
	return nil
}

// fullExe finds ironclaw-full in the directory of this executable (after
// symlinks), the only place looked: never $PATH, where another build or
// someone else's file may be.
func fullExe() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding this executable: %w", err)
	}
	if resolved, err := filepath.EvalSymlinks(self); err == nil {
		self = resolved
	}
	path := filepath.Join(filepath.Dir(self), FullExeName)
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("no %s beside %s", FullExeName, self)
	}
	return path, nil
}
