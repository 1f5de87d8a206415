package cli

import (
	"fmt"

	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/spf13/cobra"
)

func newDoctorCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "doctor",
		Short: "Show, per isolation feature, whether this host enforces it and how to fix what is missing",
		Long: `Check, feature by feature, what this host enforces for the native sandbox
runtime, say how to fix what is missing, and prove it with a real sandbox.
Exits 0 when everything required works, 1 otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			findings := native.Diagnose(c.Context())
			failed := false
			for _, f := range findings {
				mark := "ok  "
				switch {
				case !f.OK && f.Required:
					mark, failed = "FAIL", true
				case !f.OK:
					mark = "warn"
				}
				fmt.Fprintf(e.stdout, "%s  %-28s %s\n", mark, f.Feature, f.Detail)
				if !f.OK && f.Fix != "" {
					fmt.Fprintf(e.stdout, "      %-28s fix: %s\n", "", f.Fix)
				}
			}
			if failed {
				return exitCode(1)
			}
			return nil
		},
	}
}
