package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

// newSandboxPauseCmd is `sandbox pause ID...` (pause) or `sandbox resume
// ID...`: each id is printed with its new state.
func newSandboxPauseCmd(e *env, pause bool) *cobra.Command {
	use, short := "pause ID...", "Pause sandboxes (frozen: no CPU, memory and files kept; the next request resumes them)"
	if !pause {
		use, short = "resume ID...", "Resume paused sandboxes"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, ids []string) error {
			cl := newClient()
			call := cl.ResumeSandbox
			if pause {
				call = cl.PauseSandbox
			}
			return e.eachArg(ids, func(id string) (string, error) {
				sb, err := call(c.Context(), id)
				if err != nil {
					return "", err
				}
				return safe(sb.ID) + "\t" + safe(sb.State), nil
			})
		},
	}
}

// newSandboxSnapshotCmd is `sandbox snapshot ID` (prints the snapshot's
// id; `sandbox create --from-snapshot` forks it), `snapshot ls` and
// `snapshot rm SNAP...`.
func newSandboxSnapshotCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "snapshot ID",
		Short: "Snapshot a sandbox's /workspace (fork it with 'sandbox create --from-snapshot'); ls, rm",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			s, err := newClient().SnapshotSandbox(c.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "%s\t%d files\t%d dirs\t%d bytes\t%d skipped\n", safe(s.ID), s.Files, s.Dirs, s.Bytes, s.Skipped)
			return nil
		},
	}
	c.AddCommand(&cobra.Command{
		Use:   "ls",
		Short: "List snapshots",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			list, err := newClient().ListSnapshots(c.Context())
			if err != nil {
				return err
			}
			for _, s := range list {
				fmt.Fprintf(e.stdout, "%s\t%s\t%s\t%d bytes\n", safe(s.ID), safe(s.Sandbox), s.CreatedAt.Format("2006-01-02T15:04:05Z"), s.Bytes)
			}
			return nil
		},
	}, &cobra.Command{
		Use:   "rm SNAP...",
		Short: "Delete snapshots",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, ids []string) error {
			cl := newClient()
			return e.eachArg(ids, func(id string) (string, error) {
				return safe(id), cl.DeleteSnapshot(c.Context(), id)
			})
		},
	})
	return c
}
