package cli

import (
	"github.com/spf13/cobra"
)

func newToolsCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "tools",
		Short: "List the tools operators approved (tool.register requests)",
		Long: `List the tool definitions of a running 'ironclaw serve': the tools agents may
offer a model, each registered through an approved tool.register request. The
daemon and token are found as for 'ironclaw sandbox'.`,
	}
	c.AddCommand(newToolsLsCmd(e))
	return c
}

func newToolsLsCmd(e *env) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:     "ls [--json]",
		Aliases: []string{"list"},
		Short:   "List registered tools: NAME COMMAND APPROVAL DESCRIPTION",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			list, err := newClient().ListTools(c.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSONLines(e.stdout, list)
			}
			// Names, commands and descriptions are an agent's text (an
			// operator approved them, but may not have read every byte):
			// the table escapes every cell.
			t := newTable(e.stdout, "NAME", "COMMAND", "APPROVAL", "DESCRIPTION")
			for _, tl := range list {
				cmd := tl.Command
				if cmd == "" {
					cmd = "-"
				}
				t.row(tl.Name, cmd, tl.Approval, tl.Description)
			}
			return t.flush()
		},
	}
	jsonFlag(c.Flags(), &asJSON)
	return c
}
