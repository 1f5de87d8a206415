package cli

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

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
directory); the decider recorded is the operator behind the token.`,
	}
	c.AddCommand(newApprovalsLsCmd(e), newApprovalsShowCmd(e), newApprovalsDecideCmd(e, true), newApprovalsDecideCmd(e, false))
	return c
}

func approvalLine(a client.Approval) string {
	sess := a.Session
	if sess == "" {
		sess = "-"
	}
	when := a.ExpiresAt.Format(time.RFC3339)
	if a.State != "pending" && a.DecidedBy != "" {
		when = "by " + a.DecidedBy
	}
	return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", a.ID, a.State, a.Kind, sess, when, a.Summary)
}

func newApprovalsLsCmd(e *env) *cobra.Command {
	var (
		state, session, kind string
		all, watch, asJSON   bool
	)
	c := &cobra.Command{
		Use:   "ls [--state S | --all] [--session ID] [--kind K] [--watch] [--json]",
		Short: "List approval requests (pending by default); --watch prints each change as it happens",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := ctxOf(c)
			cl := newClient()
			if all {
				state = ""
			}
			if watch {
				w := bufio.NewWriter(e.stdout)
				err := cl.WatchApprovals(ctx, func(a client.Approval) error {
					if asJSON {
						b, _ := json.Marshal(a)
						fmt.Fprintln(w, string(b))
					} else {
						fmt.Fprintln(w, strings.ReplaceAll(approvalLine(a), "\t", "  "))
					}
					return w.Flush()
				})
				if errors.Is(err, ctx.Err()) {
					return nil
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
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tKIND\tSANDBOX\tEXPIRES/DECIDED\tSUMMARY")
			for _, a := range list {
				fmt.Fprintln(tw, approvalLine(a))
			}
			return tw.Flush()
		},
	}
	c.Flags().StringVar(&state, "state", "pending", "pending, approved, denied or expired")
	c.Flags().BoolVar(&all, "all", false, "every state")
	c.Flags().StringVar(&session, "session", "", "only requests about this sandbox")
	c.Flags().StringVar(&kind, "kind", "", "only this kind (egress.host, sandbox.widen, tool.register, agent.spawn, exec.command, tool.call)")
	c.Flags().BoolVarP(&watch, "watch", "w", false, "print pending requests, then every request as it is filed or decided, until interrupted")
	c.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line")
	return c
}

func writeJSONLines(w io.Writer, list []client.Approval) error {
	enc := json.NewEncoder(w)
	for _, a := range list {
		if err := enc.Encode(a); err != nil {
			return err
		}
	}
	return nil
}

func newApprovalsShowCmd(e *env) *cobra.Command {
	var wait time.Duration
	c := &cobra.Command{
		Use:   "show ID [--wait 30s]",
		Short: "Print one approval request as JSON",
		Args:  cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			a, err := newClient().GetApproval(ctxOf(c), args[0], wait)
			if err != nil {
				return err
			}
			b, _ := json.MarshalIndent(a, "", "  ")
			_, err = fmt.Fprintln(e.stdout, string(b))
			return err
		},
	}
	c.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for a pending request to be decided")
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
				a, err = cl.Approve(ctxOf(c), args[0], scope, reason)
			} else {
				a, err = cl.Deny(ctxOf(c), args[0], reason)
			}
			if err != nil {
				return err
			}
			line := fmt.Sprintf("%s %s by %s", a.ID, a.State, a.DecidedBy)
			if len(a.Result) > 0 && string(a.Result) != "{}" {
				line += " " + string(a.Result)
			}
			_, err = fmt.Fprintln(e.stdout, line)
			return err
		},
	}
	if approve {
		c.Flags().StringVar(&scope, "scope", "", "for egress.host: sandbox (this sandbox only, the default) or global (every sandbox, remembered)")
	}
	c.Flags().StringVar(&reason, "reason", "", "why; recorded in the audit log")
	return c
}
