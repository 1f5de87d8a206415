package native

import (
	"fmt"
	"strings"
	"testing"
)

// TestInitStderrLines: the init's standard error comes a write at a time
// (the C init's die writes a prefix, the message and the newline
// separately); it is logged and kept as lines, a line over maxDiagLine in
// pieces, and the last words are the last line, ended or not.
func TestInitStderrLines(t *testing.T) {
	var logged []string
	b := &Sandbox{id: "sb", rt: &Runtime{opts: Options{Logf: func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }}}}
	if got := b.initDiag(); got != "" {
		t.Fatalf("nothing written: %q", got)
	}
	for _, w := range []string{"ironclaw: sandbox steward: ", "refused to run", "\n", "a\nb\n", "half"} {
		b.initStderr([]byte(w))
	}
	if want := []string{"sb init: ironclaw: sandbox steward: refused to run", "sb init: a", "sb init: b"}; strings.Join(logged, "|") != strings.Join(want, "|") {
		t.Fatalf("logged %q, want %q", logged, want)
	}
	if got := b.initDiag(); got != ": half" {
		t.Fatalf("last words %q, want the unended line", got)
	}
	b.initStderr([]byte(" done\n" + strings.Repeat("x", 2*maxDiagLine+5)))
	if got := b.initDiag(); got != ": "+strings.Repeat("x", 5) {
		t.Fatalf("last words after a long line: %q", got)
	}
	if len(logged) != 6 || logged[3] != "sb init: half done" || len(logged[4]) != len("sb init: ")+maxDiagLine {
		t.Fatalf("logged %d lines: %q", len(logged), logged[3:])
	}
	for range 2 * maxDiagLines {
		b.initStderr([]byte("more\n"))
	}
	if len(b.diag) != maxDiagLines || b.diag[0] != "ironclaw: sandbox steward: refused to run" {
		t.Fatalf("kept %d lines, the first %q", len(b.diag), b.diag[0])
	}
	if len(logged) != 6+2*maxDiagLines {
		t.Fatalf("logged %d lines, want every one (below maxLoggedLines)", len(logged))
	}
}

// TestInitStderrLogBound: an init that writes without end gets
// maxLoggedLines lines into the log, one line saying the rest are only
// counted, and the count when the sandbox goes; its diagnostics stay the
// first lines.
func TestInitStderrLogBound(t *testing.T) {
	var logged []string
	b := &Sandbox{id: "sb", rt: &Runtime{opts: Options{Logf: func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }}}}
	const written = 3*maxLoggedLines + 7
	for i := range written {
		b.initStderr(fmt.Appendf(nil, "line %d\n", i))
	}
	if len(logged) != maxLoggedLines+1 {
		t.Fatalf("logged %d lines, want %d and one about the rest", len(logged), maxLoggedLines)
	}
	if logged[maxLoggedLines-1] != fmt.Sprintf("sb init: line %d", maxLoggedLines-1) || !strings.Contains(logged[maxLoggedLines], "counted, not logged") {
		t.Fatalf("the last lines logged: %q", logged[maxLoggedLines-1:])
	}
	if len(b.diag) != maxDiagLines || b.diag[0] != "line 0" {
		t.Fatalf("kept %d lines, the first %q", len(b.diag), b.diag[0])
	}
	b.logDropped()
	if want := fmt.Sprintf("sb init: %d line(s) of its standard error were not logged", written-maxLoggedLines); logged[len(logged)-1] != want {
		t.Fatalf("at the end: %q, want %q", logged[len(logged)-1], want)
	}
}
