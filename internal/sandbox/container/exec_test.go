package container

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// feed writes s to f in chunks of n bytes, then finishes.
func feed(f *Front, s string, n int) {
	for len(s) > 0 {
		k := min(n, len(s))
		_, _ = f.Write([]byte(s[:k]))
		s = s[k:]
	}
	f.Finish()
}

func TestFront(t *testing.T) {
	m := wire.Marker("abc")
	for _, tc := range []struct {
		name, in        string
		started, failed bool
		out, other      string
	}{
		{name: "started", in: m + "started 42\nhello\n", started: true, out: "hello\n"},
		{name: "failed execve", in: m + "started 42\n" + m + "failed not-found 2 no such file\n", failed: true},
		{name: "runtime complaint", in: "runc: exec failed\n", other: "runc: exec failed\n"},
		{name: "no header at all", in: ""},
		{name: "output like a marker prefix", in: m + "started 7\n" + m[:5], started: true, out: m[:5]},
		{name: "bad header", in: m + "bogus\nrest", other: "bogusrest"},
	} {
		for _, n := range []int{1, 3, 1 << 20} {
			var out bytes.Buffer
			f := NewFront("abc", &out)
			feed(f, tc.in, n)
			h, other := f.Result()
			switch {
			case tc.started && (h == nil || !h.Started || h.Pid == 0 || f.pid() != h.Pid):
				t.Errorf("%s/%d: header %+v, want started", tc.name, n, h)
			case tc.failed && (h == nil || h.Started || h.Code != wire.CodeNotFound):
				t.Errorf("%s/%d: header %+v, want failed not-found", tc.name, n, h)
			case !tc.started && !tc.failed && h != nil:
				t.Errorf("%s/%d: header %+v, want none", tc.name, n, h)
			}
			if out.String() != tc.out || other != tc.other {
				t.Errorf("%s/%d: out %q other %q, want %q %q", tc.name, n, out.String(), other, tc.out, tc.other)
			}
			select {
			case <-f.started:
			default:
				t.Errorf("%s/%d: started not closed after Finish", tc.name, n)
			}
		}
	}
}

func TestLimitedBuffer(t *testing.T) {
	l := &LimitedBuffer{Max: 4}
	if n, err := l.Write([]byte("abcdef")); n != 6 || err != nil || l.String() != "abcd" {
		t.Errorf("Write = %d, %v; kept %q", n, err, l.String())
	}
}

// Started comes once, with the header's pid, before any output of either
// stream; a held stdout written before the header is passed on after it.
func TestFrontStartedBeforeOutput(t *testing.T) {
	m := wire.Marker("abc")
	var log []string
	var errOut bytes.Buffer
	f := NewFront("abc", &errOut)
	f.OnStarted(func(pid int) { log = append(log, fmt.Sprintf("started %d", pid)) })
	stdout := f.Hold(writerFunc(func(p []byte) { log = append(log, "out "+string(p)) }))
	_, _ = stdout.Write([]byte("early"))
	if len(log) != 0 {
		t.Fatalf("before the header: %q", log)
	}
	feed(f, m+"started 42\nerr", 2)
	_, _ = stdout.Write([]byte("late"))
	want := []string{"started 42", "out early", "out late"}
	if fmt.Sprint(log) != fmt.Sprint(want) || errOut.String() != "err" {
		t.Errorf("log %q stderr %q; want %q and \"err\"", log, errOut.String(), want)
	}

	// A start failure: no Started, held output still comes out.
	log = nil
	f = NewFront("abc", &errOut)
	f.OnStarted(func(pid int) { log = append(log, "started") })
	stdout = f.Hold(writerFunc(func(p []byte) { log = append(log, "out "+string(p)) }))
	_, _ = stdout.Write([]byte("x"))
	feed(f, m+"failed not-found 2 nope\n", 1<<20)
	if fmt.Sprint(log) != fmt.Sprint([]string{"out x"}) {
		t.Errorf("failed start: log %q", log)
	}
}

type writerFunc func([]byte)

func (w writerFunc) Write(p []byte) (int, error) { w(p); return len(p), nil }
