// Package cli is the ironclaw command line. main only calls Main; every
// subcommand lives in its own file here.
//
// What holds for every command lives in one place each: the root context
// that signals cancel (signals.go), the flag types for durations and the
// daemon's numbers (flags.go), the printers that escape what an agent
// wrote and the --json of every listing (printer.go), and what --image
// means (image.go). The serve flags' defaults are package defaults'.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/spf13/cobra"
)

// Exit codes, as Docker's: 125 an IronClaw error, 126 cannot execute, 127
// not found; otherwise the command's own (137 when a limit killed it).
const (
	ExitIronClaw      = 125
	ExitNotExecutable = 126
	ExitNotFound      = 127
)

// exitCode is returned by a command that already reported what happened and
// only wants the process to exit with code.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// env is what every command may touch of the outside world.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
}

// Main runs the CLI with args (without the program name) and returns the
// process exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "ironclaw",
		Short:         "Run AI-agent tool calls inside sealed sandboxes",
		Long:          "IronClaw runs AI-agent tool calls, and whole agents, inside sealed per-session sandboxes:\nloopback-only, uid 65532, no capabilities, seccomp, landlock, read-only root, hard limits.",
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%v (see '%s --help')", err, c.CommandPath())
	})
	root.CompletionOptions.DisableDefaultCmd = true
	root.AddCommand(newRunCmd(e), newDoctorCmd(e), newVersionCmd(e), newServeCmd(e), newSandboxCmd(e), newAuditCmd(e), newApprovalsCmd(e), newToolsCmd(e), newVolumeCmd(e), newSecretCmd(e), newOperatorCmd(e), newAgentCmd(e), newE2BCmd(e))
	root.SetArgs(args)
	// One context for every command: the first SIGINT, SIGTERM or SIGHUP
	// cancels it, a second one ends the process.
	ctx, stop := withSignals(context.Background(), stopSignals...)
	defer stop()
	err := root.ExecuteContext(ctx)
	var code exitCode
	switch {
	case err == nil:
		return 0
	case errors.As(err, &code):
		return int(code)
	case interrupted(ctx):
		// Whatever failed, it failed because the command was cut short.
		fmt.Fprintln(stderr, "ironclaw: interrupted")
		return ExitInterrupted
	case errors.Is(err, sandbox.ErrCommandNotFound):
		fmt.Fprintf(stderr, "ironclaw: %s\n", safe(err.Error()))
		return ExitNotFound
	case errors.Is(err, sandbox.ErrNotExecutable):
		fmt.Fprintf(stderr, "ironclaw: %s\n", safe(err.Error()))
		return ExitNotExecutable
	}
	fmt.Fprintf(stderr, "ironclaw: %s\n", safe(err.Error())) // the daemon's messages may quote an agent's text
	return ExitIronClaw
}

// Version is set at build time with -ldflags "-X .../cli.Version=...".
var Version = "dev"

func newVersionCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintln(e.stdout, "ironclaw", Version)
			return nil
		},
	}
}
