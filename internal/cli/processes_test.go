package cli

import (
	"strings"
	"testing"
	"time"
)

func TestProcessCommands(t *testing.T) {
	startDaemon(t)
	code, out, stderr := run(t, "", "sandbox", "create")
	if code != 0 {
		t.Fatalf("create: %d %q", code, stderr)
	}
	id := strings.TrimSpace(out)

	code, out, stderr = run(t, "", "sandbox", "spawn", "--tag", "srv", id, "--", "sh", "-c", "echo out; echo err >&2; sleep 30")
	pid := strings.TrimSpace(out)
	if code != 0 || pid != "1" {
		t.Fatalf("spawn: %d %q %q", code, out, stderr)
	}
	code, out, _ = run(t, "", "sandbox", "ps", id)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 2 || !strings.HasPrefix(lines[0], "PID") || !strings.Contains(lines[1], "running") ||
		!strings.Contains(lines[1], "srv") || !strings.Contains(lines[1], "sh -c") {
		t.Errorf("ps: %d\n%s", code, out)
	}
	if code, out, _ := run(t, "", "sandbox", "ps", "--json", "--tag", "srv", id); code != 0 || !strings.Contains(out, `"pid":1`) || strings.Count(out, "\n") != 1 {
		t.Errorf("ps --json: %d %q", code, out)
	}
	// Output arrives in its own time: poll.
	for i := 0; ; i++ {
		code, out, stderr = run(t, "", "sandbox", "logs", id, pid)
		if code == 0 && out == "out\n" && stderr == "err\n" || i == 100 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code != 0 || out != "out\n" || stderr != "err\n" {
		t.Errorf("logs: %d %q %q", code, out, stderr)
	}
	if code, out, _ := run(t, "", "sandbox", "logs", "--offset", "8", id, pid); code != 0 || out != "" {
		t.Errorf("logs --offset 8: %d %q", code, out)
	}
	if code, _, stderr := run(t, "", "sandbox", "signal", id, pid, "BOGUS"); code != ExitIronClaw || !strings.Contains(stderr, "TERM") {
		t.Errorf("signal BOGUS: %d %q", code, stderr)
	}
	if code, _, stderr := run(t, "", "sandbox", "signal", id, pid, "TERM"); code != 0 {
		t.Errorf("signal TERM: %d %q", code, stderr)
	}
	if code, out, _ := run(t, "", "sandbox", "logs", "--follow", id, pid); code != 143 || out != "out\n" {
		t.Errorf("logs --follow after TERM: %d %q", code, out)
	}
	code, out, _ = run(t, "", "sandbox", "spawn", id, "--", "sleep", "30")
	if code != 0 {
		t.Fatalf("spawn 2: %d", code)
	}
	if code, out, _ := run(t, "", "sandbox", "kill", id, strings.TrimSpace(out)); code != 0 || !strings.Contains(out, "exited 137") {
		t.Errorf("kill: %d %q", code, out)
	}
	if code, _, stderr := run(t, "", "sandbox", "logs", id, "x"); code != ExitIronClaw || !strings.Contains(stderr, "process handle") {
		t.Errorf("logs of a bad pid: %d %q", code, stderr)
	}
	if code, _, _ := run(t, "", "sandbox", "kill", id, "99"); code != ExitIronClaw {
		t.Errorf("kill of an unknown pid: %d", code)
	}
}
