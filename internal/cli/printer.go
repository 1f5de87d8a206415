package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/textsafe"
	"github.com/spf13/pflag"
)

// Everything the CLI prints that came from the daemon may hold what an
// agent wrote: sandbox labels, approval data and notes, audit records,
// error messages. On a terminal, control characters and escape sequences
// can repaint lines ("approve" written over what a request really asks)
// and bidirectional controls can reorder text. So every such value goes
// through this file's printers, which render those characters as visible
// escapes (textsafe.Escape), and JSON output carries them as \u escapes.

// safe renders one value for a terminal: one line, every control, bidi or
// format character (and the backslash) written as a visible escape.
func safe(s string) string { return textsafe.Escape(s) }

// preEscaped prints text the daemon escaped already (an approval's
// summary): as it is when it holds nothing unsafe, so its backslashes are
// not doubled a second time; escaped in full otherwise.
func preEscaped(s string) string {
	if textsafe.Check("", s) == nil {
		return s
	}
	return safe(s)
}

// fieldValue prints an approval field's value: JSON text with unsafe
// characters as \u escapes (still valid, exact JSON), anything else
// escaped.
func fieldValue(f client.ApprovalField) string {
	if f.Format == "json" {
		return string(escapeJSONText([]byte(f.Value)))
	}
	return safe(f.Value)
}

// quoted is s escaped and in double quotes; a quote inside is \", so the
// text cannot seem to end early.
func quoted(s string) string { return `"` + strings.ReplaceAll(safe(s), `"`, `\"`) + `"` }

// table is a tabwriter whose every cell is escaped, so a value can break
// neither the terminal nor the columns (tabs and newlines are escaped).
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	if len(header) > 0 {
		fmt.Fprintln(t.tw, strings.Join(header, "\t"))
	}
	return t
}

// row writes one row, escaping every cell.
func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = safe(c)
	}
	t.rowEscaped(cells...)
}

// rowEscaped writes one row of cells the caller escaped.
func (t *table) rowEscaped(cells ...string) {
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

// under writes a line the caller escaped (with safe or quoted), aligned
// under the column at index col.
func (t *table) under(col int, escaped string) {
	fmt.Fprintln(t.tw, strings.Repeat("\t", col)+escaped)
}

func (t *table) flush() error { return t.tw.Flush() }

// safeJSON is v as JSON in which every character a terminal could act on
// is a \u escape, so the output is valid JSON and safe to print as is.
func safeJSON(v any, indent bool) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if indent {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return escapeJSONText(bytes.TrimRight(b.Bytes(), "\n")), nil
}

// escapeJSONText rewrites unsafe characters of encoded JSON as \u escapes.
// They can only occur inside strings (JSON's own syntax is ASCII), where
// \uXXXX means the same character; the encoder already escaped ASCII
// controls.
func escapeJSONText(in []byte) []byte {
	var out bytes.Buffer
	for i := 0; i < len(in); {
		r, n := utf8.DecodeRune(in[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			out.WriteString(`\ufffd`)
		case r == '\n':
			out.WriteRune(r) // the indentation's own, outside strings
		case textsafe.Unsafe(r):
			if r > 0xffff {
				r1, r2 := utf16.EncodeRune(r)
				fmt.Fprintf(&out, `\u%04x\u%04x`, r1, r2)
			} else {
				fmt.Fprintf(&out, `\u%04x`, r)
			}
		default:
			out.Write(in[i : i+n])
		}
		i += n
	}
	return out.Bytes()
}

// jsonFlag defines --json, the same on every listing: the API's objects,
// one JSON object per line (NDJSON), for a list as for --watch and
// --follow, so that one reader (jq, a script reading lines) takes both.
func jsonFlag(f *pflag.FlagSet, p *bool) {
	f.BoolVar(p, "json", false, "print the API's objects as JSON, one per line (control and bidi characters as \\u escapes)")
}

// writeJSONLines writes each of list as one escaped JSON line.
func writeJSONLines[T any](w io.Writer, list []T) error {
	for _, v := range list {
		if err := writeJSONLine(w, v); err != nil {
			return err
		}
	}
	return nil
}

// writeJSONLine writes v as one escaped JSON line.
func writeJSONLine(w io.Writer, v any) error {
	b, err := safeJSON(v, false)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

// eachArg calls f for each of args in turn and prints the line it returns.
// A failure does not stop the rest: it is returned, with its argument,
// once the next failure has reported it on stderr (so the last failure
// is the command's error and every other one is reported).
func (e *env) eachArg(args []string, f func(arg string) (line string, err error)) error {
	var failed error
	for _, a := range args {
		line, err := f(a)
		if err != nil {
			if failed != nil {
				fmt.Fprintf(e.stderr, "ironclaw: %s\n", safe(failed.Error()))
			}
			failed = fmt.Errorf("%s: %w", a, err)
			continue
		}
		fmt.Fprintln(e.stdout, line)
	}
	return failed
}
