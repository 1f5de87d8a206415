package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/spf13/cobra"
)

func newAuditCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "audit",
		Short: "Read and check the daemon's audit log (operator)",
		Long: `Read, follow, verify and export the audit log of a running 'ironclaw serve'.
These need the operator token: IRONCLAW_OPERATOR_TOKEN, else the operator.token
file in the default data directory. IRONCLAW_ADDR names the daemon.`,
	}
	c.AddCommand(newAuditTailCmd(e), newAuditVerifyCmd(e), newAuditExportCmd(e))
	return c
}

// auditLine is one record as "seq time actor kind session data", every
// field escaped (records hold what agents wrote).
func auditLine(r client.AuditRecord) string {
	session := r.Session
	if session == "" {
		session = "-"
	}
	data := string(escapeJSONText(r.Data))
	if data == "" {
		data = "{}"
	}
	return fmt.Sprintf("%d %s %s %s %s %s", r.Seq, safe(r.Time), safe(r.Actor), safe(r.Kind), safe(session), data)
}

func newAuditTailCmd(e *env) *cobra.Command {
	var (
		after  int64
		follow bool
	)
	c := &cobra.Command{
		Use:   "tail [-f] [--after SEQ]",
		Short: "Print audit records after SEQ, one per line: seq time actor kind session data",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if after < 0 {
				return errors.New("--after must not be negative")
			}
			ctx := ctxOf(c)
			cl := newClient()
			w := bufio.NewWriter(e.stdout)
			defer w.Flush()
			for {
				recs, err := cl.AuditTail(ctx, after, 1000)
				if err != nil {
					return err
				}
				for _, r := range recs {
					fmt.Fprintln(w, auditLine(r))
					after = r.Seq
				}
				if len(recs) < 1000 {
					break
				}
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if !follow {
				return nil
			}
			ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			err := cl.AuditFollow(ctx, after, func(r client.AuditRecord) error {
				_, err := fmt.Fprintln(e.stdout, auditLine(r))
				return err
			})
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		},
	}
	c.Flags().Int64Var(&after, "after", 0, "start after this sequence number")
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing records as they are appended (until interrupted)")
	return c
}

func newAuditVerifyCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "verify",
		Short: "Check the audit log's hash chain: exit 0 if intact, 1 naming the first bad record",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			res, err := newClient().AuditVerify(ctxOf(c))
			if err != nil {
				return err
			}
			if res.OK {
				fmt.Fprintf(e.stdout, "ok: %d records\n", res.Checked)
				return nil
			}
			why := res.Problem
			if res.Reason != "" {
				why += ": " + res.Reason
			}
			fmt.Fprintf(e.stdout, "bad: record %d: %s (%d records checked)\n", res.BadSeq, why, res.Checked)
			return exitCode(1)
		},
	}
}

func newAuditExportCmd(e *env) *cobra.Command {
	var format string
	c := &cobra.Command{
		Use:   "export [--format jsonl]",
		Short: "Write every audit record to stdout as JSON lines",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if format != "jsonl" {
				return fmt.Errorf("--format %q: only jsonl is supported", format)
			}
			var w io.Writer = e.stdout
			return newClient().AuditExport(ctxOf(c), w)
		},
	}
	c.Flags().StringVar(&format, "format", "jsonl", "output format (jsonl)")
	return c
}
