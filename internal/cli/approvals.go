package cli

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/ironclaw/ironclaw/internal/cli/flagtypes"
	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/spf13/cobra"
)

func newApprovalsCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "approvals",
		Short: "List and decide approval requests (operator)",
		Long: `List, watch, show, approve and deny the requests waiting at the approval
gateway of a running 'ironclaw serve': hosts a sandbox tried to reach, wider
sandboxes, new tools, new agents, and commands the policy marks. These need the
operator token (IRONCLAW_OPERATOR_TOKEN, else operator.token in the default data
directory); the decider recorded is the operator behind the token.

What a request will do is shown as its fields (host:port, argv, limits, ...),
taken from the data the approval applies. The requester's own text is shown
apart, as "agent's note": it is the agent's words, not a description the daemon
checked. Control and bidirectional characters are shown escaped (\x1b, \u202e).`,
	}
	c.AddCommand(newApprovalsLsCmd(e), newApprovalsShowCmd(e), newApprovalsDecideCmd(e, true), newApprovalsDecideCmd(e, false))
	return c
}

// noteLabel introduces the requester's own text wherever it is printed.
const noteLabel = "agent's note (its own words, not checked)"

// approvalCells is an approval's row, escaped.
func approvalCells(a client.Approval) []string {
	sess := a.Session
	if sess == "" {
		sess = "-"
	}
	when := a.ExpiresAt.Format(time.RFC3339)
	if a.State != "pending" && a.DecidedBy != "" {
		when = "by " + a.DecidedBy
	}
	return []string{safe(a.ID), safe(a.State), safe(a.Kind), safe(sess), safe(when), preEscaped(a.Summary)}
}

// detailLines are the decisive fields, in full, then the agent's note,
// labelled and quoted; every line is escaped already.
func detailLines(a client.Approval) []string {
	var out []string
	for _, f := range a.Fields {
		out = append(out, safe(f.Name)+": "+fieldValue(f))
	}
	if a.Via != "" {
		out = append(out, safe("filed by: "+a.RequestedBy+" via "+a.Via))
	}
	if a.AgentNote != "" {
		out = append(out, noteLabel+": "+quoted(a.AgentNote))
	}
	if a.Reason != "" && a.State != "pending" {
		out = append(out, safe("reason: "+a.Reason))
	}
	return out
}

func newApprovalsLsCmd(e *env) *cobra.Command {
	var (
		state, session, kind      string
		all, watch, asJSON, brief bool
	)
	c := &cobra.Command{
		Use:   "ls [--state S | --all] [--session ID] [--kind K] [--watch] [--json] [--brief]",
		Short: "List approval requests (pending by default) with what each will apply; --watch prints each change as it happens",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := c.Context()
			cl := newClient()
			if all {
				state = ""
			}
			if watch {
				w := bufio.NewWriter(e.stdout)
				err := cl.WatchApprovals(ctx, func(a client.Approval) error {
					if asJSON {
						if err := writeJSONLine(w, a); err != nil {
							return err
						}
						return w.Flush()
					}
					fmt.Fprintln(w, strings.Join(approvalCells(a), "  "))
					if !brief {
						for _, l := range detailLines(a) {
							fmt.Fprintln(w, "    "+l)
						}
					}
					return w.Flush()
				})
				if ctx.Err() != nil {
					return nil // watched until the root context ended (Ctrl-C)
				}
				return err
			}
			list, err := cl.ListApprovals(ctx, client.ApprovalFilter{State: state, Session: session, Kind: kind})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSONLines(e.stdout, list)
			}
			t := newTable(e.stdout, "ID", "STATE", "KIND", "SANDBOX", "EXPIRES/DECIDED", "SUMMARY")
			for _, a := range list {
				t.rowEscaped(approvalCells(a)...)
				if !brief {
					for _, l := range detailLines(a) {
						t.under(5, l) // escaped by detailLines
					}
				}
			}
			return t.flush()
		},
	}
	c.Flags().StringVar(&state, "state", "pending", "pending, approved, denied or expired")
	c.Flags().BoolVar(&all, "all", false, "every state")
	c.Flags().StringVar(&session, "session", "", "only requests about this sandbox")
	c.Flags().StringVar(&kind, "kind", "", "only this kind (egress.host, sandbox.widen, tool.register, agent.spawn, exec.command, tool.call)")
	c.Flags().BoolVarP(&watch, "watch", "w", false, "print pending requests, then every request as it is filed or decided, until interrupted")
	jsonFlag(c.Flags(), &asJSON)
	c.Flags().BoolVar(&brief, "brief", false, "one line per request, without its fields and note")
	return c
}

// writeApproval prints one approval for a human: what it is, what it will
// apply (the fields, in full), the agent's note apart, and the decision.
func writeApproval(w io.Writer, a client.Approval) error {
	t := newTable(w)
	t.row("id:", a.ID)
	t.row("kind:", a.Kind)
	state := a.State
	if a.State == "pending" {
		state += " (expires " + a.ExpiresAt.Format(time.RFC3339) + ")"
	}
	t.row("state:", state)
	if a.Session != "" {
		t.row("sandbox:", a.Session)
	}
	by := a.RequestedBy
	if a.Via != "" {
		by += " (filed via " + a.Via + ")"
	}
	t.row("requested by:", by)
	t.rowEscaped("summary:", preEscaped(a.Summary))
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "will apply:")
	ft := newTable(w)
	for _, f := range a.Fields {
		ft.rowEscaped("  "+safe(f.Name)+":", fieldValue(f))
	}
	if err := ft.flush(); err != nil {
		return err
	}
	if a.AgentNote != "" {
		fmt.Fprintln(w, noteLabel+":")
		fmt.Fprintln(w, "  "+quoted(a.AgentNote))
	}
	if a.State != "pending" {
		dt := newTable(w)
		decided := a.State
		if a.DecidedBy != "" {
			decided += " by " + a.DecidedBy
		}
		if a.DecidedAt != nil {
			decided += " at " + a.DecidedAt.Format(time.RFC3339)
		}
		dt.row("decision:", decided)
		if a.Scope != "" {
			dt.row("scope:", a.Scope)
		}
		if a.Reason != "" {
			dt.row("reason:", a.Reason)
		}
		if len(a.Result) > 0 && string(a.Result) != "{}" {
			dt.row("result:", string(a.Result))
		}
		return dt.flush()
	}
	return nil
}

func newApprovalsShowCmd(e *env) *cobra.Command {
	var (
		wait   time.Duration
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "show ID [--wait 30s] [--json]",
		Short: "Print one approval request: what it will apply, the agent's note apart, and its decision",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			a, err := newClient().ShowApproval(c.Context(), args[0], wait)
			if err != nil {
				return err
			}
			if asJSON {
				b, err := safeJSON(a, true)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintln(e.stdout, string(b))
				return err
			}
			return writeApproval(e.stdout, a)
		},
	}
	flagtypes.Duration(c.Flags(), &wait, "wait", "", 0, "wait up to this long for a pending request to be decided, e.g. 30s")
	c.Flags().BoolVar(&asJSON, "json", false, "the approval object as JSON (control and bidi characters as \\u escapes)")
	return c
}

func newApprovalsDecideCmd(e *env, approve bool) *cobra.Command {
	var scope, reason string
	use, short := "deny ID [--reason R]", "Deny a pending request"
	if approve {
		use, short = "approve ID [--scope sandbox|global] [--reason R]", "Approve a pending request; it takes effect at once"
	}
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl := newClient()
			var a client.Approval
			var err error
			if approve {
				a, err = cl.Approve(c.Context(), args[0], scope, reason)
			} else {
				a, err = cl.Deny(c.Context(), args[0], reason)
			}
			if err != nil {
				return err
			}
			line := fmt.Sprintf("%s %s by %s", a.ID, a.State, a.DecidedBy)
			if len(a.Result) > 0 && string(a.Result) != "{}" {
				line += " " + string(a.Result)
			}
			_, err = fmt.Fprintln(e.stdout, safe(line))
			return err
		},
	}
	if approve {
		c.Flags().StringVar(&scope, "scope", "", "for egress.host: sandbox (this sandbox only, the default) or global (every sandbox, remembered)")
	}
	c.Flags().StringVar(&reason, "reason", "", "why; recorded in the audit log")
	return c
}
