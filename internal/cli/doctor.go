package cli

import (
	"fmt"

	"github.com/ironclaw/ironclaw/internal/sandbox/backend"
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
			exe, why := backend.InitExe()
			initFinding := native.Finding{Feature: "small sandbox init", OK: true, Detail: exe}
			if exe == "" {
				initFinding = native.Finding{Feature: "small sandbox init", Detail: "sandboxes re-execute this binary (slower start, more memory each): " + why,
					Fix: "make build (bin/ironclaw-sandbox beside bin/ironclaw), or go install github.com/ironclaw/ironclaw/cmd/...@VERSION"}
			}
			stewardPath, stewardWhy := backend.StewardExe(exe)
			stewardFinding := native.Finding{Feature: "idle pid 1 (steward)", OK: true, Detail: stewardPath}
			if stewardPath == "" {
				stewardFinding = native.Finding{Feature: "idle pid 1 (steward)", Detail: "idle sandboxes keep the Go init as pid 1 (6-7 threads, about 2.3 MiB each): " + stewardWhy,
					Fix: "make build (bin/ironclaw-steward, from C: needs cc)"}
			} else if err := native.CheckSteward(stewardPath); err != nil {
				stewardFinding = native.Finding{Feature: "idle pid 1 (steward)", Detail: err.Error(), Fix: "make build (both from one tree)"}
			}
			findings := append([]native.Finding{initFinding, stewardFinding, e.fullFinding()}, native.Diagnose(c.Context(), exe)...)
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

// fullFinding says where serve and the other heavy commands run.
func (e *env) fullFinding() native.Finding {
	f := native.Finding{Feature: "full command line", OK: true}
	if e.full != nil {
		f.Detail = "this binary (" + FullExeName + ")"
		return f
	}
	path, err := fullExe()
	if err != nil {
		f.OK = false
		f.Detail = "serve, operator/agent add, offline audit verify and run --image are unavailable: " + err.Error()
		f.Fix = "make build (bin/ironclaw-full beside bin/ironclaw), or go install github.com/ironclaw/ironclaw/cmd/...@VERSION"
		return f
	}
	f.Detail = path
	return f
}
