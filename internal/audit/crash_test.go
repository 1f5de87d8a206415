package audit

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/store"
	"github.com/ironclaw/ironclaw/internal/testutil/leakcheck"
)

// crashChildEnv, when set in the environment, turns the test binary into
// the child of TestCrashSafety: it appends to the database named by the
// variable until it is killed.
const crashChildEnv = "IRONCLAW_AUDIT_CRASH_CHILD"

func TestMain(m *testing.M) {
	if path := os.Getenv(crashChildEnv); path != "" {
		os.Exit(crashChild(path))
	}
	leakcheck.Main(m)
}

// crashChild appends from several goroutines forever and prints
// "seq hash" for each record after Append returned it, i.e. after it was
// acknowledged. The line goes straight to the stdout pipe (no buffering),
// so every line the parent reads was acknowledged before the kill.
func crashChild(path string) int {
	ctx := context.Background()
	st, err := store.OpenWith(ctx, path, store.Options{PresizeWAL: true}) // as the daemon does
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	l, err := New(ctx, st, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var mu sync.Mutex
	for w := 0; w < 8; w++ {
		go func() {
			for i := 0; ; i++ {
				r, err := l.Append(ctx, Entry{Session: "crash", Actor: fmt.Sprint("w", w), Kind: KindSandboxExec,
					Data: map[string]any{"i": i, "pad": strings.Repeat("x", 100)}})
				if err != nil {
					fmt.Fprintln(os.Stderr, "append:", err)
					os.Exit(1)
				}
				mu.Lock()
				_, err = os.Stdout.WriteString(fmt.Sprintf("%d %s\n", r.Seq, r.Hash))
				mu.Unlock()
				if err != nil {
					os.Exit(1)
				}
			}
		}()
	}
	select {} // until SIGKILL
}

// TestCrashSafety kills an appending child process with SIGKILL at an
// arbitrary point, several times over the same file, and checks that every
// record the child saw acknowledged is in the file with the hash it was
// acknowledged with, and that the chain verifies and continues.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns child processes")
	}
	path := filepath.Join(t.TempDir(), "crash.db")
	acked := map[int64]string{}
	for round := 0; round < 3; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+path)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		// Kill after a varying number of acknowledgements, so the kill
		// lands at different points of the commit cycle.
		killAt := 500 + round*700
		n := 0
		deadline := time.AfterFunc(30*time.Second, func() { cmd.Process.Kill() })
		for sc.Scan() {
			seq, hash, err := parseAck(sc.Text())
			if err != nil {
				t.Fatalf("child printed %q: %v", sc.Text(), err)
			}
			acked[seq] = hash
			n++
			if n == killAt {
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
		}
		deadline.Stop()
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: child did not die by SIGKILL (%v); stderr:\n%s", round, err, stderr.String())
		}
		if n < killAt {
			t.Fatalf("round %d: child acknowledged only %d records; stderr:\n%s", round, n, stderr.String())
		}

		// Reopen (SQLite recovers the WAL) and check.
		st := openStore(t, path)
		l, err := New(context.Background(), st, Options{})
		if err != nil {
			t.Fatal(err)
		}
		res, err := l.Verify(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if !res.OK {
			t.Fatalf("round %d: chain does not verify after kill: %v", round, res)
		}
		var missing []int64
		for seq, hash := range acked {
			if seq > res.LastSeq {
				missing = append(missing, seq)
				continue
			}
			if got := storedRecord(t, l, seq).Hash; got != hash {
				t.Errorf("round %d: record %d has hash %s, acknowledged %s", round, seq, got, hash)
			}
		}
		if len(missing) > 0 {
			t.Fatalf("round %d: %d acknowledged records lost after kill -9 (e.g. %d); log ends at %d", round, len(missing), missing[0], res.LastSeq)
		}
		t.Logf("round %d: %d acknowledged in total, log holds %d (the rest committed but not yet printed when killed)", round, len(acked), res.LastSeq)
		l.Close()
		st.Close()
	}
}

func parseAck(line string) (int64, string, error) {
	f := strings.Fields(line)
	if len(f) != 2 {
		return 0, "", fmt.Errorf("want 2 fields")
	}
	seq, err := strconv.ParseInt(f[0], 10, 64)
	return seq, f[1], err
}
