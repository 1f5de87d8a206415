package native_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/native"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

func waitSpareInits(t testing.TB, r *native.Runtime, n int) {
	t.Helper()
	waitStock(t, "spare inits", r.SpareInitsIdle, n)
}

// A cold create takes an init started ahead: it becomes a whole sandbox
// of the spec (its limits, its seal), one that died while it waited is
// passed over, and Close leaves no cgroup and no process.
func TestSpareInitsServeColdCreates(t *testing.T) {
	sandboxtest.Native(t)
	before := cgroupCount(t)
	beforeIDs := ourCgroupIDs(t)
	var logMu sync.Mutex
	var logs strings.Builder
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(&logs, format+"\n", args...)
	}
	logged := func() string {
		logMu.Lock()
		defer logMu.Unlock()
		return logs.String()
	}
	r := sandboxtest.NewNative(t, native.Options{SpareInits: 2, Logf: logf})
	if !r.HasSteward() {
		t.Skip("skipping: spare inits need the steward's C init")
	}
	waitSpareInits(t, r, 2)
	hatched := newCgroupIDs(t, beforeIDs, 2)
	ctx := context.Background()
	spec := sandbox.Spec{Hostname: "hatched", Network: sandbox.Network{LoopbackTCP: []uint16{9000}},
		Limits: sandbox.Limits{MemoryBytes: 768 << 20, Pids: 40}}
	sb, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	if !hatched[sb.ID()] {
		t.Fatalf("sandbox %s was not made from a spare init (%v)", sb.ID(), hatched)
	}
	if v := cgroupValue(t, sb.ID(), "", memoryLimitFile()); v != fmt.Sprint(768<<20) {
		t.Errorf("memory limit %s, want %d (the spec's)", v, 768<<20)
	}
	var out bytes.Buffer
	res, err := sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", "id -u; hostname; grep -E '^(NoNewPrivs|Seccomp|CapEff):' /proc/self/status"}, Stdout: &out})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec: %v %+v %q", err, res, out.String())
	}
	for _, want := range []string{"65532\n", "hatched\n", "NoNewPrivs:\t1", "Seccomp:\t2", "CapEff:\t0000000000000000"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("a sandbox from a spare init: %q lacks %q", out.String(), want)
		}
	}
	out.Reset()
	res, _ = sb.Exec(ctx, sandbox.ExecRequest{Argv: []string{"sh", "-c", "i=0; while [ $i -lt 60 ]; do sleep 3 & i=$((i+1)); done 2>&1 | head -1"}, Stdout: &out, Stderr: &out})
	if res.ExitCode == 0 && !strings.Contains(out.String(), "fork") && !strings.Contains(out.String(), "unavailable") {
		t.Fatalf("60 processes under pids=40 in a sandbox from a spare init: %q", out.String())
	}

	// Spare inits that died while they waited are passed over: kill both,
	// let them become zombies, and the create is made from a clone.
	killWaiting := func() []int {
		waitSpareInits(t, r, 2)
		var pids []int
		for id := range ourCgroupIDs(t) {
			if id == sb.ID() {
				continue
			}
			procs := strings.Fields(cgroupValue(t, id, "", "cgroup.procs"))
			if len(procs) == 0 {
				continue // a sandbox's cgroup on its way out
			}
			pid, err := strconv.Atoi(procs[0])
			if err != nil {
				t.Fatalf("the waiting init of %s: %v", id, err)
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			pids = append(pids, pid)
		}
		if len(pids) != 2 {
			t.Fatalf("killed %d waiting inits, want 2", len(pids))
		}
		return pids
	}
	dead := killWaiting()
	for _, pid := range dead {
		for state := ""; state != "Z"; {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil {
				t.Fatal(err)
			}
			state = strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))[0]
		}
	}
	sb2, err := r.Create(ctx, sandbox.Spec{Network: sandbox.Network{LoopbackTCP: []uint16{9001}}})
	if err != nil {
		t.Fatalf("a cold create after the spare inits died: %v", err)
	}
	if hatched[sb2.ID()] {
		t.Fatalf("the create made %s, a spare init's id", sb2.ID())
	}
	if l := logged(); strings.Contains(l, "gone when taken") {
		t.Fatalf("a dead spare init was taken, not passed over:\n%s", l)
	}
	out.Reset()
	if res, err := sb2.Exec(ctx, sandbox.ExecRequest{Argv: []string{"echo", "ok"}, Stdout: &out}); err != nil || res.ExitCode != 0 || out.String() != "ok\n" {
		t.Fatalf("exec: %v %+v %q", err, res, out.String())
	}
	sb2.Destroy(ctx)
	// Killed just before they are taken, still exiting: each create goes
	// on from a clone if it must, and succeeds.
	killWaiting()
	for i := 0; i < 2; i++ {
		// One that starts over names its first id only (CreateNamed).
		var heard []string
		sb3, err := r.CreateNamed(ctx, sandbox.Spec{Network: sandbox.Network{LoopbackTCP: []uint16{9002}}}, func(id string) { heard = append(heard, id) })
		if err != nil {
			t.Fatalf("a cold create as spare inits die: %v", err)
		}
		if len(heard) != 1 {
			t.Fatalf("a cold create as spare inits die was named %v, want one id", heard)
		}
		sb3.Destroy(ctx)
	}
	sb.Destroy(ctx)
	r.Close(ctx)
	if after := cgroupCount(t); after != before {
		t.Fatalf("spare inits left cgroups: %d before, %d after Close", before, after)
	}
	for _, pid := range dead {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Fatalf("the killed spare init %d is still a process after Close", pid)
		}
	}
}
