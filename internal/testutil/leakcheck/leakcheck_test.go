package leakcheck

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// envChild makes the test binary one of the runs below instead of the
// tests.
const envChild = "IRONCLAW_LEAKCHECK_CHILD"

// run is a stand-in *testing.M: its Run does what one test run would.
type run func() int

func (r run) Run() int { return r() }

// stuck is closed by nothing: a goroutine receiving from it never ends.
var stuck = make(chan struct{})

func leakingGoroutine() { <-stuck }

func TestMain(m *testing.M) {
	switch os.Getenv(envChild) {
	case "leak":
		Main(run(func() int { go leakingGoroutine(); return 0 }))
	case "clean":
		done := make(chan struct{})
		Main(run(func() int { go func() { close(done) }(); <-done; return 0 }))
	case "failed":
		Main(run(func() int { go leakingGoroutine(); return 3 }))
	}
	os.Exit(m.Run())
}

func child(t *testing.T, mode string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"="+mode)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), string(out)
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// A goroutine a test started and left running fails the run, and the
// report names the function it is stuck in.
func TestLeftGoroutineFailsTheRun(t *testing.T) {
	code, out := child(t, "leak")
	if code != 1 || !strings.Contains(out, "leakingGoroutine") {
		t.Fatalf("a leaking run exited %d with:\n%s", code, out)
	}
}

// Goroutines that ended before the check are no leak.
func TestEndedGoroutinesPass(t *testing.T) {
	if code, out := child(t, "clean"); code != 0 {
		t.Fatalf("a clean run exited %d with:\n%s", code, out)
	}
}

// A failed run keeps its own exit status and is not checked.
func TestFailedRunKeepsItsStatus(t *testing.T) {
	if code, out := child(t, "failed"); code != 3 || strings.Contains(out, "goleak") {
		t.Fatalf("a failed run exited %d with:\n%s", code, out)
	}
}
