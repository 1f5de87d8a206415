package cli

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/ironclaw/ironclaw/internal/client"
)

// The sandbox's background processes: ps, spawn, logs, kill, signal.

func processCmds(e *env) []*cobra.Command {
	return []*cobra.Command{newSandboxPsCmd(e), newSandboxSpawnCmd(e), newSandboxLogsCmd(e), newSandboxKillCmd(e), newSandboxSignalCmd(e)}
}

func parsePID(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%q is not a process handle (the PID that spawn printed)", s)
	}
	return n, nil
}

func newSandboxPsCmd(e *env) *cobra.Command {
	var (
		tag    string
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "ps ID [--tag T] [--json]",
		Short: "List a sandbox's background processes",
		Long: `List the background processes of a sandbox: those running and the exited ones
the daemon still keeps (the newest 64). PID is the daemon's handle (use it with
logs, kill and signal); OSPID the process's pid inside the sandbox.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			list, err := newClient().Processes(c.Context(), args[0], tag)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSONLines(e.stdout, list)
			}
			// The command and tag are the agent's text: the table escapes
			// every cell.
			t := newTable(e.stdout, "PID", "OSPID", "STATE", "EXIT", "AGE", "TAG", "OUTPUT", "COMMAND")
			now := time.Now()
			for _, p := range list {
				exit, tg := "-", p.Tag
				if p.Exit != nil {
					exit = strconv.Itoa(*p.Exit)
				}
				if tg == "" {
					tg = "-"
				}
				t.row(strconv.Itoa(p.PID), strconv.Itoa(p.OSPID), p.State, exit, age(now.Sub(p.StartedAt)), tg,
					strconv.FormatInt(p.Offset, 10), truncateCmd(strings.Join(p.Argv, " ")))
			}
			return t.flush()
		},
	}
	c.Flags().StringVar(&tag, "tag", "", "only processes with this tag")
	jsonFlag(c.Flags(), &asJSON)
	return c
}

func truncateCmd(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}

func newSandboxSpawnCmd(e *env) *cobra.Command {
	var (
		envs  []string
		cwd   string
		tag   string
		stdin bool
	)
	c := &cobra.Command{
		Use:   "spawn [flags] ID -- CMD [ARGS...]",
		Short: "Start a background process in a sandbox and print its PID",
		Long: `Start a command that keeps running after this returns; print its PID (the
daemon's handle, only that, so scripts can capture it). Read its output with
'sandbox logs', stop it with 'sandbox signal' or 'sandbox kill'. A sandbox runs
at most 32 processes at once.`,
		Example: `  pid=$(ironclaw sandbox spawn --tag web sbx-0123456789abcdef -- python3 -m http.server 8000)
  ironclaw sandbox logs --follow sbx-0123456789abcdef "$pid"`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) < 2 {
				return errors.New("spawn needs a sandbox and a command: ironclaw sandbox spawn ID -- CMD [ARGS...]")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if args[1] == "--" {
				args = append(args[:1:1], args[2:]...)
			}
			if len(args) < 2 {
				return errors.New("spawn needs a command after --: ironclaw sandbox spawn ID -- CMD [ARGS...]")
			}
			env, err := parseLabels("env", envs)
			if err != nil {
				return err
			}
			cl := newClient()
			req := client.SpawnRequest{Argv: args[1:], Cwd: cwd, Env: env, Tag: tag, Stdin: stdin}
			p, err := spawnApproved(c.Context(), e, cl, args[0], req)
			if err != nil {
				return err
			}
			if p.Exit != nil && p.Error != "" {
				fmt.Fprintf(e.stderr, "ironclaw: %s\n", safe(p.Error))
			}
			fmt.Fprintln(e.stdout, p.PID)
			return nil
		},
	}
	f := c.Flags()
	f.SetInterspersed(false)
	f.StringArrayVarP(&envs, "env", "e", nil, "set KEY=VALUE for this process (repeatable)")
	f.StringVarP(&cwd, "workdir", "w", "", "working directory inside (default /workspace)")
	f.StringVar(&tag, "tag", "", "a name for the process (ps --tag)")
	f.BoolVar(&stdin, "stdin", false, "open the process's stdin (written through the API)")
	return c
}

func newSandboxLogsCmd(e *env) *cobra.Command {
	var (
		follow bool
		offset int64
	)
	c := &cobra.Command{
		Use:   "logs [--follow] [--offset N] ID PID",
		Short: "Print a background process's output",
		Long: `Print a background process's output (stdout to stdout, stderr to stderr) from
byte offset N of its log (default 0). The daemon keeps the newest 1 MiB of each
process's output; what it no longer holds is reported on stderr. With --follow,
wait for more until the process exits, then exit with its exit code.`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			pid, err := parsePID(args[1])
			if err != nil {
				return err
			}
			if offset < 0 {
				return errors.New("--offset must not be negative")
			}
			end, err := newClient().ProcessOutput(c.Context(), args[0], pid, client.OutputRequest{Offset: offset, Follow: follow,
				Stdout: e.stdout, Stderr: e.stderr, Dropped: func(n int64) {
					fmt.Fprintf(e.stderr, "ironclaw: %d bytes of output before this are no longer kept\n", n)
				}})
			if err != nil {
				return err
			}
			if end.Error != "" {
				fmt.Fprintf(e.stderr, "ironclaw: %s\n", safe(end.Error))
			}
			if follow && end.Exit != nil && *end.Exit >= 0 {
				return exitCode(*end.Exit)
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "wait for more output until the process exits")
	c.Flags().Int64Var(&offset, "offset", 0, "start at this byte offset of the output log")
	return c
}

func newSandboxKillCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "kill ID PID",
		Short: "Kill a background process (its process group) and forget it",
		Args:  cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			pid, err := parsePID(args[1])
			if err != nil {
				return err
			}
			p, err := newClient().KillProcess(c.Context(), args[0], pid)
			if err != nil {
				return err
			}
			if p.Exit != nil {
				fmt.Fprintf(e.stdout, "%d exited %d\n", p.PID, *p.Exit)
			}
			return nil
		},
	}
}

func newSandboxSignalCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "signal ID PID SIGNAL",
		Short: "Send a signal (TERM, INT, HUP, QUIT, KILL, USR1, USR2) to a background process's group",
		Args:  cobra.ExactArgs(3),
		RunE: func(c *cobra.Command, args []string) error {
			pid, err := parsePID(args[1])
			if err != nil {
				return err
			}
			return newClient().SignalProcess(c.Context(), args[0], pid, args[2])
		},
	}
}
