package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestUnknownCommandInEveryGroup: after every group of commands in the
// tree, a word that names none of them fails with one line naming the
// group, and the group alone still prints its help and succeeds.
func TestUnknownCommandInEveryGroup(t *testing.T) {
	e := &env{}
	var groups [][]string
	var walk func(path []string, c *cobra.Command)
	walk = func(path []string, c *cobra.Command) {
		if !c.Runnable() && c.HasSubCommands() {
			groups = append(groups, path)
		}
		for _, sub := range c.Commands() {
			walk(append(path[:len(path):len(path)], sub.Name()), sub)
		}
	}
	for _, nc := range e.commandTable() {
		walk([]string{nc.name}, nc.make())
	}
	if len(groups) < 5 {
		t.Fatalf("found %d groups (%v), want the tree's groups (sandbox, audit, ...)", len(groups), groups)
	}
	for _, g := range append([][]string{{}}, groups...) {
		path := "ironclaw " + strings.Join(g, " ")
		t.Run(path, func(t *testing.T) {
			code, stdout, stderr := run(t, "", append(g, "zzqx")...)
			want := `ironclaw: unknown command "zzqx" for "` + strings.TrimSpace(path) + `"`
			if code != ExitIronClaw || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d and one line beginning %q", code, stdout, stderr, ExitIronClaw, want)
			}
			code, stdout, stderr = run(t, "", g...)
			if code != 0 || !strings.Contains(stdout, "Usage:") || stderr != "" {
				t.Errorf("alone: exit %d, stdout %q, stderr %q; want its help", code, stdout, stderr)
			}
		})
	}
}

// TestUnknownCommandLeavesTheRestToCobra: help, flags and a runnable
// command's own arguments are not taken for command names.
func TestUnknownCommandLeavesTheRestToCobra(t *testing.T) {
	for _, args := range [][]string{
		{"help"}, {"help", "sandbox"}, {"--help"}, {"sandbox", "--help"}, {"sandbox", "ls", "--help"},
		{"version"}, {"sandbox", "exec", "--help"},
	} {
		code, stdout, stderr := run(t, "", args...)
		if code != 0 || stdout == "" || stderr != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 0 and output", args, code, stdout, stderr)
		}
	}
	root := &cobra.Command{Use: "ironclaw"}
	group := &cobra.Command{Use: "group"}
	leaf := &cobra.Command{Use: "leaf", Aliases: []string{"lf"}, Run: func(*cobra.Command, []string) {}}
	group.AddCommand(leaf)
	root.AddCommand(group)
	for _, args := range [][]string{
		{}, {"group"}, {"group", "leaf", "anything", "else"}, {"group", "lf", "x"}, {"group", "-x", "y"}, {"help", "nosuch"},
	} {
		if err := unknownCommand(root, args); err != nil {
			t.Errorf("%q: %v, want none", args, err)
		}
	}
	if err := unknownCommand(root, []string{"group", "lef"}); err == nil || err.Error() != `unknown command "lef" for "ironclaw group" (did you mean "leaf"?)` {
		t.Errorf("group lef: %v", err)
	}
}
