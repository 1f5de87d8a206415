// Package textsafe keeps text an agent wrote from deceiving the human who
// reads it: terminal escape sequences, carriage returns and other control
// characters can repaint a line on a terminal, and Unicode bidirectional
// controls can reorder what a console shows ("approve evil.com" displayed
// as something else). Check refuses such text where the API accepts it
// (summaries, labels); Escape makes any text safe to print.
package textsafe

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Unsafe reports whether r must never reach a terminal or a console raw:
// C0 and C1 controls (except none: even tab and newline, which can break a
// one-line field), DEL, the bidirectional controls, and other invisible
// format characters (zero-width joiners, the BOM, tag characters).
func Unsafe(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == utf8.RuneError:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true // bidi embeddings, overrides, isolates and marks
	case r == 0x2028 || r == 0x2029:
		return true // line and paragraph separators
	}
	return unicode.Is(unicode.Cf, r)
}

// Check returns an error naming the first unsafe character of s (where
// label says what s is), or nil. Invalid UTF-8 is unsafe.
func Check(label, s string) error {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n <= 1 {
				return fmt.Errorf("%s is not valid UTF-8 (byte %d)", label, i)
			}
		}
		if Unsafe(r) {
			return fmt.Errorf("%s holds the control or format character %U at byte %d; only printable text is accepted", label, r, i)
		}
	}
	return nil
}

// Escape returns s with every unsafe character written as a visible
// escape (\x1b, \u202e) and backslashes doubled, so the result shows
// exactly what s holds, on one line.
func Escape(s string) string {
	clean := true
	for _, r := range s {
		if r == '\\' || Unsafe(r) {
			clean = false
			break
		}
	}
	if clean && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case Unsafe(r):
			q := strconv.QuoteRuneToASCII(r) // '\x1b' or '\u202e'
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
		i += n
	}
	return b.String()
}
