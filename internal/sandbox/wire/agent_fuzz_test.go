package wire

import (
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// What the daemon reads from the helper inside an OCI or Docker sandbox
// (the exec front's header lines, a file operation's report), fuzzed: the
// helper runs as the sandbox user, beside whatever the agent runs, so each
// is hostile input. The front's reader itself is fuzzed in package
// container.

// formatHeader is a header line as the helper writes it (without marker
// and newline).
func formatHeader(h Header) string {
	if h.Started {
		return "started " + strconv.Itoa(h.Pid)
	}
	s := "failed " + h.Code + " " + strconv.Itoa(h.Errno)
	if h.Text != "" {
		s += " " + h.Text
	}
	return s
}

// FuzzParseHeader: a header line either fails to parse or means exactly
// what the helper's own spelling of it means (so a header cannot say one
// thing to the daemon and another when logged or re-sent), and a start
// failure maps to one of the exec errors with the exit code the CLI and
// the API promise (126 or 127).
func FuzzParseHeader(f *testing.F) {
	for _, s := range []string{
		"started 42", "started 0", "started -3", "started 9999999999999999999", "started +5", "started 5 ",
		"failed not-found 2 no such file", "failed not-executable 13", "failed bad-cwd x y z",
		"failed no-resources 11 fork: resource temporarily unavailable", "failed", "failed x", "failed  2 ",
		"exited 0", "", "\u202estarted 1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		h, err := ParseHeader(line)
		if err != nil {
			return
		}
		if h.Started && h.Pid <= 0 {
			t.Fatalf("%q: started with pid %d", line, h.Pid)
		}
		again, err := ParseHeader(formatHeader(h))
		if err != nil || again != h {
			t.Fatalf("%q parses as %+v; its spelling %q as %+v (%v)", line, h, formatHeader(h), again, err)
		}
		if h.Started {
			return
		}
		res, serr := StartError(h.Code, h.Text)
		switch {
		case h.Code == CodeNotFound:
			if res.ExitCode != 127 || !errors.Is(serr, sandbox.ErrCommandNotFound) {
				t.Fatalf("%q: %d, %v; want 127 and ErrCommandNotFound", line, res.ExitCode, serr)
			}
		case res.ExitCode != 126:
			t.Fatalf("%q: exit %d, want 126", line, res.ExitCode)
		case !errors.Is(serr, sandbox.ErrNotExecutable) && !errors.Is(serr, sandbox.ErrSandboxLimit) && !errors.Is(serr, sandbox.ErrInvalidRequest):
			t.Fatalf("%q: unclassified error %v", line, serr)
		}
	})
}

// FuzzFileOpError: whatever a failed file operation wrote on stderr, the
// daemon's error is nil (no report) or one of three classes, and the
// class follows the report's code alone.
func FuzzFileOpError(f *testing.F) {
	for _, s := range []string{
		`{"code":"not-found","errno":2,"err":"open /workspace/x: no such file"}`,
		`{"code":"denied","err":"permission denied"}`,
		`{"code":"aborted","err":"the upload ended early"}`,
		`{"code":"io","errno":28,"err":"no space left on device"}`,
		`{"CODE":"denied","code":"not-found"}`,
		`{"code":7}`, `null`, `[]`, `garbage`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stderr []byte) {
		err := ParseFileError(stderr)
		var fe FileError
		if json.Unmarshal(stderr, &fe) != nil {
			if err != nil {
				t.Fatalf("%q is no report, yet gave %v", stderr, err)
			}
			return
		}
		want := sandbox.ErrInvalidRequest
		switch fe.Code {
		case "not-found":
			want = sandbox.ErrNotFound
		case "denied":
			want = sandbox.ErrPermission
		}
		if !errors.Is(err, want) {
			t.Fatalf("%q (code %q) gave %v, want %v", stderr, fe.Code, err, want)
		}
	})
}
