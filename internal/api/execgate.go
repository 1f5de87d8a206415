package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/gateway"
)

// Exec approvals (policy exec.gate and exec.require_approval; see
// policy.Exec).
//
// The wall is in the sandbox: every path of its root that reaches a gated
// program is masked by a stub (package gate), so however a command spells
// the program, a run without an approval meets the stub (exit 126, a
// message on stderr). Here the API asks for the approval up front: an exec
// whose own program has a gated name (argv[0], or the first word of a cmd
// made only of plain words, which then runs as those words without a
// shell) answers 202 with an exec.command request whose data is
//
//	{"argv": [...], "mode": "wait" | "stream", "command": "..."}
//
// argv is exactly what will run; mode is how its output comes back (wait:
// ?wait=1, one JSON result; stream: NDJSON frames); command is the same
// command for a human (cmd as given, or argv shell-quoted). Re-sent with
// "approval": id, the exec runs once, and only with exactly that argv and
// mode: the sandbox's pid 1 then runs the real program for that one exec,
// when argv[0] reaches the stub of the program the approval names
// (gate.Key of argv[0]). A command line matching exec.require_approval
// (the advisory) files the same request, and its approval lets exactly
// that argv and mode run too; a gated program it starts indirectly still
// meets the stub.

// Exec modes an exec.command approval binds.
const (
	modeWait   = "wait"
	modeStream = "stream"
)

// execMode is how r wants an exec's output.
func execMode(r *http.Request) string {
	if w := r.URL.Query().Get("wait"); w == "1" || w == "true" {
		return modeWait
	}
	return modeStream
}

// execApproval is an exec.command request's data.
type execApproval struct {
	Argv    []string `json:"argv"`
	Mode    string   `json:"mode"`
	Command string   `json:"command"`
}

// gateExec files an exec.command request for an exec of a gated program
// or of a command the advisory patterns mark, answering 202, or spends the
// approval the request names and marks the exec approved (call.req.Gate).
// gated reports that the response was written.
func (s *Server) gateExec(w http.ResponseWriter, r *http.Request, who principal, id string, call *execCall, mode string) (gated bool, err error) {
	filed, err := s.gateDecide(r, who, id, call, mode)
	if err != nil {
		return true, err
	}
	if filed == nil {
		return false, nil
	}
	w.Header().Set("Location", "/v1/approvals/"+filed.ID)
	writeJSON(w, http.StatusAccepted, wire.ExecPending{Approval: approvalView(*filed)})
	return true, nil
}

// gateDecide is gateExec without the answer: filed is the exec.command
// request it filed (the exec must not run), nil when the exec may run
// (nothing to gate, or the approval spent).
func (s *Server) gateDecide(r *http.Request, who principal, id string, call *execCall, mode string) (filed *gateway.Approval, err error) {
	g, applies := s.gateOf(call)
	if !applies {
		return nil, nil
	}
	argv, command, key := g.argv, g.command, g.key
	if err := s.runningSandbox(r.Context(), who, id); err != nil {
		return nil, err
	}
	want := execApproval{Argv: argv, Mode: mode, Command: command}
	if call.approval == "" {
		a, err := s.cfg.Gateway.File(r.Context(), gateway.Request{Kind: gateway.KindExecCommand, Session: id, By: who.Name, Join: true, Data: want})
		if err != nil {
			return nil, gatewayError(err)
		}
		return &a, nil
	}
	err = s.cfg.Gateway.Use(r.Context(), call.approval, id, func(data json.RawMessage) error {
		var d execApproval
		if err := json.Unmarshal(data, &d); err != nil {
			return errors.New("its data is not an exec")
		}
		if d.Argv == nil {
			// Filed with only a command line (POST /v1/approvals): good for
			// that marked line, never for a gated program.
			if key != "" || d.Command != call.line {
				return errors.New("it was approved for a different command")
			}
			return nil
		}
		if !slices.Equal(d.Argv, argv) || d.Mode != mode {
			return errors.New("it was approved for a different argv or mode")
		}
		return nil
	})
	if err != nil {
		return nil, gatewayError(err)
	}
	call.req.Argv = argv
	call.req.Gate = key
	return nil, nil
}

// gateCheck is what the policy makes of an exec: the argv the gate sees
// (a plain cmd's words when its program is gated), the command line an
// approval shows, and the gated program's key ("" if none).
type gateCheck struct {
	argv    []string
	command string
	key     string
}

// gateOf reads call against the policy; applies reports whether the gate
// has something to do: a gated program, a line the advisory patterns
// mark, or an approval to spend. It files and spends nothing.
func (s *Server) gateOf(call *execCall) (g gateCheck, applies bool) {
	if s.cfg.Gateway == nil || s.cfg.Policy == nil {
		return gateCheck{}, false
	}
	pol := s.cfg.Policy
	g.argv, g.command = call.req.Argv, quoteArgv(call.req.Argv)
	if words, ok := plainCmd(call); ok {
		g.command = call.line
		if pol.Gated(words[0]) != "" {
			g.argv = words
		}
	} else if isCmd(call) {
		g.command = call.line
	}
	g.key = pol.Gated(g.argv[0])
	marked, _ := pol.NeedsApproval(call.line)
	return g, g.key != "" || marked || call.approval != ""
}

// isCmd reports whether call came as cmd (a shell line).
func isCmd(call *execCall) bool {
	a := call.req.Argv
	return len(a) == 3 && a[0] == "/bin/sh" && a[1] == "-c" && a[2] == call.line
}

// plainWord is a shell word that means itself: no quoting, expansion,
// globbing, redirection or comment. It compiles on first use, not at init
// (every process of the binary links this package).
var plainWord = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_./:=@%+,-]+$`) })

// plainCmd splits a cmd made only of plain words, which the shell would
// run as exactly those words.
func plainCmd(call *execCall) ([]string, bool) {
	if !isCmd(call) {
		return nil, false
	}
	if strings.ContainsAny(call.line, "\t\n\v\f\r") {
		return nil, false // a newline separates commands
	}
	words := strings.Fields(call.line)
	if len(words) == 0 || strings.Contains(words[0], "=") {
		return nil, false
	}
	for _, w := range words {
		if !plainWord().MatchString(w) {
			return nil, false
		}
	}
	return words, true
}

// quoteArgv renders argv for a human as a shell would read it back.
func quoteArgv(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if plainWord().MatchString(a) {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}
