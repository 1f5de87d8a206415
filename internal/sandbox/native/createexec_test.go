package native_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/cgroups"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// createExec runs CreateExec for argv with stdin and returns the sandbox
// (destroyed when the test ends), the result and both outputs.
func createExec(t *testing.T, r *native.Runtime, stdin string, argv ...string) (sandbox.Sandbox, sandbox.ExecResult, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	req := sandbox.ExecRequest{Argv: argv, Stdout: &out, Stderr: &errOut}
	if stdin != "" {
		req.Stdin = strings.NewReader(stdin)
	}
	sb, res, err := r.CreateExec(context.Background(), sandbox.Spec{}, req)
	if err != nil {
		t.Fatalf("CreateExec %q: %v", argv, err)
	}
	t.Cleanup(func() { _ = sb.Destroy(context.Background()) })
	return sb, res, out.String(), errOut.String()
}

// A first command queued behind the init's message gets its stdin, both
// outputs and its exit code, and the sandbox serves later commands.
func TestCreateExecRunsTheFirstCommand(t *testing.T) {
	r := sandboxtest.NewNative(t, native.Options{})
	sb, res, out, errOut := createExec(t, r, "from stdin", "sh", "-c", "echo out; echo err >&2; cat; exit 7")
	if res.ExitCode != 7 || out != "out\nfrom stdin" || errOut != "err\n" {
		t.Fatalf("first command: exit %d, stdout %q, stderr %q", res.ExitCode, out, errOut)
	}
	var again bytes.Buffer
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Argv: []string{"echo", "again"}, Stdout: &again})
	if err != nil || res.ExitCode != 0 || again.String() != "again\n" {
		t.Fatalf("second command: %v, exit %d, %q", err, res.ExitCode, again.String())
	}
}

// The queued command is read only once the init has sealed the sandbox:
// it runs as the sandbox user, with no capabilities, no_new_privs and
// the seccomp filter, like every later command.
func TestCreateExecQueuedCommandRunsSealed(t *testing.T) {
	r := sandboxtest.NewNative(t, native.Options{})
	_, res, out, _ := createExec(t, r, "", "sh", "-c", "id -u; grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status")
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %s", res.ExitCode, out)
	}
	for _, want := range []string{"65532\n", "CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(out, want) {
			t.Errorf("the queued command's view lacks %q:\n%s", want, out)
		}
	}
}

// A request Exec would refuse fails the create: no sandbox is returned
// and none is left, not even its cgroup.
func TestCreateExecRefusesABadRequestAndLeavesNothing(t *testing.T) {
	r := sandboxtest.NewNative(t, native.Options{})
	before := sandboxCgroups(t)
	sb, _, err := r.CreateExec(context.Background(), sandbox.Spec{}, sandbox.ExecRequest{})
	if !errors.Is(err, sandbox.ErrInvalidRequest) {
		t.Fatalf("no argv: err %v, want ErrInvalidRequest", err)
	}
	if sb != nil {
		t.Fatalf("a sandbox came back from a failed create: %v", sb)
	}
	if after := sandboxCgroups(t); after != before {
		t.Fatalf("sandbox cgroups: %d before, %d after the failed create", before, after)
	}
}

// Where the init's own move into its workload's pids share is refused
// (the kernel checked the writer before 5.16), a queued command would
// start before the daemon moved it: the init gives up, the runtime builds
// the sandbox again without queueing, says so once, and queues no more.
func TestCreateExecWhenTheInitsMoveIsRefused(t *testing.T) {
	var logs sync.Map
	var logged atomic.Int32
	r := sandboxtest.NewNative(t, native.Options{Logf: func(format string, args ...any) {
		logs.Store(logged.Add(1), fmt.Sprintf(format, args...))
	}})
	var opened atomic.Int32
	r.SetWorkloadTasksOpener(func(cg *cgroups.Cgroup) (*os.File, error) {
		f, err := cg.WorkloadTasks()
		if err != nil {
			return nil, err
		}
		opened.Add(1)
		f.Close()
		return os.Open(os.DevNull) // read-only: the init's write fails
	})
	_, res, out, _ := createExec(t, r, "", "echo", "ran")
	if res.ExitCode != 0 || out != "ran\n" {
		t.Fatalf("after the refusal: exit %d, %q", res.ExitCode, out)
	}
	if n := opened.Load(); n != 2 {
		t.Fatalf("the workload tasks file was opened %d times, want 2 (the queued try and the unqueued one)", n)
	}
	noted := 0
	logs.Range(func(_, v any) bool {
		if strings.Contains(v.(string), "first command waits for the sandbox to be ready") {
			noted++
		}
		return true
	})
	if noted != 1 {
		t.Fatalf("the fallback was logged %d times, want once", noted)
	}
	if _, res, out, _ = createExec(t, r, "", "echo", "again"); res.ExitCode != 0 || out != "again\n" {
		t.Fatalf("the next create: exit %d, %q", res.ExitCode, out)
	}
	if n := opened.Load(); n != 3 {
		t.Fatalf("the next create opened the tasks file %d times in all, want 3: it must not queue again", n)
	}
}

// sandboxCgroups counts this test process's sandbox cgroup directories
// (their names begin with the runtime's pid).
func sandboxCgroups(t *testing.T) int {
	t.Helper()
	prefix := fmt.Sprintf("ic-%d.", os.Getpid())
	n := 0
	_ = filepath.WalkDir("/sys/fs/cgroup", func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && strings.HasPrefix(d.Name(), prefix) {
			n++
		}
		return nil
	})
	return n
}

// A queued command is held to its wall-time limit like any other: killed
// at the limit, reported as timed out.
func TestCreateExecQueuedCommandTimesOut(t *testing.T) {
	r := sandboxtest.NewNative(t, native.Options{})
	start := time.Now()
	sb, res, err := r.CreateExec(context.Background(), sandbox.Spec{}, sandbox.ExecRequest{Argv: []string{"sleep", "30"}, Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	if took := time.Since(start); !res.TimedOut || took > 10*time.Second {
		t.Fatalf("timed out %v after %v (exit %d), want a kill at the 300ms limit", res.TimedOut, took, res.ExitCode)
	}
}
