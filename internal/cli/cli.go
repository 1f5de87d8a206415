// Package cli is the ironclaw command line. main only calls Exit; every
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
	"os"

	"github.com/ironclaw/ironclaw/internal/client"
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
	// full is the heavy part of the command line, nil in the ironclaw
	// binary: its commands are then handed to ironclaw-full (delegate).
	full Full
	args []string // the command line, without the program name
	// early is run's native runtime, opened ahead (warmRun).
	early *earlyRuntime
}

// Full is the part of the command line that only ironclaw-full links
// (package cli/full): what needs the daemon, its SQLite store, the audit
// verifier or the image registry client, whose package initialisers alone
// would more than double the start of every other command.
type Full interface {
	// ServeCommand is 'serve', with its flags; diagnostics go to stderr.
	ServeCommand(stderr io.Writer) *cobra.Command
	// AddOperator and AddAgent write a named token into a data directory
	// and return its path.
	AddOperator(dataDir, name string) (string, error)
	AddAgent(dataDir, name string) (string, error)
	// VerifyOffline checks an audit export or a data directory's
	// database without a daemon.
	VerifyOffline(ctx context.Context, file, dataDir, keyFile, checkpointFile string) (client.VerifyResult, error)
	// ResolveImage turns run's --image into a root.
	ResolveImage(ctx context.Context, ref string) (sandbox.Root, error)
}

// Main runs the CLI with args (without the program name) and returns the
// process exit code. full is nil in the ironclaw binary, which hands the
// commands that need it to ironclaw-full beside it. Main gives back the
// signals a command watched before it returns, for a caller that goes on
// (a test); a process that ends on the code calls Exit.
func Main(full Full, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	return execute(full, args, stdin, stdout, stderr, true)
}

// Exit runs the CLI with the process's arguments and standard streams
// and ends the process with the exit code. It leaves the signals as they
// are: giving them back (os/signal.Stop waits for the runtime's signal
// loop to go idle) took 0.02-0.34 ms, median 0.1, at the end of each
// one-shot `ironclaw run` on this project's guest, for a process that
// ends next.
func Exit(full Full) {
	os.Exit(execute(full, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, false))
}

func execute(full Full, args []string, stdin io.Reader, stdout, stderr io.Writer, releaseSignals bool) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, full: full, args: args}
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
	cmds, quick := e.commands(args)
	root.AddCommand(cmds...)
	root.SetArgs(args)
	if err := unknownCommand(root, args); err != nil {
		fmt.Fprintf(stderr, "ironclaw: %s\n", safe(err.Error()))
		return ExitIronClaw
	}
	// One context for every command: the first SIGINT, SIGTERM or SIGHUP
	// cancels it, a second one ends the process. A quick command gets
	// none: it is over before a signal could matter, and setting one up
	// starts the Go runtime's signal thread (0.6-0.7 ms of `ironclaw
	// version` on this project's guest).
	ctx := context.Background()
	if !quick {
		var stop func()
		ctx, stop = withSignals(ctx, stopSignals...)
		if releaseSignals {
			defer stop()
		}
	}
	err := root.ExecuteContext(ctx)
	e.discardEarly() // a run that ended before its claim (bad flags, say)
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

// commands builds the top-level commands args needs: only the one it
// names, when it names one, or else all of them (for the root's help, the
// "help" command and the suggestions for a mistyped name). Building the
// whole tree, every subcommand with its flags and help, costs about a
// millisecond, as long as the rest of a short command's start. quick
// reports that args names a quick command.
func (e *env) commands(args []string) (cmds []*cobra.Command, quick bool) {
	return pickCommands(e.commandTable(), args)
}

// pickCommands builds the commands of table that args needs (see
// commands), starting the named one's warm-up first.
func pickCommands(table []namedCommand, args []string) (cmds []*cobra.Command, quick bool) {
	if len(args) > 0 {
		for _, c := range table {
			if c.name == args[0] {
				if c.warm != nil {
					c.warm()
				}
				return []*cobra.Command{c.make()}, c.quick
			}
		}
	}
	out := make([]*cobra.Command, len(table))
	for i, c := range table {
		out[i] = c.make()
	}
	return out, false
}

// namedCommand is a top-level command and its constructor; name is the
// first word of its Use (TestCommandTableNames).
type namedCommand struct {
	name string
	make func() *cobra.Command
	// warm, when set, begins in the background what the command will
	// read anyway, as soon as the command line names it: before its
	// flags are parsed and its signals set up.
	warm func()
	// quick: the command ends as soon as it starts, so it runs without
	// the signal context (see Main).
	quick bool
}

func (e *env) commandTable() []namedCommand {
	return []namedCommand{
		{name: "run", make: func() *cobra.Command { return newRunCmd(e) }, warm: e.warmRun},
		{name: "doctor", make: func() *cobra.Command { return newDoctorCmd(e) }},
		{name: "version", make: func() *cobra.Command { return newVersionCmd(e) }, quick: true},
		{name: "serve", make: e.serveCmd},
		{name: "sandbox", make: func() *cobra.Command { return newSandboxCmd(e) }},
		{name: "audit", make: func() *cobra.Command { return newAuditCmd(e) }},
		{name: "approvals", make: func() *cobra.Command { return newApprovalsCmd(e) }},
		{name: "tools", make: func() *cobra.Command { return newToolsCmd(e) }},
		{name: "volume", make: func() *cobra.Command { return newVolumeCmd(e) }},
		{name: "secret", make: func() *cobra.Command { return newSecretCmd(e) }},
		{name: "operator", make: func() *cobra.Command { return newOperatorCmd(e) }},
		{name: "agent", make: func() *cobra.Command { return newAgentCmd(e) }},
		{name: "e2b", make: func() *cobra.Command { return newE2BCmd(e) }},
	}
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
