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
			var failed error
			for _, id := range ids {
				call := cl.ResumeSandbox
				if pause {
					call = cl.PauseSandbox
				}
				sb, err := call(c.Context(), id)
				if err != nil {
					if failed != nil {
						fmt.Fprintf(e.stderr, "ironclaw: %s\n", safe(failed.Error()))
					}
					failed = fmt.Errorf("%s: %w", id, err)
					continue
				}
				fmt.Fprintf(e.stdout, "%s\t%s\n", safe(sb.ID), safe(sb.State))
			}
			return failed
		},
	}
}
