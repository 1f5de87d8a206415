package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// unknownCommandError is a command line whose word after a group of
// commands (the root, sandbox, audit, ...) names none of the group's.
type unknownCommandError struct {
	word        string
	group       string   // the group's command path: "ironclaw sandbox"
	suggestions []string // the group's commands close to word
}

// Error is one line, as every error the CLI prints: cobra's own message
// for this spans lines (its suggestions), which the escaping of an error
// line turns into literal \n and \t.
func (e *unknownCommandError) Error() string {
	// The word is quoted as typed: Main escapes the whole line once.
	msg := fmt.Sprintf("unknown command \"%s\" for \"%s\"", e.word, e.group)
	quoted := make([]string, len(e.suggestions))
	for i, s := range e.suggestions {
		quoted[i] = `"` + s + `"`
	}
	switch len(quoted) {
	case 0:
		return fmt.Sprintf("%s (see '%s --help')", msg, e.group)
	case 1:
		return fmt.Sprintf("%s (did you mean %s?)", msg, quoted[0])
	case 2:
		return fmt.Sprintf("%s (did you mean %s or %s?)", msg, quoted[0], quoted[1])
	}
	return fmt.Sprintf("%s (did you mean one of %s?)", msg, strings.Join(quoted, ", "))
}

// unknownCommand walks args through the command groups of root and
// returns an *unknownCommandError when a word after a group names none of
// its commands. Cobra reports that only after the root; after any other
// group it prints the group's help and succeeds, so a script's
// `ironclaw sandbox lst` would pass as though it had run. The walk ends
// at the first runnable command (its words are its own arguments) and at
// the first flag, which cobra parses and reports.
func unknownCommand(root *cobra.Command, args []string) error {
	group := root
	for _, word := range args {
		if group.Runnable() || !group.HasSubCommands() || strings.HasPrefix(word, "-") {
			return nil
		}
		if group == root && isCobraCommand(word) {
			return nil
		}
		next := subcommand(group, word)
		if next == nil {
			if group.SuggestionsMinimumDistance <= 0 {
				group.SuggestionsMinimumDistance = suggestionDistance
			}
			return &unknownCommandError{word: word, group: group.CommandPath(), suggestions: group.SuggestionsFor(word)}
		}
		group = next
	}
	return nil
}

// suggestionDistance is the largest edit distance (a swap of two letters
// counts one) at which a command is suggested for a mistyped word, as
// cobra's default.
const suggestionDistance = 2

// isCobraCommand: the root's commands cobra adds itself when it runs
// (help, and the shell-completion requests).
func isCobraCommand(word string) bool {
	return word == "help" || word == cobra.ShellCompRequestCmd || word == cobra.ShellCompNoDescRequestCmd
}

func subcommand(group *cobra.Command, word string) *cobra.Command {
	for _, c := range group.Commands() {
		if c.Name() == word || c.HasAlias(word) {
			return c
		}
	}
	return nil
}
