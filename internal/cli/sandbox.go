package cli

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/cli/flagtypes"
	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/spf13/cobra"
)

// newClient is the daemon client of every remote command: IRONCLAW_ADDR,
// IRONCLAW_API_TOKEN, IRONCLAW_OPERATOR_TOKEN and the default data dir's
// token files decide where it goes and who it is.
func newClient() *client.Client { return &client.Client{} }

func parseLabels(flag string, kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--%s %q: want KEY=VALUE", flag, kv)
		}
		m[k] = v
	}
	return m, nil
}

// approvalPoll is how long one request for an approval's decision waits
// (the daemon holds it until the decision or this long).
const approvalPoll = 30 * time.Second

func newSandboxCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "sandbox",
		Short: "Manage the daemon's sandboxes (create, ls, exec, cp, rm)",
		Long: `Manage sandboxes of a running 'ironclaw serve'. The daemon's address comes from
IRONCLAW_ADDR (default http://127.0.0.1:8787), the token from IRONCLAW_API_TOKEN,
else the agent.token file in the default data directory.`,
	}
	c.AddCommand(newSandboxCreateCmd(e), newSandboxLsCmd(e), newSandboxRmCmd(e), newSandboxExecCmd(e), newSandboxCpCmd(e), newSandboxPortURLCmd(e), newSandboxPortForwardCmd(e))
	c.AddCommand(processCmds(e)...)
	c.AddCommand(newSandboxPauseCmd(e, true), newSandboxPauseCmd(e, false), newSandboxSnapshotCmd(e))
	return c
}

func newSandboxCreateCmd(e *env) *cobra.Command {
	var (
		labels, envs, vols []string
		timeout            time.Duration
		req                client.CreateRequest
	)
	c := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create a sandbox and print its id",
		Long: `Create a sandbox and print its id (only that, so scripts can capture it).

--image names the root filesystem: an argument that looks like a path (it
starts with /, . or ~, or names something that exists here) is a local image
on the daemon's host, made absolute here; it must lie beneath one of the
daemon's --image-dir directories. Anything else is a registry reference
(ghcr.io/org/app:1, localhost:5000/app@sha256:...), which the daemon pulls
when its --image-registry allows the registry.`,
		Example: `  id=$(ironclaw sandbox create --label team=a --memory 256M --idle 10m)
  ironclaw sandbox create --image ghcr.io/org/app:1
  ironclaw sandbox create --image ./rootfs
  ironclaw sandbox create --volume notes:/workspace/notes
  ironclaw sandbox create --secret github`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			var err error
			if req.Labels, err = parseLabels("label", labels); err != nil {
				return err
			}
			if req.Env, err = parseLabels("env", envs); err != nil {
				return err
			}
			if req.Image, err = imageArg(req.Image); err != nil {
				return err
			}
			if req.Volumes, err = parseVolumes(vols); err != nil {
				return err
			}
			if timeout > 0 {
				req.Limits.Timeout = timeout.String()
			}
			sb, err := newClient().CreateSandbox(c.Context(), req)
			if err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, safe(sb.ID))
			return nil
		},
	}
	f := c.Flags()
	f.StringArrayVarP(&labels, "label", "l", nil, "label KEY=VALUE (repeatable)")
	f.StringArrayVarP(&envs, "env", "e", nil, "environment KEY=VALUE of every command (repeatable)")
	f.Var(portsFlag{&req.Ports}, "port", "a loopback TCP port (1024-65535) the sandbox's servers may listen on, reachable inbound with port-url and port-forward when the policy allows (repeatable)")
	f.StringArrayVar(&vols, "volume", nil, "mount a volume of yours, NAME:/PATH (under /workspace or a new top-level directory; repeatable; see 'ironclaw volume')")
	f.StringArrayVar(&req.EgressAllow, "allow-host", nil, "host the sandbox may reach through its egress broker, e.g. api.github.com or *.pypi.org:443 (repeatable)")
	f.StringArrayVar(&req.Secrets, "secret", nil, "a brokered secret the sandbox may use: it sees a placeholder, the egress broker puts in the value (repeatable; see 'ironclaw secret')")
	f.StringVar(&req.Snapshot, "from-snapshot", "", "start /workspace as this snapshot (snap-..., from 'sandbox snapshot')")
	f.StringVar(&req.Image, "image", "", "root filesystem (default: the host-toolchain view): a local image on the daemon's host (a path: /, . or ~ first, or an existing path) or a registry reference such as ghcr.io/org/app:1")
	flagtypes.Duration(f, &req.TTL, "ttl", "", 0, "lifetime (default: the daemon's)")
	flagtypes.Duration(f, &req.Idle, "idle", "", 0, "idle timeout (default: the daemon's)")
	f.StringVar(&req.IdleAction, "idle-action", "", "what the idle timeout does: destroy or pause (default: the policy's limits.idle_action)")
	f.StringVar(&req.Limits.Memory, "memory", "", "memory limit (e.g. 256M)")
	f.Int64Var(&req.Limits.Pids, "pids", 0, "maximum number of processes and threads")
	f.Float64Var(&req.Limits.CPUs, "cpus", 0, "CPU bandwidth in CPUs")
	flagtypes.Duration(f, &timeout, "timeout", "", 0, "wall-time limit per command, e.g. 30s (default: the daemon's)")
	f.StringVar(&req.Limits.Output, "output", "", "output bytes kept per command")
	f.StringVar(&req.Limits.Workspace, "workspace-size", "", "size of /workspace")
	f.StringVar(&req.Limits.Tmp, "tmp-size", "", "size of /tmp")
	f.Int64Var(&req.Limits.OpenFiles, "open-files", 0, "open file limit")
	return c
}

func newSandboxLsCmd(e *env) *cobra.Command {
	var (
		labels []string
		asJSON bool
	)
	c := &cobra.Command{
		Use:     "ls [--label KEY=VALUE]... [--json]",
		Aliases: []string{"list"},
		Short:   "List running sandboxes",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			sel, err := parseLabels("label", labels)
			if err != nil {
				return err
			}
			list, err := newClient().ListSandboxes(c.Context(), sel)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSONLines(e.stdout, list)
			}
			// Labels are the agent's text: the table escapes every cell.
			t := newTable(e.stdout, "ID", "STATE", "AGE", "LABELS")
			now := time.Now()
			for _, sb := range list {
				t.row(sb.ID, sb.State, age(now.Sub(sb.CreatedAt)), formatLabels(sb.Labels))
			}
			return t.flush()
		},
	}
	c.Flags().StringArrayVarP(&labels, "label", "l", nil, "only sandboxes with label KEY=VALUE (repeatable: all must match)")
	jsonFlag(c.Flags(), &asJSON)
	return c
}

func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", max(0, int(d.Seconds())))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func formatLabels(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	kv := make([]string, 0, len(m))
	for k, v := range m {
		kv = append(kv, k+"="+v)
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

func newSandboxRmCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID...",
		Aliases: []string{"destroy"},
		Short:   "Destroy sandboxes",
		Args:    cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, ids []string) error {
			cl := newClient()
			return e.eachArg(ids, func(id string) (string, error) {
				_, err := cl.DeleteSandbox(c.Context(), id)
				return safe(id), err
			})
		},
	}
}

func newSandboxExecCmd(e *env) *cobra.Command {
	var (
		envs        []string
		cwd         string
		timeout     time.Duration
		interactive bool
		tty         bool
	)
	c := &cobra.Command{
		Use:   "exec [flags] ID -- CMD [ARGS...]",
		Short: "Run a command in a sandbox, stream its output and exit with its code",
		Long: `Run a command in a running sandbox. Output is streamed; ironclaw exits with the
command's exit code: 125 for an IronClaw error, 126 when the command cannot be
executed, 127 when it is not found. stdin is sent only with -i (read to the end
first).

With -t the command runs on a terminal inside the sandbox (native backend) and
this terminal is attached to it: -it for an interactive shell (raw mode, Ctrl-C
goes to the command, the size follows this window). -t needs a terminal on
stdin. If ironclaw is interrupted or the session breaks, the command is killed.`,
		Example: `  ironclaw sandbox exec sbx-0123456789abcdef -- sh -c 'echo hi'
  echo data | ironclaw sandbox exec -i sbx-0123456789abcdef -- wc -c
  ironclaw sandbox exec -it sbx-0123456789abcdef -- bash`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) < 2 {
				return errors.New("exec needs a sandbox and a command: ironclaw sandbox exec ID -- CMD [ARGS...]")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if args[1] == "--" { // flag parsing stopped at ID, so the separator is still here
				args = append(args[:1:1], args[2:]...)
			}
			if len(args) < 2 {
				return errors.New("exec needs a command after --: ironclaw sandbox exec ID -- CMD [ARGS...]")
			}
			env, err := parseLabels("env", envs)
			if err != nil {
				return err
			}
			if tty {
				if timeout > 0 {
					return errors.New("--timeout does not apply with -t: the command runs until it exits (or ironclaw is interrupted)")
				}
				x := ttyExec{id: args[0], req: client.SpawnRequest{Argv: args[1:], Cwd: cwd, Env: env}, interactive: interactive}
				return x.run(c.Context(), e)
			}
			req := client.ExecRequest{Argv: args[1:], Cwd: cwd, Env: env, Timeout: timeout, Stdout: e.stdout, Stderr: e.stderr}
			if interactive && e.stdin != nil {
				b, err := io.ReadAll(e.stdin)
				if err != nil {
					return fmt.Errorf("reading stdin: %w", err)
				}
				req.Stdin = string(b)
			}
			cl := newClient()
			res, err := cl.Exec(c.Context(), args[0], req)
			var need *client.ApprovalRequiredError
			if errors.As(err, &need) {
				// The policy marks this command: wait for an operator, then
				// run it once with the approval.
				id := need.Approval.ID
				fmt.Fprintf(e.stderr, "ironclaw: this command needs approval: waiting for request %s (ironclaw approvals approve %s)\n", id, id)
				a := need.Approval
				for a.State == "pending" {
					if a, err = cl.GetApproval(c.Context(), id, approvalPoll); err != nil {
						return err
					}
				}
				if a.State != "approved" {
					msg := fmt.Sprintf("request %s was %s", id, a.State)
					if a.DecidedBy != "" && a.State == "denied" {
						msg += " by " + a.DecidedBy
					}
					if a.Reason != "" {
						msg += ": " + a.Reason
					}
					return errors.New(msg)
				}
				req.Approval = id
				res, err = cl.Exec(c.Context(), args[0], req)
			}
			if err != nil {
				return err
			}
			if res.Error != "" {
				fmt.Fprintf(e.stderr, "ironclaw: %s\n", safe(res.Error))
			}
			if res.Truncated {
				fmt.Fprintln(e.stderr, "ironclaw: output truncated at the sandbox's output limit")
			}
			if res.TimedOut {
				fmt.Fprintln(e.stderr, "ironclaw: killed: the command ran past its wall-time limit")
			}
			if res.OOMKilled {
				fmt.Fprintln(e.stderr, "ironclaw: a process was killed at the sandbox's memory limit")
			}
			if res.Exit < 0 {
				return exitCode(ExitIronClaw)
			}
			return exitCode(res.Exit)
		},
	}
	f := c.Flags()
	f.SetInterspersed(false)
	f.StringArrayVarP(&envs, "env", "e", nil, "set KEY=VALUE for this command (repeatable)")
	f.StringVarP(&cwd, "workdir", "w", "", "working directory inside (default /workspace)")
	flagtypes.Duration(f, &timeout, "timeout", "", 0, "wall-time limit, e.g. 30s (default: the sandbox's)")
	f.BoolVarP(&interactive, "interactive", "i", false, "send stdin to the command")
	f.BoolVarP(&tty, "tty", "t", false, "run the command on a terminal and attach this one (needs a terminal; -it for a shell)")
	return c
}

// remotePath splits "ID:/path" into its parts; ok is false for a local path.
func remotePath(s string) (id, path string, ok bool) {
	id, path, ok = strings.Cut(s, ":")
	if !ok || id == "" || strings.Contains(id, "/") || !strings.HasPrefix(path, "/") {
		return "", "", false
	}
	return id, path, true
}

func newSandboxCpCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file into or out of a sandbox",
		Long: `Copy one file between this host and a sandbox. Exactly one side names the
sandbox as ID:/path, where the path is under /workspace or /tmp. The local side
may be - for stdin (upload) or stdout (download).`,
		Example: `  ironclaw sandbox cp script.py sbx-0123456789abcdef:/workspace/script.py
  ironclaw sandbox cp sbx-0123456789abcdef:/workspace/out.json -`,
		Args: cobra.ExactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			srcID, srcPath, srcRemote := remotePath(args[0])
			dstID, dstPath, dstRemote := remotePath(args[1])
			cl := newClient()
			ctx := c.Context()
			switch {
			case srcRemote == dstRemote:
				return errors.New("cp: exactly one of SRC and DST must be ID:/path inside a sandbox")
			case dstRemote: // upload
				var r io.Reader = e.stdin
				var mode os.FileMode
				if args[0] != "-" {
					f, err := os.Open(args[0])
					if err != nil {
						return err
					}
					defer f.Close()
					st, err := f.Stat()
					if err != nil {
						return err
					}
					if !st.Mode().IsRegular() {
						return fmt.Errorf("cp: %s: not a regular file (directories are not supported)", args[0])
					}
					r, mode = f, st.Mode().Perm()
				}
				return cl.PutFile(ctx, dstID, dstPath, r, mode)
			default: // download
				if args[1] == "-" {
					return cl.GetFile(ctx, srcID, srcPath, e.stdout)
				}
				dst := args[1]
				if st, err := os.Stat(dst); err == nil && st.IsDir() {
					dst = filepath.Join(dst, filepath.Base(srcPath))
				}
				// Write beside the target and rename, so a failed copy
				// leaves no partial file.
				tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".part-*")
				if err != nil {
					return err
				}
				defer os.Remove(tmp.Name())
				if err := cl.GetFile(ctx, srcID, srcPath, tmp); err != nil {
					tmp.Close()
					return err
				}
				if err := tmp.Chmod(0o644); err != nil {
					tmp.Close()
					return err
				}
				if err := tmp.Close(); err != nil {
					return err
				}
				return os.Rename(tmp.Name(), dst)
			}
		},
	}
}
