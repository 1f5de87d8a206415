package kinds

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// ExecCommand is an exec.command request: a command the policy marks, to
// run once in one sandbox once approved. Its JSON form is
//
//	{"argv": ["curl", "https://example.com"], "mode": "stream", "command": "curl https://example.com", "pattern": "^curl "}
//
// argv is the program and its arguments as they will be executed, mode
// how (the exec gate's word for it: a one-shot exec, a background
// process, ...), command the command line the policy matched, and pattern
// the policy pattern that matched. At least one of argv and command is
// set; the exec gate decides which of them an approval binds.
type ExecCommand struct {
	Argv    []string `json:"argv,omitempty"`
	Mode    string   `json:"mode,omitempty"`
	Command string   `json:"command,omitempty"`
	Pattern string   `json:"pattern,omitempty"`
}

// Bounds of an exec.command payload.
const (
	MaxExecArgs    = 4096
	MaxExecCommand = 32 << 10
	MaxExecPattern = 1024
)

// modePattern compiles on first use, not at init (every process of the
// binary links this package).
var modePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,31}$`) })

func (*ExecCommand) Kind() string { return KindExecCommand }

func (p *ExecCommand) check() error {
	switch {
	case len(p.Argv) == 0 && p.Command == "":
		return errors.New("give argv or command")
	case p.Argv != nil && (len(p.Argv) == 0 || p.Argv[0] == ""):
		return errors.New("argv must name a program")
	case len(p.Argv) > MaxExecArgs:
		return fmt.Errorf("argv has %d arguments, at most %d", len(p.Argv), MaxExecArgs)
	case len(p.Command) > MaxExecCommand:
		return fmt.Errorf("command longer than %d bytes", MaxExecCommand)
	case len(p.Pattern) > MaxExecPattern:
		return fmt.Errorf("pattern longer than %d bytes", MaxExecPattern)
	case p.Mode != "" && !modePattern().MatchString(p.Mode):
		return fmt.Errorf("mode %q: 1-32 lower-case letters, digits, '_', '.', '-', starting with a letter", p.Mode)
	case strings.IndexByte(p.Command, 0) >= 0:
		return errors.New("the command contains a NUL byte")
	}
	for _, a := range p.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return errors.New("argv contains a NUL byte")
		}
	}
	return nil
}

func (p *ExecCommand) Summary(t Target) string {
	what := esc(p.Command)
	if len(p.Argv) > 0 {
		what = argvWords(p.Argv)
	}
	return summary("run", what, "in sandbox", esc(sandboxName(t.Session)))
}

func (p *ExecCommand) Fields(t Target) []Field {
	out := []Field{{Name: "sandbox", Value: sandboxName(t.Session)}}
	if len(p.Argv) > 0 {
		out = append(out, Field{Name: "argv", Value: jsonText(p.Argv), Format: FormatJSON})
	}
	if p.Mode != "" {
		out = append(out, Field{Name: "mode", Value: p.Mode})
	}
	if p.Command != "" {
		out = append(out, Field{Name: "command", Value: p.Command})
	}
	if p.Pattern != "" {
		out = append(out, Field{Name: "policy pattern", Value: p.Pattern})
	}
	out = append(out, Field{Name: "use", Value: "once, in this sandbox"})
	return out
}

// Apply does nothing: an approved exec.command is spent by the exec that
// names it (gateway.Use).
func (*ExecCommand) Apply(context.Context, Env, Target) (map[string]any, error) { return nil, nil }
