package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/ironclaw/ironclaw/internal/cli/flagtypes"
	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/textsafe"
	"github.com/spf13/cobra"
)

func newAuditCmd(e *env) *cobra.Command {
	c := &cobra.Command{
		Use:   "audit",
		Short: "Read and check the daemon's audit log (operator)",
		Long: `Read, follow, verify and export the audit log of a running 'ironclaw serve'.
These need the operator token: IRONCLAW_OPERATOR_TOKEN, else the operator.token
file in the default data directory. IRONCLAW_ADDR names the daemon.
'audit verify --file' and '--data-dir' work offline, without a daemon.`,
	}
	c.AddCommand(newAuditTailCmd(e), newAuditVerifyCmd(e), newAuditExportCmd(e))
	return c
}

// auditLine is one record as "seq time actor kind session data". Every
// field is escaped for the terminal: agent-chosen text reaches data
// (argv, paths) and must not carry control or bidi characters to it.
func auditLine(r client.AuditRecord) string {
	session := r.Session
	if session == "" {
		session = "-"
	}
	data := string(escapeJSONText(r.Data))
	if data == "" {
		data = "{}"
	}
	return fmt.Sprintf("%d %s %s %s %s %s", r.Seq, textsafe.Escape(r.Time), textsafe.Escape(r.Actor),
		textsafe.Escape(r.Kind), textsafe.Escape(session), jsonSafe(data))
}

// jsonSafe rewrites the characters textsafe calls unsafe as JSON \u
// escapes. In JSON text they can only occur inside strings, where the
// escape means the same character, so the result is the same JSON value
// (an export stays verifiable) but prints harmlessly. Line breaks between
// JSON lines are kept. A byte that is not UTF-8 becomes \ufffd, which is
// what a JSON decoder reads it as anyway.
func jsonSafe(s string) string {
	var b []byte
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == '\n' || !textsafe.Unsafe(r) {
			if b != nil {
				b = append(b, s[i:i+n]...)
			}
			i += n
			continue
		}
		if b == nil {
			b = append(make([]byte, 0, len(s)+16), s[:i]...)
		}
		b = appendUEscape(b, r)
		i += n
	}
	if b == nil {
		return s
	}
	return string(b)
}

func appendUEscape(b []byte, r rune) []byte {
	if r > 0xffff {
		r -= 0x10000
		b = appendUEscape(b, 0xd800+(r>>10))
		return appendUEscape(b, 0xdc00+(r&0x3ff))
	}
	return fmt.Appendf(b, `\u%04x`, r)
}

// jsonSafeWriter applies jsonSafe to a stream, holding back a rune cut
// between two writes.
type jsonSafeWriter struct {
	w    io.Writer
	tail []byte
}

func (j *jsonSafeWriter) Write(p []byte) (int, error) {
	buf := append(j.tail, p...)
	cut := len(buf)
	// Hold back an incomplete UTF-8 sequence at the end (at most 3 bytes).
	for k := 1; k <= 3 && k <= len(buf); k++ {
		if utf8.RuneStart(buf[len(buf)-k]) {
			if !utf8.FullRune(buf[len(buf)-k:]) {
				cut = len(buf) - k
			}
			break
		}
	}
	j.tail = append([]byte(nil), buf[cut:]...)
	if _, err := io.WriteString(j.w, jsonSafe(string(buf[:cut]))); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (j *jsonSafeWriter) flush() error {
	_, err := io.WriteString(j.w, jsonSafe(string(j.tail)))
	j.tail = nil
	return err
}

// auditPage is how many records one request of 'audit tail' asks for (the
// API's most).
const auditPage = 1000

func newAuditTailCmd(e *env) *cobra.Command {
	var (
		after          int64
		follow, asJSON bool
	)
	c := &cobra.Command{
		Use:   "tail [-f] [--after SEQ] [--json]",
		Short: "Print audit records after SEQ, one per line: seq time actor kind session data",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := c.Context()
			cl := newClient()
			w := bufio.NewWriter(e.stdout)
			defer w.Flush()
			print := func(r client.AuditRecord) error {
				if asJSON {
					return writeJSONLine(w, r)
				}
				_, err := fmt.Fprintln(w, auditLine(r))
				return err
			}
			for {
				recs, err := cl.AuditTail(ctx, after, auditPage)
				if err != nil {
					return err
				}
				for _, r := range recs {
					if err := print(r); err != nil {
						return err
					}
					after = r.Seq
				}
				if len(recs) < auditPage {
					break
				}
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if !follow {
				return nil
			}
			// Followed until the root context ends (Ctrl-C): that is the
			// way to stop, so it is no error.
			err := cl.AuditFollow(ctx, after, func(r client.AuditRecord) error {
				if err := print(r); err != nil {
					return err
				}
				return w.Flush()
			})
			if ctx.Err() != nil {
				return nil
			}
			return err
		},
	}
	flagtypes.Int(c.Flags(), &after, "after", 0, "start after this sequence number")
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing records as they are appended (until interrupted)")
	jsonFlag(c.Flags(), &asJSON)
	return c
}

func newAuditVerifyCmd(e *env) *cobra.Command {
	var file, dataDir, keyFile, cpFile string
	c := &cobra.Command{
		Use:   "verify [--file EXPORT | --data-dir DIR] [--key FILE] [--checkpoints FILE]",
		Short: "Check the audit log's chain, MACs and checkpoints: exit 0 if intact, 1 naming the first bad record",
		Long: `Check the audit log: the SHA-256 chain (no record edited, deleted, inserted or
moved), every record's MAC under the audit key (no record rewritten by someone
without the key), and the checkpoints kept outside the data directory (no
records cut off the end, none rewritten even by someone with the key). The
verdict goes to stdout ("ok: N records" or "bad: ..."), details to stderr.

Without --file or --data-dir, the running daemon checks its own log with its
own key and checkpoint file. Offline:
  --file EXPORT    an 'ironclaw audit export' (use --key to check MACs and
                   --checkpoints to check the tail)
  --data-dir DIR   the database in DIR, read-only, with the key and checkpoint
                   file the daemon uses by default (or --key, --checkpoints);
                   works when the daemon refuses to start on a bad log`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctx := c.Context()
			var (
				v   client.VerifyResult
				err error
			)
			switch {
			case file != "" && dataDir != "":
				return errors.New("give --file or --data-dir, not both")
			case file == "" && dataDir == "":
				if keyFile != "" || cpFile != "" {
					return errors.New("--key and --checkpoints are for offline checks (--file, --data-dir); the daemon uses its own")
				}
				v, err = newClient().AuditVerify(ctx)
			case e.full == nil:
				return e.delegate(ctx, "audit verify --file/--data-dir")
			default:
				v, err = e.full.VerifyOffline(ctx, file, dataDir, keyFile, cpFile)
			}
			if err != nil {
				return err
			}
			return printVerify(e, v)
		},
	}
	c.Flags().StringVar(&file, "file", "", "verify this export (JSON lines) instead of the daemon's log")
	c.Flags().StringVar(&dataDir, "data-dir", "", "verify the database in this data directory, read-only, without a daemon")
	c.Flags().StringVar(&keyFile, "key", "", "audit key file for an offline check (with --data-dir default: the daemon's default)")
	c.Flags().StringVar(&cpFile, "checkpoints", "", "checkpoint file for an offline check (with --data-dir default: the daemon's default)")
	return c
}

// printVerify writes the verdict to stdout and the details to stderr, and
// turns a bad log into exit code 1.
func printVerify(e *env, v client.VerifyResult) error {
	if v.KeyID != "" {
		fmt.Fprintf(e.stderr, "MACs: %d records authenticated with key %s\n", v.Authenticated, textsafe.Escape(v.KeyID))
	} else {
		fmt.Fprintln(e.stderr, "MACs: not checked (no key): a record rewritten with a recomputed chain would pass")
	}
	if v.Legacy > 0 {
		fmt.Fprintf(e.stderr, "legacy: the first %d records were written before the log had a key and carry no MAC\n", v.Legacy)
	}
	if cp := v.Checkpoints; cp.File != "" {
		fmt.Fprintf(e.stderr, "checkpoints: %s: %d of %d matched; newest at record %d (%s); %d records after it not yet checkpointed\n",
			textsafe.Escape(cp.File), cp.Matched, cp.Read, cp.NewestSeq, textsafe.Escape(cp.NewestTime), cp.Unproven)
	} else {
		fmt.Fprintln(e.stderr, "checkpoints: none given: records cut off the end could not be detected")
	}
	if v.OK {
		fmt.Fprintf(e.stdout, "ok: %d records\n", v.Checked)
		return nil
	}
	why := textsafe.Escape(v.Problem)
	if v.Reason != "" {
		why += ": " + textsafe.Escape(v.Reason)
	}
	where := "checkpoints"
	if v.BadSeq > 0 {
		where = "record " + strconv.FormatInt(v.BadSeq, 10)
	}
	fmt.Fprintf(e.stdout, "bad: %s: %s (%d records checked)\n", where, why, v.Checked)
	return exitCode(1)
}

func newAuditExportCmd(e *env) *cobra.Command {
	var format string
	c := &cobra.Command{
		Use:   "export [--format jsonl]",
		Short: "Write every audit record to stdout as JSON lines (verifiable offline: audit verify --file)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if format != "jsonl" {
				return fmt.Errorf("--format %q: only jsonl is supported", format)
			}
			// Control and bidi characters are written as JSON escapes: the
			// same JSON, so the export still verifies, but harmless on a
			// terminal.
			w := &jsonSafeWriter{w: e.stdout}
			if err := newClient().AuditExport(c.Context(), w); err != nil {
				return err
			}
			return w.flush()
		},
	}
	c.Flags().StringVar(&format, "format", "jsonl", "output format (jsonl)")
	return c
}
