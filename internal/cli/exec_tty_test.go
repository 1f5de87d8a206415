package cli

import (
	"io"
	"os"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/ironclaw/ironclaw/internal/cli/full"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
	"golang.org/x/term"
)

func TestExecTTY(t *testing.T) {
	startDaemon(t)
	code, out, stderr := run(t, "", "sandbox", "create")
	if code != 0 {
		t.Fatalf("create: %d %q", code, stderr)
	}
	id := strings.TrimSpace(out)

	// Without a terminal, -t is refused before anything runs.
	if code, _, stderr := run(t, "", "sandbox", "exec", "-it", id, "--", "sh"); code != ExitIronClaw || !strings.Contains(stderr, "-t needs a terminal") {
		t.Errorf("-it without a terminal: %d %q", code, stderr)
	}
	if code, _, stderr := run(t, "", "sandbox", "exec", "-t", "--timeout", "5s", id, "--", "sh"); code != ExitIronClaw || !strings.Contains(stderr, "--timeout") {
		t.Errorf("-t --timeout: %d %q", code, stderr)
	}

	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 30, Cols: 100}); err != nil {
		t.Fatal(err)
	}
	before, err := term.GetState(int(tty.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	shown := &sandboxtest.LockedBuffer{}
	go func() { _, _ = io.Copy(shown, ptmx) }()
	var errb sandboxtest.LockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- Main(full.Commands{}, []string{"sandbox", "exec", "-it", id, "--", "sh"}, tty, tty, &errb)
	}()
	wait := func(want string) {
		t.Helper()
		for end := time.Now().Add(20 * time.Second); !strings.Contains(shown.String(), want); {
			select {
			case code := <-done:
				t.Fatalf("exec ended (%d, %q) before %q; shown %q", code, errb.String(), want, shown.String())
			default:
			}
			if time.Now().After(end) {
				t.Fatalf("waiting for %q; shown %q; stderr %q", want, shown.String(), errb.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// The first size is this terminal's.
	wait("$ ")
	ptmx.Write([]byte("stty size\n"))
	wait("30 100")
	// A resize follows SIGWINCH.
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 50, Cols: 132}); err != nil {
		t.Fatal(err)
	}
	// The resize and what is typed travel from two goroutines: ask again
	// until the new size shows.
	for i := 0; !strings.Contains(shown.String(), "50 132"); i++ {
		if i == 40 {
			t.Fatalf("no resize after SIGWINCH; shown %q", shown.String())
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGWINCH)
		time.Sleep(100 * time.Millisecond)
		ptmx.Write([]byte("stty size\n"))
		time.Sleep(400 * time.Millisecond)
	}
	ptmx.Write([]byte("exit 7\n"))
	select {
	case code := <-done:
		if code != 7 {
			t.Errorf("exit code %d, want 7; stderr %q", code, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("exec did not end; shown %q", shown.String())
	}
	after, err := term.GetState(int(tty.Fd()))
	if err != nil || !reflect.DeepEqual(before, after) {
		t.Errorf("the terminal was not restored: %v", err)
	}
}
