package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/spf13/cobra"
)

func newVolumeCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "volume",
		Short: "Named persistent volumes: create, ls, rm",
		Long: `Named persistent volumes of a running 'ironclaw serve' (as root): storage that
outlives sandboxes, with a quota (its size), mounted at create with
'ironclaw sandbox create --volume NAME:PATH', in one running sandbox at a
time. An agent sees only its own volumes. The daemon and token are found as
for 'ironclaw sandbox'.`,
	}
	c.AddCommand(newVolumeCreateCmd(e), newVolumeLsCmd(e), newVolumeRmCmd(e))
	return c
}

func newVolumeCreateCmd(e *env) *cobra.Command {
	var size string
	c := &cobra.Command{
		Use:     "create NAME --size SIZE",
		Short:   "Create a volume and print its name",
		Example: `  ironclaw volume create notes --size 1G`,
		Args:    cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			n, err := sandbox.ParseBytes(size)
			if err != nil || n <= 0 {
				return fmt.Errorf("--size %q: want a size such as 512M or 1G", size)
			}
			v, err := newClient().CreateVolume(c.Context(), args[0], n)
			if err != nil {
				return err
			}
			fmt.Fprintln(e.stdout, safe(v.Name))
			return nil
		},
	}
	c.Flags().StringVar(&size, "size", "", "the volume's size, its quota (e.g. 1G; at least 16M)")
	_ = c.MarkFlagRequired("size")
	return c
}

func newVolumeLsCmd(e *env) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:     "ls [--json]",
		Aliases: []string{"list"},
		Short:   "List volumes: NAME SIZE SANDBOX OWNER AGE",
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			list, err := newClient().ListVolumes(c.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSONLines(e.stdout, list)
			}
			t := newTable(e.stdout, "NAME", "SIZE", "SANDBOX", "OWNER", "AGE")
			now := time.Now()
			for _, v := range list {
				sb := v.Sandbox
				if sb == "" {
					sb = "-"
				}
				t.row(v.Name, sandbox.FormatBytes(v.SizeBytes), sb, v.Principal, age(now.Sub(v.CreatedAt)))
			}
			return t.flush()
		},
	}
	jsonFlag(c.Flags(), &asJSON)
	return c
}

func newVolumeRmCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME...",
		Short: "Delete volumes and their files (refused while a sandbox has one mounted)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, names []string) error {
			cl := newClient()
			return e.eachArg(names, func(n string) (string, error) {
				_, err := cl.DeleteVolume(c.Context(), n)
				return safe(n), err
			})
		},
	}
}

// parseVolumes reads --volume NAME:PATH flags.
func parseVolumes(flags []string) ([]client.VolumeMount, error) {
	var out []client.VolumeMount
	for _, f := range flags {
		name, path, ok := strings.Cut(f, ":")
		if !ok || name == "" || !strings.HasPrefix(path, "/") {
			return nil, fmt.Errorf("--volume %q: want NAME:/PATH", f)
		}
		out = append(out, client.VolumeMount{Name: name, Path: path})
	}
	return out, nil
}
