package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ironclaw/ironclaw/internal/defaults"
)

func newOperatorCmd(e *env) *cobra.Command {
	return newTokenCmd(e, "operator", "Manage named operator tokens",
		"Create a named operator token (operators/NAME.token in the data directory; the daemon reads them at start)",
		func(f Full) func(dir, name string) (string, error) { return f.AddOperator })
}

func newAgentCmd(e *env) *cobra.Command {
	return newTokenCmd(e, "agent", "Manage named agent tokens",
		"Create a named agent token (agents/NAME.token in the data directory; the daemon reads them at start). "+
			"Each named agent sees only its own sandboxes and approvals and has its own quotas and model budget",
		func(f Full) func(dir, name string) (string, error) { return f.AddAgent })
}

// newTokenCmd is 'operator' or 'agent'; adder picks the Full method that
// writes the token (ironclaw-full's: the daemon's token files).
func newTokenCmd(e *env, use, short, addShort string, adder func(Full) func(dir, name string) (string, error)) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short}
	var dataDir string
	addCmd := &cobra.Command{
		Use:   "add NAME",
		Short: addShort,
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if e.full == nil {
				return e.delegate(c.Context(), use+" add")
			}
			p, err := adder(e.full)(dataDir, args[0])
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(e.stdout, p)
			return err
		},
	}
	addCmd.Flags().StringVar(&dataDir, "data-dir", defaults.DataDir(), "the daemon's data directory")
	c.AddCommand(addCmd)
	return c
}
