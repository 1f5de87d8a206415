package policy

import (
	"fmt"
	"path"
	"regexp"
	"slices"

	"github.com/ironclaw/ironclaw/internal/sandbox/gate"
)

// Exec is the exec section:
//
//	exec:
//	  gate: [curl, wget, /usr/bin/ssh]
//	  require_approval: ["^curl ", "rm -rf /"]
//
// gate is the wall. It lists programs that run only with an operator's
// approval, however a command spells them: a name is every file of that
// name in the sandbox's PATH directories, an absolute path the file it
// resolves to, each resolved in every sandbox's own root (the host view,
// an image or a directory). Every path of the root that reaches such a
// file is masked by a stub that says the program needs approval and exits
// 126, so /usr/bin/curl, c'u'rl, env curl, sh -c, a symlink, a copy, a
// hard link or the ELF loader all fail (see internal/sandbox/gate). An
// exec whose own program (argv[0], or the first word of a cmd made only of
// plain words) has a gated name answers 202 with an exec.command approval
// request for exactly its argv and mode; re-sent with the approval, it
// runs once, as the real program.
//
// require_approval is an advisory: regular expressions over the command
// line (cmd as given, or argv joined by spaces). A match files the same
// exec.command request early, before anything runs; it is not a wall, as
// any respelling passes it.
type Exec struct {
	Gate            []string `yaml:"gate"`
	RequireApproval []string `yaml:"require_approval"`

	patterns []*regexp.Regexp
	keys     []string // gate.Key of each Gate entry, once each
}

func (e *Exec) validate() error {
	if len(e.Gate) > gate.MaxPrograms {
		return fmt.Errorf("%w: exec.gate lists %d programs, more than %d", ErrInvalid, len(e.Gate), gate.MaxPrograms)
	}
	e.keys = nil
	for _, g := range e.Gate {
		if err := gate.CheckEntry(g); err != nil {
			return fmt.Errorf("%w: exec.gate: %v", ErrInvalid, err)
		}
		if k := gate.Key(g); !slices.Contains(e.keys, k) {
			e.keys = append(e.keys, k)
		}
	}
	e.patterns = nil
	for _, s := range e.RequireApproval {
		re, err := regexp.Compile(s)
		if err != nil {
			return fmt.Errorf("%w: exec.require_approval %q: %v", ErrInvalid, s, err)
		}
		e.patterns = append(e.patterns, re)
	}
	return nil
}

// NeedsApproval reports whether a command line matches one of the advisory
// patterns (exec.require_approval), and which.
func (e *Exec) NeedsApproval(commandLine string) (bool, string) {
	for i, re := range e.patterns {
		if re.MatchString(commandLine) {
			return true, e.RequireApproval[i]
		}
	}
	return false, ""
}

// Gated returns the gate key (see gate.Key) of the program an exec's
// argv[0] names, or "" when its name is not gated. The name decides, not
// where it resolves: the sandbox's pid 1 checks that at start.
func (e *Exec) Gated(argv0 string) string {
	if argv0 == "" {
		return ""
	}
	if k := path.Base(argv0); slices.Contains(e.keys, k) {
		return k
	}
	return ""
}
