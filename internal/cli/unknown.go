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

// unknownCommand returns an *unknownCommandError when the word after the
// deepest group of commands args name (cobra's own Find, so aliases and
// its matching rules hold) names none of the group's commands. Cobra
// reports that only after the root; after any other group it prints the
// group's help and succeeds, so a script's `ironclaw sandbox lst` would
// pass as though it had run. A runnable command's words are its own
// arguments, and a flag is left to cobra, which parses and reports it.
func unknownCommand(root *cobra.Command, args []string) error {
	group, rest, _ := root.Find(args) // its error is the root's unknown command, reported here
	if group.Runnable() || !group.HasSubCommands() || len(rest) == 0 {
		return nil
	}
	word := rest[0]
	if strings.HasPrefix(word, "-") || (group == root && isCobraCommand(word)) {
		return nil
	}
	if group.SuggestionsMinimumDistance <= 0 {
		group.SuggestionsMinimumDistance = suggestionDistance
	}
	return &unknownCommandError{word: word, group: group.CommandPath(), suggestions: group.SuggestionsFor(word)}
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
