package envd

import (
	"net/http"
	"testing"
	"time"

	"connectrpc.com/connect"
)

func TestStreamLimiter(t *testing.T) {
	l := newStreamLimiter(2, 3)
	a1, err := l.acquire("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.acquire("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.acquire("a"); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("a third stream of a sandbox: %v", err)
	}
	if _, err := l.acquire("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.acquire("c"); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("a fourth stream in all: %v", err)
	}
	a1()
	a1() // releasing twice releases once
	if _, err := l.acquire("c"); err != nil {
		t.Errorf("after a release: %v", err)
	}
	if _, err := l.acquire("c"); connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Errorf("a double release freed two: %v", err)
	}
	if len(l.per) != 3 || l.n != 3 {
		t.Errorf("per %v n %d", l.per, l.n)
	}
}

func TestKeepaliveOf(t *testing.T) {
	for v, want := range map[string]time.Duration{"": keepaliveDefault, "x": keepaliveDefault, "-3": keepaliveDefault, "0": keepaliveDefault,
		"1": time.Second, " 7 ": 7 * time.Second, "50": 50 * time.Second, "61": keepaliveMax, "99999999999999999999": keepaliveDefault, "9999999": keepaliveMax} {
		h := http.Header{}
		h.Set("Keepalive-Ping-Interval", v)
		if got := keepaliveOf(h); got != want {
			t.Errorf("%q: %v, want %v", v, got, want)
		}
	}
}

func TestEndEvent(t *testing.T) {
	n := func(v int) *int { return &v }
	for _, c := range []struct {
		exit   *int
		err    string
		code   int32
		exited bool
		status string
		msg    string
	}{
		{n(0), "", 0, true, "exit status 0", ""},
		{n(2), "", 2, true, "exit status 2", "exit status 2"},
		{n(127), "command not found", 127, true, "exit status 127", "command not found"},
		{n(128), "", 128, true, "exit status 128", "exit status 128"},
		{n(137), "", -1, false, "signal: killed", "signal: killed"},
		{n(143), "killed", -1, false, "signal: terminated", "signal: terminated"},
		{n(160), "", 160, true, "exit status 160", "exit status 160"},
		{nil, "", -1, false, "unknown", "the process's end is unknown"},
		{n(-1), "lost", -1, false, "unknown", "lost"},
	} {
		e := endEvent(c.exit, c.err)
		if e.GetExitCode() != c.code || e.GetExited() != c.exited || e.GetStatus() != c.status || e.GetError() != c.msg || (c.msg == "") != (e.Error == nil) {
			t.Errorf("exit %v %q: %v", c.exit, c.err, e)
		}
	}
}

func TestResolveCwd(t *testing.T) {
	for in, want := range map[string]string{"": "/workspace", "~": "/workspace", "~/a/../b": "/workspace/b", "a/b": "/workspace/a/b",
		"../..": "/", "/tmp/./x/": "/tmp/x", "~user": "/workspace/~user"} {
		if got := resolveCwd(in); got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}
